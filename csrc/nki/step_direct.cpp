#include "nki/step_direct.h"

#include <ATen/Functions.h>
#include <ATen/TensorIterator.h>
#include <c10/util/BFloat16.h>

#include <cmath>
#include <cstdint>

#include "exec/tensor_desc.h"

namespace torch_neuronx::nki::direct {
namespace {

enum : int64_t { kAdd = 0, kSub = 1, kMul = 2, kDiv = 3, kMax = 4, kMin = 5 };

template <int64_t Op>
inline float apply(float x, float y) {
  if constexpr (Op == kAdd) return x + y;
  if constexpr (Op == kSub) return x - y;
  if constexpr (Op == kMul) return x * y;
  if constexpr (Op == kDiv) return x / y;
  // NaN wins, as at::maximum / at::minimum (the general path) give.
  if constexpr (Op == kMax) return std::isnan(x) || std::isnan(y) ? NAN : (x > y ? x : y);
  if constexpr (Op == kMin) return std::isnan(x) || std::isnan(y) ? NAN : (x < y ? x : y);
}

template <class O, class A, class B, int64_t Op>
void run(at::TensorIterator& iter) {
  iter.for_each([](char** data, const int64_t* strides, int64_t n, int64_t m) {
    const int64_t so = strides[0], sa = strides[1], sb = strides[2];
    for (int64_t j = 0; j < m; ++j) {
      char* po = data[0] + j * strides[3];
      const char* pa = data[1] + j * strides[4];
      const char* pb = data[2] + j * strides[5];
      if (so == sizeof(O) && sa == sizeof(A) && (sb == sizeof(B) || sb == 0)) {
        // The common rows: dense, the second operand dense or one value (a broadcast column).
        O* o = reinterpret_cast<O*>(po);
        const A* a = reinterpret_cast<const A*>(pa);
        const B* b = reinterpret_cast<const B*>(pb);
        if (sb == 0) {
          const float y = static_cast<float>(*b);
          for (int64_t i = 0; i < n; ++i) o[i] = static_cast<O>(apply<Op>(static_cast<float>(a[i]), y));
        } else {
          for (int64_t i = 0; i < n; ++i)
            o[i] = static_cast<O>(apply<Op>(static_cast<float>(a[i]), static_cast<float>(b[i])));
        }
        continue;
      }
      for (int64_t i = 0; i < n; ++i) {
        const float x = static_cast<float>(*reinterpret_cast<const A*>(pa + i * sa));
        const float y = static_cast<float>(*reinterpret_cast<const B*>(pb + i * sb));
        *reinterpret_cast<O*>(po + i * so) = static_cast<O>(apply<Op>(x, y));
      }
    }
  });
}

template <class O, class A, class B>
bool run_op(int64_t op, at::TensorIterator& iter) {
  switch (op) {
    case kAdd:
      run<O, A, B, kAdd>(iter);
      return true;
    case kSub:
      run<O, A, B, kSub>(iter);
      return true;
    case kMul:
      run<O, A, B, kMul>(iter);
      return true;
    case kDiv:
      run<O, A, B, kDiv>(iter);
      return true;
    case kMax:
      run<O, A, B, kMax>(iter);
      return true;
    case kMin:
      run<O, A, B, kMin>(iter);
      return true;
    default:
      return false;
  }
}

template <class O, class A>
bool with_b(int64_t op, at::TensorIterator& iter) {
  return iter.dtype(2) == at::kFloat ? run_op<O, A, float>(op, iter) : run_op<O, A, c10::BFloat16>(op, iter);
}

template <class O>
bool with_a(int64_t op, at::TensorIterator& iter) {
  return iter.dtype(1) == at::kFloat ? with_b<O, float>(op, iter) : with_b<O, c10::BFloat16>(op, iter);
}

bool covered(const at::Tensor& t) { return t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16; }

bool fits(const at::Tensor& t, const at::Tensor& dst) {
  return covered(t) && (t.dim() == 0 ? t.scalar_type() == at::kFloat : t.sizes().equals(dst.sizes()));
}

// `t` seen as words of `width` bytes (the innermost dim dense and a whole number of words, every
// other stride and the start whole words), or undefined.
at::Tensor as_words(const at::Tensor& t, int64_t width) {
  const int64_t item = static_cast<int64_t>(t.element_size()), last = t.dim() - 1;
  if (last < 0 || (t.stride(last) != 1 && t.size(last) != 1) || (t.size(last) * item) % width != 0) return {};
  if ((t.storage_offset() * item) % width != 0 || reinterpret_cast<uintptr_t>(t.const_data_ptr()) % width != 0) {
    return {};
  }
  c10::SmallVector<int64_t, 6> sizes(t.sizes().begin(), t.sizes().end()), strides(t.dim());
  for (int64_t d = 0; d < last; ++d) {
    if ((t.stride(d) * item) % width != 0) return {};
    strides[d] = t.stride(d) * item / width;
  }
  sizes[last] = t.size(last) * item / width;
  strides[last] = 1;
  // 16-byte words travel as complex doubles: copy_ moves them without arithmetic, every bit kept.
  const at::ScalarType word = width == 16  ? at::kComplexDouble
                              : width == 8 ? at::kLong
                              : width == 4 ? at::kInt
                                           : at::kShort;
  return make_cpu_tensor(t.storage(), c10::scalarTypeToTypeMeta(word), sizes, strides,
                         t.storage_offset() * item / width);
}

}  // namespace

bool copy(const at::Tensor& dst, const at::Tensor& src) {
  if (dst.scalar_type() != src.scalar_type() || !dst.sizes().equals(src.sizes()) || dst.dim() == 0) return false;
  for (int64_t width : {16, 8, 4, 2}) {
    if (width <= static_cast<int64_t>(dst.element_size())) break;  // no wider than what copy_ moves already
    const at::Tensor d = as_words(dst, width), s = as_words(src, width);
    if (d.defined() && s.defined()) {
      d.copy_(s);
      return true;
    }
  }
  return false;
}

bool writable(const at::Tensor& dst) {
  for (int64_t d = 0; d < dst.dim(); ++d) {
    if (dst.stride(d) == 0 && dst.size(d) > 1) return false;
  }
  return true;
}

bool binary(int64_t op, const at::Tensor& dst, const at::Tensor& a, const at::Tensor& b) {
  if (op < kAdd || op > kMin || !covered(dst) || !fits(a, dst) || !fits(b, dst) || !writable(dst)) return false;
  // One dtype throughout (an immediate only beside fp32, which it is): ATen's vectorised kernel
  // computes the same bits, in fp32 and rounded once.
  const at::ScalarType dt = dst.scalar_type();
  if (a.scalar_type() == dt && b.scalar_type() == dt) {
    switch (op) {
      case kAdd:
        at::add_out(const_cast<at::Tensor&>(dst), a, b);
        return true;
      case kSub:
        at::sub_out(const_cast<at::Tensor&>(dst), a, b);
        return true;
      case kMul:
        at::mul_out(const_cast<at::Tensor&>(dst), a, b);
        return true;
      case kDiv:
        at::div_out(const_cast<at::Tensor&>(dst), a, b);
        return true;
      case kMax:
        at::maximum_out(const_cast<at::Tensor&>(dst), a, b);
        return true;
      default:
        at::minimum_out(const_cast<at::Tensor&>(dst), a, b);
        return true;
    }
  }
  // The tracer has ruled out overlaps that matter; TensorIterator's own check cannot tell SBUF tiles
  // interleaved partition by partition from overlapping ones.
  at::TensorIterator iter = at::TensorIteratorConfig()
                                .set_check_mem_overlap(false)
                                .check_all_same_dtype(false)
                                .resize_outputs(false)
                                .add_output(dst)
                                .add_const_input(a)
                                .add_const_input(b)
                                .build();
  return dst.scalar_type() == at::kFloat ? with_a<float>(op, iter) : with_a<c10::BFloat16>(op, iter);
}

}  // namespace torch_neuronx::nki::direct
