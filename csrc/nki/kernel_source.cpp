#include "nki/kernel_source.h"

#include <utility>

#include "exec/executor.h"
#include "exec/tensor_desc.h"

namespace torch_neuronx::nki {

std::atomic<bool> source_active{false};

void launch_program(c10::DeviceIndex device, OpRecord& rec, std::shared_ptr<const Program> program,
                    const std::vector<c10::IValue>& args, c10::ArrayRef<at::Tensor> outs) {
  std::vector<TensorDesc> io;
  for (const auto& a : args)
    if (a.isTensor() && a.toTensor().defined()) io.push_back(TensorDesc::of(a.toTensor()));
  for (const auto& o : outs)
    if (o.defined()) io.push_back(TensorDesc::of(o));
  const size_t inputs = io.size() - outs.size();
  // The source traced the kernel for these arguments; a kernel whose tensors are not the op's
  // (in elements or dtype) would write memory the op does not own.
  const auto& want = program->io();
  TORCH_CHECK(want.size() == io.size(), "nki kernel source: ", program->name(), " takes ", want.size(), " tensors; ",
              rec.name, " has ", io.size());
  for (size_t i = 0; i < io.size(); ++i) {
    int64_t n = 1;
    for (auto v : io[i].sizes) n *= v;
    TORCH_CHECK(want[i].numel == n && want[i].dtype == io[i].dtype, "nki kernel source: tensor ", i, " of ",
                program->name(), " is ", want[i].numel, " ", c10::toString(want[i].dtype), "; ", rec.name, " has ", n,
                " ", c10::toString(io[i].dtype));
  }
  rec.count(Mode::kAsync);
  rec.nki_calls.fetch_add(1, std::memory_order_relaxed);
  launch(device, rec.name.c_str(), [program = std::move(program), io = std::move(io), inputs] {
    std::vector<at::Tensor> views;
    views.reserve(io.size());
    for (size_t i = 0; i < io.size(); ++i) {
      at::Tensor v = io[i].view();
      // The program addresses its inputs densely; an output is allocated dense for it.
      views.push_back(i < inputs && !v.is_contiguous() ? v.contiguous() : v);
    }
    program->run(views);
  });
}

}  // namespace torch_neuronx::nki
