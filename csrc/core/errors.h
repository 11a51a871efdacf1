// The one place where failures of the runtime (bad settings, bad indices, a queued task that
// failed) become PyTorch errors. A task's error keeps its kind: an IndexError raised by a kernel
// on the device's queue is an IndexError at the synchronizing call that reports it.
#pragma once

#include <c10/util/Exception.h>

#include <exception>
#include <string>

namespace torch_neuronx {

// Throws `e` as a c10::Error of the kind of `cause` (IndexError, ValueError, TypeError,
// NotImplementedError, OutOfMemoryError, DistBackendError, or a plain Error) with `message`.
[[noreturn]] void throw_as_torch_error(const std::string& message, const std::exception_ptr& cause);

// Turns the current exception (inside a catch block) into a c10::Error.
[[noreturn]] void rethrow_as_torch_error();

// Runs a runtime call and turns its failures into c10::Error (c10 errors pass unchanged).
template <class F>
auto checked(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const c10::Error&) {
    throw;
  } catch (...) {
    rethrow_as_torch_error();
  }
}

}  // namespace torch_neuronx
