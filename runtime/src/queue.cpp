#include "neuronrt/queue.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <stdexcept>
#include <unordered_set>

#include "neuronrt/cores.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define NEURONRT_PAUSE() _mm_pause()
#else
#define NEURONRT_PAUSE() std::this_thread::yield()
#endif

namespace neuronrt {
namespace {

std::function<void()>& thread_init_hook() {
  static std::function<void()> hook;
  return hook;
}

thread_local Queue* tls_current = nullptr;

std::string describe(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "unknown exception";
  }
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A worker that just ran dry keeps polling this long before it sleeps, so a host thread that
// issues op after op does not pay a wake-up per op; short enough not to hold a core for long.
// Neither polls while the machine's cores are oversubscribed (cores.cpp).
constexpr auto kWorkerSpin = std::chrono::microseconds(50);
// A host thread waiting for a task polls this long before it sleeps.
constexpr auto kWaitSpin = std::chrono::microseconds(20);

std::chrono::microseconds spin(std::chrono::microseconds limit) {
  return cores_contended() ? std::chrono::microseconds(0) : limit;
}

// Polls `busy` for up to `limit`; true once it turned false. The clock is read only when polling
// starts and every 64 polls (it costs more than a poll).
template <class Busy>
bool poll_while(Busy busy, std::chrono::microseconds limit) {
  if (!busy()) return true;
  const auto until = std::chrono::steady_clock::now() + limit;
  for (unsigned i = 1; busy(); ++i) {
    NEURONRT_PAUSE();
    if (i % 64 == 0 && std::chrono::steady_clock::now() >= until) return !busy();
  }
  return true;
}

}  // namespace

Queue::Program*& Queue::program() {
  // A thread that ends with a program open closes it, so the worker running it is not left
  // waiting for tasks that will never come.
  struct Holder {
    Program* p = nullptr;
    ~Holder() {
      if (p != nullptr) p->close();
      delete p;
    }
  };
  thread_local Holder open;
  return open.p;
}

namespace {
thread_local const char* tls_failed_task = nullptr;             // the task of a program that failed
thread_local const trace::Origin* tls_replay_origin = nullptr;  // the origin of the slot running

}  // namespace

void Queue::Gathered::run(const Queue& q, const trace::Origin* replay) const {
  const int64_t start = trace::on() ? trace::now_ns() : 0;
  try {
    call(fn);
  } catch (...) {
    tls_failed_task = name;
    throw;
  }
  if (start != 0) q.record_span(name, replay != nullptr ? *replay : origin, start);
}

void Queue::record_span(const char* name, const trace::Origin& origin, int64_t start_ns) const {
  trace::Span span;
  span.name = name;
  span.device = opts_.device;
  span.stream = opts_.tag;
  span.origin = origin;
  span.start_ns = start_ns;
  span.end_ns = trace::now_ns();
  trace::record(span);
}

struct Queue::Segment {
  Queue* queue = nullptr;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Gathered> tasks;       // pushed by the host thread, taken by the worker
  std::atomic<bool> closed{false};  // written under mu; the worker's spin reads it without
  bool worker_waiting = false;      // under mu: whether a push must wake the worker
  std::atomic<size_t> pushed{0};    // what the worker's spin reads without the lock
  ~Segment() {
    for (auto& t : tasks) t.destroy(t.fn);
  }
};

struct Queue::ProgramTask {
  std::shared_ptr<Segment> seg;

  // The next task of the run, or false once the run is closed and drained (or the queue stops).
  bool take(Gathered* out, size_t taken) {
    const auto spin_until = std::chrono::steady_clock::now() + spin(kWorkerSpin);
    while (seg->pushed.load(std::memory_order_acquire) == taken && !seg->closed.load(std::memory_order_acquire) &&
           std::chrono::steady_clock::now() < spin_until) {
      std::this_thread::yield();
    }
    std::unique_lock<std::mutex> lock(seg->mu);
    while (seg->tasks.empty() && !seg->closed) {
      if (seg->queue->stop_.load()) return false;  // shutting down with a run left open
      seg->worker_waiting = true;
      seg->cv.wait_for(lock, std::chrono::milliseconds(10));
      seg->worker_waiting = false;
    }
    if (seg->tasks.empty()) return false;
    *out = seg->tasks.front();
    seg->tasks.pop_front();
    return true;
  }

  void operator()() {
    std::exception_ptr failure;
    Gathered t{};
    for (size_t taken = 0; take(&t, taken); ++taken) {
      if (!failure) {  // after a failure the rest of the run is dropped
        try {
          t.run(*seg->queue, nullptr);
        } catch (...) {
          failure = std::current_exception();
        }
      }
      t.destroy(t.fn);
    }
    if (failure) std::rethrow_exception(failure);
  }
};

void Queue::Program::push(Gathered g) {
  if (!segment) {
    auto fresh = std::make_shared<Segment>();
    fresh->queue = queue;
    try {
      queue->submit_now(name, ProgramTask{fresh});
    } catch (...) {
      g.destroy(g.fn);
      throw;
    }
    segment = std::move(fresh);
  }
  bool wake;
  {
    std::lock_guard<std::mutex> lock(segment->mu);
    segment->tasks.push_back(g);
    segment->pushed.fetch_add(1, std::memory_order_release);
    wake = segment->worker_waiting;
  }
  if (wake) segment->cv.notify_one();
}

void Queue::Program::close() {
  if (!segment) return;
  {
    std::lock_guard<std::mutex> lock(segment->mu);
    segment->closed.store(true, std::memory_order_release);
  }
  segment->cv.notify_one();
  segment.reset();
}

void Queue::begin_program(const char* name) {
  if (opts_.blocking) return;
  Program*& open = program();
  if (open != nullptr) {
    if (open->queue != this) {
      throw std::logic_error("neuron: a program is already open on " + open->queue->name() +
                             "; one program per thread at a time");
    }
    open->depth++;
    return;
  }
  auto* p = new Program();
  p->queue = this;
  p->name = name;
  p->depth = 1;
  open = p;
}

void Queue::end_program() {
  Program*& open = program();
  if (open == nullptr || open->queue != this) return;
  if (--open->depth > 0) return;
  std::unique_ptr<Program> p(open);
  open = nullptr;
  p->close();
}

void Queue::submit_gathered() {
  Program* open = program();
  if (open != nullptr && open->queue == this) open->close();
  if (!has_deferred_.load(std::memory_order_acquire)) return;
  std::unique_lock<std::mutex> lock(submit_mu_);
  flush_deferred_locked();
  lock.unlock();
  wake_worker();
}

// The tasks of a concatenated segment, in order, as one queue task (queue_concat.cpp). A task
// that fails does not stop the others, as on the queue each would have run; the first failure is
// the task's error and names the op that raised it.
void Queue::run_in_order(const std::vector<Gathered>& tasks) {
  std::exception_ptr first;
  const char* failed = nullptr;
  for (const auto& t : tasks) {
    try {
      t.run(*tls_current, nullptr);
    } catch (...) {
      if (!first) {
        first = std::current_exception();
        failed = tls_failed_task;
      }
    }
  }
  if (first) {
    tls_failed_task = failed;
    std::rethrow_exception(first);
  }
}

void Queue::wake_worker() {
  if (worker_sleeping_.load(std::memory_order_seq_cst)) {
    std::lock_guard<std::mutex> guard(mu_);
    work_cv_.notify_one();
  }
}

struct Queue::Graph {
  std::vector<Gathered> tasks;
  std::string invalid;  // why the capture failed, if it did
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph() {
    for (auto& t : tasks) t.destroy(t.fn);
  }
};

struct Queue::ReplayTask {
  std::shared_ptr<Graph> graph;

  void operator()() {
    // The replay's own origin (who launched it), not the capture's.
    const trace::Origin* origin = tls_replay_origin;
    for (const auto& t : graph->tasks) t.run(*tls_current, origin);
  }
};

void Queue::begin_capture() {
  std::lock_guard<std::mutex> lock(capture_mu_);
  if (capture_) throw CaptureError("neuron: " + opts_.name + " is already capturing a graph");
  submit_gathered();  // a program the calling thread has open runs before the capture, not inside it
  capture_ = std::make_shared<Graph>();
  capturing_.store(true, std::memory_order_release);
}

std::shared_ptr<Queue::Graph> Queue::end_capture() {
  std::shared_ptr<Graph> graph;
  {
    std::lock_guard<std::mutex> lock(capture_mu_);
    if (!capture_) throw CaptureError("neuron: " + opts_.name + " is not capturing a graph");
    capturing_.store(false, std::memory_order_release);
    graph = std::move(capture_);
  }
  if (!graph->invalid.empty()) {
    throw CaptureError("neuron: the capture on " + opts_.name + " was invalidated by an operation not permitted " +
                       "while capturing (" + graph->invalid + "); nothing was recorded");
  }
  return graph;
}

void Queue::record(Gathered g) {
  {
    std::lock_guard<std::mutex> lock(capture_mu_);
    if (capture_) {
      capture_->tasks.push_back(g);
      return;
    }
  }
  // The capture ended between the check and here: the task runs as any other, and its captures
  // go with the queue task.
  std::shared_ptr<void> fn(g.fn, g.destroy);
  submit_now(g.name, [fn, call = g.call] { call(fn.get()); });
}

void Queue::refuse_while_capturing(const char* what) {
  if (!capturing_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(capture_mu_);
  if (!capture_) return;
  if (capture_->invalid.empty()) capture_->invalid = what;
  throw CaptureError(std::string("neuron: operation not permitted when stream is capturing: ") + what + " on " +
                     opts_.name + " would wait for work that is only being recorded. End the capture first; the " +
                     "capture is invalidated");
}

uint64_t Queue::replay(const std::shared_ptr<Graph>& graph, const char* name) {
  if (!graph) throw std::invalid_argument("neuron: replay of an empty graph");
  return submit(name, ReplayTask{graph});
}

size_t Queue::task_count(const Graph& graph) { return graph.tasks.size(); }

void Queue::set_thread_init_hook(std::function<void()> hook) { thread_init_hook() = std::move(hook); }

Queue* Queue::current() { return tls_current; }

Queue::Queue(QueueOptions options) : opts_(std::move(options)), slots_(kSlots) {
  worker_ = std::thread([this] { worker_loop(); });
}

Queue::~Queue() { shutdown(); }

void Queue::shutdown() {
  std::lock_guard<std::mutex> submitting(submit_mu_);
  if (!worker_.joinable()) return;
  if (!deferred_.empty()) flush_deferred_locked();  // deferred work runs, as queued work does
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  work_cv_.notify_all();
  worker_.join();
}

Queue::Slot& Queue::reserve_locked() {
  if (stop_.load(std::memory_order_relaxed)) {
    throw std::runtime_error("neuron: " + opts_.name + " has shut down (the interpreter is exiting)");
  }
  const uint64_t seq = submitted_.load(std::memory_order_relaxed) + 1;
  // The slot is free once the task kSlots before this one has finished. Reading the worker's
  // counter costs a cache-line transfer, so only when the last reading does not already prove it.
  if (seq > kSlots && seq - kSlots > known_completed_) {
    wait_for(seq - kSlots);
    known_completed_ = completed_.load(std::memory_order_acquire);
  }
  return slots_[(seq - 1) % kSlots];
}

uint64_t Queue::publish_locked(std::unique_lock<std::mutex>& lock) {
  // seq_cst on both sides of the sleep handshake: the worker sets worker_sleeping_ then reads
  // submitted_, this thread writes submitted_ then reads worker_sleeping_; one sees the other.
  const uint64_t seq = submitted_.load(std::memory_order_relaxed) + 1;
  submitted_.store(seq, std::memory_order_seq_cst);
  lock.unlock();
  if (worker_sleeping_.load(std::memory_order_seq_cst)) {
    std::lock_guard<std::mutex> guard(mu_);
    work_cv_.notify_one();
  }
  if (opts_.blocking) {
    wait_for(seq);
    raise_pending_error();
  }
  return seq;
}

void Queue::run_sync(const char* name, const std::function<void()>& fn) {
  refuse_while_capturing(name);
  std::exception_ptr own;
  submit_gathered();
  // The task runs while this frame waits for it, so it may hold references into the frame.
  const uint64_t seq = submit_now(name, [&fn, &own] {
    try {
      fn();
    } catch (...) {
      own = std::current_exception();
    }
  });
  wait_for(seq);
  raise_error_through(seq);
  if (own) std::rethrow_exception(own);
}

void Queue::finish_one(uint64_t seq) {
  // seq_cst pairs with wait_for: a waiter registers then reads completed_, this thread writes
  // completed_ then reads waiters_; one of them sees the other (a release store would let the
  // read of waiters_ pass it, and a waiter could sleep forever).
  completed_.store(seq, std::memory_order_seq_cst);
  if (waiters_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    done_cv_.notify_all();
  }
}

void Queue::worker_loop() {
  tls_current = this;
  if (thread_init_hook()) thread_init_hook()();
  uint64_t next = 1;
  int64_t since = -1;  // the current busy period's start; the atomics mirror it for busy_ns()
  for (;;) {
    if (since >= 0 && submitted_.load(std::memory_order_acquire) < next) {  // ran dry: the period ends
      busy_ns_.store(busy_ns_.load(std::memory_order_relaxed) + now_ns() - since, std::memory_order_relaxed);
      busy_since_ns_.store(since = -1, std::memory_order_relaxed);
    }
    if (!poll_while([&] { return submitted_.load(std::memory_order_acquire) < next; }, spin(kWorkerSpin))) {
      std::unique_lock<std::mutex> lock(mu_);
      worker_sleeping_.store(true, std::memory_order_seq_cst);
      work_cv_.wait(lock, [&] { return stop_.load() || submitted_.load(std::memory_order_seq_cst) >= next; });
      worker_sleeping_.store(false, std::memory_order_relaxed);
      if (submitted_.load(std::memory_order_acquire) < next) return;  // stopping, drained
    }
    if (since < 0) busy_since_ns_.store(since = now_ns(), std::memory_order_relaxed);
    run_task(slots_[(next - 1) % kSlots], next);
    finish_one(next);
    ++next;
  }
}

std::string Queue::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_error_;
}

uint64_t Queue::busy_ns() const {
  const int64_t since = busy_since_ns_.load(std::memory_order_relaxed);
  const int64_t done = busy_ns_.load(std::memory_order_relaxed);
  return static_cast<uint64_t>(done + (since >= 0 ? std::max<int64_t>(0, now_ns() - since) : 0));
}

void Queue::run_task(Slot& slot, uint64_t seq) {
  const int64_t start = trace::on() && !slot.container ? trace::now_ns() : 0;
  tls_replay_origin = &slot.origin;
  try {
    if (opts_.enter) opts_.enter();
    slot.call(slot.storage);
    if (opts_.leave) opts_.leave();
  } catch (...) {
    if (opts_.leave) opts_.leave();
    record_error(seq, slot.name, std::current_exception());
  }
  // Captures are released before the task counts as done.
  slot.destroy(slot.storage);
  if (start != 0) record_span(slot.name, slot.origin, start);
}

void Queue::record_error(uint64_t seq, const char* name, std::exception_ptr error) {
  std::string task = name ? name : "?";
  if (tls_failed_task != nullptr) {
    task += "' (its task '" + std::string(tls_failed_task) + "')";
    tls_failed_task = nullptr;
  } else {
    task += "'";
  }
  std::string what = "neuron: task '" + task + " failed on " + opts_.name + ": " + describe(error);
  failed_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  last_error_ = what;
  if (!error_) {
    error_seq_ = seq;
    error_what_ = std::move(what);
    error_ = std::move(error);
  }
}

void Queue::raise_error_locked(std::unique_lock<std::mutex>& lock) {
  std::exception_ptr cause = std::move(error_);
  std::string what = std::move(error_what_);
  error_ = nullptr;
  error_what_.clear();
  lock.unlock();
  throw TaskError(what, cause);
}

void Queue::raise_pending_error() {
  std::unique_lock<std::mutex> lock(mu_);
  if (error_) raise_error_locked(lock);
}

void Queue::raise_error_through(uint64_t seq) {
  std::unique_lock<std::mutex> lock(mu_);
  if (error_ && error_seq_ <= seq) raise_error_locked(lock);
}

void Queue::wait_for(uint64_t seq) const {
  if (is_complete(seq)) return;
  const auto until = std::chrono::steady_clock::now() + spin(kWaitSpin);
  while (std::chrono::steady_clock::now() < until) {
    if (is_complete(seq)) return;
    NEURONRT_PAUSE();
  }
  waiters_.fetch_add(1, std::memory_order_seq_cst);
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return is_complete(seq); });
  }
  waiters_.fetch_sub(1, std::memory_order_seq_cst);
}

bool Queue::wait_for(uint64_t seq, std::chrono::microseconds timeout) const {
  if (is_complete(seq)) return true;
  waiters_.fetch_add(1, std::memory_order_seq_cst);
  bool done;
  {
    std::unique_lock<std::mutex> lock(mu_);
    done = done_cv_.wait_for(lock, timeout, [&] { return is_complete(seq); });
  }
  waiters_.fetch_sub(1, std::memory_order_seq_cst);
  return done;
}

void Queue::synchronize() {
  refuse_while_capturing("synchronize");
  submit_gathered();
  wait_for(last_submitted());
  raise_pending_error();
}

bool Queue::query() {
  refuse_while_capturing("query");
  submit_gathered();
  return is_complete(last_submitted());
}

void Event::record(Queue& queue) {
  auto stamp = std::make_shared<std::atomic<int64_t>>(0);
  const bool timing = timing_;
  if (queue.capturing()) {
    // Recorded work has no queue position until a replay: the event marks what came before the
    // capture (the autograd engine and stream hand-offs record events inside captured regions).
    queue_ = &queue;
    seq_ = queue.last_submitted();
    stamp_ns_ = std::move(stamp);
    return;
  }
  queue.submit_gathered();
  seq_ = queue.submit_now("event_record", [stamp, timing] {
    if (timing) stamp->store(now_ns(), std::memory_order_release);
  });
  queue_ = &queue;
  stamp_ns_ = std::move(stamp);
}

bool Event::query() const { return !queue_ || queue_->is_complete(seq_); }

void Event::synchronize() const {
  if (!queue_) return;
  queue_->wait_for(seq_);
  queue_->raise_error_through(seq_);
}

void Event::block(Queue& waiter) const {
  if (!queue_ || queue_ == &waiter || queue_->is_complete(seq_)) return;
  Queue* source = queue_;
  const uint64_t seq = seq_;
  waiter.submit("event_wait", [source, seq] { source->wait_for(seq); });
}

double Event::elapsed_ms_since(const Event& start) const {
  if (!timing_ || !start.timing_) {
    throw std::invalid_argument("neuron: both events must be created with enable_timing=True");
  }
  if (!start.queue_ || !queue_) {
    throw std::invalid_argument("neuron: both events must be recorded before elapsed_time");
  }
  if (!start.query() || !query()) {
    throw std::invalid_argument("neuron: both events must have completed before elapsed_time");
  }
  return (stamp_ns_->load() - start.stamp_ns_->load()) / 1e6;
}

}  // namespace neuronrt
