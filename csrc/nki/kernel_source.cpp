#include "nki/kernel_source.h"

#include <utility>

#include "exec/tensor_desc.h"

namespace torch_neuronx::nki {

std::atomic<bool> source_active{false};

void launch_program(c10::DeviceIndex device, OpRecord& rec, std::shared_ptr<const Program> program,
                    const std::vector<c10::IValue>& args, c10::ArrayRef<at::Tensor> outs) {
  std::vector<TensorDesc> io;
  for (const auto& a : args)
    if (a.isTensor() && a.toTensor().defined()) io.push_back(TensorDesc::of(a.toTensor()));
  const size_t inputs = io.size();
  for (const auto& o : outs) io.push_back(TensorDesc::of(o));
  program->launch(device, rec, std::move(io), inputs);
  rec.nki_calls.fetch_add(1, std::memory_order_relaxed);
}

bool run_from_source(c10::DeviceIndex device, OpRecord& rec, const std::vector<c10::IValue>& args,
                     c10::ArrayRef<at::Tensor> outs) {
  for (const auto& o : outs)
    if (!o.defined() || !o.is_contiguous()) return false;  // the program writes dense outputs
  auto program = program_for(rec, args);
  if (!program) return false;
  launch_program(device, rec, std::move(program), args, outs);
  return true;
}

}  // namespace torch_neuronx::nki
