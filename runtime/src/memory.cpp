#include "neuronrt/memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

namespace neuronrt {
namespace {

uint64_t round_up(uint64_t n, uint64_t m) { return (n + m - 1) / m * m; }

// Frees of at least this size give their pages back to the OS, so the host's resident memory
// follows what the device holds.
constexpr uint64_t kReleaseThreshold = 1ull << 20;

// What the process's address-space limit (ulimit -v) still lets it map; UINT64_MAX without one.
uint64_t address_space_left(uint64_t* limit) {
  rlimit lim{};
  if (getrlimit(RLIMIT_AS, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return UINT64_MAX;
  *limit = lim.rlim_cur;
  unsigned long long pages = 0;  // statm's first field: the pages mapped now (VmSize)
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%llu", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  const uint64_t mapped = pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return lim.rlim_cur > mapped ? lim.rlim_cur - mapped : 0;
}

}  // namespace

DeviceMemory::DeviceMemory(uint64_t capacity, int device) : capacity_(round_up(capacity, 4096)), device_(device) {
  if (capacity == 0 || capacity > kMaxCapacity) {
    throw std::invalid_argument("neuron runtime: device memory of " + std::to_string(capacity) +
                                " bytes: it must be from 1 to " + std::to_string(kMaxCapacity) + " bytes");
  }
}

DeviceMemory::~DeviceMemory() {
  if (base_) munmap(base_, range_);
  if (fd_ >= 0) close(fd_);
}

void DeviceMemory::reserve_locked() {
  if (base_) return;
  uint64_t range = capacity_ * kAddressSlack, limit = 0;
  const uint64_t left = address_space_left(&limit);
  if (left != UINT64_MAX) {
    // At most half of what the limit leaves: the process's own heap, threads and other devices
    // need the rest. Less slack only means fragmentation runs out of addresses sooner.
    const uint64_t share = left / 2 / 4096 * 4096;
    if (share < capacity_) {
      throw std::runtime_error("neuron runtime: the " + std::to_string(capacity_) +
                               " bytes of device memory of neuron:" + std::to_string(device_) +
                               " do not fit this process's address-space limit (ulimit -v: " + std::to_string(limit) +
                               " bytes, " + std::to_string(left) +
                               " of them unused): set TORCH_NEURONX_HBM_BYTES to at most " +
                               std::to_string(share >> 20) + "MiB, or raise the limit");
    }
    range = std::min(range, share);
  }
  // A sparse file: pages exist once written, as with anonymous memory.
  const int fd = memfd_create("neuronx-device-memory", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(range)) != 0) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) close(fd);
    throw std::runtime_error("neuron runtime: cannot create the device memory file: " + why);
  }
  void* p = mmap(nullptr, range, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (p == MAP_FAILED) {
    const std::string why = std::strerror(errno);
    close(fd);
    throw std::runtime_error("neuron runtime: cannot reserve " + std::to_string(range) +
                             " bytes of address space for the device memory of neuron:" + std::to_string(device_) +
                             ": " + why + " (TORCH_NEURONX_HBM_BYTES sets a smaller device memory)");
  }
  range_ = range;
  // A forked child must not reach the parent's device memory (the mapping is shared, not copied
  // on write): it does not inherit the mapping, and never frees pages of the file (free()).
  madvise(p, range_, MADV_DONTFORK);
  owner_pid_ = getpid();
  fd_ = fd;
  base_ = static_cast<char*>(p);
  insert_free_locked(0, range_);
}

int DeviceMemory::share_fd() {
  std::lock_guard<std::mutex> lock(mu_);
  reserve_locked();
  return fd_;
}

uint64_t DeviceMemory::offset_of(const void* ptr) const {
  if (!contains(ptr)) throw std::invalid_argument("neuron runtime: pointer is not in this device's memory");
  return static_cast<uint64_t>(static_cast<const char*>(ptr) - base_);
}

void DeviceMemory::insert_free_locked(uint64_t offset, uint64_t size) {
  free_by_offset_[offset] = size;
  free_by_size_.insert({size, offset});
}

void DeviceMemory::erase_free_locked(uint64_t offset, uint64_t size) {
  free_by_offset_.erase(offset);
  free_by_size_.erase({size, offset});
}

void* DeviceMemory::allocate(size_t bytes) {
  const uint64_t size = round_up(bytes ? bytes : 1, kAlignment);
  std::lock_guard<std::mutex> lock(mu_);
  if (size > capacity_ - used_) return nullptr;
  reserve_locked();
  auto it = free_by_size_.lower_bound({size, 0});
  if (it == free_by_size_.end()) return nullptr;  // fragmented
  const auto [block_size, offset] = *it;
  erase_free_locked(offset, block_size);
  if (block_size > size) insert_free_locked(offset + size, block_size - size);
  live_[offset] = size;
  used_ += size;
  return base_ + offset;
}

void DeviceMemory::free(void* ptr) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t offset = static_cast<char*>(ptr) - base_;
  auto live = live_.find(offset);
  if (!base_ || live == live_.end()) {
    throw std::invalid_argument("neuron runtime: free of a pointer that is not a live device allocation");
  }
  uint64_t start = offset, size = live->second;
  live_.erase(live);
  used_ -= size;
  if (size >= kReleaseThreshold && !protected_ && getpid() == owner_pid_) {
    // Interior whole pages only: neighbours may share the first and last page.
    const uint64_t lo = round_up(start, 4096), hi = (start + size) / 4096 * 4096;
    // Punching the hole frees the file's pages (dropping the mapping alone would keep them).
    if (hi > lo) fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(lo), hi - lo);
  }
  auto next = free_by_offset_.lower_bound(start);
  if (next != free_by_offset_.end() && next->first == start + size) {
    const uint64_t next_size = next->second;
    erase_free_locked(next->first, next_size);
    size += next_size;
  }
  auto prev = free_by_offset_.lower_bound(start);
  if (prev != free_by_offset_.begin()) {
    --prev;
    if (prev->first + prev->second == start) {
      const uint64_t prev_off = prev->first, prev_size = prev->second;
      erase_free_locked(prev_off, prev_size);
      start = prev_off;
      size += prev_size;
    }
  }
  insert_free_locked(start, size);
}

uint64_t DeviceMemory::used() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_;
}

uint64_t DeviceMemory::largest_free() const {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t left = capacity_ - used_;
  if (!base_) return left;
  return std::min(left, free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first);
}

bool DeviceMemory::contains(const void* ptr) const {
  const char* p = static_cast<const char*>(ptr);
  return base_ && p >= base_ && p < base_ + range_;
}

void DeviceMemory::set_host_access(bool accessible) {
  std::lock_guard<std::mutex> lock(mu_);
  reserve_locked();
  protected_ = !accessible;
  if (mprotect(base_, range_, accessible ? (PROT_READ | PROT_WRITE) : PROT_NONE) != 0) {
    throw std::runtime_error(std::string("neuron runtime: mprotect failed: ") + std::strerror(errno));
  }
}

}  // namespace neuronrt
