// Which typed kernels run on the queue worker alone (exec/solo_team.h): calls whose bits cannot
// depend on how the kernel splits its work, and none of whose tensors exceeds kSoloElements. The
// boxed ops that may are flagged kSplitInvariant in pipeline/op_overrides.cpp.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/mean_meta.h>
#include <ATen/ops/neg_meta.h>
#include <ATen/ops/pow_meta.h>
#include <ATen/ops/rsqrt_meta.h>
#include <ATen/ops/sqrt_meta.h>
#include <ATen/ops/sum_meta.h>

#include <algorithm>
#include <type_traits>

#include "aten/fast_elementwise.h"
#include "exec/solo_team.h"
#include "pipeline/op_record.h"

namespace torch_neuronx {

// Ops whose CPU kernel computes every output element the same way however its work is split.
// `exact(out, args...)` says it of one call.
template <class Meta>
struct SplitInvariant : std::false_type {};
struct AlwaysSplitInvariant : std::true_type {
  template <class... Args>
  static bool exact(const Args&...) {
    return true;
  }
};

// Elementwise ops whose vectorized body and scalar tail compute an element alike: one correctly
// rounded IEEE operation, or none. (add, sub, mul and div say it in fast_elementwise.h.)
template <>
struct SplitInvariant<at::meta::structured_sqrt> : AlwaysSplitInvariant {};
template <>
struct SplitInvariant<at::meta::structured_neg> : AlwaysSplitInvariant {};  // a sign flip
// 1 / sqrt(x) in both paths for float and double; a bfloat16 or half scalar tail rounds the root to
// its dtype before dividing, where the vectorized body divides in float.
template <>
struct SplitInvariant<at::meta::structured_rsqrt> : std::true_type {
  static bool exact(const at::Tensor& out, const at::Tensor&) {
    return out.scalar_type() == at::kFloat || out.scalar_type() == at::kDouble;
  }
};
// x ** 0 is a fill, x ** 1 a copy, x ** 2 is x * x in both paths (and for integers); other
// exponents call pow, whose vectorized body and scalar tail differ.
template <>
struct SplitInvariant<at::meta::structured_pow_Tensor_Scalar> : std::true_type {
  static bool exact(const at::Tensor&, const at::Tensor&, const at::Scalar& exponent) {
    if (exponent.isComplex()) return false;
    const double e = exponent.toDouble();
    return e == 0.0 || e == 1.0 || e == 2.0;
  }
};

// Sums and means over dimensions into more than one element: the CPU's reduction gives each thread
// whole outputs (TensorIterator's parallel_dim_reduction splits a kept dimension, never a reduced
// one), and an output's sum is the same cascade of additions whether vector lanes or the scalar
// loop compute it (SumKernel.cpp's row_sum); a mean is that sum divided. A sum into one element
// splits its elements between threads (two_pass_reduction) and keeps the team.
struct DimSum : std::true_type {
  template <class... Args>
  static bool exact(const at::Tensor& out, const at::Tensor& self, const Args&...) {
    return out.numel() > 1 && !c10::isComplexType(self.scalar_type());
  }
};
template <>
struct SplitInvariant<at::meta::structured_sum_dim_IntList> : DimSum {};
template <>
struct SplitInvariant<at::meta::structured_mean_dim> : DimSum {};

template <class T>
int64_t numel_of(const T& v) {
  if constexpr (std::is_same_v<std::decay_t<T>, at::Tensor>) {
    return v.defined() ? v.numel() : 0;
  } else {
    return 0;
  }
}

// Whether a call of op `Meta` (its operands `args`) writing `out` runs its CPU kernel on the worker
// alone, counted on `rec`: a split-invariant call of a real dtype (complex products and roots
// round differently in the vectorized body and the scalar tail), no tensor of which is larger than
// kSoloElements.
template <class Meta, class... Args>
bool solo_call(OpRecord& rec, const at::Tensor& out, const Args&... args) {
  bool solo = false;
  if constexpr (FastElementwise<Meta>::value || SplitInvariant<Meta>::value) {
    solo = std::max({out.numel(), numel_of(args)...}) <= kSoloElements && !c10::isComplexType(out.scalar_type());
    if constexpr (FastElementwise<Meta>::value) solo = solo && FastElementwise<Meta>::exact(args...);
    if constexpr (SplitInvariant<Meta>::value) solo = solo && SplitInvariant<Meta>::exact(out, args...);
  }
  return rec.count_solo(solo);
}

}  // namespace torch_neuronx
