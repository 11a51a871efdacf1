// Device memory shared with other processes of the same host, as CUDA IPC shares device
// allocations: a block is named by its device's memory file and offset, and a consumer maps it
// (same pages: writes are visible both ways). The producer keeps the block alive while consumers
// hold it, through a reference count in a small shared file of the producer (its share
// counters): the producer sets a slot to 1 for the message that carries the block; the consumer
// that receives the message takes that reference over and drops it when it unmaps; sharing a
// received block again adds one for the new message. The producer frees a block (gives its slot
// back) once its count is 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace neuronrt {

class ShareCounters {
 public:
  static constexpr int kSlots = 8192;

  // This process's counters (the file is made on first use).
  static ShareCounters& mine();
  int fd() const { return fd_; }
  // A free slot, its count set to 1; throws when every slot is in use.
  int acquire();
  int64_t count(int slot) const;
  // Gives a slot whose count is 0 back.
  void release(int slot);

 private:
  ShareCounters();
  int fd_ = -1;
  int64_t* counts_ = nullptr;
  std::mutex mu_;
  std::vector<int> free_;
};

// A consumer's mapping of a shared block and its count.
class MappedBlock {
 public:
  // Maps `bytes` at `offset` of the memory file `mem_fd`, and the counters file `counters_fd`;
  // the fds are only used here (the caller closes them).
  MappedBlock(int mem_fd, uint64_t offset, uint64_t bytes, int counters_fd, int slot);
  ~MappedBlock();  // unmaps, dropping the reference
  MappedBlock(const MappedBlock&) = delete;
  MappedBlock& operator=(const MappedBlock&) = delete;

  void* data() const { return data_; }
  // One more reference, for a message that shares this block again.
  void add_reference();
  // What a message sharing this block again carries: dups of the files, the block, its slot.
  int mem_fd() const { return mem_fd_; }
  int counters_fd() const { return counters_fd_; }
  uint64_t offset() const { return offset_; }
  int slot() const { return slot_; }

 private:
  void* map_ = nullptr;
  size_t map_len_ = 0;
  void* data_ = nullptr;
  int64_t* counts_ = nullptr;
  int mem_fd_ = -1, counters_fd_ = -1;  // kept (dup'ed) for sharing the block again
  uint64_t offset_ = 0;
  int slot_ = 0;
};

}  // namespace neuronrt
