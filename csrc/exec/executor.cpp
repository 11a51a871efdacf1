#include "exec/executor.h"

#include <ATen/Parallel.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/util/Exception.h>

#include <mutex>
#include <vector>

#include "exec/kernel_alloc.h"

namespace torch_neuronx {
namespace {

// Warnings of a kernel that ran for a waiting caller belong to the caller's call.
struct CollectWarnings final : c10::WarningHandler {
  std::vector<c10::Warning> warnings;
  void process(const c10::Warning& w) override { warnings.push_back(w); }
};

// Warnings of kernels on workers, kept for the next launch on a user's thread.
struct WorkerWarnings final : c10::WarningHandler {
  std::mutex mu;
  std::vector<c10::Warning> pending;
  void process(const c10::Warning& w) override {
    std::lock_guard<std::mutex> lock(mu);
    if (pending.size() < 256) pending.push_back(w);  // bounded: a warning storm keeps its first ones
    worker_warnings_pending.store(true, std::memory_order_relaxed);
  }
};

WorkerWarnings& worker_warnings() {
  static auto* w = new WorkerWarnings();  // leaked: workers may warn during shutdown
  return *w;
}

// Kernels on queue workers call ATen on CPU views below autograd, like the op that queued them,
// and their warnings wait for the user's thread. A kernel's thread team is PyTorch's intra-op
// thread count, whatever the host thread is doing, so an op splits its work (and a reduction its
// sums) as the CPU does: the same inputs give the same bits, run after run, and the CPU's bits.
struct WorkerSetup {
  WorkerSetup() {
    neuronrt::Queue::set_thread_init_hook([] {
      static thread_local at::AutoDispatchBelowADInplaceOrView below;
      c10::WarningUtils::set_warning_handler(&worker_warnings());
      at::internal::lazy_init_num_threads();
    });
  }
} worker_setup;

}  // namespace

std::atomic<bool> worker_warnings_pending{false};

void raise_worker_warnings() {
  std::vector<c10::Warning> warnings;
  {
    auto& w = worker_warnings();
    std::lock_guard<std::mutex> lock(w.mu);
    warnings.swap(w.pending);
    worker_warnings_pending.store(false, std::memory_order_relaxed);
  }
  for (const auto& w : warnings) c10::warn(w);
}

void run_sync(c10::DeviceIndex device, const char* name, const std::function<void()>& fn) {
  if (worker_warnings_pending.load(std::memory_order_relaxed)) raise_worker_warnings();
  const c10::Stream stream = current_stream(device);
  auto& q = queue_of(stream);
  CollectWarnings collected;
  try {
    q.run_sync(name, [&] {
      c10::WarningUtils::WarningHandlerGuard guard(&collected);
      KernelAllocScope alloc(device, stream.id());
      ViewScope views;
      fn();
    });
  } catch (...) {
    for (const auto& w : collected.warnings) c10::warn(w);
    rethrow_as_torch_error();
  }
  for (const auto& w : collected.warnings) c10::warn(w);
}

}  // namespace torch_neuronx
