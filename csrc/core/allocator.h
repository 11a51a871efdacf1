// Stream-ordered caching allocator for neuron device memory (the registered device allocator).
#pragma once

#include <c10/core/CachingDeviceAllocator.h>

#include <memory>
#include <vector>

namespace torch {
struct CapturedTraceback;
}

namespace torch_neuronx {

class CachingAllocator : public c10::DeviceAllocator {
 public:
  // Allocates on `device` for its current stream (on a queue worker: for that queue's stream,
  // from fresh memory, as allocate_fresh).
  virtual c10::DataPtr allocate_on(c10::DeviceIndex device, size_t bytes) = 0;
  // Fresh device memory for `stream`, never a cached block: for allocations made while a task
  // runs, when queued work may still use cached blocks. Never waits for the device.
  virtual c10::DataPtr allocate_fresh(c10::DeviceIndex device, c10::StreamId stream, size_t bytes) = 0;
  // A DataPtr for a block that allocate_fresh returned and whose DataPtr released its context.
  virtual c10::DataPtr adopt(void* context, c10::Device device) = 0;
  // True when `data_ptr` came from this allocator (a neuron block).
  virtual bool owns(const c10::DataPtr& data_ptr) const = 0;
  // The share of `device`'s memory this process may reserve (torch.cuda's per-process fraction).
  virtual void set_memory_fraction(double fraction, c10::DeviceIndex device) = 0;
  virtual double memory_fraction(c10::DeviceIndex device) = 0;

  // A graph capture's private memory (CUDA's graph pool). While `stream` of `device` captures,
  // host allocations for it take fresh memory that belongs to the pool, and every block freed
  // (the pool's, or any other the captured work may use) is held by the pool instead of cached:
  // recorded work keeps addresses, so none of them may be handed out again while the graph lives.
  // end_capture_pool stops the capture's claim; release_capture_pool (the graph's reset) caches
  // what the pool held, once its replays are done.
  struct CapturePool;
  virtual void begin_capture_pool(c10::DeviceIndex device, c10::StreamId stream) = 0;
  virtual std::shared_ptr<CapturePool> end_capture_pool(c10::DeviceIndex device) = 0;
  virtual void release_capture_pool(c10::DeviceIndex device, const std::shared_ptr<CapturePool>& pool) = 0;

  // The segments and their blocks now, for torch.neuron.memory._snapshot().
  struct BlockState {
    uint64_t address, size, requested;
    const char* state;  // "active_allocated", "active_pending_free" or "inactive"
    std::shared_ptr<torch::CapturedTraceback> frames;
  };
  struct SegmentState {
    int device;
    uint64_t address, total_size;
    int64_t stream;
    bool small;
    std::vector<BlockState> blocks;
  };
  virtual std::vector<SegmentState> segments() = 0;
};

CachingAllocator& caching_allocator();

// Pinned (page-locked) host memory: non_blocking copies from/to it are asynchronous.
c10::Allocator* pinned_host_allocator();
bool is_pinned_ptr(const void* ptr);

}  // namespace torch_neuronx
