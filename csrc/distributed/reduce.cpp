#include "distributed/reduce.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>

#include <algorithm>

namespace torch_neuronx {
namespace {

using Op = c10d::ReduceOp::RedOpType;

bool is_sum_like(Op op) { return op == Op::SUM || op == Op::AVG || op == Op::PREMUL_SUM; }

// A block at a time through an accumulator of type Acc: each pass over one source is a plain
// loop the compiler vectorizes, and 16-bit values are rounded once, at the end.
template <class T, class Acc, class Combine>
void blocked(T* const* outs, int nouts, const T* const* src, int n, int64_t count, Acc pre, Acc post, Combine combine) {
  constexpr int64_t kBlock = 2048;
  Acc acc[kBlock];
  for (int64_t b = 0; b < count; b += kBlock) {
    const int64_t m = std::min(kBlock, count - b);
    const T* s0 = src[0] + b;
    for (int64_t j = 0; j < m; ++j) acc[j] = static_cast<Acc>(s0[j]) * pre;
    for (int r = 1; r < n; ++r) {
      const T* s = src[r] + b;
      for (int64_t j = 0; j < m; ++j) acc[j] = combine(acc[j], static_cast<Acc>(s[j]) * pre);
    }
    for (int64_t j = 0; j < m; ++j) acc[j] = acc[j] * post;
    for (int k = 0; k < nouts; ++k) {
      T* o = outs[k] + b;
      for (int64_t j = 0; j < m; ++j) o[j] = static_cast<T>(acc[j]);
    }
  }
}

template <class T, class Acc>
void reduce_typed(void* const* outs, int nouts, const void* const* src_, int n, int64_t count, const Reduction& r) {
  auto* dst = reinterpret_cast<T* const*>(outs);
  auto* src = reinterpret_cast<const T* const*>(src_);
  const Acc one = static_cast<Acc>(1);
  switch (r.op) {
    case Op::SUM:
      return blocked<T, Acc>(dst, nouts, src, n, count, one, one, [](Acc a, Acc b) { return a + b; });
    case Op::AVG:
      if constexpr (std::is_floating_point_v<Acc>) {
        return blocked<T, Acc>(dst, nouts, src, n, count, one, one / static_cast<Acc>(r.ranks),
                               [](Acc a, Acc b) { return a + b; });
      }
      break;
    case Op::PREMUL_SUM:
      if constexpr (std::is_floating_point_v<Acc>) {
        return blocked<T, Acc>(dst, nouts, src, n, count, static_cast<Acc>(r.premul), one,
                               [](Acc a, Acc b) { return a + b; });
      }
      break;
    case Op::PRODUCT:
      return blocked<T, Acc>(dst, nouts, src, n, count, one, one, [](Acc a, Acc b) { return a * b; });
    case Op::MIN:
      return blocked<T, Acc>(dst, nouts, src, n, count, one, one, [](Acc a, Acc b) { return b < a ? b : a; });
    case Op::MAX:
      return blocked<T, Acc>(dst, nouts, src, n, count, one, one, [](Acc a, Acc b) { return b > a ? b : a; });
    case Op::BAND:
    case Op::BOR:
    case Op::BXOR:
      if constexpr (std::is_integral_v<Acc>) {
        if (r.op == Op::BAND)
          return blocked<T, Acc>(dst, nouts, src, n, count, one, one, [](Acc a, Acc b) { return a & b; });
        if (r.op == Op::BOR)
          return blocked<T, Acc>(dst, nouts, src, n, count, one, one, [](Acc a, Acc b) { return a | b; });
        return blocked<T, Acc>(dst, nouts, src, n, count, one, one, [](Acc a, Acc b) { return a ^ b; });
      }
      break;
    default:
      break;
  }
  TORCH_INTERNAL_ASSERT(false, "neuron: reduction ", reduction_name(r), " reached a kernel that cannot run it");
}

// bool: sum, max and or are "any"; product, min and and are "all".
void reduce_bool(void* const* outs, int nouts, const void* const* src, int n, int64_t count, const Reduction& r) {
  Reduction as_bytes = r;
  switch (r.op) {
    case Op::SUM:
    case Op::MAX:
    case Op::BOR:
      as_bytes.op = Op::MAX;
      break;
    case Op::PRODUCT:
    case Op::MIN:
    case Op::BAND:
      as_bytes.op = Op::MIN;
      break;
    default:
      break;
  }
  reduce_typed<uint8_t, uint8_t>(outs, nouts, src, n, count, as_bytes);
}

}  // namespace

c10d::ReduceOp gloo_op(const Reduction& r) {
  const bool summed = r.op == c10d::ReduceOp::AVG || r.op == c10d::ReduceOp::PREMUL_SUM;
  return c10d::ReduceOp(summed ? c10d::ReduceOp::SUM : r.op);
}

std::string reduction_name(const Reduction& r) {
  switch (r.op) {
    case Op::SUM:
      return "sum";
    case Op::AVG:
      return "avg";
    case Op::PRODUCT:
      return "product";
    case Op::MIN:
      return "min";
    case Op::MAX:
      return "max";
    case Op::BAND:
      return "band";
    case Op::BOR:
      return "bor";
    case Op::BXOR:
      return "bxor";
    case Op::PREMUL_SUM:
      return "premul_sum(" + std::to_string(r.premul) + ")";
    default:
      return "op " + std::to_string(static_cast<int>(r.op));
  }
}

Reduction make_reduction(const c10d::ReduceOp& op, c10::ScalarType dtype, int ranks, const char* collective) {
  Reduction r;
  r.op = op.op_;
  r.ranks = ranks;
  const bool floating = c10::isFloatingType(dtype) || c10::isComplexType(dtype);
  TORCH_CHECK(r.op != Op::UNUSED, "neuron: ", collective, ": reduce op UNUSED is not a reduction");
  if (r.op == Op::PREMUL_SUM) {
    auto* s = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
    TORCH_CHECK(s != nullptr, "neuron: ", collective,
                ": PREMUL_SUM needs a factor (torch.distributed._make_nccl_premul_sum)");
    if (s->tensor_factor.defined()) {
      TORCH_CHECK(s->tensor_factor.numel() == 1, "neuron: ", collective, ": PREMUL_SUM's factor must have one element");
      r.premul = s->tensor_factor.to(c10::kCPU, c10::kDouble).item<double>();
    } else {
      r.premul = s->double_factor;
    }
  }
  TORCH_CHECK_NOT_IMPLEMENTED(floating || (r.op != Op::AVG && r.op != Op::PREMUL_SUM), "neuron: ", collective, ": ",
                              reduction_name(r), " needs a floating-point tensor, got ", dtype,
                              " (use SUM and divide)");
  TORCH_CHECK_NOT_IMPLEMENTED(!floating || (r.op != Op::BAND && r.op != Op::BOR && r.op != Op::BXOR),
                              "neuron: ", collective, ": bitwise reduction ", reduction_name(r),
                              " needs an integer tensor, got ", dtype);
  TORCH_CHECK_NOT_IMPLEMENTED(!c10::isComplexType(dtype) || is_sum_like(r.op), "neuron: ", collective, ": ",
                              reduction_name(r), " is not defined for complex tensors");
  return r;
}

void reduce_into(void* const* outs, int nouts, const void* const* src, int n, int64_t count, c10::ScalarType dtype,
                 const Reduction& r) {
  switch (dtype) {
    case c10::kFloat:
      return reduce_typed<float, float>(outs, nouts, src, n, count, r);
    case c10::kDouble:
      return reduce_typed<double, double>(outs, nouts, src, n, count, r);
    case c10::kHalf:
      return reduce_typed<c10::Half, float>(outs, nouts, src, n, count, r);
    case c10::kBFloat16:
      return reduce_typed<c10::BFloat16, float>(outs, nouts, src, n, count, r);
    case c10::kComplexFloat:
      return reduce_typed<float, float>(outs, nouts, src, n, count * 2, r);
    case c10::kComplexDouble:
      return reduce_typed<double, double>(outs, nouts, src, n, count * 2, r);
    case c10::kChar:
      return reduce_typed<int8_t, int8_t>(outs, nouts, src, n, count, r);
    case c10::kByte:
      return reduce_typed<uint8_t, uint8_t>(outs, nouts, src, n, count, r);
    case c10::kShort:
      return reduce_typed<int16_t, int16_t>(outs, nouts, src, n, count, r);
    case c10::kInt:
      return reduce_typed<int32_t, int32_t>(outs, nouts, src, n, count, r);
    case c10::kLong:
      return reduce_typed<int64_t, int64_t>(outs, nouts, src, n, count, r);
    case c10::kBool:
      return reduce_bool(outs, nouts, src, n, count, r);
    default:
      TORCH_CHECK_NOT_IMPLEMENTED(false, "neuron: collectives cannot reduce ", dtype, " tensors");
  }
}

}  // namespace torch_neuronx
