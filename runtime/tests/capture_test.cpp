// Stream capture: a queue records what is submitted to it, from any thread, and replays the
// recording as one task; whatever would wait for it meanwhile raises and invalidates the capture.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "neuronrt/queue.h"

using neuronrt::CaptureError;
using neuronrt::Queue;

TEST(Capture, RecordsFromEveryThreadAndReplaysAsOneTask) {
  Queue q(neuronrt::QueueOptions{"test queue", false, {}, {}, 0});
  auto count = std::make_shared<std::atomic<int>>(0);
  q.begin_capture();
  EXPECT_TRUE(q.capturing());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(q.submit("add", [count] { count->fetch_add(1); }), 0u);
  std::thread other([&] { q.submit("add", [count] { count->fetch_add(100); }); });
  other.join();
  auto graph = q.end_capture();
  EXPECT_FALSE(q.capturing());
  q.synchronize();
  EXPECT_EQ(count->load(), 0);  // recorded, not run
  EXPECT_EQ(Queue::task_count(*graph), 11u);
  const uint64_t before = q.last_submitted();
  q.replay(graph, "replay");
  q.replay(graph, "replay");
  EXPECT_EQ(q.last_submitted(), before + 2);  // one queue task per replay
  q.synchronize();
  EXPECT_EQ(count->load(), 2 * 110);
}

TEST(Capture, WaitingWhileCapturingRaisesAndInvalidatesTheCapture) {
  Queue q(neuronrt::QueueOptions{"test queue", false, {}, {}, 0});
  int ran = 0;
  q.begin_capture();
  q.submit("task", [&ran] { ++ran; });
  EXPECT_THROW(q.synchronize(), CaptureError);
  EXPECT_THROW(q.run_sync("sync op", [] {}), CaptureError);
  EXPECT_THROW(q.end_capture(), CaptureError);  // nothing was recorded
  q.submit("task", [&ran] { ++ran; });          // the queue runs as before
  q.synchronize();
  EXPECT_EQ(ran, 1);
  EXPECT_THROW(q.end_capture(), CaptureError);  // not capturing
  q.begin_capture();
  EXPECT_THROW(q.begin_capture(), CaptureError);  // one capture at a time
  q.end_capture();
}

TEST(Capture, AFailingTaskOfAReplayIsNamedAtTheNextSynchronize) {
  Queue q(neuronrt::QueueOptions{"test queue", false, {}, {}, 0});
  q.begin_capture();
  q.submit("fine", [] {});
  q.submit("broken kernel", [] { throw std::runtime_error("bad value"); });
  auto graph = q.end_capture();
  q.replay(graph, "neuron::graph_replay");
  try {
    q.synchronize();
    FAIL() << "the replay's failure was not raised";
  } catch (const neuronrt::TaskError& e) {
    EXPECT_NE(std::string(e.what()).find("broken kernel"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("neuron::graph_replay"), std::string::npos) << e.what();
  }
  q.synchronize();  // the error was raised once; the queue goes on
}
