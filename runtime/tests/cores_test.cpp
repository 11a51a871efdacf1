#include "neuronrt/cores.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

using namespace neuronrt;

// Busy threads beyond the cores make the queues stop polling, and the answer follows the machine
// within its refresh period (so a load that ends gives the polling back).
TEST(Cores, BusyThreadsBeyondTheCoresAreSeenAsContention) {
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  const int cores = CPU_COUNT(&set);
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (int i = 0; i < cores + 3; ++i) {
    busy.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  }
  bool seen = false;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!seen && std::chrono::steady_clock::now() < until) {
    seen = cores_contended();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  stop = true;
  for (auto& t : busy) t.join();
  EXPECT_TRUE(seen);
}
