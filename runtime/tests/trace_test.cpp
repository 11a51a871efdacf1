// Task spans: while tracing, each task a queue runs is a span on its device and queue, carrying
// the correlation id and note of the host call that queued it; programs and replays give their
// tasks' spans, not their own.
#include "neuronrt/trace.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "neuronrt/queue.h"

using neuronrt::Queue;
namespace trace = neuronrt::trace;

namespace {

neuronrt::QueueOptions options(int device, int64_t tag) {
  neuronrt::QueueOptions o;
  o.name = "test queue";
  o.tag = tag;
  o.device = device;
  return o;
}

std::vector<std::string> names(const std::vector<trace::Span>& spans) {
  std::vector<std::string> out;
  for (const auto& s : spans) out.push_back(s.name);
  return out;
}

uint64_t g_note = 0;
uint64_t note_source() { return g_note; }

}  // namespace

TEST(Trace, RecordsASpanPerTaskWithItsOrigin) {
  Queue q(options(3, 7));
  q.submit("before", [] {});
  q.synchronize();
  trace::start();
  trace::set_note_source(&note_source);
  g_note = 42;
  trace::push_correlation(11);
  const int64_t t0 = trace::now_ns();
  q.submit("first", [] {});
  trace::push_correlation(12);
  q.submit("second", [] {});
  trace::pop_correlation();
  trace::pop_correlation();
  q.submit("third", [] {});
  q.synchronize();
  const auto spans = trace::stop();
  trace::set_note_source(nullptr);
  q.submit("after", [] {});
  q.synchronize();

  ASSERT_EQ(names(spans), (std::vector<std::string>{"first", "second", "third"}));
  EXPECT_EQ(spans[0].origin.correlation, 11u);
  EXPECT_EQ(spans[1].origin.correlation, 12u);
  EXPECT_EQ(spans[2].origin.correlation, 0u);
  for (const auto& s : spans) {
    EXPECT_EQ(s.device, 3);
    EXPECT_EQ(s.stream, 7);
    EXPECT_EQ(s.origin.note, 42u);
    EXPECT_NE(s.origin.thread, 0);
    EXPECT_LE(t0, s.origin.queued_ns);
    EXPECT_LE(s.origin.queued_ns, s.origin.queued_end_ns);
    EXPECT_LE(s.origin.queued_ns, s.start_ns);  // a task runs after it was queued
    EXPECT_LE(s.start_ns, s.end_ns);
  }
  EXPECT_LE(spans[0].end_ns, spans[1].start_ns);  // in order on one queue
  EXPECT_EQ(trace::dropped(), 0u);
}

TEST(Trace, ProgramsAndReplaysGiveTheirTasksSpans) {
  Queue q(options(0, 0));
  q.begin_capture();
  q.submit("captured a", [] {});
  q.submit("captured b", [] {});
  auto graph = q.end_capture();

  trace::start();
  trace::push_correlation(5);
  q.begin_program("program");
  q.submit("in program 1", [] {});
  q.submit("in program 2", [] {});
  q.end_program();
  trace::pop_correlation();
  trace::push_correlation(9);
  q.replay(graph, "replay");
  trace::pop_correlation();
  q.synchronize();
  const auto spans = trace::stop();

  ASSERT_EQ(names(spans), (std::vector<std::string>{"in program 1", "in program 2", "captured a", "captured b"}));
  EXPECT_EQ(spans[0].origin.correlation, 5u);
  EXPECT_EQ(spans[1].origin.correlation, 5u);
  EXPECT_EQ(spans[2].origin.correlation, 9u);  // the replay's caller, not the capture's
  EXPECT_EQ(spans[3].origin.correlation, 9u);
}

TEST(Trace, OffRecordsNothing) {
  Queue q(options(0, 0));
  trace::start();
  trace::stop();
  q.submit("untraced", [] {});
  q.synchronize();
  trace::start();
  EXPECT_TRUE(trace::stop().empty());
}
