#include "core/errors.h"

#include "neuronrt/queue.h"
#include "neuronrt/shm_group.h"

namespace torch_neuronx {
namespace {

// A kernel's error reaches the host at a synchronizing call; it carries the message, not the C++
// backtrace of the worker thread that c10 errors append.
std::string without_backtrace(std::string msg) {
  const auto bt = msg.find("\nException raised from ");
  if (bt != std::string::npos) msg.resize(bt);
  return msg;
}

}  // namespace

void throw_as_torch_error(const std::string& message, const std::exception_ptr& cause) {
  const std::string msg = without_backtrace(message);
  try {
    if (cause) std::rethrow_exception(cause);
  } catch (const c10::IndexError&) {
    TORCH_CHECK_INDEX(false, msg);
  } catch (const c10::ValueError&) {
    TORCH_CHECK_VALUE(false, msg);
  } catch (const c10::TypeError&) {
    TORCH_CHECK_TYPE(false, msg);
  } catch (const c10::NotImplementedError&) {
    TORCH_CHECK_NOT_IMPLEMENTED(false, msg);
  } catch (const c10::OutOfMemoryError&) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, msg);
  } catch (const c10::LinAlgError&) {
    TORCH_CHECK_LINALG(false, msg);
  } catch (const c10::DistBackendError&) {
    TORCH_CHECK_WITH(DistBackendError, false, msg);
  } catch (const neuronrt::CollectiveError&) {
    TORCH_CHECK_WITH(DistBackendError, false, msg);
  } catch (...) {
  }
  TORCH_CHECK(false, msg);
}

void rethrow_as_torch_error() {
  try {
    throw;
  } catch (const c10::Error&) {
    throw;
  } catch (const neuronrt::TaskError& e) {
    throw_as_torch_error(e.what(), e.cause());
  } catch (const std::exception& e) {
    throw_as_torch_error(e.what(), std::current_exception());
  }
}

}  // namespace torch_neuronx
