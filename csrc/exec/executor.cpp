#include "exec/executor.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/util/Exception.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <mutex>
#include <thread>
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

void park_a_team() {
  // libgomp lets a team's idle threads spin (about 300,000 polls) after each parallel region
  // unless more OpenMP threads exist than CPUs; then they poll briefly and sleep. A CPU process
  // has one team, led by the Python thread, so its spinning helpers sit on the cores Python does
  // not use. Here the team is the queue worker's, and the Python thread keeps dispatching beside
  // it: a spinning helper takes the core the host needs (a tiny Llama's generate ran 2.2x slower).
  // One more team, parked for good, makes libgomp count more threads than cores, so helpers
  // yield at once; the worker's team keeps its size, so kernels keep the CPU's bits. The team is
  // led by a thread of its own: on the user's thread it would be a team a forked child inherits
  // without its threads, and the child's first parallel region would hang. ATen's parallel_for
  // is inlined here and this library is built without OpenMP, so the region is opened through the
  // libgomp that torch loaded; without one there is nothing to do.
  using Region = void (*)(void (*)(void*), void*, unsigned, unsigned);
  const auto open_region = reinterpret_cast<Region>(dlsym(RTLD_DEFAULT, "GOMP_parallel"));
  const int n = at::get_num_threads();
  if (open_region == nullptr || n <= 1) return;
  std::thread([open_region, n] {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);  // signals stay with the threads that handle them
    open_region([](void*) {}, nullptr, static_cast<unsigned>(n), 0);
    for (;;) pause();  // a thread's team ends with it
  }).detach();
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
      static std::once_flag parked;  // by the first worker, off every op's path
      std::call_once(parked, park_a_team);
    });
  }
} worker_setup;

}  // namespace

std::atomic<bool> worker_warnings_pending{false};

std::atomic<bool> concatenation_enabled{false};

bool concatenating() {
  return concatenation_enabled.load(std::memory_order_relaxed) && !at::globalContext().deterministicAlgorithms();
}

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
