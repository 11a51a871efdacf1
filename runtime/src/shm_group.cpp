#include "neuronrt/shm_group.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define NEURONRT_SPIN() _mm_pause()
#else
#define NEURONRT_SPIN() std::this_thread::yield()
#endif

namespace neuronrt {

constexpr uint64_t kMagic = 0x6e6575726f6e7831ull;  // "neuronx1"
constexpr size_t kSignatureBytes = 96;
constexpr size_t kReasonBytes = 1024;

struct ShmGroup::Header {
  uint64_t magic;
  uint64_t size, buffer_bytes, chunk_bytes;
  std::atomic<int32_t> aborted;  // 0, 1 while the reason is written, 2 once it can be read
  int32_t abort_rank;
  char reason[kReasonBytes];
};

// One rank's arrival counter and the signatures of its collectives, two deep by round parity (a
// fast rank may start its next collective while a slow one still reads the last signature).
struct ShmGroup::RankState {
  alignas(64) std::atomic<uint64_t> arrived;
  std::atomic<int32_t> pid;
  char signature[2][kSignatureBytes];
};

struct ShmGroup::Channel {
  alignas(64) std::atomic<uint64_t> sent;   // chunks written by the sender
  alignas(64) std::atomic<uint64_t> taken;  // chunks read by the receiver
  uint64_t message_bytes[2];                // the size of the message each chunk belongs to
};

namespace {

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared-memory counters must be lock free");

size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

struct Layout {
  size_t ranks, channels, buffers, chunks, total;
  Layout(size_t n, size_t buffer_bytes, size_t chunk_bytes) {
    ranks = 4096;  // after the header's page
    channels = ranks + align_up(n * 256, 4096);
    buffers = channels + align_up(n * n * 256, 4096);
    chunks = buffers + n * 2 * buffer_bytes;
    total = chunks + n * n * 2 * chunk_bytes;
  }
};

std::string segment_name() {
  static std::atomic<int> counter{0};
  std::random_device rd;
  std::ostringstream s;
  s << "/neuronx-" << getpid() << "-" << counter.fetch_add(1) << "-" << std::hex << rd();
  return s.str();
}

std::string errno_text() { return std::strerror(errno); }

// A pid is gone once kill() cannot find it, or it is a zombie nobody reaped yet.
bool process_gone(int32_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

}  // namespace

ShmGroup::ShmGroup(ShmGroupOptions options) : opts_(std::move(options)) {
  static_assert(sizeof(ShmGroup::RankState) <= 256 && sizeof(ShmGroup::Channel) <= 256, "slots of the segment");
  static_assert(sizeof(ShmGroup::Header) <= 4096, "the header's page");
  if (opts_.size < 1 || opts_.rank < 0 || opts_.rank >= opts_.size) {
    throw std::invalid_argument("neuron: shared-memory group of size " + std::to_string(opts_.size) +
                                " cannot have rank " + std::to_string(opts_.rank));
  }
  const Layout layout(opts_.size, opts_.buffer_bytes, opts_.chunk_bytes);
  bytes_ = layout.total;
  ranks_at_ = layout.ranks;
  channels_at_ = layout.channels;
  buffers_at_ = layout.buffers;
  chunks_at_ = layout.chunks;
  std::string name;
  int fd = -1;
  if (opts_.rank == 0) {
    name = segment_name();
    fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) throw std::runtime_error("neuron: shm_open(" + name + ") failed: " + errno_text());
    // Reserve the pages now: a full /dev/shm would otherwise kill a rank with SIGBUS mid-collective.
    const int err = ftruncate(fd, static_cast<off_t>(bytes_)) != 0 ? errno : posix_fallocate(fd, 0, bytes_);
    if (err != 0) {
      close(fd);
      shm_unlink(name.c_str());
      throw std::runtime_error("neuron: cannot reserve " + std::to_string(bytes_ >> 20) +
                               " MiB of shared memory in /dev/shm for " + opts_.label + ": " + std::strerror(err) +
                               " (a container needs a larger --shm-size)");
    }
    opts_.store_set("neuronx_shm/name", name);
  } else {
    name = opts_.store_get("neuronx_shm/name");
    fd = shm_open(name.c_str(), O_RDWR, 0600);
    if (fd < 0) {
      throw std::runtime_error("neuron: rank " + std::to_string(opts_.rank) + " of " + opts_.label +
                               " cannot open shared memory " + name + ": " + errno_text() +
                               " (are all ranks on one host?)");
    }
  }
  void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    if (opts_.rank == 0) shm_unlink(name.c_str());
    throw std::runtime_error("neuron: mmap of shared memory for " + opts_.label + " failed: " + errno_text());
  }
  base_ = static_cast<uint8_t*>(p);
  header_ = reinterpret_cast<Header*>(base_);
  if (opts_.rank == 0) {
    header_->size = opts_.size;
    header_->buffer_bytes = opts_.buffer_bytes;
    header_->chunk_bytes = opts_.chunk_bytes;
    std::atomic_thread_fence(std::memory_order_release);
    header_->magic = kMagic;
  }
  auto* me = state(opts_.rank);
  me->pid.store(getpid(), std::memory_order_release);
  sent_.assign(opts_.size, 0);
  received_.assign(opts_.size, 0);
  if (opts_.rank != 0) {
    opts_.store_set("neuronx_shm/attached/" + std::to_string(opts_.rank), "1");
  } else {
    try {
      for (int r = 1; r < opts_.size; ++r) opts_.store_get("neuronx_shm/attached/" + std::to_string(r));
    } catch (...) {
      shm_unlink(name.c_str());
      throw;
    }
    shm_unlink(name.c_str());  // every rank holds a mapping: the name is no longer needed
  }
  exchange_fds();
}

namespace {

struct Socket {
  int fd = -1;
  explicit Socket(int f) : fd(f) {}
  ~Socket() {
    if (fd >= 0) close(fd);
  }
};

// An abstract unix socket address: no file, gone when the socket closes.
socklen_t abstract_address(const std::string& name, sockaddr_un& addr) {
  addr = {};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, name.data(), std::min(name.size(), sizeof(addr.sun_path) - 2));
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

constexpr int kMaxSharedFds = 64;

// The process at the other end of a unix socket (for a client socket: the listener's); uid -1 when unknown.
ucred peer_of(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) cred = {0, static_cast<uid_t>(-1), 0};
  return cred;
}

std::string describe(const ucred& cred) {
  return "pid " + std::to_string(cred.pid) + " (uid " + std::to_string(static_cast<int64_t>(cred.uid)) + ")";
}

// One handshake message: the sender's rank and how many files, the files as SCM_RIGHTS.
struct FdMessage {
  int32_t head[2] = {-1, 0};
  iovec iov{head, sizeof(head)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxSharedFds)] = {};
  msghdr msg{};
  FdMessage() {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
  }
  FdMessage(const FdMessage&) = delete;
};

}  // namespace

// Anyone on the host can connect to an abstract socket, and its name is in the store. So a
// connection counts only from a rank's own process: our uid, and the pid that rank wrote into the
// segment (which only our uid can map). Every wait ends at the group's deadline, and a connection
// that is not a rank is closed while the accept loop goes on waiting for the real ones.
void ShmGroup::exchange_fds() {
  const int n = opts_.size;
  peer_fds_.assign(n, {});
  peer_maps_.assign(n, {});
  for (int fd : opts_.share_fds) peer_fds_[opts_.rank].push_back(dup(fd));
  if (n == 1 || opts_.share_fds.empty()) return;
  if (opts_.share_fds.size() > size_t(kMaxSharedFds)) throw std::invalid_argument("neuron: too many devices to share");
  const auto start = std::chrono::steady_clock::now();
  auto left_ms = [&] {
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    return std::clamp<int64_t>((timeout() - waited).count(), 0, INT32_MAX);
  };
  Socket listener(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const std::string name = segment_name().substr(1) + "-fds";
  sockaddr_un addr;
  socklen_t len = abstract_address(name, addr);
  // A long backlog: strangers' connections queued ahead must not make the ranks' connect() wait.
  if (listener.fd < 0 || bind(listener.fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      listen(listener.fd, SOMAXCONN) != 0) {
    throw std::runtime_error("neuron: cannot open a socket to share device memory with " + opts_.label + ": " +
                             errno_text());
  }
  opts_.store_set("neuronx_fds/" + std::to_string(opts_.rank), name);
  // Push ours to every peer: a connection is queued before it is accepted, so no order deadlocks.
  for (int q = 0; q < n; ++q) {
    if (q == opts_.rank) continue;
    len = abstract_address(opts_.store_get("neuronx_fds/" + std::to_string(q)), addr);
    const std::string to = "rank " + std::to_string(q) + " of " + opts_.label;
    Socket s(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const int64_t ms = std::max<int64_t>(left_ms(), 1);  // 0 would mean no limit
    const timeval limit{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>(ms % 1000 * 1000)};
    if (s.fd < 0 || setsockopt(s.fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit)) != 0 ||
        connect(s.fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
      const bool late = errno == EAGAIN || errno == EINPROGRESS;
      throw std::runtime_error("neuron: cannot share device memory with " + to + ": " +
                               (late ? "timed out connecting (timeout " + std::to_string(timeout().count()) +
                                           " ms, set by init_process_group(timeout=...))"
                                     : errno_text() + " (are all ranks in one network namespace?)"));
    }
    // The name came through the store, which others may write: our memory goes to rank q's process only.
    const ucred cred = peer_of(s.fd);
    const int32_t pid = state(q)->pid.load(std::memory_order_acquire);
    if (cred.uid != geteuid() || cred.pid <= 0 || cred.pid != pid) {
      throw std::runtime_error("neuron: will not share device memory with " + to +
                               ": the socket named for it belongs to " + describe(cred) + ", not to rank " +
                               std::to_string(q) + "'s process (pid " + std::to_string(pid) + ", uid " +
                               std::to_string(geteuid()) + ")");
    }
    FdMessage m;
    m.head[0] = opts_.rank;
    m.head[1] = static_cast<int32_t>(opts_.share_fds.size());
    m.msg.msg_controllen = CMSG_SPACE(sizeof(int) * opts_.share_fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * opts_.share_fds.size());
    std::memcpy(CMSG_DATA(c), opts_.share_fds.data(), sizeof(int) * opts_.share_fds.size());
    if (sendmsg(s.fd, &m.msg, MSG_NOSIGNAL) < 0) {
      throw std::runtime_error("neuron: cannot share device memory with " + to + ": " + errno_text());
    }
  }
  int rejected = 0;
  std::string last_rejected;
  for (;;) {
    std::vector<int> missing;
    for (int r = 0; r < n; ++r)
      if (r != opts_.rank && peer_fds_[r].empty()) missing.push_back(r);
    if (missing.empty()) return;
    pollfd p{listener.fd, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(left_ms()));
    if ((ready < 0 && errno == EINTR) || (ready == 0 && left_ms() > 0)) continue;  // a timeout past poll's range
    if (ready <= 0) {
      throw std::runtime_error(
          "neuron: " + opts_.label + ": timed out after " + std::to_string(timeout().count()) +
          " ms waiting for rank(s) " + rank_list(missing) +
          " to share their device memory (timeout set by init_process_group(timeout=...))" +
          (rejected ? "; meanwhile " + std::to_string(rejected) +
                          " connection(s) from processes that are not ranks of the group were refused, the last: " +
                          last_rejected
                    : std::string()));
    }
    Socket c(accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC));
    if (c.fd < 0) {
      if (errno == ECONNABORTED || errno == EINTR || errno == EAGAIN) continue;
      throw std::runtime_error("neuron: " + opts_.label +
                               ": cannot accept the other ranks' device memory: " + errno_text());
    }
    if (const std::string why = receive_fds(c.fd, missing, static_cast<int>(left_ms())); !why.empty()) {
      if (rejected++ == 0) {
        std::fprintf(stderr, "neuron: %s: refused a connection to its device memory socket: %s\n", opts_.label.c_str(),
                     why.c_str());
      }
      last_rejected = why;
    }
  }
}

std::string ShmGroup::receive_fds(int fd, const std::vector<int>& missing, int wait_ms) {
  // Judged before reading anything: a stranger that sends nothing costs no wait.
  const ucred cred = peer_of(fd);
  if (cred.uid != geteuid()) return describe(cred) + ", another user than this rank's uid " + std::to_string(geteuid());
  auto is_missing_rank = [&](int r) {
    return cred.pid > 0 && std::find(missing.begin(), missing.end(), r) != missing.end() &&
           cred.pid == state(r)->pid.load(std::memory_order_acquire);
  };
  if (std::none_of(missing.begin(), missing.end(), is_missing_rank)) {
    return describe(cred) + ", not the process of rank(s) " + rank_list(missing);
  }
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, wait_ms) <= 0) return describe(cred) + ", a rank's process, sent nothing in time";
  FdMessage m;
  const ssize_t got = recvmsg(fd, &m.msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  std::vector<int> fds;
  for (cmsghdr* cm = got < 0 ? nullptr : CMSG_FIRSTHDR(&m.msg); cm != nullptr; cm = CMSG_NXTHDR(&m.msg, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    const size_t at = fds.size();
    fds.resize(at + count);
    std::memcpy(fds.data() + at, CMSG_DATA(cm), count * sizeof(int));
  }
  const int from = m.head[0];
  std::string why;
  if (got != sizeof(m.head) || (m.msg.msg_flags & MSG_CTRUNC) || fds.empty() || fds.size() != size_t(m.head[1])) {
    why = describe(cred) + " sent a malformed device memory handshake";
  } else if (!is_missing_rank(from)) {
    why = describe(cred) + " claimed to be rank " + std::to_string(from) +
          ", which it is not (or that rank was heard from already)";
  }
  if (!why.empty()) {
    for (int f : fds) close(f);
    return why;
  }
  peer_fds_[from] = std::move(fds);
  return {};
}

uint8_t* ShmGroup::peer(int r, const Location& where) {
  if (r < 0 || r >= opts_.size || where.device < 0 || size_t(where.device) >= peer_fds_[r].size()) {
    throw std::invalid_argument("neuron: " + opts_.label + ": rank " + std::to_string(r) + " has no shared device " +
                                std::to_string(where.device));
  }
  auto& maps = peer_maps_[r];
  if (maps.size() <= size_t(where.device)) maps.resize(where.device + 1, {nullptr, 0});
  auto& [base, size] = maps[where.device];
  if (base == nullptr) {
    const int fd = peer_fds_[r][where.device];
    struct stat st{};
    void* p = fstat(fd, &st) == 0 ? mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0)
                                  : MAP_FAILED;
    if (p == MAP_FAILED) {
      throw std::runtime_error("neuron: cannot map the device memory of rank " + std::to_string(r) + ": " +
                               errno_text());
    }
    base = static_cast<uint8_t*>(p);
    size = st.st_size;
  }
  return base + where.offset;
}

ShmGroup::~ShmGroup() {
  if (base_ != nullptr) munmap(base_, bytes_);
  for (auto& maps : peer_maps_)
    for (auto& [base, size] : maps)
      if (base != nullptr) munmap(base, size);
  for (auto& fds : peer_fds_)
    for (int fd : fds) close(fd);
}

ShmGroup::RankState* ShmGroup::state(int r) const {
  return reinterpret_cast<RankState*>(base_ + ranks_at_ + 256 * size_t(r));
}

ShmGroup::Channel& ShmGroup::channel(int src, int dst) const {
  return *reinterpret_cast<Channel*>(base_ + channels_at_ + 256 * (size_t(src) * opts_.size + dst));
}

uint8_t* ShmGroup::chunk(int src, int dst, uint64_t index) const {
  return base_ + chunks_at_ + ((size_t(src) * opts_.size + dst) * 2 + index % 2) * opts_.chunk_bytes;
}

uint8_t* ShmGroup::mine() {
  return base_ + buffers_at_ + (size_t(opts_.rank) * 2 + (round_ + 1) % 2) * opts_.buffer_bytes;
}

const uint8_t* ShmGroup::buffer(int r) const {
  return base_ + buffers_at_ + (size_t(r) * 2 + round_ % 2) * opts_.buffer_bytes;
}

std::string ShmGroup::aborted_reason() const {
  if (header_ == nullptr || header_->aborted.load(std::memory_order_acquire) == 0) return {};
  while (header_->aborted.load(std::memory_order_acquire) != 2) std::this_thread::yield();
  return "rank " + std::to_string(header_->abort_rank) + " aborted " + opts_.label + ": " + header_->reason;
}

void ShmGroup::abort(const std::string& reason) {
  int32_t expected = 0;
  if (!header_->aborted.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) return;
  header_->abort_rank = opts_.rank;
  std::snprintf(header_->reason, kReasonBytes, "%s", reason.c_str());
  header_->aborted.store(2, std::memory_order_release);
}

void ShmGroup::fail(const std::string& message) {
  abort(message);
  throw CollectiveError(message);
}

void ShmGroup::begin(const std::string& what, const std::string& signature) {
  if (const std::string why = aborted_reason(); !why.empty()) {
    throw CollectiveError("neuron: " + what + " on " + opts_.label + " cannot run: the group is unusable since " + why);
  }
  what_ = what;
  ++collectives_;
  first_round_ = round_ + 1;
  auto* me = state(opts_.rank);
  std::snprintf(me->signature[first_round_ % 2], kSignatureBytes, "%s", signature.c_str());
}

void ShmGroup::arrive() {
  const uint64_t round = ++round_;
  state(opts_.rank)->arrived.store(round, std::memory_order_release);
  auto arrived = [&](int r) { return state(r)->arrived.load(std::memory_order_acquire) >= round; };
  wait(
      [&] {
        for (int r = 0; r < opts_.size; ++r)
          if (!arrived(r)) return false;
        return true;
      },
      [&] {
        std::vector<int> missing;
        for (int r = 0; r < opts_.size; ++r)
          if (!arrived(r)) missing.push_back(r);
        return missing;
      },
      "to join", what_);
  if (round == first_round_) check_signatures();
}

void ShmGroup::end() { what_.clear(); }

void ShmGroup::check_signatures() {
  auto signature = [&](int r) { return std::string(state(r)->signature[first_round_ % 2]); };
  const std::string own = signature(opts_.rank);
  for (int r = 0; r < opts_.size; ++r) {
    if (const std::string other = signature(r); other != own) {
      // Every rank sees the same mismatch and fails; none waits for the others.
      fail("neuron: mismatched collectives on " + opts_.label + " (collective #" + std::to_string(collectives_) +
           "): rank " + std::to_string(opts_.rank) + " called " + own + ", rank " + std::to_string(r) + " called " +
           other);
    }
  }
}

template <class Ready, class Missing>
void ShmGroup::wait(Ready ready, Missing missing, const char* waiting_for, const std::string& what) {
  if (ready()) return;
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto timeout = this->timeout();  // a wait keeps the deadline it started with
  const auto watchdog = std::max<std::chrono::milliseconds>(
      std::chrono::seconds(1), std::min<std::chrono::milliseconds>(std::chrono::minutes(1), timeout / 4));
  auto next_report = start + watchdog;
  auto next_peer_check = start;
  auto where = [&] {
    return what + " on " + opts_.label + " (rank " + std::to_string(opts_.rank) + " of " + std::to_string(opts_.size) +
           // Only a collective (called with what_ itself) numbers itself: sends and receives run on
           // other threads and must not read the collectives' counters.
           (&what == &what_ ? ", collective #" + std::to_string(collectives_) : std::string()) + ")";
  };
  for (uint64_t spins = 0;; ++spins) {
    if (ready()) return;
    if (spins < 4096) {
      NEURONRT_SPIN();
      continue;
    }
    // Past the first spins the peers are slow: give the core away (ranks may outnumber cores).
    const auto now = Clock::now();
    if (now - start < std::chrono::milliseconds(2)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if (now < next_peer_check) continue;
    next_peer_check = now + std::chrono::milliseconds(20);
    if (const std::string why = aborted_reason(); !why.empty()) {
      throw CollectiveError("neuron: " + where() + " failed: " + why);
    }
    for (int r : missing()) {
      const int32_t pid = state(r)->pid.load();
      if (process_gone(pid)) {
        // A rank that aborted the group and then exited (between this loop's two checks, on a
        // busy host) is reported by its reason, which says more than its exit.
        if (const std::string why = aborted_reason(); !why.empty()) {
          throw CollectiveError("neuron: " + where() + " failed: " + why);
        }
        fail("neuron: " + where() + " failed: rank " + std::to_string(r) + " (pid " + std::to_string(pid) +
             ") exited before joining it");
      }
    }
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - start);
    if (waited >= timeout) {
      fail("neuron: " + where() + " timed out after " + std::to_string(waited.count()) + " ms waiting for rank(s) " +
           rank_list(missing()) + " " + waiting_for + " (timeout " + std::to_string(timeout.count()) +
           " ms, set by init_process_group(timeout=...) or _set_pg_timeout)");
    }
    if (now >= next_report) {
      next_report += watchdog;
      std::fprintf(stderr, "neuron watchdog: %s has waited %.1f s for rank(s) %s %s (timeout %.1f s)\n",
                   where().c_str(), waited.count() / 1e3, rank_list(missing()).c_str(), waiting_for,
                   timeout.count() / 1e3);
    }
  }
}

void ShmGroup::send(int dst, const void* data, size_t bytes) {
  const std::string what = "send to rank " + std::to_string(dst);
  if (const std::string why = aborted_reason(); !why.empty()) {
    throw CollectiveError("neuron: " + what + " on " + opts_.label + " cannot run: the group is unusable since " + why);
  }
  Channel& ch = channel(opts_.rank, dst);
  const size_t n = std::max<size_t>(1, (bytes + opts_.chunk_bytes - 1) / opts_.chunk_bytes);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t index = sent_[dst];
    wait([&] { return ch.taken.load(std::memory_order_acquire) + 2 > index; }, [&] { return std::vector<int>{dst}; },
         "to receive", what);
    const size_t off = i * opts_.chunk_bytes;
    const size_t len = std::min(opts_.chunk_bytes, bytes - std::min(bytes, off));
    if (len) std::memcpy(chunk(opts_.rank, dst, index), static_cast<const uint8_t*>(data) + off, len);
    ch.message_bytes[index % 2] = bytes;
    ch.sent.store(index + 1, std::memory_order_release);
    sent_[dst] = index + 1;
  }
}

void ShmGroup::recv(int src, void* data, size_t bytes) {
  const std::string what = "recv from rank " + std::to_string(src);
  if (const std::string why = aborted_reason(); !why.empty()) {
    throw CollectiveError("neuron: " + what + " on " + opts_.label + " cannot run: the group is unusable since " + why);
  }
  Channel& ch = channel(src, opts_.rank);
  const size_t n = std::max<size_t>(1, (bytes + opts_.chunk_bytes - 1) / opts_.chunk_bytes);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t index = received_[src];
    wait([&] { return ch.sent.load(std::memory_order_acquire) > index; }, [&] { return std::vector<int>{src}; },
         "to send", what);
    if (ch.message_bytes[index % 2] != bytes) {
      fail("neuron: " + what + " on " + opts_.label + ": rank " + std::to_string(opts_.rank) + " expects " +
           std::to_string(bytes) + " bytes from rank " + std::to_string(src) + ", which sent " +
           std::to_string(ch.message_bytes[index % 2]));
    }
    const size_t off = i * opts_.chunk_bytes;
    const size_t len = std::min(opts_.chunk_bytes, bytes - std::min(bytes, off));
    if (len) std::memcpy(static_cast<uint8_t*>(data) + off, chunk(src, opts_.rank, index), len);
    ch.taken.store(index + 1, std::memory_order_release);
    received_[src] = index + 1;
  }
}

}  // namespace neuronrt
