// The CPU fallback: the op's tensors are copied to host memory, the CPU kernel runs there, and
// results are copied back. Only where a plan asks for it (op_policy.cpp); counted per op.
#include <ATen/native/CPUFallback.h>

#include <mutex>
#include <set>

#include "core/errors.h"
#include "neuronrt/config.h"
#include "pipeline/runners.h"

namespace torch_neuronx {
namespace {

enum class Policy { kWarn, kError, kSilent };

Policy policy() {
  static const Policy p = checked([] {
    const std::string v = neuronrt::config::choice("TORCH_NEURONX_FALLBACK", "warn", {"warn", "error", "silent"});
    return v == "error" ? Policy::kError : v == "silent" ? Policy::kSilent : Policy::kWarn;
  });
  return p;
}

std::mutex warned_mu;
std::set<std::string> warned;

}  // namespace

void note_copy(OpRecord& rec, const std::string& why) {
  TORCH_CHECK_NOT_IMPLEMENTED(policy() != Policy::kError, "neuron: ", rec.name, " would fall back to the CPU (", why,
                              ") and TORCH_NEURONX_FALLBACK=error forbids it");
  rec.count(Mode::kCopy, why);
  bool warn = false;
  if (policy() == Policy::kWarn) {
    std::lock_guard<std::mutex> lock(warned_mu);
    warn = warned.insert(rec.name).second;
  }
  if (warn) {
    TORCH_WARN(
        "neuron: ", rec.name, " falls back to the CPU (", why,
        "): its tensors are copied to host memory and "
        "back. torch_neuronx.op_counts() counts these; TORCH_NEURONX_FALLBACK=error|silent changes this warning.");
  }
}

void run_op_copy(const c10::OperatorHandle& op, OpRecord& rec, torch::jit::Stack* stack, const std::string& why) {
  note_copy(rec, why.empty() ? rec.reason : why);
  at::native::cpu_fallback(op, stack);
}

}  // namespace torch_neuronx
