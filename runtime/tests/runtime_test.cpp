#include "neuronrt/runtime.h"

#include <gtest/gtest.h>
#include <setjmp.h>
#include <signal.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

using namespace neuronrt;

TEST(Profile, Trn2DefaultsToFourLogicalCoresOf24GiB) {
  auto t = Topology::make("trn2", 2, 1, "");
  ASSERT_EQ(t.cores.size(), 4u);
  EXPECT_EQ(t.cores[0].hbm_bytes, 24 * kGiB);
  EXPECT_EQ(t.profile->physical_cores, 8);
}

TEST(Profile, Trn3AndLnc1) {
  auto t3 = Topology::make("trn3", 2, 1, "");
  EXPECT_EQ(t3.cores[0].hbm_bytes, 36 * kGiB);
  auto t1 = Topology::make("trn2", 1, 2, "");
  EXPECT_EQ(t1.cores.size(), 16u);
  EXPECT_EQ(t1.cores[0].hbm_bytes, 12 * kGiB);
  EXPECT_EQ(t1.cores[15].chip, 1);
}

TEST(Profile, VisibleCoresNarrow) {
  auto t = Topology::make("trn2", 2, 2, "3,5-6");
  ASSERT_EQ(t.cores.size(), 3u);
  EXPECT_EQ(t.cores[0].global_index, 3);
  EXPECT_EQ(t.cores[1].index, 1);
  EXPECT_EQ(t.cores[2].global_index, 6);
  EXPECT_EQ(t.cores[2].chip, 1);
}

TEST(Profile, BadSettingsNameTheProblem) {
  EXPECT_THROW(Topology::make("trn1", 2, 1, ""), std::invalid_argument);
  EXPECT_THROW(Topology::make("trn2", 3, 1, ""), std::invalid_argument);
  try {
    Topology::make("trn2", 2, 1, "0-9");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("NEURON_RT_VISIBLE_CORES"), std::string::npos);
  }
}

TEST(Memory, CapacityIsEnforcedAndFreesCoalesce) {
  DeviceMemory m(1 << 20);
  void* a = m.allocate(600 << 10);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(m.allocate(600 << 10), nullptr);  // would exceed capacity
  void* b = m.allocate(100 << 10);
  ASSERT_NE(b, nullptr);
  m.free(a);
  m.free(b);
  EXPECT_EQ(m.used(), 0u);
  EXPECT_EQ(m.largest_free(), 1u << 20);
  void* c = m.allocate(1 << 20);
  EXPECT_NE(c, nullptr);
  EXPECT_TRUE(m.contains(c));
  m.free(c);
}

TEST(Memory, FragmentedFreeBytesStillServeALargerBlock) {
  DeviceMemory m(256u << 20);
  std::vector<void*> blocks;
  for (int i = 0; i < 20; ++i) blocks.push_back(m.allocate(12u << 20));
  for (int i = 0; i < 20; i += 2) m.free(blocks[i]);  // 136 MiB free, in 12 MiB holes and the tail
  void* big = m.allocate(24u << 20);
  EXPECT_NE(big, nullptr);
  EXPECT_EQ(m.used(), (10u * 12 + 24) << 20);
  EXPECT_EQ(m.allocate(120u << 20), nullptr);  // only 112 MiB of capacity is left
}

TEST(Memory, HugeCapacityIsOnlyReserved) {
  DeviceMemory m(24 * kGiB);
  void* p = m.allocate(20 * kGiB);  // address space only; nothing is touched
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(m.allocate(8 * kGiB), nullptr);
  m.free(p);
  EXPECT_THROW(m.free(p), std::invalid_argument);
}

TEST(Queue, RunsInOrderAsynchronously) {
  Queue q({"test", false, nullptr, nullptr});
  std::vector<int> order;
  std::atomic<bool> gate{false};
  q.submit("wait", [&] {
    while (!gate.load()) std::this_thread::yield();
    order.push_back(1);
  });
  q.submit("second", [&] { order.push_back(2); });
  EXPECT_FALSE(q.query());  // submit returned before the work ran
  gate = true;
  q.synchronize();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_TRUE(q.query());
}

TEST(Queue, TaskErrorSurfacesAtSynchronizeWithItsName) {
  Queue q({"neuron:0 stream 0", false, nullptr, nullptr});
  q.submit("aten::broken", [] { throw std::runtime_error("bad shape"); });
  try {
    q.synchronize();
    FAIL() << "error was lost";
  } catch (const TaskError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("aten::broken"), std::string::npos);
    EXPECT_NE(msg.find("bad shape"), std::string::npos);
  }
  q.synchronize();  // reported once; the queue stays usable
  int x = 0;
  q.submit("ok", [&] { x = 7; });
  q.synchronize();
  EXPECT_EQ(x, 7);
}

TEST(Queue, TaskErrorKeepsItsCause) {
  Queue q({"neuron:0 stream 0", false, nullptr, nullptr});
  q.submit("aten::index", [] { throw std::out_of_range("index 9 is out of bounds"); });
  try {
    q.synchronize();
    FAIL();
  } catch (const TaskError& e) {
    EXPECT_THROW(std::rethrow_exception(e.cause()), std::out_of_range);
  }
}

TEST(Queue, RunSyncRunsInQueueOrderAndRethrows) {
  Queue q({"sync", false, nullptr, nullptr});
  std::atomic<int> first{0};
  q.submit("slow", [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    first = 1;
  });
  int seen = -1;
  Queue* on = nullptr;
  q.run_sync("inline", [&] {
    seen = first.load();
    on = Queue::current();
  });
  EXPECT_EQ(seen, 1);  // ran after the queued task, on the worker
  EXPECT_EQ(on, &q);
  EXPECT_EQ(Queue::current(), nullptr);
  EXPECT_THROW(q.run_sync("bad", [] { throw std::invalid_argument("bad"); }), std::invalid_argument);
  // An earlier task's failure comes first.
  q.submit("earlier", [] { throw std::runtime_error("earlier"); });
  EXPECT_THROW(q.run_sync("ok", [] {}), TaskError);
  q.synchronize();
}

TEST(Queue, WaitWithTimeout) {
  Queue q({"timeout", false, nullptr, nullptr});
  const uint64_t seq = q.submit("slow", [] { std::this_thread::sleep_for(std::chrono::milliseconds(50)); });
  EXPECT_FALSE(q.wait_for(seq, std::chrono::microseconds(1000)));
  EXPECT_TRUE(q.wait_for(seq, std::chrono::microseconds(5000000)));
}

TEST(Event, SynchronizeRaisesAnEarlierFailureOfItsQueue) {
  Queue q({"events", false, nullptr, nullptr});
  Event before;
  before.record(q);
  q.submit("aten::broken", [] { throw std::runtime_error("boom"); });
  Event after;
  after.record(q);
  before.synchronize();  // the failure comes after it
  EXPECT_THROW(after.synchronize(), TaskError);
  q.synchronize();  // raised once
}

TEST(Queue, BlockingModeWaitsForEachTask) {
  Queue q({"blocking", true, nullptr, nullptr});
  int x = 0;
  q.submit("set", [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    x = 1;
  });
  EXPECT_EQ(x, 1);
}

// The host/worker hand-offs (wake a sleeping worker, wake a waiting host) must never lose a
// notification: each round ends in a synchronize that would hang.
TEST(Queue, HandOffsNeverLoseAWakeUp) {
  Queue q({"stress", false, nullptr, nullptr});
  std::atomic<int> ran{0};
  for (int i = 0; i < 6000; ++i) {
    // Tasks of 0..40 µs: the host's spin (20 µs) sometimes expires just as the task ends.
    const auto busy = std::chrono::microseconds(i % 41);
    q.submit("tick", [&ran, busy] {
      const auto until = std::chrono::steady_clock::now() + busy;
      while (std::chrono::steady_clock::now() < until) {
      }
      ran.fetch_add(1, std::memory_order_relaxed);
    });
    if (i % 500 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));  // let the worker sleep
    q.synchronize();
  }
  EXPECT_EQ(ran.load(), 6000);
}

TEST(Queue, FullRingMakesSubmitWait) {
  Queue q({"ring", false, nullptr, nullptr});
  std::atomic<bool> gate{false};
  q.submit("gate", [&] {
    while (!gate.load()) std::this_thread::yield();
  });
  std::atomic<uint64_t> done{0};
  std::thread producer([&] {
    for (size_t i = 0; i < Queue::kSlots + 10; ++i) q.submit("fill", [&] { done.fetch_add(1); });
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(done.load(), 0u);
  EXPECT_LE(q.last_submitted(), Queue::kSlots);  // the producer is held at the ring's depth
  gate = true;
  producer.join();
  q.synchronize();
  EXPECT_EQ(done.load(), Queue::kSlots + 10);
}

TEST(Queue, LargeCapturesSpillToTheHeap) {
  Queue q({"big", false, nullptr, nullptr});
  std::array<char, 4096> big{};
  big[4095] = 7;
  int seen = 0;
  q.submit("big", [big, &seen] { seen = big[4095]; });
  q.synchronize();
  EXPECT_EQ(seen, 7);
}

TEST(Program, GathersTasksIntoOneInOrder) {
  Queue q({"prog", false, nullptr, nullptr});
  std::vector<int> order;
  const uint64_t before = q.last_submitted();
  q.begin_program("neuron::program");
  EXPECT_EQ(q.last_submitted(), before);  // an empty program costs nothing
  for (int i = 0; i < 5; ++i) EXPECT_EQ(q.submit("k", [&order, i] { order.push_back(i); }), 0u);
  q.begin_program("nested");  // belongs to the outer program
  q.submit("k", [&order] { order.push_back(5); });
  q.end_program();
  q.end_program();
  EXPECT_EQ(q.last_submitted(), before + 1);  // one task for the whole program
  q.synchronize();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5}));
}

TEST(Program, TasksStartBeforeTheProgramEnds) {
  Queue q({"prog", false, nullptr, nullptr});
  std::atomic<int> ran{0};
  q.begin_program("p");
  q.submit("first", [&ran] { ran = 1; });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (ran.load() == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  EXPECT_EQ(ran.load(), 1);  // the worker started it while the host still launches
  q.submit("second", [&ran] { ran = 2; });
  q.end_program();
  q.synchronize();
  EXPECT_EQ(ran.load(), 2);
}

TEST(Program, AThreadThatEndsWithAProgramOpenDoesNotHangTheQueue) {
  Queue q({"prog", false, nullptr, nullptr});
  int x = 0;
  std::thread t([&] {
    q.begin_program("p");
    q.submit("set", [&x] { x = 5; });
  });  // never calls end_program
  t.join();
  q.synchronize();
  EXPECT_EQ(x, 5);
}

TEST(Program, WaitersSeeGatheredWork) {
  Queue q({"prog", false, nullptr, nullptr});
  std::atomic<int> x{0};
  q.begin_program("p");
  q.submit("set", [&x] { x = 1; });
  int seen = -1;
  q.run_sync("read", [&] { seen = x.load(); });  // submits what was gathered first
  EXPECT_EQ(seen, 1);
  q.submit("set", [&x] { x = 2; });
  Event e;
  e.record(q);  // the event comes after the gathered task
  e.synchronize();
  EXPECT_EQ(x.load(), 2);
  q.submit("set", [&x] { x = 3; });
  q.synchronize();
  EXPECT_EQ(x.load(), 3);
  q.submit("set", [&x] { x = 4; });
  while (!q.query()) std::this_thread::yield();
  EXPECT_EQ(x.load(), 4);
  q.end_program();
}

TEST(Program, FirstFailureStopsItAndIsNamed) {
  Queue q({"neuron:0 stream 0", false, nullptr, nullptr});
  bool after = false;
  q.begin_program("neuron::program");
  q.submit("kernel_3", [] { throw std::out_of_range("index 9"); });
  q.submit("kernel_4", [&] { after = true; });
  q.end_program();
  try {
    q.synchronize();
    FAIL();
  } catch (const TaskError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("neuron::program"), std::string::npos) << msg;
    EXPECT_NE(msg.find("kernel_3"), std::string::npos) << msg;
    EXPECT_THROW(std::rethrow_exception(e.cause()), std::out_of_range);
  }
  EXPECT_FALSE(after);
  int x = 0;
  q.submit("ok", [&] { x = 7; });
  q.synchronize();
  EXPECT_EQ(x, 7);
}

TEST(Program, OtherQueuesAndThreadsAreNotGathered) {
  Queue a({"a", false, nullptr, nullptr});
  Queue b({"b", false, nullptr, nullptr});
  a.begin_program("p");
  EXPECT_GT(b.submit("direct", [] {}), 0u);
  uint64_t other = 0;
  std::thread t([&] { other = a.submit("other thread", [] {}); });
  t.join();
  EXPECT_GT(other, 0u);
  EXPECT_THROW(b.begin_program("second"), std::logic_error);
  a.end_program();
  a.synchronize();
  b.synchronize();
}

TEST(Program, BlockingQueuesGatherNothing) {
  Queue q({"blocking", true, nullptr, nullptr});
  int x = 0;
  q.begin_program("p");
  EXPECT_GT(q.submit("set", [&] { x = 1; }), 0u);
  EXPECT_EQ(x, 1);
  q.end_program();
}

TEST(Program, MoveOnlyCapturesAreReleasedWhenItRuns) {
  Queue q({"prog", false, nullptr, nullptr});
  auto token = std::make_shared<int>(1);
  std::weak_ptr<int> watch = token;
  q.begin_program("p");
  q.submit("hold", [u = std::make_unique<int>(2), t = std::move(token)] { (void)*u; });
  q.end_program();
  q.synchronize();
  EXPECT_TRUE(watch.expired());
}

TEST(Event, OrdersTwoQueues) {
  Queue producer({"p", false, nullptr, nullptr}), consumer({"c", false, nullptr, nullptr});
  std::atomic<bool> gate{false};
  int value = 0, seen = -1;
  producer.submit("slow", [&] {
    while (!gate.load()) std::this_thread::yield();
    value = 42;
  });
  Event done;
  done.record(producer);
  done.block(consumer);
  consumer.submit("read", [&] { seen = value; });
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_FALSE(done.query());
  EXPECT_FALSE(consumer.query());
  gate = true;
  consumer.synchronize();
  EXPECT_EQ(seen, 42);
  EXPECT_TRUE(done.query());
}

TEST(Event, ElapsedTime) {
  Queue q({"t", false, nullptr, nullptr});
  Event a(true), b(true);
  a.record(q);
  q.submit("sleep", [] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
  b.record(q);
  b.synchronize();
  EXPECT_GE(b.elapsed_ms_since(a), 15.0);
  Event untimed;
  untimed.record(q);
  untimed.synchronize();
  EXPECT_THROW(untimed.elapsed_ms_since(a), std::invalid_argument);
}

TEST(Runtime, CopiesAreQueuedAndCounted) {
  RuntimeOptions o;
  o.topology = Topology::make("trn2", 2, 1, "0-1");
  Runtime rt(o);
  ASSERT_EQ(rt.device_count(), 2);
  std::vector<float> host(1024, 3.0f), back(1024, 0.0f);
  void* dev = rt.memory(1).allocate(host.size() * sizeof(float));
  EXPECT_EQ(rt.device_of(dev), 1);
  EXPECT_EQ(rt.device_of(host.data()), -1);
  Queue& q = rt.queue(1, 0);
  rt.copy_async(q, dev, host.data(), 4096, Runtime::kHostToDevice);
  rt.copy_async(q, back.data(), dev, 4096, Runtime::kDeviceToHost);
  rt.synchronize_device(1);
  EXPECT_EQ(back[1023], 3.0f);
  EXPECT_EQ(rt.counters().h2d_bytes.load(), 4096u);
  rt.memory(1).free(dev);
  EXPECT_THROW(rt.queue(5, 0), std::out_of_range);
}

static sigjmp_buf g_jump;
static void on_segv(int) { siglongjmp(g_jump, 1); }

TEST(Runtime, SanitizerCatchesHostAccessOutsideTasks) {
  RuntimeOptions o;
  o.topology = Topology::make("trn2", 2, 1, "0", 1 << 20);
  o.sanitize = true;
  Runtime rt(o);
  auto* p = static_cast<volatile int*>(rt.memory(0).allocate(4096));
  rt.queue(0, 0).submit("write", [p] { p[0] = 5; });  // inside a task: allowed
  int seen = 0;
  rt.queue(0, 0).submit("read", [p, &seen] { seen = p[0]; });
  EXPECT_EQ(seen, 5);
  struct sigaction sa{}, old{};
  sa.sa_handler = on_segv;
  sigaction(SIGSEGV, &sa, &old);
  bool caught = false;
  if (sigsetjmp(g_jump, 1) == 0) {
    p[0] = 1;  // host access outside a task
  } else {
    caught = true;
  }
  sigaction(SIGSEGV, &old, nullptr);
  EXPECT_TRUE(caught);
}

// Concatenation (Queue::defer): a segment seen before runs as one task; order is kept whatever
// closes the segment.
TEST(Concat, SeenSegmentRunsAsOneTaskInOrder) {
  Queue::reset_concat_stats();
  Queue q({"concat", false, nullptr, nullptr});
  std::vector<int> order;
  for (int pass = 0; pass < 2; ++pass) {
    const uint64_t before = q.last_submitted();
    for (int i = 0; i < 5; ++i) EXPECT_EQ(q.defer("k", [&order, i] { order.push_back(i); }, 7, nullptr), 0u);
    EXPECT_EQ(q.last_submitted(), before);  // held in the open segment
    q.synchronize();
    EXPECT_EQ(q.last_submitted(), before + (pass == 0 ? 5 : 1));  // new: task by task; seen: one task
  }
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 0, 1, 2, 3, 4}));
  const auto s = Queue::concat_stats();
  EXPECT_EQ(s.segments_built, 1u);
  EXPECT_EQ(s.segments_hit, 1u);
  EXPECT_EQ(s.tasks_concatenated, 5u);
}

TEST(Concat, AnotherThreadsTaskRunsAfterTheSegment) {
  Queue q({"concat", false, nullptr, nullptr});
  std::vector<int> order;
  q.defer("a", [&order] { order.push_back(1); }, 1, nullptr);
  std::thread([&] { q.submit("b", [&order] { order.push_back(2); }); }).join();
  q.synchronize();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

TEST(Concat, FailureNamesItsTaskAndTheOthersRun) {
  Queue::reset_concat_stats();
  Queue q({"concat", false, nullptr, nullptr});
  int after = 0;
  for (int pass = 0; pass < 2; ++pass) {
    q.defer("fine", [] {}, 1, nullptr);
    q.defer(
        "bad",
        [pass] {
          if (pass == 1) throw std::runtime_error("boom");
        },
        2, nullptr);
    q.defer("later", [&after] { ++after; }, 3, nullptr);
    if (pass == 0) q.synchronize();
  }
  try {
    q.synchronize();
    ADD_FAILURE() << "no error";
  } catch (const TaskError& e) {
    EXPECT_NE(std::string(e.what()).find("'bad'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("boom"), std::string::npos) << e.what();
  }
  EXPECT_EQ(after, 2);
  EXPECT_EQ(Queue::concat_stats().segments_hit, 1u);
}

TEST(Concat, BufferLimitClosesTheSegment) {
  Queue::reset_concat_stats();
  Queue::set_concat_limit(2);
  Queue q({"concat", false, nullptr, nullptr});
  std::atomic<int> ran{0};
  const uint64_t before = q.last_submitted();
  for (int i = 0; i < 4; ++i) q.defer("k", [&ran] { ++ran; }, 1, nullptr);
  EXPECT_EQ(q.last_submitted(), before + 3);  // a new segment of two, then the same one again
  q.synchronize();
  EXPECT_EQ(ran.load(), 4);
  Queue::set_concat_limit(1024);
}

TEST(Concat, ASegmentLongerThanTheRingRuns) {
  Queue::reset_concat_stats();
  Queue q({"concat", false, nullptr, nullptr});
  std::atomic<int> ran{0};
  for (int pass = 0; pass < 2; ++pass) {  // new (task by task, more tasks than slots), then seen
    for (size_t i = 0; i < Queue::kSlots * 2 + 3; ++i) q.defer("k", [&ran] { ++ran; }, 1, nullptr);
    q.synchronize();
  }
  EXPECT_EQ(ran.load(), static_cast<int>(Queue::kSlots * 2 + 3) * 2);
  // The limit (1024, twice the ring) closes each pass's segment once: 1024 tasks, then 3.
  EXPECT_EQ(Queue::concat_stats().segments_built, 2u);
  EXPECT_EQ(Queue::concat_stats().segments_hit, 2u);
}

TEST(Concat, WorkForAnotherQueueQueuesTheOpenSegment) {
  Queue a({"a", false, nullptr, nullptr}), b({"b", false, nullptr, nullptr});
  const uint64_t before = a.last_submitted();
  a.defer("held", [] {}, 1, nullptr);
  EXPECT_EQ(a.last_submitted(), before);
  b.defer("other", [] {}, 1, nullptr);  // another queue's segment opens: a's is queued first
  EXPECT_EQ(a.last_submitted(), before + 1);
  a.submit("plain", [] {});
  EXPECT_EQ(b.last_submitted(), 1u);  // and work for a queues b's
  a.synchronize();
  b.synchronize();
}
