// CUDA's device rule, the one check every neuron kernel applies: all tensor arguments on one
// neuron device; 0-dim CPU tensors may be mixed in as scalars. Raises "Expected all tensors to be
// on the same device..." and returns the device the op runs on (-1: no neuron tensor).
#pragma once

#include <ATen/core/TensorBase.h>
#include <c10/util/ArrayRef.h>

namespace torch_neuronx {

class DeviceCheck {
 public:
  explicit DeviceCheck(const char* op) : op_(op) {}
  // `written`: an argument the op writes, which must be a neuron tensor, never a CPU scalar
  // (CUDA's TensorIterator rule: host scalars are inputs only).
  void add(const at::TensorBase& t, bool written = false);
  c10::DeviceIndex device() const { return device_; }

 private:
  const char* op_;
  c10::DeviceIndex device_ = -1;
};

c10::DeviceIndex check_devices(const char* op, c10::ArrayRef<const at::TensorBase*> tensors);

}  // namespace torch_neuronx
