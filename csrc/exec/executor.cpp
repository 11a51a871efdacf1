#include "exec/executor.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/util/Exception.h>

#include <mutex>
#include <vector>

#include "exec/kernel_alloc.h"

extern "C" void omp_set_num_threads(int);

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

// The software NeuronCore's engines are the host's cores, and the host's thread needs one of them
// while it runs Python. A kernel team as wide as every core would wait on that thread at each
// barrier, so a kernel uses every core only while the host waits for the device, and one fewer
// otherwise (at least one), unless its work is large enough to be worth the host's share of a
// core (size_kernel_team_for, executor.h). The width decides how ATen splits a reduction, so it
// can change the last bits of a result from run to run; with
// torch.use_deterministic_algorithms(True) it stays fixed and runs repeat bit for bit.
int g_cores = 0;
thread_local int t_width = 0;

void set_team_width(int want) {
  if (want != t_width) {
    omp_set_num_threads(want);
    t_width = want;
  }
}

bool adaptive_team() { return !at::globalContext().deterministicAlgorithms(); }

void size_kernel_team() {
  const bool every_core = adaptive_team() && neuronrt::Queue::host_threads_waiting() > 0;
  set_team_width(every_core ? g_cores : std::max(1, g_cores - 1));
}

// Kernels on queue workers call ATen on CPU views below autograd, like the op that queued them,
// and their warnings wait for the user's thread.
struct WorkerSetup {
  WorkerSetup() {
    g_cores = std::max(1, at::get_num_threads());
    neuronrt::Queue::set_task_prologue(&size_kernel_team);
    neuronrt::Queue::set_thread_init_hook([] {
      static thread_local at::AutoDispatchBelowADInplaceOrView below;
      c10::WarningUtils::set_warning_handler(&worker_warnings());
      at::internal::lazy_init_num_threads();
    });
  }
} worker_setup;

}  // namespace

std::atomic<bool> worker_warnings_pending{false};

void size_kernel_team_for(int64_t work) {
  if (work >= kEveryCoreWork && adaptive_team()) set_team_width(g_cores);
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
