// Scaled dot-product attention on neuron picks the kernel the CPU would pick. Without a choice
// registered for the device, PyTorch runs its unfused math decomposition (a dozen ops, each
// rounding in the input dtype); with it, the CPU's fused flash-attention kernel runs through
// the queued path, and results match the CPU's. A hardware build would choose its own kernel.
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice_native.h>

namespace torch_neuronx {
namespace {

int64_t choose_sdp_kernel(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                          const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                          std::optional<double> scale, bool enable_gqa) {
  // The CPU's rules read only shapes, strides, dtypes and flags.
  return at::native::_fused_sdp_choice_cpp(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa);
}

}  // namespace
}  // namespace torch_neuronx

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_neuronx::choose_sdp_kernel)
}
