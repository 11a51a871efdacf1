// The neuron caching allocator. Its policy, as CUDA's caching allocator:
// - Device memory is taken from the runtime in segments: requests up to 1 MiB (the small pool)
//   are carved from 2 MiB segments, requests below 10 MiB from 20 MiB segments, larger ones get a
//   segment of their own rounded to 2 MiB. Blocks are multiples of 512 bytes.
// - A freed block is cached, tied to the stream it was allocated for (every block of a segment
//   has the segment's stream). Later allocations for that stream reuse it without waiting: the
//   stream's queue runs in order, so work queued before the free has finished with the memory
//   before work queued after the reuse starts.
// - Best fit among the stream's cached blocks of the request's pool. A larger block is split; the
//   rest stays cached (small pool: if at least 512 bytes are left; large pool: if more than 1 MiB).
//   A freed block merges with free neighbours of its segment.
// - A block used on other streams (record_stream) is not cached until events recorded on those
//   streams at free time have completed.
// - When the device is full: wait for the device, give every entirely free segment back, retry
//   once; then raise torch.OutOfMemoryError naming the sizes and the largest free block. The
//   allocator stays usable. empty_cache() gives entirely free segments back.
// - Allocations made while a task runs (a kernel's own outputs) take a fresh segment, never a
//   cached block: a block the host freed after queuing later work may still be used by that work.
//   They never wait. Freed, they are cached like any block.
// - While a stream captures a graph, its host allocations take fresh memory of the capture's
//   pool, and blocks freed meanwhile, or freed later from that pool, are held until the graph is
//   released (allocator.h: CapturePool).
// - The host never touches a block's contents: copies and fills are tasks on the stream.
#include "core/allocator.h"

#include <c10/core/Allocator.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/memory_history.h"

namespace torch_neuronx {
namespace {

using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

constexpr size_t kMinBlock = 512;
constexpr size_t kSmallSize = 1 << 20;
constexpr size_t kSmallSegment = 2 << 20;
constexpr size_t kMinLargeAlloc = 10 << 20;
constexpr size_t kLargeSegment = 20 << 20;
constexpr size_t kRoundLarge = 2 << 20;

struct Block;

}  // namespace

struct CachingAllocator::CapturePool {
  c10::StreamId stream;
  bool alive = true;         // held blocks wait for release_capture_pool
  std::vector<Block*> held;  // freed blocks whose addresses the graph's work may use
};

namespace {

using CapturePool = CachingAllocator::CapturePool;

struct Block {
  int device;
  c10::StreamId stream;
  size_t size;
  size_t requested = 0;
  void* ptr;
  bool small;  // its pool
  bool allocated = false;
  bool pending = false;   // freed, waiting for events of other streams
  Block* prev = nullptr;  // neighbours within the segment
  Block* next = nullptr;
  std::set<c10::StreamId> uses;  // other streams that used it (record_stream)
  std::vector<std::unique_ptr<neuronrt::Event>> events;
  std::shared_ptr<CapturePool> pool;                 // a graph capture's, if it was allocated while one ran
  std::shared_ptr<torch::CapturedTraceback> frames;  // what allocated it (memory history)

  bool whole_segment() const { return !prev && !next; }
};

struct BlockOrder {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return a->stream < b->stream;
    if (a->size != b->size) return a->size < b->size;
    return a->ptr < b->ptr;
  }
};
using Pool = std::set<Block*, BlockOrder>;

size_t round_size(size_t n) { return n < kMinBlock ? kMinBlock : (n + kMinBlock - 1) / kMinBlock * kMinBlock; }

size_t segment_size(size_t size) {
  if (size <= kSmallSize) return kSmallSegment;
  if (size < kMinLargeAlloc) return kLargeSegment;
  return (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

std::string format_bytes(uint64_t n) {
  char buf[64];
  if (n >= (1ull << 30))
    snprintf(buf, sizeof buf, "%.2f GiB", n / double(1ull << 30));
  else if (n >= (1ull << 20))
    snprintf(buf, sizeof buf, "%.2f MiB", n / double(1ull << 20));
  else
    snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(n));
  return buf;
}

// The shortest text that reads back as `x` (1.0000001 stays 1.0000001, where %g gives 1).
std::string format_fraction(double x) {
  char buf[32];
  for (int digits = 1; digits <= 17; ++digits) {
    snprintf(buf, sizeof buf, "%.*g", digits, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  return buf;
}

template <class F>
void for_pools(bool small, F&& f) {
  f(static_cast<size_t>(StatType::AGGREGATE));
  f(static_cast<size_t>(small ? StatType::SMALL_POOL : StatType::LARGE_POOL));
}

struct DeviceState {
  std::mutex mu;
  Pool small, large;
  std::vector<Block*> pending;
  std::set<Block*> segments;  // each segment's first block (it lives as long as the segment)
  DeviceStats stats;
  double fraction = 1.0;                   // of the device's memory this process may reserve
  std::shared_ptr<CapturePool> capturing;  // the pool of the capture in progress on this device
  Pool& pool(bool is_small) { return is_small ? small : large; }
};

void free_block(void* ctx);

class Allocator final : public CachingAllocator {
 public:
  c10::DataPtr allocate(size_t n) override { return allocate_on(current_device(), n); }

  c10::DataPtr allocate_on(c10::DeviceIndex device, size_t n) override {
    if (const auto* q = neuronrt::Queue::current()) return allocate_fresh(device, q->tag(), n);
    auto& rt = runtime();  // raises in a forked child
    const c10::Device dev(kNeuron, device);
    if (n == 0) return c10::DataPtr(nullptr, nullptr, &free_block, dev);
    const c10::StreamId stream = current_stream(device).id();
    const size_t size = round_size(n);
    const bool small = size <= kSmallSize;
    auto& st = state(device);
    // Before the lock: gathering a stack may wait for the GIL, which an allocating thread may hold.
    auto frames = memory_history().gather(/*free=*/false);
    std::unique_lock<std::mutex> lock(st.mu);
    if (st.capturing && st.capturing->stream == stream) {
      std::shared_ptr<CapturePool> pool = st.capturing;
      lock.unlock();
      c10::DataPtr fresh = allocate_fresh(device, stream, n);
      static_cast<Block*>(fresh.get_context())->pool = std::move(pool);  // the block is ours alone yet
      return fresh;
    }
    collect_pending_locked(st);
    Block* b = take_cached_locked(st, stream, size, small);
    if (!b) {
      // Only here, off the cached path: a device that refuses work never has a cached block.
      if (!rt.usable(device)) {
        lock.unlock();
        checked([&] { rt.check_usable(device); });
      }
      const size_t seg = segment_size(size);
      void* p = take_segment_locked(st, device, seg);
      if (!p) {
        // Give entirely free segments back and retry. Cached blocks may still be read by queued
        // work of their stream, so the device must drain first.
        st.stats.num_alloc_retries++;
        lock.unlock();
        checked([&] { rt.synchronize_device(device); });
        lock.lock();
        collect_pending_locked(st);
        release_free_segments_locked(st);
        p = take_segment_locked(st, device, seg);
      }
      if (!p) {
        st.stats.num_ooms++;
        const size_t a = static_cast<size_t>(StatType::AGGREGATE);
        const uint64_t allocated = st.stats.allocated_bytes[a].current;
        const uint64_t reserved = st.stats.reserved_bytes[a].current;
        const uint64_t cached = largest_cached_locked(st);
        const auto& mem = rt.memory(device);
        const uint64_t capacity = mem.capacity(), free = capacity - mem.used(), largest = mem.largest_free();
        memory_history().record({"oom", device, 0, n, stream, 0, free, frames});
        lock.unlock();
        TORCH_CHECK_WITH(OutOfMemoryError, false, "neuron out of memory. Tried to allocate ", format_bytes(n),
                         " on neuron:", static_cast<int>(device), " (", rt.topology().profile->name,
                         " logical core with ", format_bytes(capacity), " of device memory): ", format_bytes(allocated),
                         " is allocated by PyTorch, ", format_bytes(reserved),
                         " is reserved by the caching allocator (", "largest cached free block ", format_bytes(cached),
                         "), ", format_bytes(free), " is free on the device (largest free block ",
                         format_bytes(largest), ")", fraction_note_locked(st, capacity),
                         ". Free tensors or call torch.neuron.empty_cache(); the allocator is still usable. "
                         "torch.neuron.memory_summary() shows what holds the memory.");
      }
      b = new_segment_locked(st, device, stream, seg, p, small);
    }
    split_locked(st, b, size);
    return hand_out_locked(st, b, n, std::move(frames));
  }

  c10::DataPtr allocate_fresh(c10::DeviceIndex device, c10::StreamId stream, size_t n) override {
    const c10::Device dev(kNeuron, device);
    if (n == 0) return c10::DataPtr(nullptr, nullptr, &free_block, dev);
    const size_t size = round_size(n);
    auto& st = state(device);
    auto frames = memory_history().gather(/*free=*/false);
    std::unique_lock<std::mutex> lock(st.mu);
    void* p = take_segment_locked(st, device, size);
    if (!p) {
      st.stats.num_ooms++;
      const auto& mem = runtime().memory(device);
      const uint64_t free = mem.capacity() - mem.used();
      const std::string note = fraction_note_locked(st, mem.capacity());
      lock.unlock();
      TORCH_CHECK_WITH(OutOfMemoryError, false, "neuron out of memory. A kernel tried to allocate ", format_bytes(n),
                       " on neuron:", static_cast<int>(device), " while it ran; ", format_bytes(free),
                       " is free on the device", note, ". Free tensors or call torch.neuron.empty_cache().");
    }
    return hand_out_locked(st, new_segment_locked(st, device, stream, size, p, size <= kSmallSize), n,
                           std::move(frames));
  }

  c10::DataPtr adopt(void* context, c10::Device device) override {
    auto* b = static_cast<Block*>(context);
    return c10::DataPtr(b->ptr, b, &free_block, device);
  }

  void release(Block* b) {
    if (forked_child()) return;  // the parent's blocks; this process may not touch the device
    auto& st = state(b->device);
    auto frames = memory_history().gather(/*free=*/true);
    std::lock_guard<std::mutex> lock(st.mu);
    memory_history().record({"free_requested", b->device, addr(b), b->size, b->stream, 0, 0, std::move(frames)});
    b->frames.reset();
    for_pools(b->small, [&](size_t i) {
      st.stats.allocation[i].decrease(1);
      st.stats.allocated_bytes[i].decrease(b->size);
      st.stats.requested_bytes[i].decrease(b->requested);
    });
    report_to_profiler_locked(st, b, -static_cast<int64_t>(b->size));
    b->allocated = false;
    if (b->pool && !b->pool->alive) b->pool.reset();
    if (!b->pool && st.capturing) b->pool = st.capturing;  // the captured work may use it
    if (b->pool) {
      b->uses.clear();
      b->pool->held.push_back(b);
      return;
    }
    if (!b->uses.empty() && !runtime_stopped()) {
      for (c10::StreamId s : b->uses) {
        auto ev = std::make_unique<neuronrt::Event>();
        ev->record(runtime().queue(b->device, static_cast<int>(s)));
        b->events.push_back(std::move(ev));
      }
      b->uses.clear();
      b->pending = true;
      st.pending.push_back(b);
      return;
    }
    b->uses.clear();
    cache_locked(st, b);
  }

  c10::DeleterFnPtr raw_deleter() const override { return &free_block; }

  void copy_data(void* dst, const void* src, size_t n) const override {
    auto& q = current_queue();
    checked([&] {
      runtime().copy_async(q, dst, src, n, neuronrt::Runtime::kDeviceToDevice);
      q.synchronize();
    });
  }

  bool initialized() override { return true; }

  void emptyCache(c10::MempoolId_t) override {
    for (int d = 0; d < device_count(); ++d) {
      checked([&] { runtime().synchronize_device(d); });
      auto& st = state(d);
      std::lock_guard<std::mutex> lock(st.mu);
      collect_pending_locked(st);
      release_free_segments_locked(st);
    }
  }

  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    if (!ptr.get() || ptr.get_deleter() != &free_block) return;
    auto* b = static_cast<Block*>(ptr.get_context());
    auto& st = state(b->device);
    std::lock_guard<std::mutex> lock(st.mu);
    if (stream.id() != b->stream) b->uses.insert(stream.id());
  }

  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    auto& st = state(device);
    std::lock_guard<std::mutex> lock(st.mu);
    return st.stats;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    auto& st = state(device);
    std::lock_guard<std::mutex> lock(st.mu);
    for_each_stat(st, [](c10::CachingAllocator::Stat& s) { s.reset_accumulated(); });
    st.stats.num_alloc_retries = 0;
    st.stats.num_ooms = 0;
    st.stats.num_device_alloc = 0;
    st.stats.num_device_free = 0;
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    auto& st = state(device);
    std::lock_guard<std::mutex> lock(st.mu);
    for_each_stat(st, [](c10::CachingAllocator::Stat& s) { s.reset_peak(); });
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    check_device_index(device);
    const auto& mem = runtime().memory(device);
    return {mem.capacity() - mem.used(), mem.capacity()};
  }

  bool owns(const c10::DataPtr& data_ptr) const override { return data_ptr.get_deleter() == &free_block; }

  void begin_capture_pool(c10::DeviceIndex device, c10::StreamId stream) override {
    auto& st = state(device);
    std::lock_guard<std::mutex> lock(st.mu);
    TORCH_CHECK(!st.capturing, "neuron: a graph is already being captured on neuron:", static_cast<int>(device),
                "; one capture per device at a time");
    st.capturing = std::make_shared<CapturePool>();
    st.capturing->stream = stream;
  }

  std::shared_ptr<CapturePool> end_capture_pool(c10::DeviceIndex device) override {
    auto& st = state(device);
    std::lock_guard<std::mutex> lock(st.mu);
    return std::move(st.capturing);
  }

  void release_capture_pool(c10::DeviceIndex device, const std::shared_ptr<CapturePool>& pool) override {
    if (!pool || forked_child()) return;
    auto& st = state(device);
    std::lock_guard<std::mutex> lock(st.mu);
    pool->alive = false;
    for (Block* b : pool->held) {
      b->pool.reset();
      cache_locked(st, b);
    }
    pool->held.clear();
  }

  void set_memory_fraction(double fraction, c10::DeviceIndex device) override {
    TORCH_CHECK(fraction >= 0.0 && fraction <= 1.0, "neuron: invalid memory fraction ", format_fraction(fraction),
                ": it must be between 0 and 1");
    auto& st = state(device);
    std::lock_guard<std::mutex> lock(st.mu);
    st.fraction = fraction;
  }

  std::vector<SegmentState> segments() override {
    std::vector<SegmentState> out;
    for (int d = 0; d < device_count(); ++d) {
      auto& st = state(static_cast<c10::DeviceIndex>(d));
      std::lock_guard<std::mutex> lock(st.mu);
      for (const Block* head : st.segments) {
        SegmentState seg{d, addr(head), 0, head->stream, head->small, {}};
        for (const Block* b = head; b != nullptr; b = b->next) {
          seg.total_size += b->size;
          seg.blocks.push_back({addr(b), b->size, b->allocated ? b->requested : 0,
                                b->allocated ? "active_allocated"
                                : b->pending ? "active_pending_free"
                                             : "inactive",
                                b->frames});
        }
        out.push_back(std::move(seg));
      }
    }
    return out;
  }

  double memory_fraction(c10::DeviceIndex device) override {
    auto& st = state(device);
    std::lock_guard<std::mutex> lock(st.mu);
    return st.fraction;
  }

 private:
  // A new segment from the device, or nullptr when the device, or this process's fraction of
  // it, has no room: reserved memory counts against the fraction, as on CUDA.
  void* take_segment_locked(DeviceState& st, c10::DeviceIndex device, size_t bytes) {
    auto& mem = runtime().memory(device);
    const uint64_t reserved = st.stats.reserved_bytes[static_cast<size_t>(StatType::AGGREGATE)].current;
    if (st.fraction < 1.0 &&
        static_cast<double>(reserved + bytes) > st.fraction * static_cast<double>(mem.capacity())) {
      return nullptr;
    }
    return mem.allocate(bytes);
  }

  std::string fraction_note_locked(const DeviceState& st, uint64_t capacity) const {
    if (st.fraction >= 1.0) return "";
    return "; this process may reserve only " + format_bytes(static_cast<uint64_t>(st.fraction * capacity)) +
           " of it (set_per_process_memory_fraction(" + format_fraction(st.fraction) + "))";
  }

  // One state per visible device, made on first use; an index outside them is an error.
  DeviceState& state(c10::DeviceIndex device) {
    check_device_index(device);
    std::call_once(states_once_, [this] {
      states_.resize(device_count());
      for (auto& s : states_) s = std::make_unique<DeviceState>();
    });
    return *states_[device];
  }

  static bool forked_child() { return neuronrt::Runtime::in_forked_child(); }
  static bool runtime_stopped() { return neuronrt::Runtime::stopped(); }

  template <class F>
  static void for_each_stat(DeviceState& st, F&& f) {
    for (auto* a : {&st.stats.allocation, &st.stats.segment, &st.stats.active, &st.stats.allocated_bytes,
                    &st.stats.reserved_bytes, &st.stats.active_bytes, &st.stats.requested_bytes}) {
      for (auto& s : *a) f(s);
    }
  }

  Block* new_segment_locked(DeviceState& st, c10::DeviceIndex device, c10::StreamId stream, size_t size, void* p,
                            bool small) {
    st.stats.num_device_alloc++;
    for_pools(small, [&](size_t i) {
      st.stats.segment[i].increase(1);
      st.stats.reserved_bytes[i].increase(size);
    });
    auto* b = new Block{device, stream, size, 0, p, small};
    st.segments.insert(b);
    memory_history().record({"segment_alloc", device, addr(b), size, stream, 0});
    return b;
  }

  static uint64_t addr(const Block* b) { return reinterpret_cast<uint64_t>(b->ptr); }

  c10::DataPtr hand_out_locked(DeviceState& st, Block* b, size_t n, std::shared_ptr<torch::CapturedTraceback> frames) {
    b->allocated = true;
    b->requested = n;
    memory_history().record({"alloc", b->device, addr(b), b->size, b->stream, 0, 0, frames});
    if (memory_history().keeps_state()) b->frames = std::move(frames);
    for_pools(b->small, [&](size_t i) {
      st.stats.allocation[i].increase(1);
      st.stats.active[i].increase(1);
      st.stats.allocated_bytes[i].increase(b->size);
      st.stats.active_bytes[i].increase(b->size);
      st.stats.requested_bytes[i].increase(n);
    });
    report_to_profiler_locked(st, b, static_cast<int64_t>(b->size));
    return c10::DataPtr(b->ptr, b, &free_block, c10::Device(kNeuron, static_cast<c10::DeviceIndex>(b->device)));
  }

  // torch.profiler(profile_memory=True) records device allocations and frees, as CUDA's allocator
  // reports them (only on the thread that profiles; a queue worker's allocations are not the user's).
  static void report_to_profiler_locked(DeviceState& st, const Block* b, int64_t delta) {
    if (!c10::memoryProfilingEnabled()) return;
    const size_t a = static_cast<size_t>(StatType::AGGREGATE);
    c10::reportMemoryUsageToProfiler(b->ptr, delta, st.stats.allocated_bytes[a].current,
                                     st.stats.reserved_bytes[a].current,
                                     c10::Device(kNeuron, static_cast<c10::DeviceIndex>(b->device)));
  }

  // Best fit among the stream's cached blocks of the pool.
  Block* take_cached_locked(DeviceState& st, c10::StreamId stream, size_t size, bool small) {
    Pool& pool = st.pool(small);
    Block key{0, stream, size, 0, nullptr, small};
    auto it = pool.lower_bound(&key);
    if (it == pool.end() || (*it)->stream != stream) return nullptr;
    Block* b = *it;
    pool.erase(it);
    return b;
  }

  // Keeps `size` bytes of `b` and caches the rest as a block of its own.
  void split_locked(DeviceState& st, Block* b, size_t size) {
    const size_t rest = b->size - size;
    if (b->small ? rest < kMinBlock : rest <= kSmallSize) return;
    auto* r = new Block{b->device, b->stream, rest, 0, static_cast<char*>(b->ptr) + size, b->small};
    r->prev = b;
    r->next = b->next;
    if (b->next) b->next->prev = r;
    b->next = r;
    b->size = size;
    st.pool(r->small).insert(r);
  }

  // A free block joins its free neighbours and the pool.
  void cache_locked(DeviceState& st, Block* b) {
    memory_history().record({"free_completed", b->device, addr(b), b->size, b->stream, 0});
    for_pools(b->small, [&](size_t i) {
      st.stats.active[i].decrease(1);
      st.stats.active_bytes[i].decrease(b->size);
    });
    b->pending = false;
    Pool& pool = st.pool(b->small);
    for (Block* n : {b->prev, b->next}) {
      if (!n || n->allocated || n->pending) continue;
      pool.erase(n);
      if (n == b->prev) {
        n->size += b->size;
        n->next = b->next;
        if (b->next) b->next->prev = n;
        delete b;
        b = n;
      } else {
        b->size += n->size;
        b->next = n->next;
        if (n->next) n->next->prev = b;
        delete n;
      }
    }
    pool.insert(b);
  }

  void collect_pending_locked(DeviceState& st) {
    for (size_t i = 0; i < st.pending.size();) {
      Block* b = st.pending[i];
      bool done = true;
      for (auto& ev : b->events) done = done && ev->query();
      if (!done) {
        ++i;
        continue;
      }
      b->events.clear();
      st.pending[i] = st.pending.back();
      st.pending.pop_back();
      cache_locked(st, b);
    }
  }

  void release_free_segments_locked(DeviceState& st) {
    for (Pool* pool : {&st.small, &st.large}) {
      for (auto it = pool->begin(); it != pool->end();) {
        Block* b = *it;
        if (!b->whole_segment()) {
          ++it;
          continue;
        }
        runtime().memory(b->device).free(b->ptr);
        memory_history().record({"segment_free", b->device, addr(b), b->size, b->stream, 0});
        st.segments.erase(b);
        st.stats.num_device_free++;
        for_pools(b->small, [&](size_t i) {
          st.stats.segment[i].decrease(1);
          st.stats.reserved_bytes[i].decrease(b->size);
        });
        it = pool->erase(it);
        delete b;
      }
    }
  }

  size_t largest_cached_locked(DeviceState& st) {
    size_t largest = 0;
    for (Pool* pool : {&st.small, &st.large})
      for (Block* b : *pool) largest = std::max(largest, b->size);
    return largest;
  }

  std::once_flag states_once_;
  std::vector<std::unique_ptr<DeviceState>> states_;
};

Allocator& instance() {
  // Leaked on purpose: tensors die during interpreter shutdown after static destructors.
  static Allocator* a = new Allocator();
  return *a;
}

void free_block(void* ctx) {
  if (ctx) instance().release(static_cast<Block*>(ctx));
}

}  // namespace

CachingAllocator& caching_allocator() { return instance(); }

REGISTER_ALLOCATOR(kNeuron, &instance());

}  // namespace torch_neuronx
