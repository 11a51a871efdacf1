// The second kernel source of eager ops (TORCH_NEURONX_KERNELS=nki): where an op's call fits an NKI
// library kernel (its shapes and dtypes), the op's task runs that kernel's traced program instead of
// the CPU kernel; the op's meta, outputs, stream order and counts are the op's own. Python
// (torch_neuronx/nki/eager.py) registers the source with the ops it serves and answers per call
// with a program (traced once per signature) or none. This is the seam a hardware runtime fills
// with its compiled kernels.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <atomic>
#include <memory>
#include <type_traits>
#include <vector>

#include "nki/program.h"
#include "pipeline/op_record.h"

namespace torch_neuronx::nki {

// Set once the source is registered: the one check an op pays without it.
extern std::atomic<bool> source_active;

// The program for this call of `rec`'s op, or null (the call does not fit; the CPU kernel runs).
// `args` are the op's arguments (a tensor's IValue holds the tensor).
std::shared_ptr<const Program> program_for(OpRecord& rec, const std::vector<c10::IValue>& args);

// Queues `program` as `rec`'s task on the current stream of `device`: its inputs are the tensors
// of `args` (made dense inside the task where they are not), then `outs` (dense).
void launch_program(c10::DeviceIndex device, OpRecord& rec, std::shared_ptr<const Program> program,
                    const std::vector<c10::IValue>& args, c10::ArrayRef<at::Tensor> outs);

// Runs a call through the source where it fits (its outputs allocated dense); false: the caller
// runs its CPU kernel.
bool run_from_source(c10::DeviceIndex device, OpRecord& rec, const std::vector<c10::IValue>& args,
                     c10::ArrayRef<at::Tensor> outs);

template <class T>
c10::IValue to_ivalue(const T& v) {
  if constexpr (std::is_constructible_v<c10::IValue, const T&>) {
    return c10::IValue(v);
  } else {
    return c10::IValue();
  }
}

// run_from_source for a typed kernel's arguments.
template <size_t N, class... Args>
bool run_typed_from_source(c10::DeviceIndex device, OpRecord& rec, const std::array<at::Tensor, N>& outs,
                           const Args&... args) {
  if (!rec.nki_source.load(std::memory_order_relaxed)) return false;
  return run_from_source(device, rec, {to_ivalue(args)...}, outs);
}

}  // namespace torch_neuronx::nki
