// The shared-memory transport, with threads standing in for the ranks of a group (the segment and
// its protocol are the same across processes; dead processes are tested from Python).
#include "neuronrt/shm_group.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace neuronrt;

namespace {

// The c10d Store's role: set, and a get that blocks until the key exists.
struct Store {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, std::string> kv;
};

ShmGroupOptions options(Store& store, int rank, int size, std::chrono::milliseconds timeout = std::chrono::seconds(20),
                        std::vector<int> fds = {}) {
  ShmGroupOptions o;
  o.rank = rank;
  o.size = size;
  o.label = "group 'test'";
  o.timeout = timeout;
  o.buffer_bytes = 4096;
  o.chunk_bytes = 1024;
  o.share_fds = std::move(fds);
  o.store_set = [&store](const std::string& k, const std::string& v) {
    std::lock_guard<std::mutex> lock(store.mu);
    store.kv[k] = v;
    store.cv.notify_all();
  };
  o.store_get = [&store](const std::string& k) {
    std::unique_lock<std::mutex> lock(store.mu);
    store.cv.wait(lock, [&] { return store.kv.count(k) > 0; });
    return store.kv[k];
  };
  return o;
}

// Runs `body(group)` on `size` threads, one rank each; returns each rank's exception text.
template <class Body>
std::vector<std::string> run_ranks(int size, Body body, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  Store store;
  std::vector<std::string> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        ShmGroup g(options(store, r, size, timeout));
        body(g);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

int neuronx_segments() {
  int n = 0;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) n += std::strncmp(e->d_name, "neuronx-", 8) == 0;
    closedir(d);
  }
  return n;
}

// A process that is no rank (a fork: another pid) at the device-memory socket `name`: with `claim`
// it sends what rank 1 would, with a memory file of its own; else nothing. It holds the connection
// until the rank closes it. Returns once it is connected.
pid_t connect_stranger(const std::string& name, bool claim) {
  int ready[2];
  if (pipe(ready) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {  // only system calls here: other threads may hold locks the child inherits
    alarm(30);
    const int s = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path + 1, name.data(), name.size());
    const socklen_t len = offsetof(sockaddr_un, sun_path) + 1 + name.size();
    if (connect(s, reinterpret_cast<sockaddr*>(&addr), len) != 0) _exit(1);
    if (claim) {
      int fd = memfd_create("stranger", 0);
      if (ftruncate(fd, 1 << 20) != 0) _exit(1);
      int32_t head[2] = {1, 1};
      iovec iov{head, sizeof(head)};
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
      if (sendmsg(s, &msg, 0) < 0) _exit(1);
    }
    if (write(ready[1], "x", 1) != 1) _exit(1);
    char byte;
    while (read(s, &byte, 1) > 0) {
    }
    _exit(0);
  }
  close(ready[1]);
  char byte = 0;
  const bool connected = read(ready[0], &byte, 1) == 1;
  close(ready[0]);
  return connected ? pid : -1;
}

// Two ranks on threads, each with a memory file for device memory (byte 4096 = 10 + rank); rank
// 0's socket has a silent stranger and one that claims to be rank 1 queued before rank 1 learns
// its name. `rank1_late` holds rank 0's name back from rank 1 for that long. Returns each rank's
// exception text, or "" when it read every rank's byte.
std::vector<std::string> meet_past_strangers(std::chrono::milliseconds timeout, std::chrono::milliseconds rank1_late) {
  constexpr size_t kBytes = 1 << 20;
  Store store;
  std::vector<int> fds(2);
  for (int r = 0; r < 2; ++r) {
    fds[r] = memfd_create("test-device", MFD_CLOEXEC);
    EXPECT_EQ(ftruncate(fds[r], kBytes), 0);
    const uint8_t byte = static_cast<uint8_t>(10 + r);
    EXPECT_EQ(pwrite(fds[r], &byte, 1, 4096), 1);
  }
  std::vector<pid_t> strangers;
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        ShmGroupOptions o = options(store, r, 2, timeout, {fds[r]});
        o.store_set = [&, r, set = o.store_set](const std::string& k, const std::string& v) {
          if (r == 0 && k == "neuronx_fds/0") strangers = {connect_stranger(v, false), connect_stranger(v, true)};
          set(k, v);
        };
        o.store_get = [&, r, get = o.store_get](const std::string& k) {
          if (r == 1 && k == "neuronx_fds/0") std::this_thread::sleep_for(rank1_late);
          return get(k);
        };
        ShmGroup g(std::move(o));
        for (int q = 0; q < 2; ++q) {
          if (*g.peer(q, {0, 4096}) != 10 + q) throw std::runtime_error("wrong byte from rank " + std::to_string(q));
        }
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (pid_t pid : strangers) {
    EXPECT_GT(pid, 0) << "a stranger could not connect";
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  for (int fd : fds) close(fd);
  return errors;
}

}  // namespace

TEST(ShmGroup, StrangersAtTheDeviceMemorySocketAreRefusedAndTheRanksStillMeet) {
  const auto start = std::chrono::steady_clock::now();
  const auto errors = meet_past_strangers(std::chrono::seconds(20), std::chrono::milliseconds(0));
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5)) << "a silent stranger held rank 0 up";
}

TEST(ShmGroup, TheDeviceMemoryHandshakeTimesOutNamingTheRefusedStrangers) {
  const auto start = std::chrono::steady_clock::now();
  const auto errors = meet_past_strangers(std::chrono::seconds(1), std::chrono::milliseconds(1500));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  for (const char* part : {"timed out after 1000 ms waiting for rank(s) [1] to share their device memory",
                           "2 connection(s) from processes that are not ranks of the group were refused",
                           "not the process of rank(s) [1]"}) {
    EXPECT_NE(errors[0].find(part), std::string::npos) << errors[0];
  }
}

TEST(ShmGroup, EveryRankReadsEveryRanksBufferEachRound) {
  constexpr int kSize = 3, kRounds = 200;
  auto errors = run_ranks(kSize, [](ShmGroup& g) {
    for (int round = 0; round < kRounds; ++round) {
      g.begin("allgather", "allgather int 1");
      const int value = round * 10 + g.rank();
      std::memcpy(g.mine(), &value, sizeof(value));
      g.arrive();
      for (int r = 0; r < kSize; ++r) {
        int got;
        std::memcpy(&got, g.buffer(r), sizeof(got));
        if (got != round * 10 + r)
          throw std::runtime_error("round " + std::to_string(round) + " read " + std::to_string(got) + " from rank " +
                                   std::to_string(r));
      }
      g.end();
    }
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

TEST(ShmGroup, SegmentIsUnlinkedOnceEveryRankMappedIt) {
  const int before = neuronx_segments();
  auto errors = run_ranks(2, [&](ShmGroup& g) {
    g.begin("barrier", "barrier");
    g.arrive();  // both constructed: rank 0 unlinked before returning
    if (g.rank() == 0 && neuronx_segments() != before) throw std::runtime_error("segment still named");
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(neuronx_segments(), before);
}

TEST(ShmGroup, SendAndRecvAcrossManyChunksAndEmptyMessages) {
  std::vector<uint8_t> data(10 * 1024 + 17);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7);
  std::vector<uint8_t> got(data.size());
  auto errors = run_ranks(2, [&](ShmGroup& g) {
    if (g.rank() == 0) {
      g.send(1, data.data(), data.size());
      g.send(1, nullptr, 0);
    } else {
      g.recv(0, got.data(), got.size());
      g.recv(0, nullptr, 0);
    }
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(got, data);
}

TEST(ShmGroup, MismatchedMessageSizeNamesBoth) {
  auto errors = run_ranks(2, [&](ShmGroup& g) {
    std::vector<uint8_t> buf(64);
    if (g.rank() == 0) {
      g.send(1, buf.data(), 64);
    } else {
      g.begin("recv", "recv");
      g.recv(0, buf.data(), 32);
    }
  });
  EXPECT_NE(errors[1].find("expects 32 bytes from rank 0, which sent 64"), std::string::npos) << errors[1];
}

TEST(ShmGroup, MismatchedCollectivesFailOnEveryRank) {
  auto errors = run_ranks(2, [](ShmGroup& g) {
    g.begin(g.rank() == 0 ? "allreduce" : "broadcast", g.rank() == 0 ? "allreduce float 8 sum" : "broadcast float 8");
    g.arrive();
  });
  for (const auto& e : errors) {
    EXPECT_NE(e.find("mismatched collectives"), std::string::npos) << e;
    EXPECT_NE(e.find("allreduce float 8 sum"), std::string::npos) << e;
    EXPECT_NE(e.find("broadcast float 8"), std::string::npos) << e;
  }
}

TEST(ShmGroup, AMissingRankTimesOutNamedAndTheGroupStaysUnusable) {
  std::string later;
  const auto start = std::chrono::steady_clock::now();
  auto errors = run_ranks(
      2,
      [&](ShmGroup& g) {
        if (g.rank() == 1) return;  // never joins
        g.begin("allreduce", "allreduce float 4 sum");
        try {
          g.arrive();
        } catch (const CollectiveError&) {
          try {
            g.begin("barrier", "barrier");
          } catch (const CollectiveError& e) {
            later = e.what();
          }
          throw;
        }
      },
      std::chrono::milliseconds(300));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_NE(errors[0].find("allreduce on group 'test'"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("timed out"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("rank(s) [1]"), std::string::npos) << errors[0];
  EXPECT_LT(took, std::chrono::seconds(5));
  EXPECT_NE(later.find("unusable"), std::string::npos) << later;
}

TEST(ShmGroup, AnAbortReachesRanksWaitingInACollective) {
  auto errors = run_ranks(3, [](ShmGroup& g) {
    if (g.rank() == 2) {
      g.abort("rank 2 gave up");
      return;
    }
    g.begin("allgather", "allgather");
    g.arrive();  // rank 2 never arrives, but its abort ends the wait long before the timeout
  });
  for (int r : {0, 1}) EXPECT_NE(errors[r].find("rank 2 gave up"), std::string::npos) << errors[r];
}

TEST(ShmGroup, RanksReadAndWriteEachOthersDeviceMemoryInPlace) {
  constexpr int kSize = 3;
  constexpr size_t kBytes = 1 << 20;
  Store store;
  std::vector<int> fds(kSize);
  std::vector<uint8_t*> mem(kSize);
  for (int r = 0; r < kSize; ++r) {  // each rank's "device memory": a memory file it maps
    fds[r] = memfd_create("test-device", MFD_CLOEXEC);
    ASSERT_EQ(ftruncate(fds[r], kBytes), 0);
    mem[r] = static_cast<uint8_t*>(mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[r], 0));
    mem[r][4096] = static_cast<uint8_t>(10 + r);
  }
  std::vector<std::string> errors(kSize);
  std::vector<std::thread> threads;
  for (int r = 0; r < kSize; ++r) {
    threads.emplace_back([&, r] {
      try {
        ShmGroup g(options(store, r, kSize, std::chrono::seconds(20), {fds[r]}));
        g.begin("allgather", "allgather");
        g.arrive();
        for (int q = 0; q < kSize; ++q) {
          if (*g.peer(q, {0, 4096}) != 10 + q) throw std::runtime_error("wrong byte from rank " + std::to_string(q));
        }
        *g.peer((r + 1) % kSize, {0, 8192}) = static_cast<uint8_t>(100 + r);  // write into the next rank
        g.arrive();
        g.end();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kSize; ++r) {
    EXPECT_EQ(errors[r], "");
    EXPECT_EQ(mem[r][8192], 100 + (r + kSize - 1) % kSize);
    munmap(mem[r], kBytes);
    close(fds[r]);
  }
}
