#include "neuronrt/ipc.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace neuronrt {
namespace {

constexpr size_t kCountersBytes = ShareCounters::kSlots * sizeof(int64_t);
constexpr uint64_t kPage = 4096;

std::string errno_text() { return std::strerror(errno); }

int64_t* map_counters(int fd) {
  void* p = mmap(nullptr, kCountersBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw std::runtime_error("neuron: cannot map the share counters: " + errno_text());
  return static_cast<int64_t*>(p);
}

// The counts live in a shared mapping that several processes update (lock-free atomics work
// across processes on the same memory).
int64_t add(int64_t* counts, int slot, int64_t delta) {
  return __atomic_add_fetch(&counts[slot], delta, __ATOMIC_SEQ_CST);
}

}  // namespace

ShareCounters& ShareCounters::mine() {
  // Leaked: consumers may still drop references while this process exits.
  static ShareCounters* c = new ShareCounters();
  return *c;
}

ShareCounters::ShareCounters() {
  fd_ = memfd_create("neuronx-share-counters", MFD_CLOEXEC);
  if (fd_ < 0 || ftruncate(fd_, kCountersBytes) != 0) {
    throw std::runtime_error("neuron: cannot create the share counters file: " + errno_text());
  }
  counts_ = map_counters(fd_);
  free_.reserve(kSlots);
  for (int s = kSlots - 1; s >= 0; --s) free_.push_back(s);
}

int ShareCounters::acquire() {
  std::lock_guard<std::mutex> lock(mu_);
  if (free_.empty()) {
    throw std::runtime_error("neuron: " + std::to_string(kSlots) +
                             " device-memory blocks are shared with other processes and still held there; "
                             "let the receiving processes free the tensors they received");
  }
  const int slot = free_.back();
  free_.pop_back();
  __atomic_store_n(&counts_[slot], 1, __ATOMIC_SEQ_CST);
  return slot;
}

int64_t ShareCounters::count(int slot) const { return __atomic_load_n(&counts_[slot], __ATOMIC_SEQ_CST); }

void ShareCounters::release(int slot) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(slot);
}

MappedBlock::MappedBlock(int mem_fd, uint64_t offset, uint64_t bytes, int counters_fd, int slot)
    : offset_(offset), slot_(slot) {
  if (slot < 0 || slot >= ShareCounters::kSlots) throw std::invalid_argument("neuron: invalid share counter slot");
  const uint64_t start = offset / kPage * kPage;
  map_len_ = static_cast<size_t>((offset + bytes + kPage - 1) / kPage * kPage - start);
  map_ = mmap(nullptr, map_len_, PROT_READ | PROT_WRITE, MAP_SHARED, mem_fd, static_cast<off_t>(start));
  if (map_ == MAP_FAILED) throw std::runtime_error("neuron: cannot map shared device memory: " + errno_text());
  data_ = static_cast<char*>(map_) + (offset - start);
  try {
    counts_ = map_counters(counters_fd);
  } catch (...) {
    munmap(map_, map_len_);
    throw;
  }
  mem_fd_ = dup(mem_fd);
  counters_fd_ = dup(counters_fd);
}

MappedBlock::~MappedBlock() {
  add(counts_, slot_, -1);
  munmap(counts_, kCountersBytes);
  munmap(map_, map_len_);
  close(mem_fd_);
  close(counters_fd_);
}

void MappedBlock::add_reference() { add(counts_, slot_, 1); }

}  // namespace neuronrt
