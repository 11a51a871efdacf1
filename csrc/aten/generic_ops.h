// The boxed kernel behind every op without a dedicated neuron kernel (see generic_ops.cpp).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <string>
#include <vector>

namespace torch_neuronx {

// Ops (e.g. "aten::lgamma") routed through the copy-to-host CPU fallback; a testing aid.
void set_forced_fallback_ops(const std::vector<std::string>& ops);
// Runs `op`'s CPU kernel in place on device memory, synchronously (the generic path).
void run_generic(const c10::OperatorHandle& op, torch::jit::Stack* stack);
// Makes CPU allocations inside generic kernels come from device memory; called at load.
void install_cpu_allocator_redirect();

}  // namespace torch_neuronx
