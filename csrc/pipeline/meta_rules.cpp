#include "pipeline/meta_rules.h"

#include <ATen/Context.h>
#include <ATen/Dispatch_v2.h>
#include <ATen/core/Reduction.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/random_cpu_dispatch.h>
#include <c10/util/strides.h>

#include <algorithm>
#include <vector>

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

void batch_norm_backward_masked(const c10::IValue* args, const Results& results) {
  // (grad_out, input, weight?, running_mean?, running_var?, save_mean?, save_invstd?, train, eps, output_mask)
  const auto mask = args[9].toBoolList();
  for (size_t i = 0; i < results.size() && i < mask.size(); ++i)
    if (!mask.get(i)) results[i]->defined = false;
}

namespace {
// _sort_dims (aten/src/ATen/native/mkl/SpectralOps.cpp): the transformed dimensions, all but the
// last of them (`keep_last`) or all, in the input's stride order, largest first.
std::vector<int64_t> sort_dims(c10::IntArrayRef strides, std::vector<int64_t> dims, bool keep_last) {
  std::stable_sort(dims.begin(), dims.end() - (keep_last ? 1 : 0),
                   [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
  return dims;
}

// _exec_fft's output layout (mkl/SpectralOps.cpp; torch/_meta_registrations.py's _exec_fft): the
// batch (untransformed) dimensions outermost, in the input's stride order, then the transformed
// ones in `dims`' order, all contiguous.
c10::SmallVector<int64_t, 5> exec_fft_strides(c10::IntArrayRef in_strides, c10::IntArrayRef out_sizes,
                                              const std::vector<int64_t>& dims) {
  const size_t ndim = out_sizes.size();
  std::vector<bool> transformed(ndim, false);
  for (int64_t d : dims) transformed[d] = true;
  std::vector<int64_t> order;
  for (size_t d = 0; d < ndim; ++d)
    if (!transformed[d]) order.push_back(static_cast<int64_t>(d));
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return in_strides[a] > in_strides[b]; });
  order.insert(order.end(), dims.begin(), dims.end());
  c10::SmallVector<int64_t, 5> strides(ndim);
  int64_t s = 1;
  for (size_t i = order.size(); i-- > 0;) {
    strides[order[i]] = s;
    s *= std::max<int64_t>(out_sizes[order[i]], 1);
  }
  return strides;
}

std::vector<int64_t> dims_of(const c10::IValue& v, int64_t ndim) {
  std::vector<int64_t> dims = v.toIntVector();
  for (auto& d : dims) d = c10::maybe_wrap_dim(d, ndim);
  return dims;
}
}  // namespace

namespace {
// _fft_r2c(self, dim, normalization, onesided) and _fft_c2c(self, dim, normalization, forward): the
// r2c keeps its last transformed dimension last (`keep_last`); no dims is a clone, as meta says.
void fft_cpu_layout(const c10::IValue* args, const Results& results, bool keep_last) {
  const at::Tensor self = tensor_at(args, 0);
  if (results.empty() || !results[0]->defined || !self.defined()) return;
  OutputMeta& out = *results[0];
  const auto dims = dims_of(args[1], self.dim());
  if (dims.empty()) return;
  out.strides = at::hasMKL() ? exec_fft_strides(self.strides(), out.sizes, sort_dims(self.strides(), dims, keep_last))
                             : c10::contiguous_strides(out.sizes);
}
}  // namespace

void fft_r2c_cpu_layout(const c10::IValue* args, const Results& results) { fft_cpu_layout(args, results, true); }

void fft_c2c_cpu_layout(const c10::IValue* args, const Results& results) { fft_cpu_layout(args, results, false); }

void fft_c2r_cpu_layout(const c10::IValue* args, const Results& results) {
  // (self, dim, normalization, last_dim_size): the C2C transforms of all but the last dimension,
  // then the C2R of the last, over the C2C's result
  const at::Tensor self = tensor_at(args, 0);
  if (results.empty() || !results[0]->defined || !self.defined()) return;
  OutputMeta& out = *results[0];
  auto dims = dims_of(args[1], self.dim());
  if (dims.empty()) return;
  if (!at::hasMKL()) {
    out.strides = c10::contiguous_strides(out.sizes);
    return;
  }
  c10::SmallVector<int64_t, 5> in_strides(self.strides().begin(), self.strides().end());
  if (dims.size() > 1) {
    const std::vector<int64_t> c2c(dims.begin(), dims.end() - 1);
    in_strides = exec_fft_strides(self.strides(), self.sizes(), sort_dims(self.strides(), c2c, false));
  }
  out.strides = exec_fft_strides(in_strides, out.sizes, {dims.back()});
}

void complex_to_real_contiguous(const c10::IValue* args, const Results& results) {
  // abs.out, angle, angle.out (self, ...): the CPU computes a complex input's real result in a
  // complex scratch tensor and resizes the result to it, contiguous
  // (unary_op_impl_with_complex_to_float_out); meta keeps the input's layout.
  const at::Tensor self = tensor_at(args, 0);
  if (!self.defined() || !self.is_complex()) return;
  for (OutputMeta* m : results)
    if (m->defined && !c10::isComplexType(m->dtype)) m->strides = c10::contiguous_strides(m->sizes);
}

void integral_input_contiguous(const c10::IValue* args, const Results& results) {
  // nan_to_num.out(self, nan, posinf, neginf, *, out): an integer input has nothing to replace and
  // the CPU copies it into an out= tensor resized contiguous
  const at::Tensor self = tensor_at(args, 0);
  if (!self.defined() || c10::isFloatingType(self.scalar_type()) || self.is_complex()) return;
  for (OutputMeta* m : results)
    if (m->defined) m->strides = c10::contiguous_strides(m->sizes);
}

namespace {
// The convolution's output format: channels-last for a 4- or 5-dim weight when the input or the
// weight suggests it (cuDNN's and oneDNN's rule alike); for float64, which neither takes, the CPU's
// own kernels give channels-last in 2d only.
c10::MemoryFormat conv_memory_format(const at::Tensor& input, const at::Tensor& weight) {
  const bool float64 = input.scalar_type() == at::kDouble || weight.scalar_type() == at::kDouble;
  const auto wanted = weight.dim() == 4               ? c10::MemoryFormat::ChannelsLast
                      : weight.dim() == 5 && !float64 ? c10::MemoryFormat::ChannelsLast3d
                                                      : c10::MemoryFormat::Contiguous;
  if (wanted == c10::MemoryFormat::Contiguous) return wanted;
  return input.suggest_memory_format() == wanted || weight.suggest_memory_format() == wanted
             ? wanted
             : c10::MemoryFormat::Contiguous;
}

void lay_out(OutputMeta* m, c10::MemoryFormat format) {
  const size_t rank = format == c10::MemoryFormat::ChannelsLast     ? 4
                      : format == c10::MemoryFormat::ChannelsLast3d ? 5
                                                                    : 0;
  if (!m->defined || m->sizes.size() != rank) return;
  const auto strides = format == c10::MemoryFormat::ChannelsLast ? c10::get_channels_last_strides_2d(m->sizes)
                                                                 : c10::get_channels_last_strides_3d(m->sizes);
  m->strides.assign(strides.begin(), strides.end());
}
}  // namespace

void convolution_memory_format(const c10::IValue* args, const Results& results) {
  // (input, weight, bias?, ...)
  if (!results.empty()) lay_out(results[0], conv_memory_format(tensor_at(args, 0), tensor_at(args, 1)));
}

void group_norm_backward_memory_format(const c10::IValue* args, const Results& results) {
  // (grad_out, input, mean, rstd, weight?, N, C, HxW, group, output_mask) -> (grad_input, ...)
  const at::Tensor input = tensor_at(args, 1);
  if (!results.empty() && input.defined()) lay_out(results[0], input.suggest_memory_format());
}

void convolution_backward_memory_format(const c10::IValue* args, const Results& results) {
  // (grad_output, input, weight, ...) -> (grad_input, grad_weight, grad_bias)
  const auto format = conv_memory_format(tensor_at(args, 1), tensor_at(args, 2));
  for (size_t i = 0; i < 2 && i < results.size(); ++i) lay_out(results[i], format);
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

void weight_norm_float_norms(const c10::IValue* args, const Results& results) {
  if (results.size() == 2 && tensor_at(args, 1).scalar_type() == at::kHalf) results[1]->dtype = at::kFloat;
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
