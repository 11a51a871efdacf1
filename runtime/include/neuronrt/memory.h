// Device memory of one logical core: an address range the size of its HBM, reserved from the
// OS lazily (the host has far less RAM than the profile's HBM) with the capacity enforced.
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

  explicit DeviceMemory(uint64_t capacity);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  // nullptr when the request does not fit in what is left (the caller reports OOM).
  void* allocate(size_t bytes);
  void free(void* ptr);

  uint64_t capacity() const { return capacity_; }
  uint64_t used() const;
  uint64_t largest_free() const;
  bool contains(const void* ptr) const;

  // Sanitizer support: make the whole range inaccessible (or accessible) to the process.
  void set_host_access(bool accessible);

 private:
  void reserve_locked();
  void insert_free_locked(uint64_t offset, uint64_t size);
  void erase_free_locked(uint64_t offset, uint64_t size);

  const uint64_t capacity_;
  char* base_ = nullptr;
  bool protected_ = false;
  mutable std::mutex mu_;
  uint64_t used_ = 0;
  std::map<uint64_t, uint64_t> free_by_offset_;           // offset -> size
  std::set<std::pair<uint64_t, uint64_t>> free_by_size_;  // (size, offset)
  std::unordered_map<uint64_t, uint64_t> live_;           // offset -> size
};

}  // namespace neuronrt
