#include "exec/device_check.h"

#include <c10/util/Exception.h>

#include "core/device.h"

namespace torch_neuronx {

void DeviceCheck::add(const at::TensorBase& t, bool written) {
  if (!t.defined()) return;
  const auto d = t.device();
  TORCH_CHECK(!written || d.type() == kNeuron,
              "Expected all tensors to be on the same device, but found at least two devices, neuron and ", d, "! (in ",
              op_, ": the tensor it writes is on ", d, ")");
  if (d.type() == kNeuron) {
    TORCH_CHECK(device_ < 0 || device_ == d.index(),
                "Expected all tensors to be on the same device, but found at least two devices, neuron:",
                static_cast<int>(device_), " and ", d, "! (in ", op_, ")");
    device_ = d.index();
  } else {
    TORCH_CHECK(d.is_cpu() && t.dim() == 0,
                "Expected all tensors to be on the same device, but found at least two devices, neuron and ", d,
                "! (in ", op_, "; only 0-dim CPU tensors may be mixed in as scalars)");
  }
}

c10::DeviceIndex check_devices(const char* op, c10::ArrayRef<const at::TensorBase*> tensors) {
  DeviceCheck check(op);
  for (const auto* t : tensors) check.add(*t);
  return check.device();
}

}  // namespace torch_neuronx
