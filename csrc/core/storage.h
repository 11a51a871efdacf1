// Neuron tensors and their storage: allocation, resizing, and the dtypes Trainium holds.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/StorageImpl.h>

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
// Whether tensors of `dtype` may live on neuron: all but float64 and complex under
// TORCH_NEURONX_STRICT=1 (Trainium has neither), all otherwise.
bool dtype_allowed(c10::ScalarType dtype);
void check_trainium_dtype(c10::ScalarType dtype);

inline bool is_neuron(const at::TensorBase& t) { return t.defined() && t.device().type() == kNeuron; }

}  // namespace torch_neuronx
