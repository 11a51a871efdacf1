// How each op runs on neuron, decided once per op (see op_policy.cpp for the policy).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <string>
#include <vector>

#include "pipeline/op_record.h"

namespace torch_neuronx {

// Flags of an entry of the overrides table.
enum OverrideFlag : unsigned {
  kClaim = 1,              // take the op at the device even though it has a composite kernel
  kNoOutKernel = 2,        // the task runs the op and copies its results (its out= kernel misbehaves)
  kContiguousOutputs = 4,  // fresh outputs are contiguous, as the CPU kernel makes them
  kFunctionalLayout = 8,   // a resized out= tensor takes the functional op's result layout
  kQuietResize = 16,       // out= tensors resize without PyTorch's warning, as the CPU kernel does
  kWidenedResults = 32,    // the task widens the kernel's results to meta's (CUDA's) dtype
  kOutScratch = 64,        // the out= kernel writes scratch the task copies into the out= tensors (it restrides them)
  kSplitInvariant = 128,   // the CPU kernel's bits do not depend on how its work is split: small calls run alone
};

// The record (plan and counters) of a boxed op, made on first use. Cheap on repeated calls.
OpRecord& record_for(const c10::OperatorHandle& op);

// "aten::add.Tensor" for an operator.
std::string op_display_name(const c10::OperatorHandle& op);

// Ops the boxed entry registers for directly (kClaim), as "name" or "name.overload".
std::vector<std::string> claimed_ops();

// Reads TORCH_NEURONX_OP_POLICY; a ValueError names an entry that is malformed, names no operator,
// or names one the policy cannot change (a typed kernel, a composite op). Called at import.
void check_op_policy();

// How `name` ("aten::op" or "aten::op.overload") runs on neuron and why, in words.
std::string explain(const std::string& name);

}  // namespace torch_neuronx
