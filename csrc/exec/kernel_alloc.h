// Memory that a CPU kernel allocates while it runs as a task for the device (a sync op's
// outputs, a resized out= argument) comes from device memory, so its results are device tensors
// without a copy. Inside a KernelAllocScope the process's CPU allocator serves such requests
// from the neuron allocator; everywhere else it is the plain CPU allocator. The redirect is
// installed by the first scope: until the device runs such a kernel, the process's CPU allocator
// is PyTorch's own.
//
// The blocks are always fresh device memory, never a cached block: a task runs at its place in
// the stream, and a block the host freed after queuing later work may still be read by that
// work. Freed normally, they join the stream's cache like any block.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/Stream.h>

namespace torch_neuronx {

class KernelAllocScope {
 public:
  KernelAllocScope(c10::DeviceIndex device, c10::StreamId stream);
  ~KernelAllocScope();
  KernelAllocScope(const KernelAllocScope&) = delete;
  KernelAllocScope& operator=(const KernelAllocScope&) = delete;

 private:
  int saved_device_;
  c10::StreamId saved_stream_;
};

// The allocator of CPU alias storages that a kernel may resize (it redirects inside a scope).
c10::Allocator* kernel_cpu_allocator();

// Whether the process's CPU allocator is still PyTorch's own (no kernel has needed the redirect).
bool cpu_allocator_is_pytorchs();

// Whether a CPU DataPtr holds device memory (it came from the neuron allocator inside a scope).
bool holds_device_memory(const c10::DataPtr& p);
// Turns such a DataPtr back into a neuron DataPtr that frees through the neuron allocator.
c10::DataPtr to_device_data_ptr(c10::DataPtr p, c10::DeviceIndex device);

}  // namespace torch_neuronx
