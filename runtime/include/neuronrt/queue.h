// In-order asynchronous execution queues (the streams of a logical core) and events.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace neuronrt {

using Task = std::function<void()>;

// Raised at a synchronizing call for a task that failed earlier on a queue.
class TaskError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct QueueOptions {
  std::string name;              // "neuron:0 stream 3", for error messages
  bool blocking = false;         // every submit waits for its task (NEURON_LAUNCH_BLOCKING)
  std::function<void()> enter;   // around every task: the sanitizer opens device memory
  std::function<void()> leave;
};

class Queue {
 public:
  explicit Queue(QueueOptions options);
  ~Queue();
  Queue(const Queue&) = delete;
  Queue& operator=(const Queue&) = delete;

  // `name` must outlive the task (an operator name or a literal). Returns the task's sequence
  // number; a task that throws records its error, which the next synchronizing call raises.
  uint64_t submit(const char* name, Task fn);
  // Waits for the queue to drain (raising a recorded error), then runs `fn` on the calling
  // thread with device memory open: for work whose results the host needs at once. Exceptions
  // from `fn` propagate to the caller.
  void run_inline(const Task& fn);

  void synchronize();                 // all submitted work; raises a recorded error
  bool query() const;                 // true when all submitted work has finished
  void wait_for(uint64_t seq) const;  // until task `seq` has finished (no error check)
  bool is_complete(uint64_t seq) const { return completed_.load(std::memory_order_acquire) >= seq; }
  uint64_t last_submitted() const { return submitted_.load(std::memory_order_acquire); }
  uint64_t tasks_completed() const { return completed_.load(std::memory_order_acquire); }
  void raise_pending_error();

  // Called once on each worker thread before its first task (the torch layer sets up
  // thread-local state there).
  static void set_thread_init_hook(std::function<void()> hook);

 private:
  struct Item {
    const char* name;
    Task fn;
  };
  void worker_loop();
  void run_task(const char* name, const Task& fn);
  void record_error(const char* name, const std::string& what);
  void finish_one();

  QueueOptions opts_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  mutable std::condition_variable done_cv_;
  std::deque<Item> items_;
  std::atomic<uint64_t> submitted_{0};
  std::atomic<uint64_t> completed_{0};
  std::atomic<bool> worker_sleeping_{false};
  mutable std::atomic<int> waiters_{0};
  bool stop_ = false;
  std::string error_;  // first failure since the last synchronizing call
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
