// Launching a compiled kernel: a C function generated for the software NeuronCore (Inductor's C++
// code generator) runs as a task on the current stream, with the data pointers of device tensors
// and integer arguments, like a CUDA kernel launch. The host passes addresses; it never touches the
// memory behind them.
#pragma once

#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace torch_neuronx {

// The most arguments a launched kernel takes.
constexpr size_t kMaxKernelArgs = 96;

// `kinds[i]` says what args[i] is: 'p' a device tensor (its data pointer is passed), 'i' an
// integer. Raises for anything else (a host tensor, a float argument).
void launch_cpu_kernel(void* fn, const std::string& name, const std::string& kinds,
                       const std::vector<c10::IValue>& args);

}  // namespace torch_neuronx
