// Scaled dot-product attention on neuron: where the CPU would run its fused flash-attention
// kernel, the device's own fused entry runs (the "overrideable" backend, PrivateUse1's slot in
// SDPA), and it runs that CPU kernel as a task, so results match the CPU's. Elsewhere PyTorch's
// math decomposition runs, as on the CPU. A hardware build would put its own kernel here.
#include <ATen/Context.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <ATen/ops/_fused_sdp_choice_native.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/util/Array.h>
#include <torch/library.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "nki/kernel_source.h"
#include "pipeline/op_record.h"

namespace torch_neuronx {
namespace {

using at::Tensor;

// The inputs the CPU's flash kernel takes (use_flash_attention_cpp in sdp_utils_cpp.cpp, less its
// runtime flag, read by choose_sdp_kernel): neuron's fused kernel runs that kernel. Not float64:
// CUDA's fused kernels take none, and its math path is what makes double backward work.
bool same_head_dim(const sdp::sdp_params& p, bool debug) {
  const bool same = p.query.sym_size(-1) == p.key.sym_size(-1) && p.query.sym_size(-1) == p.value.sym_size(-1);
  if (!same && debug) {
    TORCH_WARN("neuron's fused attention needs query, key and value of one head size; got ", p.query.sym_size(-1), ", ",
               p.key.sym_size(-1), " and ", p.value.sym_size(-1));
  }
  return same;
}

bool fused_kernel_takes(const sdp::sdp_params& p, bool debug) {
  constexpr auto dtypes = c10::array_of<at::ScalarType>(at::kFloat, at::kBFloat16, at::kHalf);
  constexpr auto gates = c10::array_of<bool (*)(const sdp::sdp_params&, bool)>(
      sdp::check_nested_tensor, sdp::check_for_dropout, sdp::check_tensor_shapes,
      sdp::check_batch_size_and_num_heads_dense<true>, sdp::check_attn_mask_shape, same_head_dim,
      sdp::check_nonzero_sequence_lengths_dense, sdp::check_last_dim_stride_equals_1_dense<false>);
  for (auto gate : gates)
    if (!gate(p, debug)) return false;
  return sdp::check_tensor_dtype(p, dtypes, debug);
}

// sdpa_kernel's choice, as documented for a PrivateUse1 device: SDPBackend.OVERRIDEABLE switches
// the device's fused kernel. FLASH_ATTENTION switches it too, since that kernel is the CPU's flash
// kernel: code that pins FLASH_ATTENTION runs as it runs on the CPU. Then the math path.
int64_t choose_sdp_kernel(const Tensor& query, const Tensor& key, const Tensor& value,
                          const std::optional<Tensor>& attn_mask, double dropout_p, bool is_causal,
                          std::optional<double> /*scale*/, bool enable_gqa) {
  const auto& ctx = at::globalContext();
  const bool fused = ctx.userEnabledOverrideableSDP() || ctx.userEnabledFlashSDP();
  const sdp::sdp_params p{query, key, value, attn_mask, dropout_p, is_causal, enable_gqa};
  if (fused && fused_kernel_takes(p, /*debug=*/false)) return static_cast<int64_t>(sdp::SDPBackend::overrideable);
  if (ctx.userEnabledMathSDP()) return static_cast<int64_t>(sdp::SDPBackend::math);
  if (fused) {
    TORCH_WARN("neuron's fused attention kernel (SDPBackend.OVERRIDEABLE) was not used because:");
    fused_kernel_takes(p, /*debug=*/true);
  }
  TORCH_CHECK(false,
              "No viable backend for scaled_dot_product_attention was found. On neuron the backends are "
              "SDPBackend.OVERRIDEABLE (the device's fused kernel; FLASH_ATTENTION selects it too) and MATH.");
}

OpRecord& fused_rec = typed_op("aten::_scaled_dot_product_fused_attention_overrideable",
                               "the CPU's flash attention (aten::_scaled_dot_product_flash_attention_for_cpu)");
OpRecord& fused_backward_rec =
    typed_op("aten::_scaled_dot_product_fused_attention_overrideable_backward", "the CPU's flash attention backward");

// `out` laid out as the meta kernels lay it out: in the dimension order of `query`'s strides (or
// key's, value's for their gradients). The CPU kernel may give another order, and compiled code
// checks strides against meta.
Tensor in_query_layout(const Tensor& query, const Tensor& out) {
  std::vector<int64_t> order(query.dim());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return query.stride(a) > query.stride(b); });
  std::vector<int64_t> strides(query.dim());
  int64_t stride = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    strides[*it] = stride;
    stride *= out.size(*it);
  }
  if (out.strides().equals(strides)) return out;
  return at::empty_strided(out.sizes(), strides, out.options()).copy_(out);
}

// Its results as the meta kernel gives them: no cumulative sequence lengths or debug mask (no
// nested tensors here), the sequence lengths, and 0-dim seed and offset.
std::tuple<Tensor, Tensor, Tensor, Tensor, c10::SymInt, c10::SymInt, Tensor, Tensor, Tensor> fused_attention(
    const Tensor& query, const Tensor& key, const Tensor& value, const std::optional<Tensor>& attn_bias,
    double dropout_p, bool is_causal, bool /*return_debug_mask*/, std::optional<double> scale) {
  const Tensor seed = at::empty({}, query.options().dtype(at::kLong));
  const Tensor offset = at::empty({}, query.options().dtype(at::kLong));
  if (C10_UNLIKELY(nki::source_active.load(std::memory_order_relaxed)) && fused_rec.nki_source.load()) {
    const std::vector<c10::IValue> args{query, key, value, attn_bias, dropout_p, is_causal, /*return_debug_mask=*/false,
                                        scale};
    if (auto program = nki::program_for(fused_rec, args)) {
      const Tensor out = at::empty(query.sizes(), query.options());
      const Tensor lse = at::empty({query.size(0), query.size(1), query.size(2)}, query.options().dtype(at::kFloat));
      nki::launch_program(query.device().index(), fused_rec, std::move(program), args, {out, lse});
      return {in_query_layout(query, out), lse,  Tensor(), Tensor(), c10::SymInt(query.size(-2)),
              c10::SymInt(key.size(-2)),   seed, offset,   Tensor()};
    }
  }
  fused_rec.count(Mode::kAsync);
  auto [out, logsumexp] =
      at::_scaled_dot_product_flash_attention_for_cpu(query, key, value, dropout_p, is_causal, attn_bias, scale);
  return {in_query_layout(query, out),
          logsumexp.contiguous(),
          Tensor(),
          Tensor(),
          c10::SymInt(query.size(-2)),
          c10::SymInt(key.size(-2)),
          seed,
          offset,
          Tensor()};
}

std::tuple<Tensor, Tensor, Tensor, Tensor> fused_attention_backward(
    const Tensor& grad_out, const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_bias,
    std::array<bool, 4> grad_input_mask, const Tensor& out, const Tensor& logsumexp, const Tensor& /*cum_seq_q*/,
    const Tensor& /*cum_seq_k*/, c10::SymInt /*max_q*/, c10::SymInt /*max_k*/, double dropout_p, bool is_causal,
    const Tensor& /*philox_seed*/, const Tensor& /*philox_offset*/, std::optional<double> scale) {
  // The CPU's flash kernel gives no gradient of the mask; the CPU picks it only when none is needed.
  TORCH_CHECK(!grad_input_mask[3],
              "neuron: scaled_dot_product_attention's fused kernel gives no gradient of "
              "attn_mask; pass a mask that does not require grad");
  fused_backward_rec.count(Mode::kAsync);
  const std::optional<Tensor> mask = attn_bias.defined() ? std::optional<Tensor>(attn_bias) : std::nullopt;
  auto [gq, gk, gv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
      grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, mask, scale);
  return {in_query_layout(query, gq), in_query_layout(key, gk), in_query_layout(value, gv), Tensor()};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  // PyTorch registers no PrivateUse1 kernel of its own for the choice; its meta kernel (fake
  // tensors, torch.compile) reaches the same function through the stub below.
  m.impl("_fused_sdp_choice", TORCH_FN(choose_sdp_kernel));
  m.impl("_scaled_dot_product_fused_attention_overrideable", TORCH_FN(fused_attention));
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward", TORCH_FN(fused_attention_backward));
}

}  // namespace
}  // namespace torch_neuronx

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_neuronx::choose_sdp_kernel)
}
