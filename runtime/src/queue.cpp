#include "neuronrt/queue.h"

#include <chrono>
#include <stdexcept>

namespace neuronrt {
namespace {

std::function<void()>& thread_init_hook() {
  static std::function<void()> hook;
  return hook;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A worker that just ran dry keeps polling this long before it sleeps, so a host thread that
// issues op after op does not pay a wake-up per op; short enough not to steal a core for long.
constexpr auto kSpin = std::chrono::microseconds(50);

}  // namespace

void Queue::set_thread_init_hook(std::function<void()> hook) { thread_init_hook() = std::move(hook); }

Queue::Queue(QueueOptions options) : opts_(std::move(options)) {
  worker_ = std::thread([this] { worker_loop(); });
}

Queue::~Queue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  worker_.join();
}

uint64_t Queue::submit(const char* name, Task fn) {
  uint64_t seq;
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    items_.push_back({name, std::move(fn)});
    seq = submitted_.fetch_add(1, std::memory_order_acq_rel) + 1;
    wake = worker_sleeping_.load(std::memory_order_acquire);
  }
  if (wake) work_cv_.notify_one();
  if (opts_.blocking) {
    wait_for(seq);
    raise_pending_error();
  }
  return seq;
}

void Queue::run_inline(const Task& fn) {
  synchronize();
  try {
    if (opts_.enter) opts_.enter();
    fn();
  } catch (...) {
    if (opts_.leave) opts_.leave();
    throw;
  }
  if (opts_.leave) opts_.leave();
}

void Queue::finish_one() {
  completed_.fetch_add(1, std::memory_order_acq_rel);
  if (waiters_.load(std::memory_order_acquire) > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    done_cv_.notify_all();
  }
}

void Queue::worker_loop() {
  if (thread_init_hook()) thread_init_hook()();
  for (;;) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (items_.empty() && !stop_) {
        lock.unlock();
        const auto until = std::chrono::steady_clock::now() + kSpin;
        while (std::chrono::steady_clock::now() < until) {
          if (submitted_.load(std::memory_order_acquire) !=
              completed_.load(std::memory_order_acquire))
            break;
          std::this_thread::yield();
        }
        lock.lock();
        worker_sleeping_.store(true, std::memory_order_release);
        work_cv_.wait(lock, [&] { return stop_ || !items_.empty(); });
        worker_sleeping_.store(false, std::memory_order_release);
      }
      if (items_.empty() && stop_) return;
      item = std::move(items_.front());
      items_.pop_front();
    }
    run_task(item.name, item.fn);
    item.fn = nullptr;  // release captures before the task counts as done
    finish_one();
  }
}

void Queue::run_task(const char* name, const Task& fn) {
  try {
    if (opts_.enter) opts_.enter();
    fn();
    if (opts_.leave) opts_.leave();
  } catch (const std::exception& e) {
    if (opts_.leave) opts_.leave();
    record_error(name, e.what());
  } catch (...) {
    if (opts_.leave) opts_.leave();
    record_error(name, "unknown exception");
  }
}

void Queue::record_error(const char* name, const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_.empty()) {
    error_ = "neuron: task '" + std::string(name ? name : "?") + "' failed on " + opts_.name +
             ": " + what;
  }
}

void Queue::raise_pending_error() {
  std::string err;
  {
    std::lock_guard<std::mutex> lock(mu_);
    err.swap(error_);
  }
  if (!err.empty()) throw TaskError(err);
}

void Queue::wait_for(uint64_t seq) const {
  if (is_complete(seq)) return;
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
  while (std::chrono::steady_clock::now() < until) {
    if (is_complete(seq)) return;
  }
  waiters_.fetch_add(1, std::memory_order_acq_rel);
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return is_complete(seq); });
  }
  waiters_.fetch_sub(1, std::memory_order_acq_rel);
}

void Queue::synchronize() {
  wait_for(last_submitted());
  raise_pending_error();
}

bool Queue::query() const { return is_complete(last_submitted()); }

void Event::record(Queue& queue) {
  auto stamp = std::make_shared<std::atomic<int64_t>>(0);
  const bool timing = timing_;
  seq_ = queue.submit("event_record", [stamp, timing] {
    if (timing) stamp->store(now_ns(), std::memory_order_release);
  });
  queue_ = &queue;
  stamp_ns_ = std::move(stamp);
}

bool Event::query() const { return !queue_ || queue_->is_complete(seq_); }

void Event::synchronize() const {
  if (queue_) queue_->wait_for(seq_);
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
