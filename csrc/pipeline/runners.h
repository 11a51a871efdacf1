// The three ways the boxed entry runs an op (see op_policy.cpp for which one and why).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <string>

#include "pipeline/op_record.h"

namespace torch_neuronx {

// Queues the op and returns at once. False, having changed nothing, when this call cannot run
// async; `why` says why (the call then runs sync).
bool run_op_async(const c10::OperatorHandle& op, OpRecord& rec, torch::jit::Stack* stack, std::string* why);

// Runs the op's CPU kernel as a task on device memory and waits for it.
void run_op_sync(const c10::OperatorHandle& op, OpRecord& rec, torch::jit::Stack* stack, const std::string& why);

// The CPU fallback: copies to host memory and back (TORCH_NEURONX_FALLBACK says whether it warns).
void run_op_copy(const c10::OperatorHandle& op, OpRecord& rec, torch::jit::Stack* stack, const std::string& why);
// Counts a copy to host and back (applies TORCH_NEURONX_FALLBACK: it may warn or raise).
void note_copy(OpRecord& rec, const std::string& why);

}  // namespace torch_neuronx
