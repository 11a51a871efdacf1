// Eager op concatenation on a queue (Queue::defer): the open segment, its signature, the
// segments seen, and how a closed segment is queued.
#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <unordered_set>

#include "neuronrt/queue.h"

namespace neuronrt {

namespace {

struct ConcatState {
  std::mutex mu;
  std::unordered_set<uint64_t> seen;  // signatures of the segments closed so far (bounded)
  std::atomic<size_t> limit{1024};
  void (*hook)(void*) = nullptr;
  std::atomic<uint64_t> built{0}, hit{0}, tasks{0};
};

ConcatState& concat_state() {
  static auto* s = new ConcatState();  // leaked: queues flush at exit
  return *s;
}

// The task's key folded into the segment's signature; order matters.
uint64_t fold(uint64_t h, uint64_t key) {
  h ^= key + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdULL;
}

// A slot's inline form of a task held on the heap.
struct HeapTask {
  void* fn;
  void (*call)(void*);
  void (*destroy)(void*);
};

}  // namespace

// The tasks of a segment seen before, run in order as one queue task.
struct Queue::ConcatTask {
  std::vector<Gathered> tasks;
  ~ConcatTask() {
    for (auto& t : tasks) t.destroy(t.fn);
  }
  void operator()() const { run_in_order(tasks); }
};

Queue::ConcatStats Queue::concat_stats() {
  auto& c = concat_state();
  ConcatStats s;
  s.segments_built = c.built.load();
  s.segments_hit = c.hit.load();
  s.tasks_concatenated = c.tasks.load();
  return s;
}

void Queue::reset_concat_stats() {
  auto& c = concat_state();
  std::lock_guard<std::mutex> lock(c.mu);
  c.seen.clear();
  c.built = 0;
  c.hit = 0;
  c.tasks = 0;
}

void Queue::set_concat_limit(size_t tasks) { concat_state().limit = std::max<size_t>(1, tasks); }

void Queue::set_concatenated_hook(void (*hook)(void* tag)) { concat_state().hook = hook; }

std::atomic<Queue*> Queue::segment_owner_{nullptr};

void Queue::defer_gathered(Gathered g, uint64_t key, void* tag) {
  close_other_segment();
  std::unique_lock<std::mutex> lock(submit_mu_);
  if (stop_.load(std::memory_order_relaxed)) {
    g.destroy(g.fn);
    throw std::runtime_error("neuron: " + opts_.name + " has shut down (the interpreter is exiting)");
  }
  try {
    deferred_.push_back({g, tag});
  } catch (...) {
    g.destroy(g.fn);
    throw;
  }
  deferred_key_ = fold(deferred_key_, key);
  has_deferred_.store(true, std::memory_order_release);
  segment_owner_.store(this, std::memory_order_release);
  if (deferred_.size() < concat_state().limit.load(std::memory_order_relaxed)) return;
  flush_deferred_locked();
  lock.unlock();
  wake_worker();
}

uint64_t Queue::place_locked(const char* name, bool container, const trace::Origin& origin, void* fn,
                             void (*call)(void*), void (*destroy)(void*)) {
  Slot& slot = reserve_locked();
  new (slot.storage) HeapTask{fn, call, destroy};
  slot.call = [](void* p) {
    auto* t = static_cast<HeapTask*>(p);
    t->call(t->fn);
  };
  slot.destroy = [](void* p) {
    auto* t = static_cast<HeapTask*>(p);
    t->destroy(t->fn);
  };
  slot.name = name;
  slot.container = container;
  slot.origin = origin;
  const uint64_t seq = submitted_.load(std::memory_order_relaxed) + 1;
  submitted_.store(seq, std::memory_order_seq_cst);
  // Now, not after the segment: a segment longer than the ring waits for the worker to free slots.
  wake_worker();
  return seq;
}

void Queue::flush_deferred_locked() {
  std::vector<Deferred> segment;
  segment.swap(deferred_);
  const uint64_t key = fold(deferred_key_, segment.size());
  deferred_key_ = 0;
  has_deferred_.store(false, std::memory_order_release);
  Queue* self = this;
  segment_owner_.compare_exchange_strong(self, nullptr, std::memory_order_acq_rel);
  if (segment.empty()) return;
  auto& c = concat_state();
  bool seen = false;
  if (segment.size() > 1) {
    std::lock_guard<std::mutex> guard(c.mu);
    seen = c.seen.count(key) != 0;
    if (!seen) {
      if (c.seen.size() >= (1u << 16)) c.seen.clear();  // bounded: a workload's segments come back
      c.seen.insert(key);
    }
  }
  if (!seen) {
    // Task by task, as submit would have queued them. A task whose slot cannot be had (the queue
    // stopped) is destroyed with the ones after it.
    size_t placed = 0;
    try {
      for (; placed < segment.size(); ++placed) {
        const Gathered& g = segment[placed].task;
        place_locked(g.name, false, g.origin, g.fn, g.call, g.destroy);
      }
    } catch (...) {
      for (size_t i = placed; i < segment.size(); ++i) segment[i].task.destroy(segment[i].task.fn);
      throw;
    }
    if (segment.size() > 1) c.built.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  auto* task = new ConcatTask();
  task->tasks.reserve(segment.size());
  for (const auto& d : segment) task->tasks.push_back(d.task);
  try {
    place_locked(
        "neuron::concatenated", true, trace::Origin{}, task, [](void* p) { (*static_cast<ConcatTask*>(p))(); },
        [](void* p) { delete static_cast<ConcatTask*>(p); });
  } catch (...) {
    delete task;
    throw;
  }
  c.hit.fetch_add(1, std::memory_order_relaxed);
  c.tasks.fetch_add(segment.size(), std::memory_order_relaxed);
  if (c.hook != nullptr) {
    for (const auto& d : segment) c.hook(d.tag);
  }
}

}  // namespace neuronrt
