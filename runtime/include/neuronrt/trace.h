// Task spans for profilers. While tracing is on, every queue records when each task ran on its
// worker and which host call queued it (the profiler's correlation id, the host thread and the
// time of the submit), so a profiler can draw a device lane per queue linked to the host op. Off,
// it costs each submit and each task one relaxed atomic load.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace neuronrt {
namespace trace {

// Who queued a task: taken on the submitting thread.
struct Origin {
  uint64_t correlation = 0;  // the innermost open correlation id of the thread (0: none)
  int64_t queued_ns = 0;     // when the submit began and ended, on the profiler's clock
  int64_t queued_end_ns = 0;
  int32_t thread = 0;  // the submitting thread's system id
  uint64_t note = 0;   // what the note source said of the host op (0: nothing)
};

struct Span {
  const char* name = nullptr;  // the task's name (outlives the task)
  int device = -1;
  int64_t stream = 0;  // the queue's tag (the stream id)
  Origin origin;
  int64_t start_ns = 0;  // on the worker, on the profiler's clock
  int64_t end_ns = 0;
};

bool on();
// Clears what an earlier trace left and starts recording.
void start();
// Stops recording and hands over the spans, in the order they finished.
std::vector<Span> stop();
// Spans dropped because the buffer was full (kMaxSpans), since start().
uint64_t dropped();
constexpr size_t kMaxSpans = size_t{1} << 22;

// The profiler's clock: nanoseconds since the Unix epoch (what PyTorch's profiler stamps ops with).
int64_t now_ns();

// The calling thread's correlation ids, innermost last (a profiler pushes one per host op).
void push_correlation(uint64_t id);
void pop_correlation();

// The owner's description of the host op queuing work (an id it can look up later), asked at each
// traced submit on the submitting thread. The torch layer's is the op's name and input shapes.
void set_note_source(uint64_t (*source)());

// For the queues: the calling thread's origin now (a submit's start), its end, and a finished span.
Origin origin_now();
void end_origin(Origin& origin);
void record(const Span& span);

}  // namespace trace
}  // namespace neuronrt
