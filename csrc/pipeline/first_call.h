// The first call of each op signature waits for its kernel. A CPU kernel checks more than its
// meta kernel does (the dtypes it implements, a mode string, an out= cast), and a check that fails
// inside a queued task would surface only at a later sync, blamed on whatever runs there; on CUDA
// those checks run on the host and raise at the call. So a call whose signature has not yet run
// cleanly waits for its task and raises its error there; later calls of that signature are queued.
//
// The signature holds what such checks depend on: the op, each tensor's dtype, rank and device
// type, which tensors share memory with a written one, each other argument's kind, and the exact
// value of arguments that choose a behaviour (strings, bools, integers, dtypes, layouts, memory
// formats: an integer may be a reduction mode or a dim, which can change a result's shape where
// meta and the CPU kernel disagree), whether each tensor is empty (many CPU kernels return early
// for no elements, before their dtype checks), whether it is contiguous in the default or
// channels-last format (kernels that require it check it) and whether its elements alias each
// other (out= kernels refuse to write such a tensor). Sizes, strides and floating-point numbers
// are left out: a model's shapes and scalars change from step to step (a growing KV cache, a
// learning-rate schedule), and errors that depend on them are the meta kernel's to raise at the
// call, or depend on values (an index out of range) and surface at a sync, as CUDA's device-side
// asserts do.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/util/SmallVector.h>

#include <optional>
#include <string_view>
#include <type_traits>

#include "exec/executor.h"
#include "pipeline/op_record.h"
#include "pipeline/word_key.h"

namespace torch_neuronx {

class Signature : public WordKey<16> {
 public:
  explicit Signature(const OpRecord& rec);
  void add_tensor(const at::Tensor& t);
  // A boxed argument; `real_type` is the schema's (a ScalarType argument is an int IValue).
  void add_ivalue(const c10::IValue& v, const c10::TypePtr& real_type);

  // Typed kernels' arguments.
  void add(const at::Tensor& t) { add_tensor(t); }
  void add(const at::Scalar& s) { word(static_cast<int64_t>(s.type()) + 100); }
  void add(c10::string_view s) { add_text(std::string_view(s.data(), s.size())); }
  template <class T>
  void add(const std::optional<T>& v) {
    if (!v.has_value()) {
      word(-2);
    } else {
      add(*v);
    }
  }
  template <class T>
  void add(const T& v) {
    if constexpr (std::is_same_v<T, bool> || std::is_enum_v<T>) {
      word(static_cast<int64_t>(v) + 200);
    } else if constexpr (std::is_integral_v<T>) {
      word(300);
      word(static_cast<int64_t>(v));  // a dim or a reduction mode can change the result's shape
    } else if constexpr (std::is_arithmetic_v<T>) {
      word(301);
    } else {
      word(302);  // sizes and other values: their kind only
    }
  }

  // Which of the call's tensors share a storage with a written one, and how their elements
  // overlap (the CPU kernel's overlap checks depend on it): `tensors` holds each device tensor
  // and whether it is written.
  void add_sharing(c10::ArrayRef<std::pair<const c10::TensorImpl*, bool>> tensors);

 private:
  void add_text(std::string_view s);
};

// Whether `sig` has run cleanly; `ran_cleanly` remembers that it has.
bool known_signature(const Signature& sig);
void ran_cleanly(Signature sig);

// Queues the task of a call that raises nothing at the call (its kernel cannot fail there):
// concatenated when concatenation is on (executor.h), under `key`.
template <class F>
void launch_queued(c10::DeviceIndex device, OpRecord& rec, uint64_t key, F&& fn) {
  if (C10_UNLIKELY(concatenation_enabled.load(std::memory_order_relaxed))) {
    launch_concatenable(device, rec.name.c_str(), key, &rec, std::forward<F>(fn));
  } else {
    launch(device, rec.name.c_str(), std::forward<F>(fn));
  }
}

// Queues `fn` on `device`'s current stream, or, for the first call of its signature, runs it
// there and waits, so its error raises here (counted on the record as a first-call wait).
template <class F>
void launch_op(c10::DeviceIndex device, OpRecord& rec, Signature sig, F&& fn) {
  // A capture records the call for its replays: nothing runs now, so nothing to wait for.
  if (known_signature(sig) || current_queue(device).capturing()) {
    // A call whose signature ran cleanly may be concatenated; a first call may not: it waits for
    // its kernel, closing the open segment.
    if (C10_UNLIKELY(concatenation_enabled.load(std::memory_order_relaxed))) {
      launch_concatenable(device, rec.name.c_str(), sig.hash(), &rec, std::forward<F>(fn));
    } else {
      launch(device, rec.name.c_str(), std::forward<F>(fn));
    }
    return;
  }
  rec.first_waits.fetch_add(1, std::memory_order_relaxed);
  run_sync(device, rec.name.c_str(), [&fn] { fn(); });
  ran_cleanly(std::move(sig));
}

}  // namespace torch_neuronx
