#include "core/storage.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include <atomic>

#include "core/allocator.h"
#include "neuronrt/config.h"

namespace torch_neuronx {
namespace {

bool strict_mode() {
  static const bool strict = checked([] { return neuronrt::config::flag("TORCH_NEURONX_STRICT"); });
  return strict;
}

std::atomic<bool> warned_f64{false}, warned_complex{false};

}  // namespace

bool dtype_allowed(c10::ScalarType dtype) {
  return !strict_mode() || (dtype != c10::kDouble && !c10::isComplexType(dtype));
}

void check_trainium_dtype(c10::ScalarType dtype) {
  const bool f64 = dtype == c10::kDouble;
  const bool cplx = c10::isComplexType(dtype);
  if (C10_LIKELY(!f64 && !cplx)) return;
  TORCH_CHECK_TYPE(!strict_mode(), "neuron: dtype ", dtype,
                   " is not supported by Trainium (no float64 or complex types on the device); "
                   "TORCH_NEURONX_STRICT=1 makes this an error. Use float32 or bfloat16.");
  // Once per process and kind: a model that uses the type does so at every step (RoPE's complex
  // frequencies), and the user needs the advice once, not the repetition.
  auto& flag = f64 ? warned_f64 : warned_complex;
  if (!flag.exchange(true)) {
    const char* instead =
        f64 ? "Keep device tensors in float32 or bfloat16 (for example .float(), or torch.set_default_dtype"
              "(torch.float32) before building the model)."
            : "Keep complex numbers off the device: write the arithmetic on real tensors (rotary embeddings as "
              "cos/sin products, the rotate-half form transformers' models use, instead of view_as_complex "
              "and polar), or keep that part on the CPU.";
    TORCH_WARN("neuron: dtype ", dtype, " runs on the software device but Trainium cannot run it (it has no ",
               f64 ? "float64" : "complex", " types). ", instead,
               " TORCH_NEURONX_STRICT=1 makes this an error at the first such tensor, as the chip would. "
               "(Said once per process.)");
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
  return at::detail::empty_generic(sizes, &caching_allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   dtype, format);
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
    checked([&] { runtime().copy_async(q, fresh.get(), storage->data(), keep, neuronrt::Runtime::kDeviceToDevice); });
  }
  // The old block returns to the stream's pool; the copy above is ahead of any reuse.
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_nbytes(new_bytes);
}

}  // namespace torch_neuronx
