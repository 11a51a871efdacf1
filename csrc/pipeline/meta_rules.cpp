#include "pipeline/meta_rules.h"

#include <ATen/Dispatch_v2.h>
#include <ATen/core/Reduction.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/random_cpu_dispatch.h>

namespace torch_neuronx::meta_rules {
namespace {

at::Tensor tensor_at(const c10::IValue* args, int i) { return args[i].isTensor() ? args[i].toTensor() : at::Tensor(); }

// CPU's mixed-type rule (ATen/native/cpu/mixed_data_type.h): the first defined parameter's dtype
// differs from the input's.
bool mixed(const at::Tensor& input, std::initializer_list<at::Tensor> params) {
  for (const auto& p : params)
    if (p.defined()) return p.scalar_type() != input.scalar_type();
  return false;
}

void set_stats(const Results& results, size_t first, size_t n, c10::ScalarType dtype, bool empty) {
  for (size_t i = first; i < first + n && i < results.size(); ++i) {
    auto& m = *results[i];
    m.dtype = dtype;
    if (empty) {
      m.sizes.assign({0});
      m.strides.assign({1});
    }
  }
}

void batch_norm(const c10::IValue* args, const Results& results, bool has_running, std::optional<bool> train,
                int train_arg) {
  const at::Tensor input = tensor_at(args, 0);
  const bool is_mixed =
      has_running ? mixed(input, {tensor_at(args, 1), tensor_at(args, 2), tensor_at(args, 3), tensor_at(args, 4)})
                  : mixed(input, {tensor_at(args, 1), tensor_at(args, 2)});
  const bool training = train.has_value() ? *train : args[train_arg].toBool();
  set_stats(results, 1, 2, is_mixed ? at::kFloat : input.scalar_type(), !training);
}

}  // namespace

void batch_norm_stats(const c10::IValue* args, const Results& results) {
  // (input, weight?, bias?, running_mean?, running_var?, training, momentum, eps)
  batch_norm(args, results, true, std::nullopt, 5);
}

void batch_norm_stats_no_stats(const c10::IValue* args, const Results& results) {
  // (input, weight?, bias?, training, momentum, eps)
  batch_norm(args, results, false, std::nullopt, 3);
}

void batch_norm_stats_eval(const c10::IValue* args, const Results& results) {
  batch_norm(args, results, true, false, -1);
}

void batch_norm_stats_train(const c10::IValue* args, const Results& results) {
  batch_norm(args, results, true, true, -1);
}

namespace {
// The first result as a full reduction's: `rank` dimensions of size 1 (0-dim for rank 0).
void fully_reduced(const Results& results, size_t rank) {
  results[0]->sizes.assign(rank, 1);
  results[0]->strides.assign(rank, 1);
}
}  // namespace

void multi_margin_loss_0d(const c10::IValue* args, const Results& results) {
  // (self, target, p, margin, weight?, reduction): meta gives (nframe,) for reduction none
  // whatever the target's rank; the CPU (and CUDA) give it only for a target with dimensions.
  if (results.empty() || args[5].toInt() != at::Reduction::None || tensor_at(args, 1).dim() > 0) return;
  fully_reduced(results, 0);
}

void multilabel_margin_loss_0d(const c10::IValue* args, const Results& results) {
  // (self, target, reduction): the CPU's loss of a 1-dim target is 0-dim for every reduction.
  if (results.empty() || tensor_at(args, 1).dim() > 1) return;
  fully_reduced(results, 0);
}

void empty_dim_reduces_all(const c10::IValue* args, const Results& results) {
  // (self, dim?, keepdim, ...)
  if (results.empty() || !args[1].isIntList() || !args[1].toIntList().empty()) return;
  fully_reduced(results, args[2].toBool() ? static_cast<size_t>(tensor_at(args, 0).dim()) : 0);
}

void check_uniform(c10::IValue* args) {
  const double from = args[1].toDouble(), to = args[2].toDouble();
  TORCH_CHECK(from <= to, "uniform_ expects to return a [from, to) range, but found from=", from, " > to=", to);
}

// The CPU kernel checks the range against the dtype before it draws anything, so its own
// checks run on an empty CPU tensor of that dtype: the CPU's messages, no draw.
namespace {
void check_random_range(const at::Tensor& self, int64_t from, std::optional<int64_t> to) {
  at::Tensor probe = at::empty({0}, at::TensorOptions().dtype(self.scalar_type()));
  at::cpu::random_(probe, from, to);
}
}  // namespace

void check_random_from(c10::IValue* args) {
  check_random_range(tensor_at(args, 0), args[1].toInt(), args[2].toOptional<int64_t>());
}

// random_(to) is the CPU's random_(0, to).
void check_random_to(c10::IValue* args) { check_random_range(tensor_at(args, 0), 0, args[1].toInt()); }

void check_masked_fill(c10::IValue* args) {
  const at::Tensor self = tensor_at(args, 0);
  const c10::Scalar value = args[2].toScalar();
  // Scalar::to<T> raises "value cannot be converted to type T without overflow", as the kernel does.
  AT_DISPATCH_V2(self.scalar_type(), "masked_fill", AT_WRAP([&] { (void)value.to<scalar_t>(); }),
                 AT_EXPAND(AT_ALL_TYPES_AND_COMPLEX), at::kComplexHalf, at::kHalf, at::kBFloat16, at::kBool);
}

void check_masked_scatter(c10::IValue* args) {
  const at::Tensor self = tensor_at(args, 0), mask = tensor_at(args, 1), source = tensor_at(args, 2);
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_scatter_ only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(),
              "masked_scatter_: expected self and source to have same dtypes but got", self.scalar_type(), " and ",
              source.scalar_type());
  // The mask expands to self's shape (self never grows): a meta tensor says whether it can.
  (void)at::empty(mask.sizes(), mask.options().device(c10::kMeta)).expand(self.sizes());
}

void check_multinomial(c10::IValue* args) {
  const at::Tensor self = tensor_at(args, 0);
  TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "prob_dist must be 1 or 2 dim");
  TORCH_CHECK(at::isFloatingType(self.scalar_type()),
              "multinomial only supports floating-point dtypes for input, got: ", self.scalar_type());
  const int64_t n = args[1].toInt();
  TORCH_CHECK(n > 0, "cannot sample n_sample <= 0 samples");
  TORCH_CHECK(args[2].toBool() || n <= self.size(-1),
              "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  TORCH_CHECK(self.size(-1) <= (int64_t{1} << 24), "number of categories cannot exceed 2^24");
  const at::Tensor out = tensor_at(args, 4);  // multinomial.out
  TORCH_CHECK(!out.defined() || out.scalar_type() == at::kLong,
              "multinomial expects Long tensor out, got: ", out.scalar_type());
}

void check_convolution(c10::IValue* args) {
  // (input, weight, bias?, stride, padding, dilation, transposed, output_padding, groups)
  for (int64_t s : args[3].toIntList()) TORCH_CHECK(s > 0, "non-positive stride is not supported");
  for (int64_t p : args[4].toIntList()) TORCH_CHECK(p >= 0, "negative padding is not supported");
  const auto dilation = args[5].toIntVector();
  for (int64_t d : dilation) {
    TORCH_CHECK(d > 0, "dilation should be greater than zero, but got ", c10::IntArrayRef(dilation));
  }
  for (int64_t p : args[7].toIntList()) TORCH_CHECK(p >= 0, "negative output_padding is not supported");
  TORCH_CHECK(args[8].toInt() > 0, "non-positive groups is not supported");
}

void layer_norm_backward_stats(c10::IValue* args) {
  // native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?, bias?, mask)
  const at::Tensor input = tensor_at(args, 1);
  if (!at::isReducedFloatingType(input.scalar_type()) || mixed(input, {tensor_at(args, 5), tensor_at(args, 6)})) return;
  for (int i : {3, 4}) {
    const at::Tensor stat = tensor_at(args, i);
    if (stat.defined() && stat.scalar_type() != input.scalar_type()) args[i] = stat.to(input.scalar_type());
  }
}

}  // namespace torch_neuronx::meta_rules
