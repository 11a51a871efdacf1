// Copies between host and device and across devices, as queued DMA-style tasks. Pageable host
// memory copies synchronously; pinned memory with non_blocking=True copies asynchronously.
#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "core/allocator.h"
#include "core/storage.h"

namespace torch_neuronx {
namespace {

bool is_neuron(const at::Tensor& t) { return t.device().type() == kNeuron; }

bool same_layout(const at::Tensor& a, const at::Tensor& b) {
  return a.dtype() == b.dtype() && a.sizes() == b.sizes() && a.is_contiguous() && b.is_contiguous();
}

// CPU-side view of a host tensor's memory that shares no ownership (the caller waits for the
// task, or the memory is pinned, whose free waits for the devices).
at::Tensor host_view(const at::Tensor& t) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(cpu_storage_alias(t.storage()),
                                                   c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
  impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  return at::Tensor(std::move(impl));
}

void queue_copy(const at::Tensor& dst, const at::Tensor& src, c10::DeviceIndex device, int direction,
                bool wait) {
  auto& q = current_queue(device);
  const size_t bytes = dst.numel() * dst.element_size();
  checked([&] {
    if (same_layout(dst, src)) {
      runtime().copy_async(q, dst.data_ptr(), src.const_data_ptr(), bytes, direction);
    } else {
      q.submit("aten::copy_", [d = host_view(dst), s = host_view(src)]() mutable { d.copy_(s); });
    }
    if (wait) q.synchronize();
  });
}

at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  TORCH_CHECK(self.defined() && src.defined(), "neuron: copy_ of an undefined tensor");
  if (self.is_same(src) || self.numel() == 0) return self;
  at::assert_no_internal_overlap(self);
  if (is_neuron(self) && is_neuron(src)) {
    const auto dev = self.device().index();
    if (src.device().index() != dev) {
      // The source device's work must be done before the destination stream reads it.
      checked([&] { current_queue(src.device().index()).synchronize(); });
    }
    auto& q = current_queue(dev);
    checked([&] {
      if (same_layout(self, src)) {
        runtime().copy_async(q, self.data_ptr(), src.const_data_ptr(), self.nbytes(),
                             neuronrt::Runtime::kDeviceToDevice);
      } else {
        q.submit("aten::copy_", [d = cpu_view(self), s = cpu_view(src)]() mutable { d.copy_(s); });
      }
    });
    return self;
  }
  if (is_neuron(self)) {
    TORCH_CHECK(src.device().is_cpu(), "neuron: cannot copy from ", src.device(), " to ", self.device());
    const bool pinned = is_pinned_ptr(src.const_data_ptr());
    at::Tensor host = src;
    bool converted = false;
    if (src.dtype() != self.dtype() || src.sizes() != self.sizes()) {
      // Conversion happens on the host, into a buffer the copy reads before this returns.
      host = src.to(self.scalar_type()).expand(self.sizes()).contiguous();
      converted = true;
    }
    queue_copy(self, host, self.device().index(), neuronrt::Runtime::kHostToDevice,
               /*wait=*/converted || !pinned || !non_blocking);
    return self;
  }
  TORCH_CHECK(self.device().is_cpu() && is_neuron(src), "neuron: cannot copy from ", src.device(), " to ",
              self.device());
  const bool pinned = is_pinned_ptr(self.const_data_ptr());
  auto& q = current_queue(src.device().index());
  checked([&] {
    if (same_layout(self, src)) {
      runtime().copy_async(q, self.data_ptr(), src.const_data_ptr(), self.nbytes(),
                           neuronrt::Runtime::kDeviceToHost);
    } else {
      q.submit("aten::copy_", [d = host_view(self), s = cpu_view(src)]() mutable { d.copy_(s); });
    }
    if (!(pinned && non_blocking)) q.synchronize();
  });
  return self;
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  at::Tensor d = dst;
  copy_(d, self, non_blocking);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::native::resize_output(dst, self.sizes());
  at::Tensor d = dst;
  copy_(d, self, false);
  return dst;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("copy_", TORCH_FN(copy_));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
}

}  // namespace torch_neuronx
