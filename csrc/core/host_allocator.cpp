// Pinned host memory. The software device reaches all host memory, so "pinned" means memory
// this allocator tracks: copies from/to it may run asynchronously. Freeing it waits for the
// devices, as cudaFreeHost does, so no queued copy can outlive the buffer.
#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/Allocator.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "core/allocator.h"
#include "core/device.h"

namespace torch_neuronx {
namespace {

std::mutex mu;
std::map<const char*, size_t> blocks;  // start -> size, under mu
at::HostStats stats;                   // under mu

void free_pinned(void* ptr) {
  if (!ptr) return;
  try {
    if (!neuronrt::Runtime::in_forked_child()) neuronrt::Runtime::get().synchronize_all();
  } catch (...) {
    // A task error is reported at the next synchronizing call of the user's, not here.
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = blocks.find(static_cast<const char*>(ptr));
    if (it != blocks.end()) {
      const auto n = static_cast<int64_t>(it->second);
      for (auto* s : {&stats.active_requests, &stats.allocations}) s->decrease(1);
      for (auto* s : {&stats.active_bytes, &stats.allocated_bytes}) s->decrease(n);
      stats.num_host_free++;
      blocks.erase(it);
    }
  }
  std::free(ptr);
}

// torch.accelerator's host-memory calls (empty_host_cache, host_memory_stats) reach it too. Nothing
// is cached (a freed block goes back at once), so emptying the cache has nothing to return, and a
// block needs no events: freeing it already waits for the devices.
struct PinnedAllocator final : at::HostAllocator {
  c10::DataPtr allocate(size_t n) override {
    if (n == 0) return {nullptr, nullptr, &free_pinned, c10::Device(c10::kCPU)};
    void* p = nullptr;
    TORCH_CHECK_WITH(OutOfMemoryError, posix_memalign(&p, 4096, n) == 0, "neuron: cannot allocate ", n,
                     " bytes of pinned host memory");
    {
      std::lock_guard<std::mutex> lock(mu);
      blocks[static_cast<const char*>(p)] = n;
      for (auto* s : {&stats.active_requests, &stats.allocations}) s->increase(1);
      for (auto* s : {&stats.active_bytes, &stats.allocated_bytes}) s->increase(static_cast<int64_t>(n));
      stats.num_host_alloc++;
    }
    return {p, p, &free_pinned, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dst, const void* src, size_t n) const override { std::memcpy(dst, src, n); }

  bool record_event(void*, void*, c10::Stream) override { return true; }
  void empty_cache() override {}
  at::HostStats get_stats() override {
    std::lock_guard<std::mutex> lock(mu);
    return stats;
  }
  void reset_accumulated_stats() override {
    std::lock_guard<std::mutex> lock(mu);
    for (auto* s : {&stats.active_requests, &stats.active_bytes, &stats.allocations, &stats.allocated_bytes})
      s->reset_accumulated();
    stats.num_host_alloc = stats.num_host_free = 0;
  }
  void reset_peak_stats() override {
    std::lock_guard<std::mutex> lock(mu);
    for (auto* s : {&stats.active_requests, &stats.active_bytes, &stats.allocations, &stats.allocated_bytes})
      s->reset_peak();
  }
};

PinnedAllocator& instance() {
  static auto* a = new PinnedAllocator();  // leaked: pinned tensors may die after static destructors
  return *a;
}

}  // namespace

c10::Allocator* pinned_host_allocator() { return &instance(); }

REGISTER_HOST_ALLOCATOR(kNeuron, &instance())

bool is_pinned_ptr(const void* ptr) {
  const char* p = static_cast<const char*>(ptr);
  std::lock_guard<std::mutex> lock(mu);
  auto it = blocks.upper_bound(p);
  if (it == blocks.begin()) return false;
  --it;
  return p < it->first + it->second;
}

}  // namespace torch_neuronx
