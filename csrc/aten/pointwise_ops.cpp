// Elementwise ops (unary, binary, activations and their backward), asynchronous on the stream.
#include <ATen/core/Tensor.h>
#include <ATen/ops/add_cpu_dispatch.h>
#include <ATen/ops/add_meta.h>
#include <ATen/ops/addcdiv_cpu_dispatch.h>
#include <ATen/ops/addcdiv_meta.h>
#include <ATen/ops/addcmul_cpu_dispatch.h>
#include <ATen/ops/addcmul_meta.h>
#include <ATen/ops/atan2_cpu_dispatch.h>
#include <ATen/ops/atan2_meta.h>
#include <ATen/ops/bitwise_and_cpu_dispatch.h>
#include <ATen/ops/bitwise_and_meta.h>
#include <ATen/ops/bitwise_not_cpu_dispatch.h>
#include <ATen/ops/bitwise_not_meta.h>
#include <ATen/ops/bitwise_or_cpu_dispatch.h>
#include <ATen/ops/bitwise_or_meta.h>
#include <ATen/ops/bitwise_xor_cpu_dispatch.h>
#include <ATen/ops/bitwise_xor_meta.h>
#include <ATen/ops/ceil_cpu_dispatch.h>
#include <ATen/ops/ceil_meta.h>
#include <ATen/ops/clamp_cpu_dispatch.h>
#include <ATen/ops/clamp_max_cpu_dispatch.h>
#include <ATen/ops/clamp_max_meta.h>
#include <ATen/ops/clamp_meta.h>
#include <ATen/ops/clamp_min_cpu_dispatch.h>
#include <ATen/ops/clamp_min_meta.h>
#include <ATen/ops/conj_physical.h>
#include <ATen/ops/cos_cpu_dispatch.h>
#include <ATen/ops/cos_meta.h>
#include <ATen/ops/cosh_cpu_dispatch.h>
#include <ATen/ops/cosh_meta.h>
#include <ATen/ops/div_cpu_dispatch.h>
#include <ATen/ops/div_meta.h>
#include <ATen/ops/elu_backward_cpu_dispatch.h>
#include <ATen/ops/elu_backward_meta.h>
#include <ATen/ops/elu_cpu_dispatch.h>
#include <ATen/ops/elu_meta.h>
#include <ATen/ops/eq_cpu_dispatch.h>
#include <ATen/ops/eq_meta.h>
#include <ATen/ops/erf_cpu_dispatch.h>
#include <ATen/ops/erf_meta.h>
#include <ATen/ops/erfc_cpu_dispatch.h>
#include <ATen/ops/erfc_meta.h>
#include <ATen/ops/erfinv_cpu_dispatch.h>
#include <ATen/ops/erfinv_meta.h>
#include <ATen/ops/exp2_cpu_dispatch.h>
#include <ATen/ops/exp2_meta.h>
#include <ATen/ops/exp_cpu_dispatch.h>
#include <ATen/ops/exp_meta.h>
#include <ATen/ops/expm1_cpu_dispatch.h>
#include <ATen/ops/expm1_meta.h>
#include <ATen/ops/floor_cpu_dispatch.h>
#include <ATen/ops/floor_meta.h>
#include <ATen/ops/fmod_cpu_dispatch.h>
#include <ATen/ops/fmod_meta.h>
#include <ATen/ops/frac_cpu_dispatch.h>
#include <ATen/ops/frac_meta.h>
#include <ATen/ops/ge_cpu_dispatch.h>
#include <ATen/ops/ge_meta.h>
#include <ATen/ops/gelu_backward_cpu_dispatch.h>
#include <ATen/ops/gelu_backward_meta.h>
#include <ATen/ops/gelu_cpu_dispatch.h>
#include <ATen/ops/gelu_meta.h>
#include <ATen/ops/gt_cpu_dispatch.h>
#include <ATen/ops/gt_meta.h>
#include <ATen/ops/hardsigmoid_cpu_dispatch.h>
#include <ATen/ops/hardsigmoid_meta.h>
#include <ATen/ops/hypot_cpu_dispatch.h>
#include <ATen/ops/hypot_meta.h>
#include <ATen/ops/le_cpu_dispatch.h>
#include <ATen/ops/le_meta.h>
#include <ATen/ops/leaky_relu_backward_cpu_dispatch.h>
#include <ATen/ops/leaky_relu_backward_meta.h>
#include <ATen/ops/leaky_relu_cpu_dispatch.h>
#include <ATen/ops/leaky_relu_meta.h>
#include <ATen/ops/lerp_cpu_dispatch.h>
#include <ATen/ops/lerp_meta.h>
#include <ATen/ops/log10_cpu_dispatch.h>
#include <ATen/ops/log10_meta.h>
#include <ATen/ops/log1p_cpu_dispatch.h>
#include <ATen/ops/log1p_meta.h>
#include <ATen/ops/log2_cpu_dispatch.h>
#include <ATen/ops/log2_meta.h>
#include <ATen/ops/log_cpu_dispatch.h>
#include <ATen/ops/log_meta.h>
#include <ATen/ops/logaddexp_cpu_dispatch.h>
#include <ATen/ops/logaddexp_meta.h>
#include <ATen/ops/lt_cpu_dispatch.h>
#include <ATen/ops/lt_meta.h>
#include <ATen/ops/maximum_cpu_dispatch.h>
#include <ATen/ops/maximum_meta.h>
#include <ATen/ops/minimum_cpu_dispatch.h>
#include <ATen/ops/minimum_meta.h>
#include <ATen/ops/mish_cpu_dispatch.h>
#include <ATen/ops/mish_meta.h>
#include <ATen/ops/mul_cpu_dispatch.h>
#include <ATen/ops/mul_meta.h>
#include <ATen/ops/ne_cpu_dispatch.h>
#include <ATen/ops/ne_meta.h>
#include <ATen/ops/neg_cpu_dispatch.h>
#include <ATen/ops/neg_meta.h>
#include <ATen/ops/pow_cpu_dispatch.h>
#include <ATen/ops/pow_meta.h>
#include <ATen/ops/reciprocal_cpu_dispatch.h>
#include <ATen/ops/reciprocal_meta.h>
#include <ATen/ops/remainder_cpu_dispatch.h>
#include <ATen/ops/remainder_meta.h>
#include <ATen/ops/round_cpu_dispatch.h>
#include <ATen/ops/round_meta.h>
#include <ATen/ops/rsqrt_cpu_dispatch.h>
#include <ATen/ops/rsqrt_meta.h>
#include <ATen/ops/sgn_cpu_dispatch.h>
#include <ATen/ops/sgn_meta.h>
#include <ATen/ops/sigmoid_backward_cpu_dispatch.h>
#include <ATen/ops/sigmoid_backward_meta.h>
#include <ATen/ops/sigmoid_cpu_dispatch.h>
#include <ATen/ops/sigmoid_meta.h>
#include <ATen/ops/sign_cpu_dispatch.h>
#include <ATen/ops/sign_meta.h>
#include <ATen/ops/silu_backward_cpu_dispatch.h>
#include <ATen/ops/silu_backward_meta.h>
#include <ATen/ops/silu_cpu_dispatch.h>
#include <ATen/ops/silu_meta.h>
#include <ATen/ops/sin_cpu_dispatch.h>
#include <ATen/ops/sin_meta.h>
#include <ATen/ops/sinh_cpu_dispatch.h>
#include <ATen/ops/sinh_meta.h>
#include <ATen/ops/softplus_backward_cpu_dispatch.h>
#include <ATen/ops/softplus_backward_meta.h>
#include <ATen/ops/softplus_cpu_dispatch.h>
#include <ATen/ops/softplus_meta.h>
#include <ATen/ops/sqrt_cpu_dispatch.h>
#include <ATen/ops/sqrt_meta.h>
#include <ATen/ops/sub_cpu_dispatch.h>
#include <ATen/ops/sub_meta.h>
#include <ATen/ops/tan_cpu_dispatch.h>
#include <ATen/ops/tan_meta.h>
#include <ATen/ops/tanh_backward_cpu_dispatch.h>
#include <ATen/ops/tanh_backward_meta.h>
#include <ATen/ops/tanh_cpu_dispatch.h>
#include <ATen/ops/tanh_meta.h>
#include <ATen/ops/threshold_backward_cpu_dispatch.h>
#include <ATen/ops/threshold_backward_meta.h>
#include <ATen/ops/threshold_cpu_dispatch.h>
#include <ATen/ops/threshold_meta.h>
#include <ATen/ops/trunc_cpu_dispatch.h>
#include <ATen/ops/trunc_meta.h>
#include <ATen/ops/xlogy_cpu_dispatch.h>
#include <ATen/ops/xlogy_meta.h>
#include <torch/library.h>

#include "aten/structured_macros.h"

// gelu's meta functions leave `approximate` to the CPU kernel, which would raise only when the
// task runs; these check it first, so a bad value raises at the call (as on CUDA).
namespace at::meta {
inline void neuron_check_gelu_approximate(c10::string_view approximate) {
  TORCH_CHECK(approximate == "none" || approximate == "tanh", "approximate argument must be either none or tanh.");
}
struct neuron_structured_gelu : structured_gelu {
  void meta(const at::Tensor& self, c10::string_view approximate) {
    neuron_check_gelu_approximate(approximate);
    structured_gelu::meta(self, approximate);
  }
};
struct neuron_structured_gelu_backward : structured_gelu_backward {
  void meta(const at::Tensor& grad, const at::Tensor& self, c10::string_view approximate) {
    neuron_check_gelu_approximate(approximate);
    structured_gelu_backward::meta(grad, self, approximate);
  }
};
}  // namespace at::meta

namespace torch_neuronx {

#define NX_SAME_SHAPE(M) \
  template <>            \
  struct SameShapeElementwise<at::meta::M> : std::true_type {};
NX_SAME_SHAPE(structured_add_Tensor)
NX_SAME_SHAPE(structured_sub_Tensor)
NX_SAME_SHAPE(structured_mul_Tensor)
NX_SAME_SHAPE(structured_div_Tensor)
NX_SAME_SHAPE(structured_maximum)
NX_SAME_SHAPE(structured_minimum)
NX_SAME_SHAPE(structured_exp)
NX_SAME_SHAPE(structured_log)
NX_SAME_SHAPE(structured_sqrt)
NX_SAME_SHAPE(structured_rsqrt)
NX_SAME_SHAPE(structured_sin)
NX_SAME_SHAPE(structured_cos)
NX_SAME_SHAPE(structured_tanh)
NX_SAME_SHAPE(structured_sigmoid)
NX_SAME_SHAPE(structured_neg)
NX_SAME_SHAPE(structured_reciprocal)
NX_SAME_SHAPE(structured_silu)
NX_SAME_SHAPE(structured_sigmoid_backward)
NX_SAME_SHAPE(structured_tanh_backward)
NX_SAME_SHAPE(structured_silu_backward)
NX_SAME_SHAPE(structured_threshold_backward)

namespace {

using at::Scalar;
using at::Tensor;

#define NX_UNARY(op) NX_FIO(op, #op, #op "_", #op ".out", structured_##op, op##_out, (), ())
NX_UNARY(exp)
NX_UNARY(exp2)
NX_UNARY(expm1)
NX_UNARY(log)
NX_UNARY(log2)
NX_UNARY(log10)
NX_UNARY(log1p)
NX_UNARY(sqrt)
NX_UNARY(rsqrt)
NX_UNARY(sin)
NX_UNARY(cos)
NX_UNARY(tan)
NX_UNARY(sinh)
NX_UNARY(cosh)
NX_UNARY(tanh)
NX_UNARY(sigmoid)
NX_UNARY(erf)
NX_UNARY(erfc)
NX_UNARY(erfinv)
NX_UNARY(neg)
NX_UNARY(reciprocal)
NX_UNARY(floor)
NX_UNARY(ceil)
NX_UNARY(trunc)
NX_UNARY(frac)
NX_UNARY(round)
NX_UNARY(sign)
NX_UNARY(sgn)
NX_UNARY(silu)
NX_UNARY(mish)
NX_UNARY(hardsigmoid)
NX_UNARY(bitwise_not)

#define NX_BINARY(op, ov, outname)                                                                \
  NX_FIO(op##_##ov, #op "." #ov, #op "_." #ov, #op "." outname, structured_##op##_##ov, op##_out, \
         (, const Tensor& other), (, other))
NX_FIO(add, "add.Tensor", "add_.Tensor", "add.out", structured_add_Tensor, add_out,
       (, const Tensor& other, const Scalar& alpha), (, other, alpha))
NX_FIO(sub, "sub.Tensor", "sub_.Tensor", "sub.out", structured_sub_Tensor, sub_out,
       (, const Tensor& other, const Scalar& alpha), (, other, alpha))
NX_BINARY(mul, Tensor, "out")
NX_BINARY(div, Tensor, "out")
NX_FIO(div_mode, "div.Tensor_mode", "div_.Tensor_mode", "div.out_mode", structured_div_Tensor_mode, div_out,
       (, const Tensor& other, std::optional<c10::string_view> rounding_mode), (, other, rounding_mode))
NX_BINARY(remainder, Tensor, "Tensor_out")
NX_BINARY(fmod, Tensor, "Tensor_out")
NX_BINARY(bitwise_and, Tensor, "Tensor_out")
NX_BINARY(bitwise_or, Tensor, "Tensor_out")
NX_BINARY(bitwise_xor, Tensor, "Tensor_out")
NX_BINARY(eq, Tensor, "Tensor_out")
NX_BINARY(ne, Tensor, "Tensor_out")
NX_BINARY(lt, Tensor, "Tensor_out")
NX_BINARY(le, Tensor, "Tensor_out")
NX_BINARY(gt, Tensor, "Tensor_out")
NX_BINARY(ge, Tensor, "Tensor_out")
NX_BINARY(xlogy, Tensor, "OutTensor")
#define NX_COMPARE_SCALAR(op)                                                                               \
  NX_FIO(op##_Scalar, #op ".Scalar", #op "_.Scalar", #op ".Scalar_out", structured_##op##_Scalar, op##_out, \
         (, const Scalar& other), (, other))
NX_COMPARE_SCALAR(eq)
NX_COMPARE_SCALAR(ne)
NX_COMPARE_SCALAR(lt)
NX_COMPARE_SCALAR(le)
NX_COMPARE_SCALAR(gt)
NX_COMPARE_SCALAR(ge)
NX_FIO(pow_tt, "pow.Tensor_Tensor", "pow_.Tensor", "pow.Tensor_Tensor_out", structured_pow_Tensor_Tensor, pow_out,
       (, const Tensor& exponent), (, exponent))
NX_FIO(pow_ts, "pow.Tensor_Scalar", "pow_.Scalar", "pow.Tensor_Scalar_out", structured_pow_Tensor_Scalar, pow_out,
       (, const Scalar& exponent), (, exponent))
NX_FIO(atan2, "atan2", "atan2_", "atan2.out", structured_atan2, atan2_out, (, const Tensor& other), (, other))
NX_FIO(hypot, "hypot", "hypot_", "hypot.out", structured_hypot, hypot_out, (, const Tensor& other), (, other))
NX_FO(maximum, "maximum", "maximum.out", structured_maximum, maximum_out, (const Tensor& self, const Tensor& other),
      (self, other))
NX_FO(minimum, "minimum", "minimum.out", structured_minimum, minimum_out, (const Tensor& self, const Tensor& other),
      (self, other))
NX_FO(logaddexp, "logaddexp", "logaddexp.out", structured_logaddexp, logaddexp_out,
      (const Tensor& self, const Tensor& other), (self, other))
NX_FIO(lerp_s, "lerp.Scalar", "lerp_.Scalar", "lerp.Scalar_out", structured_lerp_Scalar, lerp_out,
       (, const Tensor& end, const Scalar& weight), (, end, weight))
NX_FIO(lerp_t, "lerp.Tensor", "lerp_.Tensor", "lerp.Tensor_out", structured_lerp_Tensor, lerp_out,
       (, const Tensor& end, const Tensor& weight), (, end, weight))
NX_FIO(addcmul, "addcmul", "addcmul_", "addcmul.out", structured_addcmul, addcmul_out,
       (, const Tensor& t1, const Tensor& t2, const Scalar& value), (, t1, t2, value))
NX_FIO(addcdiv, "addcdiv", "addcdiv_", "addcdiv.out", structured_addcdiv, addcdiv_out,
       (, const Tensor& t1, const Tensor& t2, const Scalar& value), (, t1, t2, value))
NX_FIO(clamp, "clamp", "clamp_", "clamp.out", structured_clamp, clamp_out,
       (, const std::optional<Scalar>& min, const std::optional<Scalar>& max), (, min, max))
NX_FIO(clamp_t, "clamp.Tensor", "clamp_.Tensor", "clamp.Tensor_out", structured_clamp_Tensor, clamp_out,
       (, const std::optional<Tensor>& min, const std::optional<Tensor>& max), (, min, max))
NX_FIO(clamp_min, "clamp_min", "clamp_min_", "clamp_min.out", structured_clamp_min, clamp_min_out,
       (, const Scalar& min), (, min))
NX_FIO(clamp_max, "clamp_max", "clamp_max_", "clamp_max.out", structured_clamp_max, clamp_max_out,
       (, const Scalar& max), (, max))
NX_FIO(gelu, "gelu", "gelu_", "gelu.out", neuron_structured_gelu, gelu_out, (, c10::string_view approximate),
       (, approximate))
NX_FIO(leaky_relu, "leaky_relu", "leaky_relu_", "leaky_relu.out", structured_leaky_relu, leaky_relu_out,
       (, const Scalar& slope), (, slope))
NX_FIO(elu, "elu", "elu_", "elu.out", structured_elu, elu_out,
       (, const Scalar& alpha, const Scalar& scale, const Scalar& input_scale), (, alpha, scale, input_scale))
NX_FIO(threshold, "threshold", "threshold_", "threshold.out", structured_threshold, threshold_out,
       (, const Scalar& threshold, const Scalar& value), (, threshold, value))
NX_FO(softplus, "softplus", "softplus.out", structured_softplus, softplus_out,
      (const Tensor& self, const Scalar& beta, const Scalar& threshold), (self, beta, threshold))

// Backward kernels (functional and grad_input= variants).
NX_FO(sigmoid_backward, "sigmoid_backward", "sigmoid_backward.grad_input", structured_sigmoid_backward,
      sigmoid_backward_out, (const Tensor& grad_output, const Tensor& output), (grad_output, output))
NX_FO(tanh_backward, "tanh_backward", "tanh_backward.grad_input", structured_tanh_backward, tanh_backward_out,
      (const Tensor& grad_output, const Tensor& output), (grad_output, output))
NX_FO(silu_backward, "silu_backward", "silu_backward.grad_input", structured_silu_backward, silu_backward_out,
      (const Tensor& grad_output, const Tensor& self), (grad_output, self))
NX_FO(gelu_backward, "gelu_backward", "gelu_backward.grad_input", neuron_structured_gelu_backward, gelu_backward_out,
      (const Tensor& grad_output, const Tensor& self, c10::string_view approximate), (grad_output, self, approximate))
NX_FO(threshold_backward, "threshold_backward", "threshold_backward.grad_input", structured_threshold_backward,
      threshold_backward_out, (const Tensor& grad_output, const Tensor& self, const Scalar& threshold),
      (grad_output, self, threshold))
NX_FO(leaky_relu_backward, "leaky_relu_backward", "leaky_relu_backward.grad_input", structured_leaky_relu_backward,
      leaky_relu_backward_out,
      (const Tensor& grad_output, const Tensor& self, const Scalar& slope, bool self_is_result),
      (grad_output, self, slope, self_is_result))
NX_FO(softplus_backward, "softplus_backward", "softplus_backward.grad_input", structured_softplus_backward,
      softplus_backward_out,
      (const Tensor& grad_output, const Tensor& self, const Scalar& beta, const Scalar& threshold),
      (grad_output, self, beta, threshold))
NX_FO(elu_backward, "elu_backward", "elu_backward.grad_input", structured_elu_backward, elu_backward_out,
      (const Tensor& grad_output, const Scalar& alpha, const Scalar& scale, const Scalar& input_scale, bool is_result,
       const Tensor& self_or_result),
      (grad_output, alpha, scale, input_scale, is_result, self_or_result))

// ATen's in-place conj_physical_ calls the kernel stub of the tensor's device directly, and the
// stub has no neuron entry; its out= form writing self is the same computation, as a neuron op.
at::Tensor& conj_physical_(at::Tensor& self) { return self.is_complex() ? at::conj_physical_out(self, self) : self; }
const bool conj_described =
    (typed_op("aten::conj_physical_", "conj_physical.out writing self (its out= form, a neuron op)"), true);

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("conj_physical_", TORCH_FN(conj_physical_)); }

}  // namespace
}  // namespace torch_neuronx
