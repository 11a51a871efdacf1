#include "aten/op_stats.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <unordered_map>

namespace torch_neuronx {
namespace {

enum class Policy { kWarn, kError, kSilent };

Policy policy() {
  static const Policy p = [] {
    const char* v = std::getenv("TORCH_NEURONX_FALLBACK");
    if (!v || !*v || std::strcmp(v, "warn") == 0) return Policy::kWarn;
    if (std::strcmp(v, "error") == 0) return Policy::kError;
    if (std::strcmp(v, "silent") == 0) return Policy::kSilent;
    TORCH_WARN("TORCH_NEURONX_FALLBACK='", v, "' is not one of warn, error, silent; using warn");
    return Policy::kWarn;
  }();
  return p;
}

struct Counts {
  std::mutex mu;
  // Keyed by the schema's address: stable for a registered operator, and cheap on the hot path.
  std::unordered_map<const c10::FunctionSchema*, std::pair<c10::OperatorHandle, int64_t>> generic, queued, fallback;
  std::set<std::string> warned;
};

Counts& counts() {
  static Counts* c = new Counts();
  return *c;
}

void bump(std::unordered_map<const c10::FunctionSchema*, std::pair<c10::OperatorHandle, int64_t>>& m,
          const c10::OperatorHandle& op) {
  auto it = m.find(&op.schema());
  if (it == m.end()) it = m.emplace(&op.schema(), std::make_pair(op, int64_t{0})).first;
  it->second.second++;
}

std::map<std::string, int64_t> snapshot(
    const std::unordered_map<const c10::FunctionSchema*, std::pair<c10::OperatorHandle, int64_t>>& m) {
  std::map<std::string, int64_t> out;
  for (const auto& [key, entry] : m) out[op_display_name(entry.first)] += entry.second;
  return out;
}

}  // namespace

std::string op_display_name(const c10::OperatorHandle& op) {
  const auto& name = op.operator_name();
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

void record_generic(const c10::OperatorHandle& op) {
  auto& c = counts();
  std::lock_guard<std::mutex> lock(c.mu);
  bump(c.generic, op);
}

void record_queued(const c10::OperatorHandle& op) {
  auto& c = counts();
  std::lock_guard<std::mutex> lock(c.mu);
  bump(c.queued, op);
}

void record_fallback(const c10::OperatorHandle& op, const char* reason) {
  const std::string name = op_display_name(op);
  TORCH_CHECK_NOT_IMPLEMENTED(policy() != Policy::kError, "neuron: ", name,
                              " would fall back to the CPU (", reason,
                              ") and TORCH_NEURONX_FALLBACK=error forbids it");
  bool warn = false;
  {
    auto& c = counts();
    std::lock_guard<std::mutex> lock(c.mu);
    bump(c.fallback, op);
    warn = policy() == Policy::kWarn && c.warned.insert(name).second;
  }
  if (warn) {
    TORCH_WARN("neuron: ", name, " falls back to the CPU (", reason,
               "): its tensors are copied to host memory and back. "
               "torch_neuronx.get_fallback_ops() counts these; TORCH_NEURONX_FALLBACK=error|silent changes this warning.");
  }
}

std::map<std::string, int64_t> generic_op_counts() {
  auto& c = counts();
  std::lock_guard<std::mutex> lock(c.mu);
  return snapshot(c.generic);
}

std::map<std::string, int64_t> queued_op_counts() {
  auto& c = counts();
  std::lock_guard<std::mutex> lock(c.mu);
  return snapshot(c.queued);
}

std::map<std::string, int64_t> fallback_op_counts() {
  auto& c = counts();
  std::lock_guard<std::mutex> lock(c.mu);
  return snapshot(c.fallback);
}

void reset_op_counts() {
  auto& c = counts();
  std::lock_guard<std::mutex> lock(c.mu);
  c.generic.clear();
  c.queued.clear();
  c.fallback.clear();
}

}  // namespace torch_neuronx
