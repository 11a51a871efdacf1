// The asynchronous path for ops without a dedicated neuron kernel (see queued_ops.cpp).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

namespace torch_neuronx {

// Queues `op` on the current stream if a meta kernel can tell its outputs' shapes: the meta
// kernel runs now (so bad arguments raise at the call), the outputs are allocated on the
// device, and the CPU out= (or in-place) kernel runs as a stream task. Returns false, having
// changed nothing, when the op cannot take this path; the synchronous generic path runs it then.
bool try_queue(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace torch_neuronx
