// The shared-memory transport, with threads standing in for the ranks of a group (the segment and
// its protocol are the same across processes; dead processes are tested from Python).
#include "neuronrt/shm_group.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <condition_variable>
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

}  // namespace

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
