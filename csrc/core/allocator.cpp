// The neuron caching allocator. Its policy:
// - Device memory comes from the runtime (one range per logical core, capacity enforced) in
//   blocks rounded to 512 bytes (up to 1 MiB: the small pool) or 128 KiB (the large pool).
// - A freed block is cached, tied to the stream it was allocated for. Later allocations for that
//   stream reuse it without waiting: the stream's queue runs in order, so work queued before the
//   free has finished reading it before work queued after the reuse starts.
// - Best fit among the stream's cached blocks, within a waste limit (2x for small blocks, 25% +
//   128 KiB for large ones): blocks are not split.
// - A block used on other streams (record_stream) is not cached until events recorded on those
//   streams at free time have completed.
// - When the device is full: wait for the device, give every cached block back, retry once;
//   then raise torch.OutOfMemoryError naming the sizes. The allocator stays usable.
// - Allocations made while a task runs (a kernel's own outputs) take fresh memory only, since
//   cached blocks may still be used by work queued after that task; they never wait.
// - The host never touches a block's contents: copies and fills are tasks on the stream.
#include "core/allocator.h"

#include <c10/core/Allocator.h>

#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "core/device.h"

namespace torch_neuronx {
namespace {

using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingAllocator::StatType;

constexpr size_t kSmallSize = 1 << 20;   // blocks up to this size are the small pool
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = 128 << 10;

struct Block {
  int device;
  c10::StreamId stream;
  size_t size;       // bytes reserved from the device
  size_t requested;  // bytes the caller asked for
  void* ptr;
  std::set<c10::StreamId> uses;  // other streams that used this block
  std::vector<std::unique_ptr<neuronrt::Event>> pending;
};

struct BlockOrder {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return a->stream < b->stream;
    if (a->size != b->size) return a->size < b->size;
    return a->ptr < b->ptr;
  }
};

size_t round_size(size_t n) {
  if (n <= kSmallSize) return (n + kSmallRound - 1) / kSmallRound * kSmallRound;
  return (n + kLargeRound - 1) / kLargeRound * kLargeRound;
}

std::string format_bytes(uint64_t n) {
  char buf[64];
  if (n >= (1ull << 30)) snprintf(buf, sizeof buf, "%.2f GiB", n / double(1ull << 30));
  else if (n >= (1ull << 20)) snprintf(buf, sizeof buf, "%.2f MiB", n / double(1ull << 20));
  else snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(n));
  return buf;
}

template <class F>
void for_pools(size_t size, F&& f) {
  f(static_cast<size_t>(StatType::AGGREGATE));
  f(static_cast<size_t>(size <= kSmallSize ? StatType::SMALL_POOL : StatType::LARGE_POOL));
}

struct DeviceState {
  std::mutex mu;
  std::set<Block*, BlockOrder> free_blocks;
  std::vector<Block*> pending;  // freed, waiting for other streams
  DeviceStats stats;
};

void free_block(void* ctx);

class Allocator final : public CachingAllocator {
 public:
  c10::DataPtr allocate(size_t n) override { return allocate_on(current_device(), n); }

  c10::DataPtr allocate_on(c10::DeviceIndex device, size_t n) override {
    if (const auto* q = neuronrt::Queue::current()) return allocate_fresh(device, q->tag(), n);
    const c10::Device dev(kNeuron, device);
    if (n == 0) return c10::DataPtr(nullptr, nullptr, &free_block, dev);
    const c10::StreamId stream = current_stream(device).id();
    const size_t size = round_size(n);
    auto& st = state(device);
    std::unique_lock<std::mutex> lock(st.mu);
    collect_pending_locked(st);
    Block* b = take_cached_locked(st, stream, size);
    if (!b) {
      void* p = runtime().memory(device).allocate(size);
      if (!p) {
        // Give the cache back to the device and retry. Cached blocks may still be read by
        // queued work of their stream, so the device must drain first.
        st.stats.num_alloc_retries++;
        lock.unlock();
        checked([&] { runtime().synchronize_device(device); });
        lock.lock();
        collect_pending_locked(st);
        release_cached_locked(st, device);
        p = runtime().memory(device).allocate(size);
      }
      if (!p) {
        st.stats.num_ooms++;
        const auto& agg = st.stats;
        const size_t a = static_cast<size_t>(StatType::AGGREGATE);
        const auto& mem = runtime().memory(device);
        const uint64_t allocated = agg.allocated_bytes[a].current;
        const uint64_t reserved = agg.reserved_bytes[a].current;
        const uint64_t capacity = mem.capacity(), used = mem.used();
        lock.unlock();
        TORCH_CHECK_WITH(OutOfMemoryError, false, "neuron out of memory. Tried to allocate ",
                         format_bytes(n), " on neuron:", static_cast<int>(device), " (",
                         runtime().topology().profile->name, " logical core with ", format_bytes(capacity),
                         " of device memory): ", format_bytes(allocated), " is allocated by PyTorch, ",
                         format_bytes(reserved), " is reserved by the caching allocator, ",
                         format_bytes(capacity - used), " is free. Free tensors or call ",
                         "torch.neuron.empty_cache(); the allocator is still usable.");
      }
      b = new_block_locked(st, device, stream, size, p);
    }
    return hand_out_locked(st, b, n);
  }

  c10::DataPtr allocate_fresh(c10::DeviceIndex device, c10::StreamId stream, size_t n) override {
    const c10::Device dev(kNeuron, device);
    if (n == 0) return c10::DataPtr(nullptr, nullptr, &free_block, dev);
    const size_t size = round_size(n);
    auto& st = state(device);
    std::unique_lock<std::mutex> lock(st.mu);
    void* p = runtime().memory(device).allocate(size);
    if (!p) {
      st.stats.num_ooms++;
      lock.unlock();
      TORCH_CHECK_WITH(OutOfMemoryError, false, "neuron out of memory. A kernel tried to allocate ", format_bytes(n),
                       " on neuron:", static_cast<int>(device), " while it ran; ", format_bytes(free_bytes(device)),
                       " is free. Free tensors or call torch.neuron.empty_cache().");
    }
    return hand_out_locked(st, new_block_locked(st, device, stream, size, p), n);
  }

  c10::DataPtr adopt(void* context, c10::Device device) override {
    auto* b = static_cast<Block*>(context);
    return c10::DataPtr(b->ptr, b, &free_block, device);
  }

  void release(Block* b) {
    auto& st = state(b->device);
    std::lock_guard<std::mutex> lock(st.mu);
    for_pools(b->size, [&](size_t i) {
      st.stats.allocation[i].decrease(1);
      st.stats.allocated_bytes[i].decrease(b->size);
      st.stats.requested_bytes[i].decrease(b->requested);
    });
    if (!b->uses.empty()) {
      for (c10::StreamId s : b->uses) {
        auto ev = std::make_unique<neuronrt::Event>();
        ev->record(runtime().queue(b->device, static_cast<int>(s)));
        b->pending.push_back(std::move(ev));
      }
      b->uses.clear();
      st.pending.push_back(b);
      return;
    }
    make_free_locked(st, b);
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
      release_cached_locked(st, d);
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
    auto reset = [](c10::CachingAllocator::StatArray& a) {
      for (auto& s : a) s.reset_accumulated();
    };
    reset(st.stats.allocation);
    reset(st.stats.segment);
    reset(st.stats.active);
    reset(st.stats.allocated_bytes);
    reset(st.stats.reserved_bytes);
    reset(st.stats.active_bytes);
    reset(st.stats.requested_bytes);
    st.stats.num_alloc_retries = 0;
    st.stats.num_ooms = 0;
    st.stats.num_device_alloc = 0;
    st.stats.num_device_free = 0;
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    auto& st = state(device);
    std::lock_guard<std::mutex> lock(st.mu);
    auto reset = [](c10::CachingAllocator::StatArray& a) {
      for (auto& s : a) s.reset_peak();
    };
    reset(st.stats.allocation);
    reset(st.stats.segment);
    reset(st.stats.active);
    reset(st.stats.allocated_bytes);
    reset(st.stats.reserved_bytes);
    reset(st.stats.active_bytes);
    reset(st.stats.requested_bytes);
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    const auto& mem = runtime().memory(device);
    return {mem.capacity() - mem.used(), mem.capacity()};
  }

  bool owns(const c10::DataPtr& data_ptr) const override {
    return data_ptr.get_deleter() == &free_block;
  }

 private:
  // One state per visible device, made on first use; an index outside them is an error.
  DeviceState& state(c10::DeviceIndex device) {
    check_device_index(device);
    std::call_once(states_once_, [this] {
      states_.resize(device_count());
      for (auto& s : states_) s = std::make_unique<DeviceState>();
    });
    return *states_[device];
  }

  uint64_t free_bytes(c10::DeviceIndex device) {
    const auto& mem = runtime().memory(device);
    return mem.capacity() - mem.used();
  }

  Block* new_block_locked(DeviceState& st, c10::DeviceIndex device, c10::StreamId stream, size_t size, void* p) {
    st.stats.num_device_alloc++;
    for_pools(size, [&](size_t i) {
      st.stats.segment[i].increase(1);
      st.stats.reserved_bytes[i].increase(size);
    });
    return new Block{device, stream, size, 0, p, {}, {}};
  }

  c10::DataPtr hand_out_locked(DeviceState& st, Block* b, size_t n) {
    b->requested = n;
    for_pools(b->size, [&](size_t i) {
      st.stats.allocation[i].increase(1);
      st.stats.active[i].increase(1);
      st.stats.allocated_bytes[i].increase(b->size);
      st.stats.active_bytes[i].increase(b->size);
      st.stats.requested_bytes[i].increase(n);
    });
    return c10::DataPtr(b->ptr, b, &free_block, c10::Device(kNeuron, static_cast<c10::DeviceIndex>(b->device)));
  }

  Block* take_cached_locked(DeviceState& st, c10::StreamId stream, size_t size) {
    Block key{0, stream, size, 0, nullptr, {}, {}};
    auto it = st.free_blocks.lower_bound(&key);
    if (it == st.free_blocks.end()) return nullptr;
    Block* b = *it;
    // Without splitting, a much larger block would waste what the caller does not use.
    const size_t limit = size <= kSmallSize ? 2 * size : size + size / 4 + kLargeRound;
    if (b->stream != stream || b->size > limit) return nullptr;
    st.free_blocks.erase(it);
    b->stream = stream;
    return b;
  }

  void make_free_locked(DeviceState& st, Block* b) {
    for_pools(b->size, [&](size_t i) {
      st.stats.active[i].decrease(1);
      st.stats.active_bytes[i].decrease(b->size);
    });
    st.free_blocks.insert(b);
  }

  void collect_pending_locked(DeviceState& st) {
    for (size_t i = 0; i < st.pending.size();) {
      Block* b = st.pending[i];
      bool done = true;
      for (auto& ev : b->pending) done = done && ev->query();
      if (!done) {
        ++i;
        continue;
      }
      b->pending.clear();
      st.pending[i] = st.pending.back();
      st.pending.pop_back();
      make_free_locked(st, b);
    }
  }

  void release_cached_locked(DeviceState& st, int device) {
    for (Block* b : st.free_blocks) {
      runtime().memory(device).free(b->ptr);
      st.stats.num_device_free++;
      for_pools(b->size, [&](size_t i) {
        st.stats.segment[i].decrease(1);
        st.stats.reserved_bytes[i].decrease(b->size);
      });
      delete b;
    }
    st.free_blocks.clear();
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
