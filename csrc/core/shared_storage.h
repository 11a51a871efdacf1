// Neuron storages shared with other processes of the host (torch.multiprocessing), on the
// runtime's device-memory sharing (neuronrt/ipc.h): the same pages, so writes are visible both
// ways; the producer keeps a block alive while a consumer holds it.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace torch_neuronx {

struct ShareHandle {
  int mem_fd;       // the device memory file (owned by the runtime or the mapping: dup it to send)
  uint64_t offset;  // of the storage's bytes in that file
  uint64_t bytes;
  int counters_fd;  // the producer's share counters file (owned likewise)
  int slot;         // the storage's count in it, already counting the message that carries this
  bool own_slot;    // the slot is this process's: it keeps the storage until the count is 0
};

// Shares a neuron storage: this process's device memory, or a block received from another
// process (shared again: one more reference). Raises for any other storage.
ShareHandle share_storage(const c10::Storage& storage);

// A neuron tensor over a block another process shared (it maps the block; the fds are only read).
at::Tensor open_shared_tensor(int mem_fd, uint64_t offset, uint64_t bytes, int counters_fd, int slot,
                              c10::DeviceIndex device, c10::ScalarType dtype, c10::IntArrayRef sizes,
                              c10::IntArrayRef strides, int64_t storage_offset);

}  // namespace torch_neuronx
