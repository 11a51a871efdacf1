#include "core/storage.h"

#include <ATen/EmptyTensor.h>
#include <ATen/ScalarOps.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/allocator.h"

namespace torch_neuronx {
namespace {

bool strict_mode() {
  static const bool strict = [] {
    const char* v = std::getenv("TORCH_NEURONX_STRICT");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return strict;
}

std::atomic<bool> warned_f64{false}, warned_complex{false};

}  // namespace

void check_trainium_dtype(c10::ScalarType dtype) {
  const bool f64 = dtype == c10::kDouble;
  const bool cplx = c10::isComplexType(dtype);
  if (C10_LIKELY(!f64 && !cplx)) return;
  TORCH_CHECK_TYPE(!strict_mode(), "neuron: dtype ", dtype,
                   " is not supported by Trainium (no float64 or complex types on the device); "
                   "TORCH_NEURONX_STRICT=1 makes this an error. Use float32 or bfloat16.");
  auto& flag = f64 ? warned_f64 : warned_complex;
  if (!flag.exchange(true)) {
    TORCH_WARN("neuron: dtype ", dtype, " runs on the software device but Trainium cannot run it "
               "(it has no float64 or complex types); set TORCH_NEURONX_STRICT=1 to make this an error.");
  }
}

at::Tensor empty_neuron(c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::ScalarType dtype,
                        c10::DeviceIndex device) {
  check_trainium_dtype(dtype);
  // The allocator serves the current device; switching costs, so only when it differs.
  std::optional<c10::DeviceGuard> guard;
  if (device >= 0 && device != current_device()) guard.emplace(c10::Device(kNeuron, device));
  return at::detail::empty_strided_generic(sizes, strides, &caching_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype);
}

at::Tensor empty_neuron(c10::IntArrayRef sizes, c10::ScalarType dtype, c10::DeviceIndex device,
                        c10::MemoryFormat format) {
  check_trainium_dtype(dtype);
  std::optional<c10::DeviceGuard> guard;
  if (device >= 0 && device != current_device()) guard.emplace(c10::Device(kNeuron, device));
  return at::detail::empty_generic(sizes, &caching_allocator(),
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype, format);
}

void resize_storage_bytes(c10::StorageImpl* storage, size_t new_bytes) {
  TORCH_CHECK(storage->resizable(), "neuron: trying to resize a storage that is not resizable");
  const auto device = storage->device().index();
  const size_t old_bytes = storage->nbytes();
  if (new_bytes == old_bytes) return;
  c10::DataPtr fresh = caching_allocator().allocate_on(device, new_bytes);
  const size_t keep = std::min(old_bytes, new_bytes);
  if (keep > 0 && storage->data()) {
    auto& q = current_queue(device);
    checked([&] {
      runtime().copy_async(q, fresh.get(), storage->data(), keep, neuronrt::Runtime::kDeviceToDevice);
    });
  }
  // The old block returns to the stream's pool; the copy above is ahead of any reuse.
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_nbytes(new_bytes);
}

c10::Storage cpu_storage_alias(const c10::Storage& s) {
  return c10::Storage(c10::Storage::use_byte_size_t(), s.nbytes(),
                      c10::DataPtr(const_cast<void*>(s.data()), c10::Device(c10::kCPU)), nullptr,
                      /*resizable=*/false);
}

at::Tensor cpu_tensor_on(c10::Storage cpu_storage, const at::Tensor& like) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(cpu_storage),
                                                   c10::DispatchKeySet(c10::DispatchKey::CPU), like.dtype());
  impl->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  return at::Tensor(std::move(impl));
}

at::Tensor cpu_view(const at::Tensor& t) {
  if (!t.defined()) return t;
  return cpu_tensor_on(cpu_storage_alias(t.storage()), t);
}

void check_devices(const char* op, c10::ArrayRef<const at::TensorBase*> tensors) {
  c10::DeviceIndex device = -1;
  for (const auto* t : tensors) {
    if (!t->defined()) continue;
    const auto d = t->device();
    if (d.type() == kNeuron) {
      TORCH_CHECK(device < 0 || device == d.index(),
                  "Expected all tensors to be on the same device, but found at least two devices, neuron:",
                  static_cast<int>(device), " and ", d, "! (in ", op, ")");
      device = d.index();
    } else {
      TORCH_CHECK(d.is_cpu() && t->dim() == 0,
                  "Expected all tensors to be on the same device, but found at least two devices, neuron and ",
                  d, "! (in ", op, "; only 0-dim CPU tensors may be mixed in as scalars)");
    }
  }
}

TensorDesc TensorDesc::of(const at::Tensor& t) {
  TensorDesc d;
  if (!t.defined()) return d;
  d.defined = true;
  d.dtype = t.scalar_type();
  if (!is_neuron(t)) {
    // check_devices admits only 0-dim CPU tensors here; the value is read now, as CUDA does.
    d.host_scalar = true;
    d.wrapped_number = t.unsafeGetTensorImpl()->is_wrapped_number();
    d.scalar = t.item();
    return d;
  }
  d.base = const_cast<void*>(t.storage().data());
  d.nbytes = t.storage().nbytes();
  d.offset = t.storage_offset();
  d.sizes.assign(t.sizes().begin(), t.sizes().end());
  d.strides.assign(t.strides().begin(), t.strides().end());
  return d;
}

at::Tensor TensorDesc::view() const {
  if (!defined) return at::Tensor();
  if (host_scalar) {
    auto t = at::detail::scalar_tensor_static(scalar, dtype, c10::Device(c10::kCPU));
    t.unsafeGetTensorImpl()->set_wrapped_number(wrapped_number);
    return t;
  }
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, c10::DataPtr(base, c10::Device(c10::kCPU)),
                       nullptr, /*resizable=*/false);
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                   c10::scalarTypeToTypeMeta(dtype));
  impl->set_sizes_and_strides(sizes, strides, offset);
  return at::Tensor(std::move(impl));
}

void run_now(c10::DeviceIndex device, const neuronrt::Task& fn) {
  auto& q = current_queue(device);
  checked([&] { q.run_inline(fn); });
}

}  // namespace torch_neuronx
