// torch.autocast("neuron") follows CUDA's whole policy, with PyTorch's own op lists: matmul-like
// ops run in the autocast dtype (bf16 by default); ops that need range run in fp32; reductions and
// softmax compute and return fp32 (a bf16 softmax in user attention code would lose precision
// silently); norm appends an fp32 dtype; ops taking several floating inputs run in the widest of
// them; binary_cross_entropy refuses to run. Users port CUDA code, so any difference from CUDA here
// would be a silent change in their numerics.
#include <ATen/autocast_mode.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

namespace {

using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

// A sigmoid followed by binary_cross_entropy loses the range a low-precision log needs; CUDA's
// autocast refuses the op rather than compute it wrongly, and so does neuron's.
Tensor binary_cross_entropy_under_autocast(const Tensor&, const Tensor&, const std::optional<Tensor>&, int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast (on neuron as "
              "on CUDA): a low-precision input near 0 or 1 makes its log lose all range. Fuse the sigmoid that "
              "usually precedes it: torch.nn.functional.binary_cross_entropy_with_logits or "
              "torch.nn.BCEWithLogitsLoss are safe to autocast.");
}

#define NX_AUTOCAST_LOWER(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define NX_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define NX_AUTOCAST_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define NX_AUTOCAST_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  AT_FORALL_LOWER_PRECISION_FP(NX_AUTOCAST_LOWER)
  AT_FORALL_FP32(NX_AUTOCAST_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(NX_AUTOCAST_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(NX_AUTOCAST_PROMOTE)
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN(binary_cross_entropy_under_autocast));
}

}  // namespace
