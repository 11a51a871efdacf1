// The ops every device needs natively: allocation, views that alias, resize/set_, .item().
#include <ATen/EmptyTensor.h>
#include <ATen/TensorUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/_nested_tensor_size_native.h>
#include <ATen/ops/_nested_tensor_storage_offsets_native.h>
#include <ATen/ops/_nested_tensor_strides_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

#include <cstring>
#include <memory>
#include <vector>

#include "core/allocator.h"
#include "core/storage.h"
#include "exec/executor.h"
#include "pipeline/op_record.h"

namespace torch_neuronx {
namespace {

c10::DeviceIndex device_or_current(std::optional<c10::Device> device) {
  if (!device.has_value() || !device->has_index()) return current_device();
  TORCH_CHECK(device->type() == kNeuron, "neuron: expected a neuron device, got ", *device);
  return device->index();
}

void check_layout(std::optional<c10::Layout> layout) {
  TORCH_CHECK(!layout.has_value() || *layout == c10::kStrided,
              "neuron: only strided tensors are supported, got layout ", *layout);
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  check_layout(layout);
  TORCH_CHECK(!pin_memory.value_or(false), "neuron: only CPU tensors can be pinned");
  return empty_neuron(size, dtype.value_or(c10::get_default_dtype_as_scalartype()), device_or_current(device),
                      memory_format.value_or(c10::MemoryFormat::Contiguous));
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  check_layout(layout);
  TORCH_CHECK(!pin_memory.value_or(false), "neuron: only CPU tensors can be pinned");
  return empty_neuron(size, stride, dtype.value_or(c10::get_default_dtype_as_scalartype()), device_or_current(device));
}

// Makes `self` cover `size`/`stride` at `offset`, growing its storage if needed.
void restride(at::Tensor& self, int64_t offset, c10::IntArrayRef size, std::optional<c10::IntArrayRef> stride) {
  auto* impl = self.unsafeGetTensorImpl();
  if (stride.has_value()) {
    TORCH_CHECK(size.size() == stride->size(), "neuron: size and stride must have the same length");
    impl->set_sizes_and_strides(size, *stride, offset);
  } else {
    impl->set_sizes_contiguous(size);
    impl->set_storage_offset(offset);
  }
  const size_t needed =
      at::detail::computeStorageNbytes(impl->sizes(), impl->strides(), self.dtype().itemsize(), impl->storage_offset());
  if (needed > self.storage().nbytes()) resize_storage_bytes(self.storage().unsafeGetStorageImpl(), needed);
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  at::Tensor t = self;
  if (self.sizes() != size) restride(t, self.storage_offset(), size, std::nullopt);
  if (memory_format.has_value() && *memory_format != c10::MemoryFormat::Preserve) {
    self.unsafeGetTensorImpl()->empty_tensor_restride(*memory_format);
  }
  return self;
}

at::Tensor& set_storage_offset(at::Tensor& self, c10::Storage source, int64_t offset, c10::IntArrayRef size,
                               c10::IntArrayRef stride) {
  TORCH_CHECK(source.device().type() == kNeuron || source.nbytes() == 0,
              "neuron: set_ expects a neuron storage, got one on ", source.device());
  if (self.storage().unsafeGetStorageImpl() != source.unsafeGetStorageImpl()) {
    self.unsafeGetTensorImpl()->set_storage_keep_dtype(std::move(source));
  }
  restride(self, offset, size, stride.empty() ? std::nullopt : std::optional<c10::IntArrayRef>(stride));
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source) {
  const int64_t n = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage_offset(self, std::move(source), 0, {n}, {});
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  if (self.is_same(source)) return self;
  return set_storage_offset(self, source.storage(), source.storage_offset(), source.sizes(), source.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage empty(c10::Storage::use_byte_size_t(), 0, caching_allocator().allocate_on(self.device().index(), 0),
                     &caching_allocator(), true);
  return set_storage_offset(self, std::move(empty), 0, {0}, {});
}

// Zero tensors (autograd's "this gradient is zero") own no memory: the ZeroTensor key makes ops
// treat them as zeros, so their storage is an empty pointer on the device.
struct NoMemoryAllocator final : c10::Allocator {
  c10::Device device;
  explicit NoMemoryAllocator(c10::Device d) : device(d) {}
  c10::DataPtr allocate(size_t) override { return {nullptr, nullptr, &c10::detail::deleteNothing, device}; }
  c10::DeleterFnPtr raw_deleter() const override { return &c10::detail::deleteNothing; }
  void copy_data(void*, const void*, std::size_t) const override {}
};

at::Tensor efficient_zero_tensor(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                                 std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                                 std::optional<bool> pin_memory) {
  check_layout(layout);
  // The storage keeps a pointer to its allocator: one per device, for the process.
  static const std::vector<std::unique_ptr<NoMemoryAllocator>> allocators = [] {
    std::vector<std::unique_ptr<NoMemoryAllocator>> v;
    for (int d = 0; d < device_count(); ++d)
      v.push_back(std::make_unique<NoMemoryAllocator>(c10::Device(kNeuron, static_cast<c10::DeviceIndex>(d))));
    return v;
  }();
  const auto index = device_or_current(device);
  check_device_index(index);
  NoMemoryAllocator& allocator = *allocators[index];
  const auto keys =
      c10::DispatchKeySet(c10::DispatchKey::PrivateUse1) | c10::DispatchKeySet(c10::DispatchKey::ZeroTensor);
  return at::detail::empty_generic(size, &allocator, keys, dtype.value_or(c10::get_default_dtype_as_scalartype()),
                                   std::nullopt);
}

// .item(): a read of device memory, so a copy task the host waits for (counted as a transfer,
// not as an op: every device reads results back this way).
c10::Scalar local_scalar_dense(const at::Tensor& self) {
  auto host = at::empty({}, self.options().device(c10::kCPU));
  void* dst = host.mutable_data_ptr();
  const void* src = self.const_data_ptr();
  const size_t n = self.dtype().itemsize();
  run_sync(self.device().index(), "aten::_local_scalar_dense", [&] { std::memcpy(dst, src, n); });
  runtime().counters().d2h_bytes.fetch_add(n, std::memory_order_relaxed);
  return at::native::_local_scalar_dense_cpu(host);
}

// module.to("neuron") swaps a parameter's data in place (keeping the Parameter object, so an
// optimizer made before the move still holds it) only when this says the two tensors' types are
// compatible, which c10 says for dense tensors of CPU, CUDA and a few others, but not PrivateUse1.
// Dense strided CPU and neuron tensors are as compatible as CPU and CUDA ones.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  const auto dense = [](const at::Tensor& t) {
    return t.layout() == c10::kStrided && !t.is_quantized() && (t.device().is_cpu() || t.device().type() == kNeuron);
  };
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()) || (dense(self) && dense(from));
}

// Tensor.record_stream(s): the block is not reused until work queued on `s` so far has finished.
void record_stream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == kNeuron && stream.device_index() == self.device().index(),
              "record_stream: expected a stream of ", self.device(), ", got one of ", stream.device());
  caching_allocator().recordStream(self.storage().data_ptr(), stream);
}

// Copy-on-write shares a storage until a write copies it, and needs a data pointer that is its
// own context; the allocator's context is its block (allocator.cpp). Refused by name, rather
// than by ATen's internal check on the missing storage.
at::Tensor lazy_clone(const at::Tensor&) {
  TORCH_CHECK_NOT_IMPLEMENTED(false,
                              "neuron: copy-on-write clones (torch._lazy_clone) are not supported on the "
                              "neuron device; use clone()");
}

// For explain(): these run no kernel, so they are never counted.
const bool described = [] {
  for (const char* op : {"aten::empty.memory_format", "aten::empty_strided", "aten::resize_",
                         "aten::set_.source_Storage", "aten::set_.source_Storage_storage_offset",
                         "aten::set_.source_Tensor", "aten::set_", "aten::_efficientzerotensor"}) {
    typed_op(op, "allocation or metadata on the host; no kernel runs");
  }
  for (const char* op : {"aten::as_strided", "aten::view", "aten::_reshape_alias", "aten::unfold", "aten::view_as_real",
                         "aten::view_as_complex"}) {
    typed_op(op, "a view: new metadata over the same device memory; no kernel runs");
  }
  typed_op("aten::_lazy_clone", "refused: copy-on-write storages are not supported on neuron");
  typed_op("aten::record_stream", "allocator bookkeeping: the block waits for the stream's work before reuse");
  typed_op("aten::_has_compatible_shallow_copy_type", "metadata: dense CPU and neuron tensors can swap data in place");
  typed_op("aten::_local_scalar_dense",
           "a transfer: a copy task to host memory that the caller waits for "
           "(counted in bytes by torch.neuron.transfer_stats(), not as an op)");
  return true;
}();

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("unfold", TORCH_FN(at::native::unfold));
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Storage", TORCH_FN(set_storage));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage_offset));
  m.impl("set_.source_Tensor", TORCH_FN(set_tensor));
  m.impl("set_", TORCH_FN(set_empty));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  m.impl("_efficientzerotensor", TORCH_FN(efficient_zero_tensor));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
  m.impl("record_stream", TORCH_FN(record_stream));
  m.impl("_lazy_clone", TORCH_FN(lazy_clone));
}

// A strided-layout nested tensor of neuron tensors: autograd reads its metadata as it records the
// tensor, and without these accessors the error was thrown where nothing catches it (the process
// aborted). The nested tensor's own ops are CPU's and CUDA's only; they raise NotImplementedError
// (jagged nested tensors, built from ordinary ops, are the layout that runs on neuron).
TORCH_LIBRARY_IMPL(aten, NestedTensorPrivateUse1, m) {
  m.impl("_nested_tensor_size", TORCH_FN(at::native::_nested_tensor_size));
  m.impl("_nested_tensor_strides", TORCH_FN(at::native::_nested_tensor_strides));
  m.impl("_nested_tensor_storage_offsets", TORCH_FN(at::native::_nested_tensor_storage_offsets));
}

}  // namespace torch_neuronx
