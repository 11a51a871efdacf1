// The shared-memory transport of a process group whose ranks share one host: what the collectives
// of ProcessGroupNeuron run on. It moves bytes and synchronizes; it knows nothing of tensors.
//
// Policy:
// - One segment per group, created by group rank 0, named through the caller's key-value store
//   (the c10d Store), mapped by every rank and unlinked by rank 0 as soon as all have mapped it:
//   nothing is left in /dev/shm on exit or on a crash after construction.
// - A collective is a series of rounds. In a round each rank writes into its own buffer, arrives,
//   waits until every rank has arrived, then reads any rank's buffer. Buffers alternate between two
//   halves by round parity: a rank can only start round r+2 (the same half as r) after round r+1's
//   arrivals, and a rank arrives at r+1 only after it finished reading round r.
// - Device memory is shared: each rank hands the others its devices' memory files (SCM_RIGHTS
//   over abstract unix sockets named through the store; nothing to clean up). Either end checks
//   the other's credentials (our uid, the pid the rank wrote into the segment) and refuses
//   strangers, and the handshake ends by the group's timeout. peer(r, loc)
//   maps rank r's device memory on first use. Collectives publish where their tensors are in a
//   round, then read and write the peers' tensors in place, as DMA between NeuronCores does.
// - Point to point: one channel per ordered pair, two chunks deep; the sender blocks only when
//   the receiver is two chunks behind.
// - Every wait has a deadline (the group's timeout) and watches its peers: a rank whose process
//   died, or that aborted the group, ends the wait at once; past the deadline the error names the
//   ranks that never arrived. Any failure aborts the group for every rank: later calls raise.
// - A wait that lasts longer than a watchdog interval is reported on stderr while it goes on.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace neuronrt {

// A collective that could not complete: a timeout, a dead or aborted peer, a mismatched call.
class CollectiveError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Where a tensor lives: a device of its process and the offset in that device's memory file.
struct Location {
  int32_t device = -1;
  uint64_t offset = 0;
};

struct ShmGroupOptions {
  int rank = 0;
  int size = 1;
  std::string label;  // "group 'default_pg'", for messages
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  size_t buffer_bytes = size_t{256} << 10;  // one half of a rank's round buffer (metadata)
  size_t chunk_bytes = size_t{1} << 20;     // one chunk of a point-to-point channel
  std::vector<int> share_fds;               // this process's device memory files, by device index
  // The rendezvous: a key-value store all ranks share (keys are private to this group).
  std::function<void(const std::string& key, const std::string& value)> store_set;
  std::function<std::string(const std::string& key)> store_get;  // blocks until the key exists
};

class ShmGroup {
 public:
  explicit ShmGroup(ShmGroupOptions options);
  ~ShmGroup();
  ShmGroup(const ShmGroup&) = delete;
  ShmGroup& operator=(const ShmGroup&) = delete;

  int rank() const { return opts_.rank; }
  int size() const { return opts_.size; }
  size_t buffer_bytes() const { return opts_.buffer_bytes; }
  const std::string& label() const { return opts_.label; }

  // Starts a collective named `what`; `signature` (at most 95 bytes: kind, dtype, sizes, op)
  // must be the same on every rank, and is compared in the first round.
  void begin(const std::string& what, const std::string& signature);
  // This rank's buffer for the current round, and rank `r`'s (valid after arrive).
  uint8_t* mine();
  const uint8_t* buffer(int r) const;
  // Publishes this round's buffer and waits for every rank's; the next call to mine() is the
  // next round's buffer.
  void arrive();
  void end();

  // Rank r's device memory at `where` (this rank's too, through a second mapping).
  uint8_t* peer(int r, const Location& where);

  // Point to point, outside collectives: may run on another thread than the collectives (a
  // rank's sends must not wait behind its own receives), one thread for sends, one for receives.
  void send(int dst, const void* data, size_t bytes);
  void recv(int src, void* data, size_t bytes);

  // The deadline of every later wait (torch.distributed's _set_pg_timeout); any thread.
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ms_.store(timeout.count()); }
  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(timeout_ms_.load()); }

  // Marks the group unusable for every rank, with a reason the others report.
  void abort(const std::string& reason);
  // Non-empty once the group has been aborted (by any rank).
  std::string aborted_reason() const;

 private:
  struct Header;
  struct RankState;
  struct Channel;
  template <class Ready, class Missing>
  void wait(Ready ready, Missing missing, const char* waiting_for, const std::string& what);
  void fail(const std::string& message);
  void check_signatures();
  void exchange_fds();
  // Takes one rank's device memory files from an accepted connection; empty, or why it was refused.
  std::string receive_fds(int fd, const std::vector<int>& missing, int wait_ms);
  RankState* state(int r) const;
  Channel& channel(int src, int dst) const;
  uint8_t* chunk(int src, int dst, uint64_t index) const;

  ShmGroupOptions opts_;
  std::atomic<int64_t> timeout_ms_{opts_.timeout.count()};  // opts_.timeout, then as set_timeout sets it
  uint8_t* base_ = nullptr;
  size_t bytes_ = 0;
  size_t ranks_at_ = 0, channels_at_ = 0, buffers_at_ = 0, chunks_at_ = 0;  // offsets in the segment
  Header* header_ = nullptr;
  uint64_t round_ = 0;                      // the current round (rounds count from 1)
  uint64_t first_round_ = 0;                // of the collective in progress
  uint64_t collectives_ = 0;                // started on this group, for messages (collectives' thread)
  std::string what_;                        // the collective in progress (collectives' thread)
  std::vector<uint64_t> sent_, received_;   // chunks per peer, point to point
  std::vector<std::vector<int>> peer_fds_;  // [rank][device], received (ours: dup'ed)
  std::vector<std::vector<std::pair<uint8_t*, size_t>>> peer_maps_;  // mapped on first use
};

}  // namespace neuronrt
