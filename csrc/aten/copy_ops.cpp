// Copies between host and device and across devices, as queued DMA-style tasks. Pageable host
// memory copies synchronously; pinned memory with non_blocking=True copies asynchronously.
#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "core/allocator.h"
#include "core/storage.h"
#include "exec/executor.h"
#include "exec/solo_team.h"
#include "exec/tensor_desc.h"
#include "pipeline/op_record.h"

namespace torch_neuronx {
namespace {

const bool described = (typed_op("aten::copy_",
                                 "a transfer: a copy task on the stream (a memcpy when both layouts "
                                 "are contiguous and alike, else ATen's copy, on the queue worker alone up to "
                                 "2^18 elements); from or to pageable host memory the caller waits for it. "
                                 "Counted in bytes by torch.neuron.transfer_stats(), not as an op")
                            .concatenable = false,
                        true);

bool memcpy_able(const at::Tensor& a, const at::Tensor& b) {
  return a.dtype() == b.dtype() && a.sizes() == b.sizes() && a.is_contiguous() && b.is_contiguous() &&
         a.is_conj() == b.is_conj() && a.is_neg() == b.is_neg();
}

// What a copy task holds of a host tensor: a view of it (the caller keeps the memory alive until
// the task has run: it waits, or the memory is pinned).
struct HostOrDevice {
  TensorDesc desc;
  at::Tensor host;
  at::Tensor view() const { return host.defined() ? host : desc.view(); }
};

HostOrDevice hold(const at::Tensor& t) {
  HostOrDevice h;
  if (is_neuron(t)) {
    h.desc = TensorDesc::of(t);
  } else {
    h.host = cpu_view(t);
  }
  return h;
}

// A memcpy when the layouts agree, else ATen's CPU copy (dtype conversion, strides, broadcasting)
// over views of both sides, as a task on `device`'s current stream.
void queue_copy(const at::Tensor& dst, const at::Tensor& src, c10::DeviceIndex device, int direction, bool wait) {
  TORCH_CHECK(src.const_data_ptr() != nullptr || src.numel() == 0,
              "neuron: copy_ from a tensor without memory (a zero tensor); materialize it first");
  auto& q = current_queue(device);
  checked([&] {
    if (memcpy_able(dst, src)) {
      runtime().copy_async(q, dst.data_ptr(), src.const_data_ptr(), dst.nbytes(), direction);
    } else {
      // Between host and device a transfer (a copy in the trace, as the memcpys are); on the
      // device ATen's strided copy, a kernel as CUDA's is.
      const char* name = direction == neuronrt::Runtime::kHostToDevice   ? "Memcpy HtoD (strided)"
                         : direction == neuronrt::Runtime::kDeviceToHost ? "Memcpy DtoH (strided)"
                                                                         : "aten::copy_";
      // Each element is converted on its own, so a small copy runs alone (exec/solo_team.h).
      q.submit(name, [d = hold(dst), s = hold(src), solo = dst.numel() <= kSoloElements] {
        SoloTeam team(solo);
        d.view().copy_(s.view());
      });
    }
    if (wait) q.synchronize();
  });
}

at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  TORCH_CHECK(self.defined() && src.defined(), "neuron: copy_ of an undefined tensor");
  if (self.is_same(src) || self.numel() == 0) return self;
  at::assert_no_internal_overlap(self);
  if (is_neuron(self) && is_neuron(src)) at::assert_no_partial_overlap(self, src);
  using RT = neuronrt::Runtime;
  if (is_neuron(self) && is_neuron(src)) {
    if (src.device().index() != self.device().index()) {
      // The source device's work must be done before the destination stream reads it.
      checked([&] { current_queue(src.device().index()).synchronize(); });
    }
    queue_copy(self, src, self.device().index(), RT::kDeviceToDevice, /*wait=*/false);
  } else if (is_neuron(self)) {
    TORCH_CHECK(src.device().is_cpu(), "neuron: cannot copy from ", src.device(), " to ", self.device());
    // Pageable host memory may be reused as soon as this returns, so only pinned memory copies
    // asynchronously.
    queue_copy(self, src, self.device().index(), RT::kHostToDevice,
               /*wait=*/!(non_blocking && is_pinned_ptr(src.const_data_ptr())));
  } else {
    TORCH_CHECK(self.device().is_cpu() && is_neuron(src), "neuron: cannot copy from ", src.device(), " to ",
                self.device());
    queue_copy(self, src, src.device().index(), RT::kDeviceToHost,
               /*wait=*/!(non_blocking && is_pinned_ptr(self.const_data_ptr())));
  }
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
