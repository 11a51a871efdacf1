#include "neuronrt/trace.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>

namespace neuronrt {
namespace trace {
namespace {

std::atomic<bool> g_on{false};
std::mutex g_mu;
std::vector<Span> g_spans;  // under g_mu
uint64_t g_dropped = 0;     // under g_mu
std::atomic<uint64_t (*)()> g_note_source{nullptr};

struct Correlations {
  std::vector<uint64_t> ids;
  int32_t thread = static_cast<int32_t>(::syscall(SYS_gettid));
};
thread_local Correlations tls;

}  // namespace

bool on() { return g_on.load(std::memory_order_relaxed); }

void start() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_spans.clear();
  g_dropped = 0;
  g_on.store(true, std::memory_order_release);
}

std::vector<Span> stop() {
  g_on.store(false, std::memory_order_release);
  std::lock_guard<std::mutex> lock(g_mu);
  std::vector<Span> out;
  out.swap(g_spans);
  return out;
}

uint64_t dropped() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_dropped;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void push_correlation(uint64_t id) { tls.ids.push_back(id); }

void pop_correlation() {
  if (!tls.ids.empty()) tls.ids.pop_back();
}

void set_note_source(uint64_t (*source)()) { g_note_source.store(source); }

Origin origin_now() {
  Origin o;
  if (auto* source = g_note_source.load(std::memory_order_relaxed)) o.note = source();
  o.correlation = tls.ids.empty() ? 0 : tls.ids.back();
  o.thread = tls.thread;
  o.queued_ns = now_ns();
  return o;
}

void end_origin(Origin& origin) { origin.queued_end_ns = now_ns(); }

void record(const Span& span) {
  std::lock_guard<std::mutex> lock(g_mu);
  // A trace that started while the task was queued keeps it; one that stopped drops it.
  if (!g_on.load(std::memory_order_relaxed)) return;
  if (g_spans.size() >= kMaxSpans) {
    g_dropped++;
    return;
  }
  g_spans.push_back(span);
}

}  // namespace trace
}  // namespace neuronrt
