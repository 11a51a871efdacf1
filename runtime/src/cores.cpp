// A worker that ran dry polls for its next task, and a host thread waiting for a task polls for
// its end, instead of sleeping at once: on idle cores a poll answers in nanoseconds where a futex
// wake-up costs microseconds. On a busy machine (a CI runner, a laptop compiling) polling is
// CPU time taken from the thread it waits for: beside two busy-looping processes, where the
// scheduler shares the cores by CPU time, the worker of a tiny Llama's generate used 31 ms of CPU
// per generate polling and running its tasks, and 19 ms running them alone. So,
// as CUDA's default schedule spins only while the process's contexts do not outnumber the
// cores, the queues poll only while the machine's runnable threads do not outnumber its cores
// (by more than one).
#include "neuronrt/cores.h"

#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

namespace neuronrt {
namespace {

// Runnable threads on the machine now: the fourth field of /proc/loadavg ("running/total").
int runnable_threads() {
  std::FILE* f = std::fopen("/proc/loadavg", "r");
  if (f == nullptr) return -1;
  int running = -1;
  if (std::fscanf(f, "%*f %*f %*f %d", &running) != 1) running = -1;
  std::fclose(f);
  return running;
}

int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  const unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? static_cast<int>(n) : 1;
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

constexpr int64_t kRefreshMs = 5;

}  // namespace

bool cores_contended() {
  static const int cores = usable_cores();
  static std::atomic<int64_t> checked_ms{-kRefreshMs};
  static std::atomic<bool> contended{false};
  const int64_t now = now_ms();
  int64_t last = checked_ms.load(std::memory_order_relaxed);
  // One thread refreshes per period; the others read the last answer.
  if (now - last >= kRefreshMs && checked_ms.compare_exchange_strong(last, now, std::memory_order_relaxed)) {
    const int running = runnable_threads();
    // The count includes this process's own host thread and polling worker, and on an idle
    // machine now and then a kernel thread or an OpenMP helper: one over the cores is not yet
    // a busy machine.
    contended.store(running > cores + 1, std::memory_order_relaxed);
  }
  return contended.load(std::memory_order_relaxed);
}

}  // namespace neuronrt
