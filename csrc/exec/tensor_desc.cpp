#include "exec/tensor_desc.h"

#include <ATen/ScalarOps.h>
#include <c10/core/TensorImpl.h>

#include "core/storage.h"

namespace torch_neuronx {

bool same_layout(c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::IntArrayRef other_sizes,
                 c10::IntArrayRef other_strides) {
  if (sizes != other_sizes) return false;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] > 1 && strides[d] != other_strides[d]) return false;
  }
  return true;
}

at::Tensor make_cpu_tensor(c10::Storage storage, caffe2::TypeMeta dtype, c10::IntArrayRef sizes,
                           c10::IntArrayRef strides, int64_t offset) {
  auto impl =
      c10::make_intrusive<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CPU), dtype);
  impl->set_sizes_and_strides(sizes, strides, offset);
  return at::Tensor(std::move(impl));
}

c10::Storage cpu_storage_alias(const c10::Storage& s, c10::Allocator* allocator, bool resizable) {
  return c10::Storage(c10::Storage::use_byte_size_t(), s.nbytes(),
                      c10::DataPtr(const_cast<void*>(s.data()), c10::Device(c10::kCPU)), allocator, resizable);
}

namespace {
thread_local ViewScope* innermost = nullptr;

c10::Storage bare_storage(void* base, size_t nbytes) {
  return c10::Storage(c10::Storage::use_byte_size_t(), nbytes, c10::DataPtr(base, c10::Device(c10::kCPU)), nullptr,
                      /*resizable=*/false);
}
}  // namespace

at::Tensor with_bits(at::Tensor v, bool conj, bool neg) {
  if (conj) v.unsafeGetTensorImpl()->_set_conj(true);
  if (neg) v.unsafeGetTensorImpl()->_set_neg(true);
  return v;
}

at::Tensor cpu_view(const at::Tensor& t) {
  if (!t.defined()) return t;
  return with_bits(
      make_cpu_tensor(cpu_storage_alias(t.storage()), t.dtype(), t.sizes(), t.strides(), t.storage_offset()),
      t.is_conj(), t.is_neg());
}

TensorDesc TensorDesc::of(const at::Tensor& t) {
  TensorDesc d;
  if (!t.defined()) return d;
  d.defined = true;
  d.dtype = t.scalar_type();
  if (!is_neuron(t)) {
    d.host_scalar = true;  // the device check admits only 0-dim host tensors here
    d.wrapped_number = t.unsafeGetTensorImpl()->is_wrapped_number();
    d.scalar = t.item();
    return d;
  }
  d.conj = t.is_conj();
  d.neg = t.is_neg();
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
  ViewScope* scope = ViewScope::current();
  c10::Storage storage = scope ? scope->storage_for(base, nbytes) : bare_storage(base, nbytes);
  return with_bits(make_cpu_tensor(std::move(storage), c10::scalarTypeToTypeMeta(dtype), sizes, strides, offset), conj,
                   neg);
}

ViewScope::ViewScope() : outer_(innermost) { innermost = this; }
ViewScope::~ViewScope() { innermost = outer_; }
ViewScope* ViewScope::current() { return innermost; }

c10::Storage ViewScope::storage_for(void* base, size_t nbytes) {
  // Empty storages share no memory, whatever their (null) address says.
  if (base == nullptr || nbytes == 0) return bare_storage(base, nbytes);
  for (const auto& [b, s] : storages_) {
    if (b == base && s.nbytes() == nbytes) return s;
  }
  storages_.emplace_back(base, bare_storage(base, nbytes));
  return storages_.back().second;
}

bool TensorDesc::describes(const at::Tensor& v) const {
  if (!defined || host_scalar) return defined == v.defined();
  return v.defined() && v.storage().data() == base && v.storage_offset() == offset && v.scalar_type() == dtype &&
         same_layout(v.sizes(), v.strides(), sizes, strides);
}

}  // namespace torch_neuronx
