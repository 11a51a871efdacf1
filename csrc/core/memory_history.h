// Memory history, as torch.cuda.memory._record_memory_history keeps it: what allocated each live
// block (its stack) and a bounded log of the allocator's actions, for _snapshot() in CUDA's format
// (so torch.cuda._memory_viz and pytorch.org/memory_viz read it).
#pragma once

#include <c10/util/Exception.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace torch {
struct CapturedTraceback;
}

namespace torch_neuronx {

struct HistoryEntry {
  const char* action;  // "alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "oom"
  int device;
  uint64_t addr;
  uint64_t size;
  int64_t stream;
  int64_t time_us;
  uint64_t device_free = 0;  // for "oom"
  std::shared_ptr<torch::CapturedTraceback> frames;
};

class MemoryHistory {
 public:
  // enabled: "state" keeps the stacks of live blocks, "all" also the log; nullopt-like "" turns it
  // off. context: which actions get stacks ("state", "alloc", "all" or ""); stacks: "python" or
  // "all" (C++ frames too). Raises c10::Error naming a bad value.
  void configure(const std::string& enabled, const std::string& context, const std::string& stacks, size_t max_entries,
                 bool clear);
  bool keeps_state() const { return state_.load(std::memory_order_relaxed); }
  // The calling thread's stack for an action, if its stacks are kept (never on a queue worker,
  // whose allocations are a kernel's, not the user's).
  std::shared_ptr<torch::CapturedTraceback> gather(bool free) const;
  void record(HistoryEntry entry);
  std::vector<HistoryEntry> entries() const;

 private:
  // Read on every allocation without the lock; written under it.
  std::atomic<bool> state_{false}, log_{false};
  std::atomic<bool> stack_alloc_{false}, stack_free_{false}, cpp_{false};
  size_t max_entries_ = SIZE_MAX;
  mutable std::mutex mu_;
  std::deque<HistoryEntry> log_entries_;  // under mu_, the newest max_entries_
};

MemoryHistory& memory_history();

}  // namespace torch_neuronx
