// In-order asynchronous execution queues (the streams of a logical core) and events.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "neuronrt/trace.h"

namespace neuronrt {

using Task = std::function<void()>;

// Raised by what a capturing queue cannot do (wait for its work), as CUDA's "operation not
// permitted when stream is capturing".
class CaptureError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Raised at a synchronizing call for a task that failed earlier on a queue. `what()` names the
// task and the queue; `cause()` is the task's own exception, so a caller can keep its kind.
class TaskError : public std::runtime_error {
 public:
  TaskError(const std::string& what, std::exception_ptr cause) : std::runtime_error(what), cause_(std::move(cause)) {}
  const std::exception_ptr& cause() const { return cause_; }

 private:
  std::exception_ptr cause_;
};

struct QueueOptions {
  std::string name;             // "neuron:0 stream 3", for error messages
  bool blocking = false;        // every submit waits for its task (NEURON_LAUNCH_BLOCKING)
  std::function<void()> enter;  // around every task: the sanitizer opens device memory
  std::function<void()> leave;
  int64_t tag = 0;  // the owner's id for this queue (the torch layer's stream id)
  int device = -1;  // the logical core it belongs to, for trace spans
};

// A queue holds up to kSlots tasks in a fixed ring, like a hardware queue of fixed depth: submit
// blocks while the ring is full. A task's captures live in its slot (no allocation and no
// cross-thread free on the hot path); larger ones spill to the heap.
class Queue {
 public:
  static constexpr size_t kSlots = 512;
  static constexpr size_t kInlineBytes = 960;

  explicit Queue(QueueOptions options);
  ~Queue();
  Queue(const Queue&) = delete;
  Queue& operator=(const Queue&) = delete;

  // `name` must outlive the task (an operator name or a literal). Returns the task's sequence
  // number, or 0 when the task joins the calling thread's open program (it gets its position when
  // the program is submitted); a task that throws records its error, which the next synchronizing
  // call raises.
  template <class F>
  uint64_t submit(const char* name, F&& fn) {
    if (capturing_.load(std::memory_order_acquire)) {
      using T = std::decay_t<F>;
      record({new T(std::forward<F>(fn)), [](void* q) { (*static_cast<T*>(q))(); },
              [](void* q) { delete static_cast<T*>(q); }, name, traced_origin()});
      return 0;
    }
    if (Program* p = program(); p != nullptr && p->queue == this) {
      p->add(name, std::forward<F>(fn));
      return 0;
    }
    return submit_now(name, std::forward<F>(fn));
  }

  // A program: the tasks one thread submits to this queue between begin_program and end_program
  // run as ONE task, in order — a compiled graph launched as a unit, as a NEFF is on Trainium. The
  // task takes its queue position at the program's first task and the worker starts each task as
  // it arrives, so the host's launching overlaps the device's running. The first failing task
  // ends the program and its error names that task. Whatever needs the queue's position —
  // run_sync, synchronize, query, an event — first closes the run in progress, so a program never
  // holds back work a waiter waits for; later tasks start a new run. One program per thread at a
  // time: a nested pair belongs to the outer program. A launch-blocking queue gathers nothing.
  void begin_program(const char* name);
  void end_program();
  // Closes the calling thread's run in progress on this queue (nothing if there is none).
  void submit_gathered();

  // Concatenation (the real backend's ConcatenationEngine, shaped for this queue): a task given
  // to `defer` is held in this queue's buffer instead of queued. The buffer is a segment: it
  // closes when anything else reaches the queue (a task from any thread, a program, a replay, an
  // event, a wait: submit_gathered), or at the buffer limit. `key` describes the task (the torch
  // layer's op signature); a closed segment whose keys were seen before, in that order, runs as
  // ONE queue task, its tasks in order; a segment seen for the first time runs task by task, as
  // if never deferred. Either way the tasks run in the order they were given, after everything
  // queued before them and before everything queued after: only the number of hand-offs changes.
  // `tag` is passed to the concatenated hook once for each task that ran in a concatenated task.
  // While capturing, inside a program, or on a launch-blocking queue, `defer` is `submit`.
  template <class F>
  uint64_t defer(const char* name, F&& fn, uint64_t key, void* tag) {
    if (capturing_.load(std::memory_order_acquire) || opts_.blocking) return submit(name, std::forward<F>(fn));
    if (Program* p = program(); p != nullptr && p->queue == this) return submit(name, std::forward<F>(fn));
    using T = std::decay_t<F>;
    defer_gathered({new T(std::forward<F>(fn)), [](void* q) { (*static_cast<T*>(q))(); },
                    [](void* q) { delete static_cast<T*>(q); }, name, traced_origin()},
                   key, tag);
    return 0;
  }
  struct ConcatStats {
    uint64_t segments_built = 0;  // closed segments of two or more tasks seen for the first time
    uint64_t segments_hit = 0;    // closed segments that ran as one task
    uint64_t tasks_concatenated = 0;
  };
  static ConcatStats concat_stats();
  static void reset_concat_stats();            // the counts, and the segments seen
  static void set_concat_limit(size_t tasks);  // the buffer limit (at least 1)
  static void set_concatenated_hook(void (*hook)(void* tag));

  // Stream capture, as CUDA's: between begin_capture and end_capture every task submitted to this
  // queue, from any thread, is recorded instead of run (submit returns 0). A graph's tasks stay
  // alive with it and run again at each replay, which queues them as ONE task. Whatever would wait
  // for the queue while it captures (run_sync, synchronize, query) raises CaptureError and
  // invalidates the capture (an event recorded meanwhile marks the work before the capture): end_capture then raises
  // too, and the queue runs as before. The memory a graph's tasks read and write must outlive it (the torch layer's
  // capture pool keeps it).
  struct Graph;
  void begin_capture();
  std::shared_ptr<Graph> end_capture();
  bool capturing() const { return capturing_.load(std::memory_order_acquire); }
  uint64_t replay(const std::shared_ptr<Graph>& graph, const char* name);
  static size_t task_count(const Graph& graph);
  // Raises CaptureError (and invalidates the capture) if this queue is capturing: for a caller
  // about to wait for it.
  void refuse_while_capturing(const char* what);

  // Runs `fn` as the queue's next task and waits for it: for work whose results the host needs
  // at once. Like every task it runs in queue order, so no other task of this queue overlaps it,
  // whatever other threads submit meanwhile. An earlier task's failure is raised first; then
  // `fn`'s own exception, as it was thrown.
  void run_sync(const char* name, const std::function<void()>& fn);

  // Waits for submitted work, stops and joins the worker; later submits raise. Idempotent.
  void shutdown();

  void synchronize();                 // all submitted work; raises a recorded error
  bool query();                       // true when all submitted work has finished
  void wait_for(uint64_t seq) const;  // until task `seq` has finished (no error check)
  // Like wait_for, giving up after `timeout`; true when the task has finished.
  bool wait_for(uint64_t seq, std::chrono::microseconds timeout) const;
  bool is_complete(uint64_t seq) const { return completed_.load(std::memory_order_acquire) >= seq; }
  uint64_t last_submitted() const { return submitted_.load(std::memory_order_acquire); }
  uint64_t tasks_completed() const { return completed_.load(std::memory_order_acquire); }
  void raise_pending_error();
  // Raises a recorded failure of a task at or before `seq` (an event's synchronize).
  void raise_error_through(uint64_t seq);
  // Nanoseconds this queue has spent running tasks (the worker's busy periods, up to now): what
  // device utilization is measured from. The clock is read only where a busy period starts and ends.
  uint64_t busy_ns() const;
  const std::string& name() const { return opts_.name; }
  int64_t tag() const { return opts_.tag; }
  int device() const { return opts_.device; }
  // Tasks that failed, and the newest failure's message (kept after it was raised), for health.
  uint64_t tasks_failed() const { return failed_.load(std::memory_order_relaxed); }
  std::string last_error() const;

  // The queue whose worker is running the calling thread's current task; nullptr on any other
  // thread (the host).
  static Queue* current();

  // Called once on each worker thread before its first task (the torch layer sets up
  // thread-local state there).
  static void set_thread_init_hook(std::function<void()> hook);

 private:
  friend class Event;

  // A task gathered into a program: its captures on the heap, called and destroyed by type-erased
  // functions like a slot's.
  struct Gathered {
    void* fn;
    void (*call)(void*);
    void (*destroy)(void*);
    const char* name;
    trace::Origin origin;  // set while tracing
    // Calls the task (a trace span of `q` while tracing, with `replay`'s origin when the task runs
    // in a graph replay); if it throws, the error of the one queue task it runs in names it.
    void run(const Queue& q, const trace::Origin* replay) const;
  };
  struct Segment;  // the tasks of one program run, shared with the worker running them
  struct Program {
    Queue* queue = nullptr;
    const char* name = nullptr;
    int depth = 0;
    std::shared_ptr<Segment> segment;  // the run in progress; its task holds the queue position
    template <class F>
    void add(const char* task_name, F&& f) {
      using T = std::decay_t<F>;
      push({new T(std::forward<F>(f)), [](void* q) { (*static_cast<T*>(q))(); },
            [](void* q) { delete static_cast<T*>(q); }, task_name, traced_origin()});
    }
    void push(Gathered g);  // the first task of a run submits the run's one queue task
    void close();           // the worker finishes the run; a later task starts another
  };
  // The calling thread's open program. A function, not a thread_local member read in this
  // header: the TLS access then lives in one translation unit (sanitizers misread the other).
  static Program*& program();
  struct ProgramTask;  // the one task a program becomes
  struct ConcatTask;   // the one task a concatenated segment becomes
  struct Deferred {
    Gathered task;
    void* tag;
  };
  void defer_gathered(Gathered g, uint64_t key, void* tag);
  void flush_deferred_locked();  // under submit_mu_: queues the buffered segment
  void wake_worker();            // after queuing without publish_locked
  // At most one queue of the process holds an open segment: work for any other queue first
  // queues it, so deferring never reorders tasks across streams or devices against the order the
  // host issued them (eager code that reads another stream's result without an event, racy on
  // CUDA, finds it queued as early as without concatenation). No lock of this queue is held.
  static std::atomic<Queue*> segment_owner_;
  void close_other_segment() {
    Queue* o = segment_owner_.load(std::memory_order_acquire);
    if (o != nullptr && o != this) o->submit_gathered();
  }
  static void run_in_order(const std::vector<Gathered>& tasks);  // a concatenated task's body
  uint64_t place_locked(const char* name, bool container, const trace::Origin& origin, void* fn, void (*call)(void*),
                        void (*destroy)(void*));
  struct ReplayTask;  // the one task a graph replay becomes
  static trace::Origin traced_origin() {
    if (!trace::on()) return {};
    trace::Origin o = trace::origin_now();
    o.queued_end_ns = o.queued_ns;
    return o;
  }

  template <class F>
  uint64_t submit_now(const char* name, F&& fn) {
    using T = std::decay_t<F>;
    const bool traced = trace::on();
    trace::Origin origin = traced ? trace::origin_now() : trace::Origin{};
    close_other_segment();
    std::unique_lock<std::mutex> lock(submit_mu_);
    if (!deferred_.empty()) flush_deferred_locked();  // a deferred segment runs before this task
    Slot& slot = reserve_locked();
    if constexpr (sizeof(T) <= kInlineBytes && alignof(T) <= alignof(std::max_align_t)) {
      new (slot.storage) T(std::forward<F>(fn));
      slot.call = [](void* p) { (*static_cast<T*>(p))(); };
      slot.destroy = [](void* p) { static_cast<T*>(p)->~T(); };
    } else {
      *reinterpret_cast<T**>(slot.storage) = new T(std::forward<F>(fn));
      slot.call = [](void* p) { (**static_cast<T**>(p))(); };
      slot.destroy = [](void* p) { delete *static_cast<T**>(p); };
    }
    slot.name = name;
    // A program's or a replay's own span would double its tasks' spans.
    slot.container = std::is_same_v<T, ProgramTask> || std::is_same_v<T, ReplayTask>;
    if (traced) trace::end_origin(origin);
    slot.origin = origin;
    return publish_locked(lock);
  }

  struct Slot {
    alignas(std::max_align_t) unsigned char storage[kInlineBytes];
    void (*call)(void*) = nullptr;
    void (*destroy)(void*) = nullptr;
    const char* name = nullptr;
    bool container = false;
    trace::Origin origin;
  };
  Slot& reserve_locked();
  uint64_t publish_locked(std::unique_lock<std::mutex>& lock);
  void worker_loop();
  void run_task(Slot& slot, uint64_t seq);
  void record_error(uint64_t seq, const char* name, std::exception_ptr error);
  void record(Gathered g);  // a task submitted while capturing
  void record_span(const char* name, const trace::Origin& origin, int64_t start_ns) const;
  void raise_error_locked(std::unique_lock<std::mutex>& lock);
  void finish_one(uint64_t seq);

  QueueOptions opts_;
  std::vector<Slot> slots_;
  std::mutex submit_mu_;            // producers
  std::vector<Deferred> deferred_;  // the open concatenation segment, under submit_mu_
  uint64_t deferred_key_ = 0;       // its signature so far, under submit_mu_
  std::atomic<bool> has_deferred_{false};
  uint64_t known_completed_ = 0;  // guarded by submit_mu_
  mutable std::mutex mu_;         // sleeping, waiting and the error
  std::condition_variable work_cv_;
  mutable std::condition_variable done_cv_;
  // Written by the host and by the worker respectively: separate cache lines, so the worker
  // polling for work does not slow the host publishing it.
  alignas(64) std::atomic<uint64_t> submitted_{0};
  alignas(64) std::atomic<uint64_t> completed_{0};
  alignas(64) char pad_[1] = {};
  std::atomic<bool> worker_sleeping_{false};
  std::atomic<int64_t> busy_ns_{0};         // finished busy periods; written by the worker only
  std::atomic<int64_t> busy_since_ns_{-1};  // the current busy period's start, -1 when idle
  mutable std::atomic<int> waiters_{0};
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> failed_{0};
  std::string last_error_;  // under mu_
  std::atomic<bool> capturing_{false};
  std::mutex capture_mu_;
  std::shared_ptr<Graph> capture_;  // under capture_mu_
  // The first failure not yet raised: its task's sequence number, name and exception.
  uint64_t error_seq_ = 0;
  std::string error_what_;
  std::exception_ptr error_;
  std::thread worker_;
};

// A marker in a queue's order: record, query, synchronize, make another queue wait, time.
class Event {
 public:
  explicit Event(bool timing = false) : timing_(timing) {}
  void record(Queue& queue);
  bool recorded() const { return queue_ != nullptr; }
  bool query() const;
  void synchronize() const;
  // Makes `waiter` run nothing after this point until the event's task has finished.
  void block(Queue& waiter) const;
  // Milliseconds from `start` to this event; both must have been recorded with timing and
  // have completed.
  double elapsed_ms_since(const Event& start) const;

 private:
  bool timing_;
  Queue* queue_ = nullptr;
  uint64_t seq_ = 0;
  std::shared_ptr<std::atomic<int64_t>> stamp_ns_;
};

}  // namespace neuronrt
