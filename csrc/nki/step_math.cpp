#include "nki/step_math.h"

#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <ATen/TensorOperators.h>

#include <algorithm>
#include <cmath>

namespace torch_neuronx::nki::math {

// The tables Python reads (torch_neuronx/nki/language.py names its ops by these lists' order).
// (clang-format's column layout gives up on this list and puts one name a line.)
// clang-format off
const std::vector<std::string> kActivations = {
    "copy", "exp", "log", "tanh", "sigmoid", "relu", "gelu", "gelu_apprx_tanh", "silu", "sqrt", "rsqrt",
    "reciprocal", "abs", "negative", "square", "sin", "cos", "sign", "softplus", "erf", "arctan", "gelu_dx",
    "silu_dx", "mish", "ceil", "floor", "tan", "trunc", "gelu_apprx_sigmoid", "gelu_apprx_sigmoid_dx",
    "erf_dx"};
// clang-format on
const std::vector<std::string> kBinaries = {"add",           "subtract",    "multiply",   "divide",      "maximum",
                                            "minimum",       "power",       "equal",      "not_equal",   "greater",
                                            "greater_equal", "less",        "less_equal", "logical_and", "logical_or",
                                            "logical_xor",   "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift",
                                            "right_shift",   "abs_max",     "abs_min",    "fmod",        "abs"};
const std::vector<std::string> kReductions = {"add", "maximum", "minimum", "multiply"};

constexpr double kLog2e = 1.4426950408889634;
constexpr double kGeluSigmoid = 1.702;

// fn(x), in place where ATen has the in-place op (x is the step's own fp32 copy).
at::Tensor activate(int64_t fn, at::Tensor& x) {
  switch (fn) {
    case 0:
      return x;
    case 1:
      // As exp2(x·log2 e): ATen's exp is MKL's high-accuracy vsExp, 3× slower than its exp2 (Sleef,
      // 1 ulp) and 3× slower again on inputs that underflow, as a kernel's masked scores do. The
      // product's rounding costs |x|·2⁻²⁴ of relative error, below the Scalar engine's own.
      return x.mul_(kLog2e).exp2_();
    case 2:
      return x.log_();
    case 3:
      return x.tanh_();
    case 4:
      return x.sigmoid_();
    case 5:
      return x.relu_();
    case 6:
      return at::gelu(x);
    case 7:
      return at::gelu(x, "tanh");
    case 8:
      return at::silu(x);
    case 9:
      return x.sqrt_();
    case 10:
      return x.rsqrt_();
    case 11:
      return x.reciprocal_();
    case 12:
      return x.abs_();
    case 13:
      return x.neg_();
    case 14:
      return x.mul_(x);
    case 15:
      return x.sin_();
    case 16:
      return x.cos_();
    case 17:
      return x.sign_();
    case 18:
      return at::softplus(x);
    case 19:
      return x.erf_();
    case 20:
      return x.atan_();
    case 21: {  // d/dx gelu = Φ(x) + x φ(x)
      const at::Tensor cdf = (x * M_SQRT1_2).erf().add_(1).mul_(0.5);
      return cdf + x * (x * x * -0.5).exp_().mul_(0.5 * M_2_SQRTPI * M_SQRT1_2);
    }
    case 22: {  // d/dx silu = σ(x) (1 + x (1 − σ(x)))
      const at::Tensor s = x.sigmoid();
      return s * (1 + x * (1 - s));
    }
    case 23:
      return at::mish(x);
    case 24:
      return x.ceil_();
    case 25:
      return x.floor_();
    case 26:
      return x.tan_();
    case 27:
      return x.trunc_();
    case 28:  // x·σ(1.702x), the sigmoid approximation of gelu
      return x * (x * kGeluSigmoid).sigmoid_();
    case 29: {  // its derivative: σ(kx) + kx·σ(kx)(1 − σ(kx))
      const at::Tensor s = (x * kGeluSigmoid).sigmoid_();
      return s + x * kGeluSigmoid * s * (1 - s);
    }
    case 30:  // d/dx erf = 2/√π · exp(−x²)
      return (x * x).neg_().exp_().mul_(M_2_SQRTPI);
    default:
      TORCH_CHECK(false, "nki: unknown activation ", fn);
  }
}

at::Tensor binary(int64_t op, const at::Tensor& a, const at::Tensor& b) {
  switch (op) {
    case 0:
      return a + b;
    case 1:
      return a - b;
    case 2:
      return a * b;
    case 3:
      return a / b;
    case 4:
      return at::maximum(a, b);
    case 5:
      return at::minimum(a, b);
    case 6:
      return at::pow(a, b);
    case 7:
      return a.eq(b);
    case 8:
      return a.ne(b);
    case 9:
      return a.gt(b);
    case 10:
      return a.ge(b);
    case 11:
      return a.lt(b);
    case 12:
      return a.le(b);
    case 13:
      return at::logical_and(a, b);
    case 14:
      return at::logical_or(a, b);
    case 15:
      return at::logical_xor(a, b);
    case 16:
      return at::bitwise_and(a, b);
    case 17:
      return at::bitwise_or(a, b);
    case 18:
      return at::bitwise_xor(a, b);
    case 19:
      return at::bitwise_left_shift(a, b);
    case 20:
      return at::bitwise_right_shift(a, b);
    case 21:
      return at::maximum(a.abs(), b.abs());
    case 22:
      return at::minimum(a.abs(), b.abs());
    case 23:
      return at::fmod(a, b);
    case 24:  // |a|: the ALU's abs takes an operand the callers fix at 0 (see language.py)
      return a.abs();
    default:
      TORCH_CHECK(false, "nki: unknown ALU op ", op);
  }
}

// Reduces the trailing dims of `x` from `first` on (NKI reduces trailing free axes only), keeping them.
at::Tensor reduce_trailing(int64_t op, const at::Tensor& x, int64_t first) {
  c10::SmallVector<int64_t, 5> keep(x.sizes().begin(), x.sizes().begin() + first);
  keep.push_back(-1);
  const at::Tensor flat = x.reshape(keep);
  switch (op) {
    case 0:
      return flat.sum(-1, /*keepdim=*/true);
    case 1:
      return flat.amax(-1, /*keepdim=*/true);
    case 2:
      return flat.amin(-1, /*keepdim=*/true);
    case 3:
      return flat.prod(-1, /*keepdim=*/true);
    default:
      TORCH_CHECK(false, "nki: unknown reduction ", op);
  }
}

bool is_integral(const at::Tensor& t) { return c10::isIntegralType(t.scalar_type(), /*includeBool=*/true); }

// The engines compute in fp32 (integer ALU ops on integer tiles stay integral).
at::Tensor fp32(const at::Tensor& t) { return t.scalar_type() == at::kFloat ? t : t.to(at::kFloat); }

// dst (+)= stᵀ @ mv in fp32, as the PE array accumulates into PSUM: 16-bit and fp8 tiles convert
// exactly to fp32 first. beta 0 ignores what PSUM held, NaN included.
void matmul(const at::Tensor& dst, const at::Tensor& st, const at::Tensor& mv, bool accumulate) {
  const int64_t k = st.size(0), m = st.numel() / k, n = mv.numel() / k;
  dst.view({m, n}).addmm_(fp32(st.reshape({k, m})).t(), fp32(mv.reshape({k, n})), accumulate ? 1.0f : 0.0f, 1.0f);
}

// One element of an ALU op (the arithmetic ones of kBinaries), in fp32 as the Vector Engine computes.
float alu(int64_t op, float a, float b) {
  switch (op) {
    case 0:
      return a + b;
    case 1:
      return a - b;
    case 2:
      return a * b;
    case 3:
      return a / b;
    case 4:
      return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
    case 5:
      return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b);
    case 6:
      return std::pow(a, b);
    case 21:
      return std::max(std::fabs(a), std::fabs(b));
    case 22:
      return std::min(std::fabs(a), std::fabs(b));
    case 23:
      return std::fmod(a, b);
    case 24:
      return std::fabs(a);
    default:
      TORCH_CHECK(false, "nki: ALU op ", op, " cannot run in a scan");
  }
}

// A tile's free elements as [P, n] fp32 rows, each row's elements adjacent: the tile itself where
// it already is so (an fp32 SBUF tile: rows `row` elements apart), else a dense fp32 copy.
at::Tensor fp32_rows(const at::Tensor& t) {
  at::Tensor r = t.reshape({t.size(0), -1});
  if (r.scalar_type() != at::kFloat || (r.size(1) > 1 && r.stride(1) != 1)) r = r.to(at::kFloat).contiguous();
  return r;
}

namespace {

struct ScanRows {
  const float *a, *b, *init;
  float* out;
  int64_t sa, sb, so, n;
};

// The linear recurrence acc = x·acc + y (cumsum, mamba's state; both ops commute exactly, so
// reverse0/1 change nothing) over `lanes` partitions from p0 at once, each step's multiply-add
// chain overlapping the others', where one partition alone waits on its own latency. Lanes > 0:
// exactly that many, a count the compiler unrolls with the accumulators in registers.
template <int64_t Lanes>
void linear_rows(const ScanRows& r, int64_t p0, int64_t lanes) {
  constexpr int64_t kMax = Lanes > 0 ? Lanes : 8;
  const int64_t count = Lanes > 0 ? Lanes : lanes;
  float acc[kMax];
  for (int64_t k = 0; k < count; ++k) acc[k] = r.init[p0 + k];
  for (int64_t j = 0; j < r.n; ++j) {
    for (int64_t k = 0; k < count; ++k) {
      const int64_t p = p0 + k;
      acc[k] = r.a[p * r.sa + j] * acc[k] + r.b[p * r.sb + j];
      r.out[p * r.so + j] = acc[k];
    }
  }
}

}  // namespace

// A scan is a recurrence along each partition's free elements: no whole-tile ATen op computes it
// for an arbitrary op pair, so it is the one step that loops over elements (partitions outer, as
// the Vector Engine streams each partition's row). It writes `out` ([P, n] fp32 rows, each row
// dense) where the caller has one apart from the inputs, else a fresh tensor, so a dst that
// overlaps data0/data1 reads nothing already overwritten. Partitions are independent: a team
// (the caller's OpenMP setting) takes blocks of them.
at::Tensor scan(const at::Tensor& data0, const at::Tensor& data1, const at::Tensor& initial, const Step& s,
                at::Tensor out) {
  // A one-row operand (a constant of the lowering) serves every partition.
  const at::Tensor a = fp32_rows(data0), b = fp32_rows(data1);
  const int64_t parts = std::max(a.size(0), b.size(0)), n = a.size(1), op0 = s.i[0], op1 = s.i[1];
  // Each partition's first value: the immediate, or its element of a column (read in place when
  // fp32: a scan per tile of a long row carries the last column over, and ATen ops to gather it
  // would cost more than the column).
  std::vector<float> init(static_cast<size_t>(parts), static_cast<float>(s.f[0]));
  if (initial.defined() && initial.scalar_type() == at::kFloat && initial.dim() >= 1 && initial.numel() == parts) {
    const float* column = initial.const_data_ptr<float>();
    for (int64_t p = 0; p < parts; ++p) init[p] = column[p * initial.stride(0)];
  } else if (initial.defined()) {
    const at::Tensor v = initial.reshape({-1}).to(at::kFloat).expand({parts}).contiguous();
    std::copy_n(v.const_data_ptr<float>(), parts, init.begin());
  }
  if (!out.defined()) out = at::empty({parts, n}, at::kFloat);
  const ScanRows rows{
      a.const_data_ptr<float>(),        b.const_data_ptr<float>(),        init.data(),   out.mutable_data_ptr<float>(),
      a.size(0) == 1 ? 0 : a.stride(0), b.size(0) == 1 ? 0 : b.stride(0), out.stride(0), n};
  const bool rev0 = s.i[2] != 0, rev1 = s.i[3] != 0, linear = op0 == 2 && op1 == 0;
  constexpr int64_t kLanes = 8;
  at::parallel_for(0, (parts + kLanes - 1) / kLanes, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p0 = begin * kLanes; p0 < std::min(parts, end * kLanes); p0 += kLanes) {
      const int64_t lanes = std::min(kLanes, parts - p0);
      if (linear) {
        lanes == kLanes ? linear_rows<kLanes>(rows, p0, lanes) : linear_rows<0>(rows, p0, lanes);
        continue;
      }
      for (int64_t p = p0; p < p0 + lanes; ++p) {
        float acc = rows.init[p];
        for (int64_t j = 0; j < n; ++j) {
          const float x = rows.a[p * rows.sa + j], y = rows.b[p * rows.sb + j];
          const float t = rev0 ? alu(op0, acc, x) : alu(op0, x, acc);
          acc = rev1 ? alu(op1, y, t) : alu(op1, t, y);
          rows.out[p * rows.so + j] = acc;
        }
      }
    }
  });
  return out;
}

}  // namespace torch_neuronx::nki::math
