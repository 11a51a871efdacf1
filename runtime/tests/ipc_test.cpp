#include "neuronrt/ipc.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "neuronrt/memory.h"

using neuronrt::DeviceMemory;
using neuronrt::MappedBlock;
using neuronrt::ShareCounters;

TEST(Ipc, AMappedBlockSeesTheSameMemoryAndDropsItsReference) {
  DeviceMemory mem(1 << 20);
  auto* p = static_cast<char*>(mem.allocate(3000));
  mem.allocate(100);  // an offset that is not page-aligned next
  auto* q = static_cast<char*>(mem.allocate(700));
  std::memset(q, 7, 700);
  auto& counters = ShareCounters::mine();
  const int slot = counters.acquire();
  EXPECT_EQ(counters.count(slot), 1);
  {
    MappedBlock block(mem.share_fd(), mem.offset_of(q), 700, counters.fd(), slot);
    auto* data = static_cast<char*>(block.data());
    EXPECT_EQ(data[0], 7);
    EXPECT_EQ(data[699], 7);
    data[10] = 42;  // seen by the owner
    EXPECT_EQ(q[10], 42);
    block.add_reference();  // shared again
    EXPECT_EQ(counters.count(slot), 2);
  }
  EXPECT_EQ(counters.count(slot), 1);  // the second message's reference is left
  counters.release(slot);
  mem.free(p);
}

TEST(Ipc, EverySlotInUseIsAnErrorNotACrash) {
  auto& counters = ShareCounters::mine();
  std::vector<int> taken;
  EXPECT_THROW(
      {
        for (;;) taken.push_back(counters.acquire());
      },
      std::runtime_error);
  EXPECT_EQ(taken.size(), static_cast<size_t>(ShareCounters::kSlots));
  for (int s : taken) counters.release(s);
}
