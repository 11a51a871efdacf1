#include "compile/kernel_launch.h"

#include <ATen/record_function.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/storage.h"
#include "exec/device_check.h"
#include "exec/executor.h"
#include "pipeline/op_record.h"

namespace torch_neuronx {
namespace {

bool is_cpu_scalar(const at::Tensor& t) { return t.device().is_cpu() && t.dim() == 0 && t.element_size() <= 16; }

// Calls `fn` with `N` integer-class arguments (pointers and 64-bit integers travel the same way in
// the platform's calling convention, so one signature per arity serves every kernel).
template <size_t... I>
void call_with(void* fn, const uintptr_t* a, std::index_sequence<I...>) {
  using F = void (*)(decltype((void)I, uintptr_t{})...);
  reinterpret_cast<F>(fn)(a[I]...);
}

template <size_t N>
void call_n(void* fn, const uintptr_t* a) {
  call_with(fn, a, std::make_index_sequence<N>{});
}

using Caller = void (*)(void*, const uintptr_t*);

template <size_t... N>
constexpr std::array<Caller, sizeof...(N)> make_callers(std::index_sequence<N...>) {
  return {&call_n<N>...};
}

constexpr auto kCallers = make_callers(std::make_index_sequence<kMaxKernelArgs + 1>{});

OpRecord& kernel_rec = typed_op("neuron::compiled_kernel", "a kernel of a compiled graph, launched as a task");

// A kernel's name for its tasks (which need one that outlives them): kept once per kernel, and
// found again by the kernel's address without a lock or a string hash on the launch path.
const char* task_name(void* fn, const std::string& kernel) {
  thread_local std::unordered_map<void*, const char*> seen;
  if (auto it = seen.find(fn); it != seen.end()) return it->second;
  static std::mutex mu;
  static auto* names = new std::unordered_set<std::string>();  // leaked: tasks may run at exit
  std::lock_guard<std::mutex> lock(mu);
  return seen[fn] = names->insert(kernel).first->c_str();
}

}  // namespace

void launch_cpu_kernel(void* fn, const std::string& name, const std::string& kinds,
                       const std::vector<c10::IValue>& args) {
  TORCH_CHECK(fn, "neuron: launching kernel ", name, " with no function");
  TORCH_CHECK(kinds.size() == args.size(), "neuron: kernel ", name, " takes ", kinds.size(), " arguments, got ",
              args.size());
  TORCH_CHECK(args.size() <= kMaxKernelArgs, "neuron: kernel ", name, " takes ", args.size(), " arguments; at most ",
              kMaxKernelArgs, " are supported");
  std::array<uintptr_t, kMaxKernelArgs> a{};
  // A 0-dim CPU tensor a kernel reads (an optimizer's step count, an unspecialized float) travels by
  // value, read at the launch, as CUDA's Inductor passes CPU scalars to a GPU kernel: the host may
  // change the tensor before the queued kernel runs.
  std::vector<std::pair<int, std::array<std::byte, 16>>> scalars;
  DeviceCheck check(name.c_str());
  for (size_t i = 0; i < args.size(); ++i) {
    if (kinds[i] == 'p' && args[i].isTensor() && is_cpu_scalar(args[i].toTensor())) {
      const at::Tensor& t = args[i].toTensor();
      scalars.emplace_back(static_cast<int>(i), std::array<std::byte, 16>{});
      std::memcpy(scalars.back().second.data(), t.const_data_ptr(), t.element_size());
    } else if (kinds[i] == 'p') {
      TORCH_CHECK(args[i].isTensor() && is_neuron(args[i].toTensor()), "neuron: argument ", i, " of kernel ", name,
                  " must be a neuron tensor or a 0-dim CPU tensor");
      const at::Tensor& t = args[i].toTensor();
      check.add(t);
      a[i] = reinterpret_cast<uintptr_t>(t.data_ptr());
    } else if (kinds[i] == 'i') {
      TORCH_CHECK(args[i].isInt() || args[i].isBool(), "neuron: argument ", i, " of kernel ", name, " must be an int");
      a[i] = static_cast<uintptr_t>(args[i].isInt() ? args[i].toInt() : args[i].toBool());
    } else {
      TORCH_CHECK_NOT_IMPLEMENTED(false, "neuron: kernel ", name, " takes an argument of kind '", kinds[i],
                                  "'; only data pointers and integers are supported");
    }
  }
  const auto device = check.device() >= 0 ? check.device() : current_device();
  kernel_rec.count(Mode::kAsync);
  // The launch is a host op of its own for profilers (as a Triton kernel's launch is on CUDA); its
  // device span carries the kernel's name.
  RECORD_FUNCTION(name, c10::ArrayRef<const c10::IValue>(args.data(), args.size()));
  const char* task = task_name(fn, name);
  const Caller caller = kCallers[args.size()];
  if (scalars.empty()) {
    launch(device, task, [fn, caller, a] { caller(fn, a.data()); });
    return;
  }
  launch(device, task, [fn, caller, a, scalars = std::move(scalars)]() mutable {
    for (auto& [i, value] : scalars) a[i] = reinterpret_cast<uintptr_t>(value.data());
    caller(fn, a.data());
  });
}

}  // namespace torch_neuronx
