// Device memory of one logical core. Its capacity (the profile's HBM) is enforced in bytes; its
// addresses come from a range several times larger, reserved from the OS lazily (the host has far
// less RAM than the profile's HBM). An allocation therefore needs free capacity, not a free
// contiguous range of it: like a device with an MMU, freeing every other block and then asking
// for one twice their size works as long as the bytes are free.
//
// The range is a memory file (memfd) mapped shared, so other processes of a job can map the same
// device memory, as NeuronCores of one instance reach each other's HBM by DMA: collectives read
// and write their peers' tensors in place (ShmGroup::peer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

namespace neuronrt {

class DeviceMemory {
 public:
  static constexpr size_t kAlignment = 512;
  // Addresses per byte of capacity: room to place blocks without compacting.
  static constexpr uint64_t kAddressSlack = 4;
  // The most device memory one core may have: its address range (kAddressSlack times it) stays a
  // small part of the host's 128 TiB of user address space.
  static constexpr uint64_t kMaxCapacity = 1ull << 40;

  // `device` names the core in errors.
  explicit DeviceMemory(uint64_t capacity, int device = 0);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  // nullptr when the request does not fit in what is left (the caller reports OOM).
  void* allocate(size_t bytes);
  void free(void* ptr);

  uint64_t capacity() const { return capacity_; }
  uint64_t used() const;
  // The largest allocation that would succeed now.
  uint64_t largest_free() const;
  bool contains(const void* ptr) const;
  // Offset of `ptr` in this memory's file (the address a peer process maps it at, plus offset).
  uint64_t offset_of(const void* ptr) const;
  // The memory file, for peers to map (reserves the range on first use); owned by this object.
  int share_fd();

  // Sanitizer support: make the whole range inaccessible (or accessible) to the process.
  void set_host_access(bool accessible);

 private:
  void reserve_locked();
  void insert_free_locked(uint64_t offset, uint64_t size);
  void erase_free_locked(uint64_t offset, uint64_t size);

  const uint64_t capacity_;
  const int device_;
  // Address range: capacity_ * kAddressSlack, or less where the process's address-space limit
  // (ulimit -v) is lower; set once, when the range is reserved.
  uint64_t range_ = 0;
  char* base_ = nullptr;
  int fd_ = -1;
  int owner_pid_ = 0;  // the process that made the file (a forked child only keeps books)
  bool protected_ = false;
  mutable std::mutex mu_;
  uint64_t used_ = 0;
  std::map<uint64_t, uint64_t> free_by_offset_;           // offset -> size
  std::set<std::pair<uint64_t, uint64_t>> free_by_size_;  // (size, offset)
  std::unordered_map<uint64_t, uint64_t> live_;           // offset -> size
};

}  // namespace neuronrt
