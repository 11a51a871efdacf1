#include "core/memory_history.h"

#include <torch/csrc/profiler/combined_traceback.h>

#include <chrono>

#include "neuronrt/queue.h"

namespace torch_neuronx {

void MemoryHistory::configure(const std::string& enabled, const std::string& context, const std::string& stacks,
                              size_t max_entries, bool clear) {
  TORCH_CHECK(enabled.empty() || enabled == "state" || enabled == "all",
              "neuron: _record_memory_history(enabled=...) must be None, \"state\" or \"all\", got \"", enabled, "\"");
  TORCH_CHECK(context.empty() || context == "state" || context == "alloc" || context == "all",
              "neuron: _record_memory_history(context=...) must be None, \"state\", \"alloc\" or \"all\", got \"",
              context, "\"");
  TORCH_CHECK(stacks == "python" || stacks == "all",
              "neuron: _record_memory_history(stacks=...) must be \"python\" or \"all\", got \"", stacks, "\"");
  TORCH_CHECK(max_entries > 0, "neuron: _record_memory_history(max_entries=...) must be positive");
  std::lock_guard<std::mutex> lock(mu_);
  state_ = !enabled.empty();
  log_ = enabled == "all";
  stack_alloc_ = state_ && !context.empty();
  stack_free_ = state_ && context == "all";
  cpp_ = stacks == "all";
  max_entries_ = max_entries;
  if (clear || !state_) log_entries_.clear();
  while (log_entries_.size() > max_entries_) log_entries_.pop_front();
}

std::shared_ptr<torch::CapturedTraceback> MemoryHistory::gather(bool free) const {
  if (!(free ? stack_free_ : stack_alloc_).load(std::memory_order_relaxed) || neuronrt::Queue::current() != nullptr)
    return nullptr;
  return torch::CapturedTraceback::gather(/*python=*/true, /*script=*/true, /*cpp=*/cpp_);
}

void MemoryHistory::record(HistoryEntry entry) {
  if (!log_) return;
  entry.time_us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  std::lock_guard<std::mutex> lock(mu_);
  if (!log_) return;
  log_entries_.push_back(std::move(entry));
  if (log_entries_.size() > max_entries_) log_entries_.pop_front();
}

std::vector<HistoryEntry> MemoryHistory::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {log_entries_.begin(), log_entries_.end()};
}

MemoryHistory& memory_history() {
  static auto* h = new MemoryHistory();  // leaked: blocks die after static destructors
  return *h;
}

}  // namespace torch_neuronx
