// The software NeuronCore runtime: the visible logical cores, their memory and queues.
// This is the interface a hardware runtime (libnrt) would sit behind.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "neuronrt/health.h"
#include "neuronrt/memory.h"
#include "neuronrt/profile.h"
#include "neuronrt/queue.h"

namespace neuronrt {

struct RuntimeOptions {
  Topology topology;
  bool launch_blocking = false;               // NEURON_LAUNCH_BLOCKING=1
  bool sanitize = false;                      // TORCH_NEURONX_SANITIZE=1
  std::vector<health::Injected> faults;       // TORCH_NEURONX_INJECT_FAULT
  bool publish_health = false;                // TORCH_NEURONX_HEALTH (on by default from the environment)
  std::chrono::milliseconds watchdog{30000};  // TORCH_NEURONX_WATCHDOG_S
  int64_t correctable_limit = 16;             // TORCH_NEURONX_CORRECTABLE_LIMIT
  static RuntimeOptions from_env();
};

struct Counters {
  std::atomic<uint64_t> h2d_bytes{0}, d2h_bytes{0}, d2d_bytes{0};
};

class Runtime {
 public:
  explicit Runtime(RuntimeOptions options);
  ~Runtime();

  // The process-wide runtime, configured from the environment on first use. Throws
  // std::invalid_argument for a bad setting, and std::runtime_error in a process forked after the
  // device was used (its queues' workers did not survive the fork).
  static Runtime& get();
  // The runtime if get() made it, else nullptr; never starts it (exit must not, with bad settings).
  static Runtime* existing();

  // True in a child forked after the parent used the device.
  static bool in_forked_child();
  // True once a queue exists (the device was used).
  static bool started();
  // When the runtime started, on the steady clock (utilization is measured from it).
  int64_t started_ns() const { return started_ns_; }
  // The visible devices, also in a forked child (0 when the runtime cannot start).
  static int visible_devices() noexcept;

  // Orderly end: waits for every queue (dropping task errors nobody can receive now), then stops
  // and joins the workers. Called at interpreter exit; any later use of a queue raises.
  void shutdown();
  static bool stopped();

  int device_count() const { return static_cast<int>(opts_.topology.cores.size()); }
  const Topology& topology() const { return opts_.topology; }
  const LogicalCore& core(int device) const;
  bool launch_blocking() const { return opts_.launch_blocking; }
  bool sanitize() const { return opts_.sanitize; }

  DeviceMemory& memory(int device);
  // The faults injected into `device` (TORCH_NEURONX_INJECT_FAULT).
  const health::DeviceFaults& faults(int device) const { return faults_.at(device); }
  int64_t correctable_limit() const { return opts_.correctable_limit; }
  // healthy, unhealthy or unknown, as this process sees `device`; `why` says what makes it unhealthy.
  std::string device_health(int device, std::string* why = nullptr);
  // The monitor publishing this process's state for nobs; nullptr before the device was used, or
  // when publishing is off or the state directory is not trusted.
  health::Monitor* monitor();
  // Queue `id` of a device, created on first use (id 0 is the default queue). A device with an
  // uncorrectable memory error gets none: this throws, after publishing the state that says why.
  Queue& queue(int device, int id);
  // False when `device` has an uncorrectable memory error: no work may run on it, nor memory be
  // taken from it.
  bool usable(int device) const { return !unusable_.at(device); }
  // Throws std::runtime_error naming the fault when `device` is not usable, after publishing the
  // state that says why (the error points to nobs).
  void check_usable(int device);
  // Starts publishing this process's state (once; a no-op when publishing is off). Work on a
  // device does it on its own; initialization calls it so that a fault this process sees is
  // published even when the device it would start on is the one refusing work.
  void publish();
  void synchronize_device(int device);
  // The queues of a device made so far.
  std::vector<Queue*> queues_of(int device);
  void synchronize_all();
  // -1 when `ptr` is in no device's memory.
  int device_of(const void* ptr) const;

  // Copies are tasks on `queue`; the caller keeps both ranges valid until the task runs.
  uint64_t copy_async(Queue& queue, void* dst, const void* src, size_t bytes, int direction);
  enum Direction { kHostToDevice = 0, kDeviceToHost = 1, kDeviceToDevice = 2 };
  Counters& counters() { return counters_; }

  static constexpr int kMaxQueuesPerDevice = 64;

 private:
  void enter_task();
  void leave_task();

  void wait_while_hung() const;

  RuntimeOptions opts_;
  std::vector<health::DeviceFaults> faults_;
  std::vector<char> unusable_;          // an uncorrectable memory error: no work runs on the device
  std::atomic<bool> releasing_{false};  // shutting down: hung queues run again
  std::once_flag monitor_once_;
  std::unique_ptr<health::Monitor> monitor_;
  int64_t started_ns_ =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  std::vector<std::unique_ptr<DeviceMemory>> memory_;
  Queue* make_queue(int device, int id);

  std::vector<std::vector<std::unique_ptr<Queue>>> queues_;  // owners, created under queues_mu_
  // Every op looks its queue up: a lock-free read once the queue exists.
  std::unique_ptr<std::atomic<Queue*>[]> queue_index_;
  std::mutex queues_mu_;
  std::mutex guard_mu_;
  int guard_depth_ = 0;
  Counters counters_;
};

}  // namespace neuronrt
