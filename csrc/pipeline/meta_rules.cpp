#include "pipeline/meta_rules.h"

#include <ATen/core/Tensor.h>

namespace torch_neuronx::meta_rules {
namespace {

at::Tensor tensor_at(const c10::IValue* args, int i) {
  return args[i].isTensor() ? args[i].toTensor() : at::Tensor();
}

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
  const bool is_mixed = has_running ? mixed(input, {tensor_at(args, 1), tensor_at(args, 2), tensor_at(args, 3), tensor_at(args, 4)})
                                    : mixed(input, {tensor_at(args, 1), tensor_at(args, 2)});
  const bool training = train.has_value() ? *train : args[train_arg].toBool();
  set_stats(results, 1, 2, is_mixed ? at::kFloat : input.scalar_type(), !training);
}

}  // namespace

void layer_norm_stats(const c10::IValue* args, const Results& results) {
  // native_layer_norm(input, normalized_shape, weight?, bias?, eps)
  const at::Tensor input = tensor_at(args, 0);
  const bool is_mixed = mixed(input, {tensor_at(args, 2), tensor_at(args, 3)});
  set_stats(results, 1, 2, is_mixed ? at::kFloat : input.scalar_type(), false);
}

void batch_norm_stats(const c10::IValue* args, const Results& results) {
  // (input, weight?, bias?, running_mean?, running_var?, training, momentum, eps)
  batch_norm(args, results, true, std::nullopt, 5);
}

void batch_norm_stats_no_stats(const c10::IValue* args, const Results& results) {
  // (input, weight?, bias?, training, momentum, eps)
  batch_norm(args, results, false, std::nullopt, 3);
}

void batch_norm_stats_eval(const c10::IValue* args, const Results& results) { batch_norm(args, results, true, false, -1); }

void batch_norm_stats_train(const c10::IValue* args, const Results& results) { batch_norm(args, results, true, true, -1); }

}  // namespace torch_neuronx::meta_rules
