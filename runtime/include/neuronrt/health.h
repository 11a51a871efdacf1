// Device health as a driver keeps it, for this process and for others to read (nobs): injected
// faults, the state each process publishes about the devices it uses, and the watchdog.
//
// Each process that uses a device keeps one JSON file, `<pid>.json`, in a directory only its user
// can enter (default /dev/shm/torch-neuronx-<uid>, mode 0700; files 0600), rewritten ten times a
// second by a thread of the runtime and replaced atomically (write then rename). A reader trusts a
// file only if its user owns it, its mode is 0600 and it parses; a file whose process is gone (or
// whose pid was reused: the start time differs) claims nothing. The file names the writer's pid
// namespace: only a reader in the same one can tell from its /proc whether the writer still runs.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace neuronrt {
class Runtime;

namespace health {

enum class Fault { kHbmUncorrectable, kHbmCorrectable, kCorrupt, kHang };
struct Injected {
  Fault kind;
  int device;
  int64_t count;  // errors of an hbm_* fault (default 1)
};
// TORCH_NEURONX_INJECT_FAULT's syntax: "kind@device[:count][,kind@device...]", kind one of
// hbm_uncorrectable, hbm_correctable, corrupt, hang. Throws std::invalid_argument naming the
// variable and the bad part.
std::vector<Injected> parse_faults(const std::string& spec, int devices);

// What this process knows of one device's health.
struct DeviceFaults {
  uint64_t correctable = 0;
  uint64_t uncorrectable = 0;
  bool corrupt = false;  // reads from the device come back with a flipped bit
  bool hang = false;     // its queues never start a task
};

// The state directory: created (0700) if missing. Throws std::runtime_error when it is not a
// directory that this user owns and nobody else may enter (a symlink, another owner, group or
// other permissions): a state nobody can trust is not published.
std::string state_dir();
std::string json_escape(const std::string& s);
// The start time of process `pid` (clock ticks since boot, /proc/<pid>/stat); 0 if it is gone.
uint64_t start_time(int pid);

// Publishes this process's device state and runs the watchdog, on a thread of its own.
class Monitor {
 public:
  Monitor(Runtime& runtime, std::string dir, std::chrono::milliseconds period, std::chrono::milliseconds hung_after);
  ~Monitor();  // stops the thread and removes the state file
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  // Checks the queues and rewrites the state file now (also what the thread does each period).
  void tick();
  // A queue of `device` that has not finished a task for longer than the watchdog limit, and why.
  bool hung(int device, std::string* why = nullptr) const;

 private:
  void loop();
  std::string render();

  Runtime& rt_;
  const std::string dir_, path_;
  const std::chrono::milliseconds period_, hung_after_;
  const uint64_t start_time_;
  const uint64_t pid_ns_;  // the inode of its pid namespace
  struct Progress {
    uint64_t completed = 0;
    std::chrono::steady_clock::time_point since;
  };
  mutable std::mutex mu_;
  std::map<std::pair<int, int64_t>, Progress> progress_;  // by (device, queue tag)
  std::map<int, std::string> hung_;                       // device -> why
  bool stop_ = false;
  std::condition_variable cv_;
  std::thread thread_;
};

}  // namespace health
}  // namespace neuronrt
