// Pinned host memory. The software device reaches all host memory, so "pinned" means memory
// this allocator tracks: copies from/to it may run asynchronously. Freeing it waits for the
// devices, as cudaFreeHost does, so no queued copy can outlive the buffer.
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
std::map<const char*, size_t> blocks;  // start -> size

void free_pinned(void* ptr) {
  if (!ptr) return;
  try {
    if (!neuronrt::Runtime::in_forked_child()) neuronrt::Runtime::get().synchronize_all();
  } catch (...) {
    // A task error is reported at the next synchronizing call of the user's, not here.
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    blocks.erase(static_cast<const char*>(ptr));
  }
  std::free(ptr);
}

struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    if (n == 0) return {nullptr, nullptr, &free_pinned, c10::Device(c10::kCPU)};
    void* p = nullptr;
    TORCH_CHECK_WITH(OutOfMemoryError, posix_memalign(&p, 4096, n) == 0, "neuron: cannot allocate ", n,
                     " bytes of pinned host memory");
    {
      std::lock_guard<std::mutex> lock(mu);
      blocks[static_cast<const char*>(p)] = n;
    }
    return {p, p, &free_pinned, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dst, const void* src, size_t n) const override { std::memcpy(dst, src, n); }
};

}  // namespace

c10::Allocator* pinned_host_allocator() {
  static PinnedAllocator a;
  return &a;
}

bool is_pinned_ptr(const void* ptr) {
  const char* p = static_cast<const char*>(ptr);
  std::lock_guard<std::mutex> lock(mu);
  auto it = blocks.upper_bound(p);
  if (it == blocks.begin()) return false;
  --it;
  return p < it->first + it->second;
}

}  // namespace torch_neuronx
