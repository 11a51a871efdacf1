// Stream-ordered caching allocator for neuron device memory (the registered device allocator).
#pragma once

#include <c10/core/CachingDeviceAllocator.h>

namespace torch_neuronx {

class CachingAllocator : public c10::DeviceAllocator {
 public:
  // Allocates on the current device for the current stream of that device.
  virtual c10::DataPtr allocate_on(c10::DeviceIndex device, size_t bytes) = 0;
  // True when `data_ptr` came from this allocator (a neuron block).
  virtual bool owns(const c10::DataPtr& data_ptr) const = 0;
};

CachingAllocator& caching_allocator();

// Pinned (page-locked) host memory: non_blocking copies from/to it are asynchronous.
c10::Allocator* pinned_host_allocator();
bool is_pinned_ptr(const void* ptr);

}  // namespace torch_neuronx
