#include "exec/kernel_alloc.h"

#include <c10/core/CPUAllocator.h>

#include <cstring>
#include <mutex>
#include <unordered_map>

#include "core/allocator.h"
#include "core/device.h"

namespace torch_neuronx {
namespace {

thread_local int tls_device = -1;
thread_local c10::StreamId tls_stream = 0;

// CPU kernels may use raw_allocate/raw_deallocate (oneDNN does), which need the data pointer to
// be the DataPtr's context. Redirected blocks therefore carry their pointer as context, and this
// table finds the neuron allocator's block again when they are freed.
std::mutex blocks_mu;
std::unordered_map<void*, void*>& blocks() {  // data pointer -> neuron allocator context
  static auto* m = new std::unordered_map<void*, void*>();
  return *m;
}
c10::DeleterFnPtr base_raw_delete = nullptr;

void* take_block(void* ptr) {
  std::lock_guard<std::mutex> lock(blocks_mu);
  auto it = blocks().find(ptr);
  if (it == blocks().end()) return nullptr;
  void* ctx = it->second;
  blocks().erase(it);
  return ctx;
}

void free_redirected(void* ptr) {
  if (void* ctx = take_block(ptr)) {
    caching_allocator().raw_deleter()(ctx);
  } else if (base_raw_delete) {
    base_raw_delete(ptr);  // host memory allocated outside a scope
  }
}

struct RedirectingCPUAllocator final : c10::Allocator {
  c10::Allocator* base = nullptr;
  c10::DataPtr allocate(size_t n) override {
    if (C10_LIKELY(tls_device < 0) || n == 0) return base->allocate(n);
    c10::DataPtr p = caching_allocator().allocate_fresh(static_cast<c10::DeviceIndex>(tls_device), tls_stream, n);
    void* data = p.get();
    void* ctx = p.release_context();
    {
      std::lock_guard<std::mutex> lock(blocks_mu);
      blocks()[data] = ctx;
    }
    return {data, data, &free_redirected, c10::Device(c10::kCPU)};
  }
  // Frees redirected blocks and, for anything else, defers to the original CPU allocator.
  c10::DeleterFnPtr raw_deleter() const override { return &free_redirected; }
  void copy_data(void* dst, const void* src, std::size_t count) const override { std::memcpy(dst, src, count); }
};

// Installed by the first scope (or the first alias made for a kernel), not when the extension
// loads: a process that never runs such a kernel keeps PyTorch's CPU allocator untouched.
RedirectingCPUAllocator& redirecting_allocator() {
  static RedirectingCPUAllocator* a = [] {
    auto* r = new RedirectingCPUAllocator();
    r->base = c10::GetCPUAllocator();
    base_raw_delete = r->base->raw_deleter();
    c10::SetCPUAllocator(r, /*priority=*/10);
    return r;
  }();
  return *a;
}

}  // namespace

KernelAllocScope::KernelAllocScope(c10::DeviceIndex device, c10::StreamId stream)
    : saved_device_(tls_device), saved_stream_(tls_stream) {
  redirecting_allocator();
  tls_device = device;
  tls_stream = stream;
}

KernelAllocScope::~KernelAllocScope() {
  tls_device = saved_device_;
  tls_stream = saved_stream_;
}

c10::Allocator* kernel_cpu_allocator() { return &redirecting_allocator(); }

bool cpu_allocator_is_pytorchs() { return c10::GetCPUAllocator() == c10::GetDefaultCPUAllocator(); }

bool holds_device_memory(const c10::DataPtr& p) {
  if (caching_allocator().owns(p)) return true;
  if (p.get_deleter() != &free_redirected) return false;
  std::lock_guard<std::mutex> lock(blocks_mu);
  return blocks().count(p.get()) > 0;
}

c10::DataPtr to_device_data_ptr(c10::DataPtr p, c10::DeviceIndex device) {
  if (caching_allocator().owns(p)) {
    p.unsafe_set_device(c10::Device(kNeuron, device));
    return p;
  }
  void* data = p.get();
  void* ctx = take_block(data);
  TORCH_INTERNAL_ASSERT(ctx, "neuron: adopting host memory that did not come from the device");
  (void)p.release_context();  // the block is owned by the returned DataPtr now
  return caching_allocator().adopt(ctx, c10::Device(kNeuron, device));
}

}  // namespace torch_neuronx
