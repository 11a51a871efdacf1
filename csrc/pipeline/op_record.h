// The plan of the op pipeline: one record per op that reached a neuron kernel, saying how its
// calls run, why, and how many ran each way. Typed kernels register a record when the extension
// loads; boxed ops get theirs from op_policy.cpp on first use. `torch_neuronx.op_counts()` and
// `explain()` read these records and nothing else.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace torch_neuronx {

struct OutputMeta;
// Corrects what meta says of a call's results (the fresh outputs, or an out= op's out= tensors)
// where the CPU kernel knowingly differs (op_overrides.cpp).
using MetaRule = void (*)(const c10::IValue* args, const std::vector<OutputMeta*>& results);
// Runs on a call's arguments before anything else: raises at the call the argument errors the CPU
// kernel would raise inside its task, where meta does not check them, or brings an argument to
// what the CPU kernel takes (op_overrides.cpp).
using ArgRule = void (*)(c10::IValue* args);

// async: the kernel is queued on the stream and the call returns at once.
// sync:  the kernel is queued and the caller waits for it (its results decide shapes or values
//        the host needs); no host copy.
// copy:  the CPU fallback: tensors are copied to host memory, computed there, and copied back.
enum class Mode : uint8_t { kAsync = 0, kSync = 1, kCopy = 2 };
const char* mode_name(Mode m);

struct OpRecord {
  std::string name;  // "aten::add.Tensor"
  Mode mode = Mode::kAsync;
  std::string reason;  // why calls take `mode`, and what runs
  bool typed = false;  // a kernel written for the device, not the boxed pipeline

  // The async plan of a boxed op (op_policy.cpp).
  std::optional<c10::OperatorHandle> out_op;  // the CPU out= kernel the task runs, if any
  std::vector<int> return_arg;                // per return: the argument it aliases, or -1 (fresh)
  std::atomic<bool> no_meta{false};           // its meta kernel turned out to be missing
  std::atomic<int64_t> meta_calls{0};         // times its meta kernel ran (the rest were cached answers)
  MetaRule rule = nullptr;                    // corrects meta's answer (op_policy.cpp)
  ArgRule arg_rule = nullptr;                 // checks the CPU kernel makes that meta lacks, or conversions
  bool widened_results = false;               // fresh results widen to meta's dtype (kWidenedResults)
  bool contiguous_outputs = false;            // fresh outputs are contiguous, whatever meta says
  bool quiet_resize = false;                  // out= tensors resize without the warning (kQuietResize)
  bool out_scratch = false;                   // the out= kernel writes scratch, copied into out= (kOutScratch)
  bool split_invariant = false;               // small calls run on the worker alone (kSplitInvariant)
  // For an out= op: the functional overload, whose result layout an out= tensor takes when it is
  // resized (as CPU kernels give it; meta kernels written in Python keep it contiguous).
  std::optional<c10::OperatorHandle> functional_op;

  // TORCH_NEURONX_KERNELS=nki: a library kernel serves the op's calls that fit it
  // (nki/kernel_source.h); how many did.
  std::atomic<bool> nki_source{false};
  std::string nki_kernel;  // which kernel, for explain(); written before nki_source is set
  std::atomic<int64_t> nki_calls{0};

  // Whether its async calls may be concatenated (executor.h): false for a typed kernel whose task
  // is queued otherwise (a transfer, histc's counting loop).
  bool concatenable = true;
  std::atomic<int64_t> concatenated{0};  // async calls that ran inside one concatenated task
  std::atomic<int64_t> solo{0};          // async calls whose kernel ran on the worker alone (solo_team.h)

  std::array<std::atomic<int64_t>, 3> calls{};
  // Async calls that waited for their kernel: the first of each signature (pipeline/first_call.h).
  std::atomic<int64_t> first_waits{0};
  void count(Mode m) { calls[static_cast<int>(m)].fetch_add(1, std::memory_order_relaxed); }
  // Counts an async call whose kernel runs on the queue worker alone (exec/solo_team.h) when `alone`;
  // returns it.
  bool count_solo(bool alone) {
    if (alone) solo.fetch_add(1, std::memory_order_relaxed);
    return alone;
  }
  // A call that ran otherwise than the plan says, with why ("a host tensor argument").
  void count(Mode m, const std::string& why);
  std::map<std::string, int64_t> call_reasons(Mode m) const;
  void reset_counts();

 private:
  mutable std::mutex mu_;
  std::array<std::map<std::string, int64_t>, 3> reasons_;
};

// The record of a typed kernel (made at load, by the registration macros).
OpRecord& typed_op(const char* name, const char* what);

// Records by name; made by typed_op or op_policy.cpp, never freed.
void add_record(OpRecord* record);
OpRecord* find_record(const std::string& name);
std::vector<OpRecord*> all_records();
void reset_all_counts();

}  // namespace torch_neuronx
