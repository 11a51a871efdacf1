#include "core/shared_storage.h"

#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>

#include <memory>

#include "core/device.h"
#include "core/errors.h"
#include "neuronrt/ipc.h"

namespace torch_neuronx {
namespace {

void release_mapped(void* ctx) { delete static_cast<neuronrt::MappedBlock*>(ctx); }

}  // namespace

ShareHandle share_storage(const c10::Storage& storage) {
  TORCH_CHECK(storage.device().type() == kNeuron, "neuron: sharing a storage that is not on neuron");
  const c10::DataPtr& p = storage.data_ptr();
  const auto device = storage.device().index();
  if (p.get_deleter() == &release_mapped) {
    auto* block = static_cast<neuronrt::MappedBlock*>(p.get_context());
    block->add_reference();
    return {block->mem_fd(), block->offset(), storage.nbytes(), block->counters_fd(), block->slot(), false};
  }
  auto& memory = runtime().memory(device);
  TORCH_CHECK(memory.contains(p.get()), "neuron: this tensor's memory is not neuron:", static_cast<int>(device),
              "'s device memory, so it cannot be shared with another process; share a clone() of it");
  auto* counters = checked([] { return &neuronrt::ShareCounters::mine(); });
  const int mem_fd = checked([&] { return memory.share_fd(); });
  const int slot = checked([&] { return counters->acquire(); });
  return {mem_fd, memory.offset_of(p.get()), storage.nbytes(), counters->fd(), slot, true};
}

at::Tensor open_shared_tensor(int mem_fd, uint64_t offset, uint64_t bytes, int counters_fd, int slot,
                              c10::DeviceIndex device, c10::ScalarType dtype, c10::IntArrayRef sizes,
                              c10::IntArrayRef strides, int64_t storage_offset) {
  check_device_index(device);
  auto block =
      checked([&] { return std::make_unique<neuronrt::MappedBlock>(mem_fd, offset, bytes, counters_fd, slot); });
  void* data = block->data();
  c10::DataPtr ptr(data, block.release(), &release_mapped, c10::Device(kNeuron, device));
  auto storage = c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), bytes, std::move(ptr),
                                                       /*allocator=*/nullptr, /*resizable=*/false);
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(std::move(storage)),
                                                          c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                          c10::scalarTypeToTypeMeta(dtype));
  t.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides, storage_offset);
  return t;
}

}  // namespace torch_neuronx
