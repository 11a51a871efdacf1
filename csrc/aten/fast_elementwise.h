// Small same-shape elementwise calls (add, sub, mul, div of contiguous float32/bfloat16 tensors of
// one shape) run as a plain loop over device memory: for tensors this small the CPU kernel's
// setup (CPU views, TensorIterator) costs far more than the arithmetic, and the queue worker must
// stay ahead of the host. Each result is what the CPU kernel computes: one IEEE operation in
// float, rounded once to the tensor's dtype. Anything else takes the CPU kernel.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/add_meta.h>
#include <ATen/ops/div_meta.h>
#include <ATen/ops/mul_meta.h>
#include <ATen/ops/sub_meta.h>
#include <c10/util/BFloat16.h>

#include <type_traits>

#include "exec/executor.h"
#include "pipeline/first_call.h"
#include "pipeline/op_record.h"

namespace torch_neuronx {

enum class FastOp : uint8_t { kAdd, kSub, kMul, kDiv };

// Above this many elements the CPU kernel's vectorized, multi-threaded loop wins.
constexpr int64_t kFastElementwiseMax = 4096;

template <class T>
void fast_loop(FastOp op, T* out, const T* a, const T* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = static_cast<float>(a[i]), y = static_cast<float>(b[i]);
    float r;
    switch (op) {
      case FastOp::kAdd:
        r = x + y;
        break;
      case FastOp::kSub:
        r = x - y;
        break;
      case FastOp::kMul:
        r = x * y;
        break;
      default:
        r = x / y;
        break;
    }
    out[i] = static_cast<T>(r);
  }
}

// Queues the loop when the call qualifies (the caller has checked one dtype, one contiguous shape,
// one device); false otherwise.
inline bool launch_fast(OpRecord& rec, FastOp op, const at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
  const int64_t n = out.numel();
  const auto dtype = out.scalar_type();
  if (n > kFastElementwiseMax || (dtype != at::kFloat && dtype != at::kBFloat16)) return false;
  rec.count(Mode::kAsync);
  void* o = out.mutable_data_ptr();
  const void* x = a.const_data_ptr();
  const void* y = b.const_data_ptr();
  const auto loop = [op, o, x, y, n, dtype] {
    if (dtype == at::kFloat) {
      fast_loop(op, static_cast<float*>(o), static_cast<const float*>(x), static_cast<const float*>(y), n);
    } else {
      fast_loop(op, static_cast<c10::BFloat16*>(o), static_cast<const c10::BFloat16*>(x),
                static_cast<const c10::BFloat16*>(y), n);
    }
  };
  // The loop cannot fail: every call may be concatenated, keyed by the op and the dtype.
  launch_queued(out.device().index(), rec, reinterpret_cast<uintptr_t>(&rec) * 31 + static_cast<uint64_t>(dtype), loop);
  return true;
}

// Which structured ops have a loop: alpha must be 1 (the CPU fuses a multiply-add otherwise).
// `exact`: the call is one IEEE operation per element, so its CPU kernel gives the same bits
// however its work is split, and may run on the worker alone (aten/solo_ops.h).
template <class Meta>
struct FastElementwise : std::false_type {};

template <FastOp Op>
struct FastAlphaOp : std::true_type {
  static bool exact(const at::Tensor&, const at::Tensor&, const at::Scalar& alpha) { return alpha.equal(1); }
  static bool launch(OpRecord& rec, const at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                     const at::Scalar& alpha) {
    return exact(a, b, alpha) && launch_fast(rec, Op, out, a, b);
  }
};
template <FastOp Op>
struct FastPlainOp : std::true_type {
  static bool exact(const at::Tensor&, const at::Tensor&) { return true; }
  static bool launch(OpRecord& rec, const at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
    return launch_fast(rec, Op, out, a, b);
  }
};

template <>
struct FastElementwise<at::meta::structured_add_Tensor> : FastAlphaOp<FastOp::kAdd> {};
template <>
struct FastElementwise<at::meta::structured_sub_Tensor> : FastAlphaOp<FastOp::kSub> {};
template <>
struct FastElementwise<at::meta::structured_mul_Tensor> : FastPlainOp<FastOp::kMul> {};
template <>
struct FastElementwise<at::meta::structured_div_Tensor> : FastPlainOp<FastOp::kDiv> {};

}  // namespace torch_neuronx
