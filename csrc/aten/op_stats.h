// Per-op counters of the ops that ran without a dedicated neuron kernel.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <map>
#include <string>
#include <vector>

namespace torch_neuronx {

std::string op_display_name(const c10::OperatorHandle& op);  // "aten::add.Tensor"
// The CPU kernel ran in place on device memory (no host copy), synchronously.
void record_generic(const c10::OperatorHandle& op);
// The CPU kernel was queued on the stream after the meta kernel sized the outputs.
void record_queued(const c10::OperatorHandle& op);
// Tensors went to host memory and back. Applies TORCH_NEURONX_FALLBACK=warn|error|silent.
void record_fallback(const c10::OperatorHandle& op, const char* reason);

std::map<std::string, int64_t> generic_op_counts();
std::map<std::string, int64_t> queued_op_counts();
std::map<std::string, int64_t> fallback_op_counts();
void reset_op_counts();

}  // namespace torch_neuronx
