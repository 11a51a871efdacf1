// Dropout draws its mask from the neuron generator (the CPU kernel would use the CPU's global
// generator, breaking torch.neuron.manual_seed reproducibility): it is composed of bernoulli_ and
// multiplications, each async. Other random ops take the boxed pipeline, which gives the CPU
// kernel a generator derived from the neuron one.
#include <ATen/core/Tensor.h>
#include <ATen/ops/bernoulli.h>
#include <ATen/ops/clone.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include "core/device.h"
#include "pipeline/op_record.h"

namespace torch_neuronx {
namespace {

std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  TORCH_CHECK(p >= 0 && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
  if (!train.value_or(true) || p == 0 || input.numel() == 0) {
    return {input.clone(), at::ones_like(input, input.options().dtype(at::kBool))};
  }
  if (p == 1) {
    auto mask = at::zeros_like(input, input.options().dtype(at::kBool));
    return {at::zeros_like(input), mask};
  }
  auto mask = at::empty_like(input, input.options().dtype(at::kBool));
  mask.bernoulli_(1 - p);
  auto out = at::mul(input, mask).mul_(1.0 / (1.0 - p));
  return {out, mask};
}

const bool described = (typed_op("aten::native_dropout",
                                 "composed of bernoulli_ (drawing from the neuron "
                                 "generator) and multiplications, each async"),
                        true);

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("native_dropout", TORCH_FN(native_dropout)); }

}  // namespace torch_neuronx
