// torch.autocast("neuron"): matmul-like ops run in the autocast dtype (bf16 by default), ops
// that need range run in fp32, the same policy lists CUDA uses.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace {

#define NX_AUTOCAST_LOWER(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define NX_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  AT_FORALL_LOWER_PRECISION_FP(NX_AUTOCAST_LOWER)
  AT_FORALL_FP32(NX_AUTOCAST_FP32)
}

}  // namespace
