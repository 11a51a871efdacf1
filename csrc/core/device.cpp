// Current device and the stream pool. Stream ids map one to one onto runtime queue ids:
//   0                      the default stream
//   1 .. kPool             pool of priority 0 streams, handed out round robin
//   kPool+1 .. 2*kPool     pool of high priority (-1) streams
//   2*kPool+1 ..           streams created with getNewStream, until the runtime's limit
//
// Priority is recorded and reported (Stream.priority) but the software NeuronCore does not act
// on it: every queue has its own worker, so ready tasks of all streams run side by side rather
// than one stream's first. It stays a scheduling hint for a hardware runtime.
#include "core/device.h"

#include <array>
#include <atomic>

namespace torch_neuronx {
namespace {

constexpr int kPool = 8;
constexpr int kFirstNew = 2 * kPool + 1;
// Per-device tables cover every index a PyTorch device can have.
constexpr int kMaxDevices = neuronrt::kMaxDevices;

thread_local c10::DeviceIndex tls_device = 0;
thread_local std::array<c10::StreamId, kMaxDevices> tls_stream{};  // zero: default stream

std::array<std::atomic<int>, kMaxDevices> pool_next_low{};
std::array<std::atomic<int>, kMaxDevices> pool_next_high{};
std::array<std::atomic<int>, kMaxDevices> next_new{};
// Priority of streams made by getNewStream, by id.
std::array<std::array<std::atomic<int8_t>, neuronrt::Runtime::kMaxQueuesPerDevice>, kMaxDevices> new_priority{};

c10::DeviceIndex resolve(c10::DeviceIndex index) {
  if (index < 0) return current_device();
  check_device_index(index);
  return index;
}

}  // namespace

neuronrt::Runtime& runtime() {
  return checked([]() -> neuronrt::Runtime& { return neuronrt::Runtime::get(); });
}

int device_count() noexcept { return neuronrt::Runtime::visible_devices(); }

void check_device_index(c10::DeviceIndex index) {
  static const int n = runtime().device_count();  // fixed for the process; on every op's path
  TORCH_CHECK(index >= 0 && index < n, "neuron: invalid device index ", static_cast<int>(index), "; ", n,
              " neuron device(s) are visible (NEURON_RT_VISIBLE_CORES narrows them)");
}

c10::DeviceIndex current_device() { return tls_device; }

void set_current_device(c10::DeviceIndex index) {
  check_device_index(index);
  tls_device = index;
}

c10::Stream current_stream(c10::DeviceIndex index) {
  index = resolve(index);
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kNeuron, index), tls_stream[index]);
}

c10::Stream default_stream(c10::DeviceIndex index) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kNeuron, resolve(index)), 0);
}

c10::Stream stream_from_pool(c10::DeviceIndex index, bool high_priority) {
  index = resolve(index);
  auto& next = high_priority ? pool_next_high[index] : pool_next_low[index];
  const int slot = next.fetch_add(1) % kPool;
  const c10::StreamId id = 1 + slot + (high_priority ? kPool : 0);
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kNeuron, index), id);
}

c10::Stream new_stream(c10::DeviceIndex index, int priority) {
  index = resolve(index);
  const int id = kFirstNew + next_new[index].fetch_add(1);
  if (id >= neuronrt::Runtime::kMaxQueuesPerDevice) {
    // Out of dedicated queues: share the pool, as CUDA's stream pool does.
    return stream_from_pool(index, priority < 0);
  }
  new_priority[index][id] = static_cast<int8_t>(priority < 0 ? -1 : 0);
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kNeuron, index), id);
}

int stream_priority(const c10::Stream& stream) {
  const auto id = stream.id();
  if (id > kPool && id <= 2 * kPool) return -1;
  if (id >= kFirstNew && id < neuronrt::Runtime::kMaxQueuesPerDevice) return new_priority[stream.device_index()][id];
  return 0;
}

void set_current_stream(const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == kNeuron, "neuron: set_stream got a stream of device ", stream.device());
  check_device_index(stream.device_index());
  tls_stream[stream.device_index()] = stream.id();
}

neuronrt::Queue& queue_of(const c10::Stream& stream) {
  return checked(
      [&]() -> neuronrt::Queue& { return runtime().queue(stream.device_index(), static_cast<int>(stream.id())); });
}

}  // namespace torch_neuronx
