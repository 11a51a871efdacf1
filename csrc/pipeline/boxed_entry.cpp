// The one boxed entry: every op without a typed neuron kernel reaches it (as the PrivateUse1
// fallback, or registered directly for the ops the overrides table claims) and runs by its plan.
#include <torch/library.h>

#include "core/generator.h"
#include "core/storage.h"
#include "exec/ivalue_walk.h"
#include "pipeline/op_policy.h"
#include "pipeline/runners.h"

namespace torch_neuronx {
namespace {

// Index lists (Tensor?[]: index, index_put_) may hold host tensors, which CUDA moves to the
// device; so does neuron (a transfer the call waits for, as on CUDA).
void move_host_indices(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t nargs = op.schema().arguments().size();
  c10::IValue* args = stack->data() + (stack->size() - nargs);
  std::optional<c10::Device> device;
  bool host = false;
  for (size_t i = 0; i < nargs; ++i) {
    for_each_tensor(args[i], [&](const at::Tensor& t) {
      if (is_neuron(t) && !device) device = t.device();
      host = host || (args[i].isOptionalTensorList() && t.defined() && t.device().is_cpu() && t.dim() > 0);
    });
  }
  if (!host || !device) return;
  for (size_t i = 0; i < nargs; ++i) {
    if (!args[i].isOptionalTensorList()) continue;
    args[i] = map_tensors(args[i], [&](const at::Tensor& t) {
      return t.defined() && t.device().is_cpu() && t.dim() > 0 ? t.to(*device) : t;
    });
  }
}

// A random op on host tensors that draws from a neuron generator (diffusers makes its noise on the
// CPU from the user's generator, whatever its device): the CPU kernel runs on the host with a
// generator derived from the neuron one, so the numbers follow torch.neuron's seed and offset.
bool host_op_with_neuron_generator(const c10::OperatorHandle& op, OpRecord& rec, torch::jit::Stack* stack) {
  const size_t nargs = op.schema().arguments().size();
  c10::IValue* args = stack->data() + (stack->size() - nargs);
  int generator = -1;
  int64_t numel = 0;
  for (size_t i = 0; i < nargs; ++i) {
    if (args[i].isGenerator() && args[i].toGenerator().device().type() == kNeuron) generator = static_cast<int>(i);
    bool neuron = false;
    for_each_tensor(args[i], [&](const at::Tensor& t) {
      neuron = neuron || is_neuron(t);
      if (t.defined()) numel += t.numel();
    });
    if (neuron) return false;
  }
  if (generator < 0) return false;
  const at::Generator g = args[generator].toGenerator();
  args[generator] = c10::IValue(resolve_generator(g, g.device().index())->cpu_generator_for(numel));
  rec.count(Mode::kSync, "host tensors drawing from a neuron generator (computed on the host)");
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  return true;
}

void boxed_entry(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  OpRecord& rec = record_for(op);
  if (rec.arg_rule) rec.arg_rule(stack->data() + (stack->size() - op.schema().arguments().size()));
  if (host_op_with_neuron_generator(op, rec, stack)) return;
  move_host_indices(op, stack);
  switch (rec.mode) {
    case Mode::kAsync: {
      std::string why;
      if (run_op_async(op, rec, stack, &why)) return;
      run_op_sync(op, rec, stack, why);
      return;
    }
    case Mode::kSync:
      run_op_sync(op, rec, stack, "");
      return;
    case Mode::kCopy:
      run_op_copy(op, rec, stack, "");
      return;
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&boxed_entry>()); }

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const auto& name : claimed_ops())
    m.impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&boxed_entry>());
}

}  // namespace torch_neuronx
