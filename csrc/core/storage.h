// Device storage and tensor helpers shared by the op files.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>
#include <c10/core/StorageImpl.h>

#include <vector>

#include "core/device.h"

namespace torch_neuronx {

// Grows or shrinks a neuron storage; the old contents are copied on the device queue.
void resize_storage_bytes(c10::StorageImpl* storage, size_t new_bytes);

// A new neuron tensor. Warns (or raises under TORCH_NEURONX_STRICT=1) for dtypes Trainium
// cannot hold.
at::Tensor empty_neuron(c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::ScalarType dtype,
                        c10::DeviceIndex device);
at::Tensor empty_neuron(c10::IntArrayRef sizes, c10::ScalarType dtype, c10::DeviceIndex device,
                        c10::MemoryFormat format = c10::MemoryFormat::Contiguous);
void check_trainium_dtype(c10::ScalarType dtype);

inline bool is_neuron(const at::TensorBase& t) { return t.defined() && t.device().type() == kNeuron; }

// A CPU tensor over the same memory as `t` (device or host), sharing no ownership: the memory
// must stay alive, which stream order guarantees for work queued on the stream that allocated
// it, and which the caller guarantees for host memory (it waits, or the memory is pinned).
at::Tensor cpu_view(const at::Tensor& t);
// A CPU tensor with `like`'s dtype, sizes, strides and offset over `cpu_storage`.
at::Tensor cpu_tensor_on(c10::Storage cpu_storage, const at::Tensor& like);
// A non-owning, non-resizable CPU storage over the same bytes as `storage`.
c10::Storage cpu_storage_alias(const c10::Storage& storage);

// CUDA's device rule: all tensor arguments on one neuron device; 0-dim CPU tensors may be mixed
// in as scalars. Raises "Expected all tensors to be on the same device...".
void check_devices(const char* op, c10::ArrayRef<const at::TensorBase*> tensors);

// What a queued task holds of a tensor: its memory and layout, inline (no allocation). The task
// turns it into a CPU tensor on the worker, so no TensorImpl crosses threads. A 0-dim CPU tensor
// (a scalar operand) is held by value.
struct TensorDesc {
  // The whole storage, as kernels may restride an output within it.
  void* base = nullptr;
  size_t nbytes = 0;
  int64_t offset = 0;  // in elements
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  bool defined = false;
  bool host_scalar = false;  // a CPU 0-dim tensor: `scalar` holds its value
  bool wrapped_number = false;
  c10::Scalar scalar;
  c10::SmallVector<int64_t, 5> sizes, strides;

  static TensorDesc of(const at::Tensor& t);
  at::Tensor view() const;  // on the worker
};

// Queues `fn` on the current stream of `device`.
template <class F>
void launch(c10::DeviceIndex device, const char* name, F&& fn) {
  auto& q = current_queue(device);
  checked([&] { q.submit(name, std::forward<F>(fn)); });
}
// Runs `fn` on the host after the current stream of `device` drains, with device memory open.
void run_now(c10::DeviceIndex device, const neuronrt::Task& fn);

}  // namespace torch_neuronx
