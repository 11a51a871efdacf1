// The executor boundary: how work reaches a neuron device. Every kernel, copy and (later) compiled
// program or collective is a task on a stream's queue, run by that queue's worker in order. The
// host never touches device memory itself: an op whose results the host needs at once (a shape
// that depends on values) is still a task; the host waits for it. That keeps one invariant for
// every caller and every thread: no kernel overlaps other queued work of its stream on the same
// memory, and the sanitizer (TORCH_NEURONX_SANITIZE=1) can prove the host stays out.
//
// A hardware runtime replaces this boundary and the kernels it runs, not the op pipeline.
#pragma once

#include <c10/core/Device.h>

#include <atomic>
#include <functional>
#include <utility>

#include "core/device.h"
#include "exec/tensor_desc.h"

namespace torch_neuronx {

// Warnings that kernels raised on queue workers since the last call that launched work; that
// call raises them again on the user's thread (so Python's warnings machinery sees them).
extern std::atomic<bool> worker_warnings_pending;
void raise_worker_warnings();

// Queues `fn` on the current stream of `device` and returns at once. `name` must outlive the task
// (an operator name or a literal); a failure is raised at a later synchronizing call.
template <class F>
void launch(c10::DeviceIndex device, const char* name, F&& fn) {
  if (C10_UNLIKELY(worker_warnings_pending.load(std::memory_order_relaxed))) raise_worker_warnings();
  auto& q = current_queue(device);
  checked([&] {
    q.submit(name, [f = std::forward<F>(fn)]() mutable {
      ViewScope views;
      f();
    });
  });
}

// Eager op concatenation (TORCH_NEURONX_ENABLE_CONCATENATION=1, or set_concatenation): an op's
// task is deferred into its stream's open segment (Queue::defer) instead of queued, and a segment
// seen before runs as one queue task. Off, an op pays this one relaxed load.
extern std::atomic<bool> concatenation_enabled;
// Enabled, and not turned off for this call: deterministic algorithms run op by op, as on Trainium.
bool concatenating();

// `launch` for a concatenable op's task: `key` is its signature (the op, its arguments' dtypes,
// ranks, layouts and sharing), `tag` what the queue's concatenated hook counts it under.
template <class F>
void launch_concatenable(c10::DeviceIndex device, const char* name, uint64_t key, void* tag, F&& fn) {
  if (!concatenating()) {
    launch(device, name, std::forward<F>(fn));
    return;
  }
  if (C10_UNLIKELY(worker_warnings_pending.load(std::memory_order_relaxed))) raise_worker_warnings();
  auto& q = current_queue(device);
  checked([&] {
    q.defer(
        name,
        [f = std::forward<F>(fn)]() mutable {
          ViewScope views;
          f();
        },
        key, tag);
  });
}

// Runs `fn` as a task on the current stream of `device` and waits for it. CPU memory the kernel
// allocates comes from the device (kernel_alloc.h); its warnings are raised again on the calling
// thread; its exception reaches the caller with its kind.
void run_sync(c10::DeviceIndex device, const char* name, const std::function<void()>& fn);

}  // namespace torch_neuronx
