// DeviceGuardImpl for neuron: powers torch.Stream, torch.Event, device guards and the
// stream calls of torch.accelerator.
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "core/allocator.h"
#include "core/device.h"
#include "core/storage.h"

namespace torch_neuronx {
namespace {

struct NeuronGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kNeuron; }

  c10::Device exchangeDevice(c10::Device d) const override {
    auto old = getDevice();
    if (old.index() != d.index()) setDevice(d);
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kNeuron, current_device()); }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kNeuron, "neuron guard got device ", d);
    set_current_device(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    try {
      set_current_device(d.index());
    } catch (...) {
    }
  }

  c10::Stream getStream(c10::Device d) const override { return current_stream(d.index()); }
  c10::Stream getDefaultStream(c10::Device d) const override { return default_stream(d.index()); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool high_priority) const override {
    return stream_from_pool(d.index(), high_priority);
  }
  c10::Stream getNewStream(c10::Device d, int priority) const override { return new_stream(d.index(), priority); }
  c10::Stream exchangeStream(c10::Stream s) const override {
    auto old = current_stream(s.device_index());
    set_current_stream(s);
    return old;
  }

  // torch.accelerator.get_device_capability: the dtypes a neuron tensor can have. No quantized
  // types (there are no quantized neuron kernels).
  c10::DeviceCapability getDeviceCapability(c10::Device) const override {
    c10::DeviceCapability cap;
    for (int i = 0; i < static_cast<int>(c10::NumScalarTypes); ++i) {
      const auto t = static_cast<c10::ScalarType>(i);
      if (c10::isQIntType(t) || !dtype_allowed(t)) cap.capability_data.capability_bits &= ~(1ULL << i);
    }
    return cap;
  }

  c10::DeviceIndex deviceCount() const noexcept override { return static_cast<c10::DeviceIndex>(device_count()); }

  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete static_cast<neuronrt::Event*>(event);
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "neuron: event on device ",
                static_cast<int>(device_index), " cannot be recorded on a stream of device ", stream.device());
    auto* ev = static_cast<neuronrt::Event*>(*event);
    if (!ev) {
      ev = new neuronrt::Event(flag == c10::EventFlag::BACKEND_DEFAULT);
      *event = ev;
    }
    checked([&] { ev->record(queue_of(stream)); });
  }

  void block(void* event, const c10::Stream& stream) const override {
    if (!event) return;
    checked([&] { static_cast<neuronrt::Event*>(event)->block(queue_of(stream)); });
  }

  bool queryEvent(void* event) const override { return !event || static_cast<neuronrt::Event*>(event)->query(); }

  void synchronizeEvent(void* event) const override {
    if (event) checked([&] { static_cast<neuronrt::Event*>(event)->synchronize(); });
  }

  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start && end, "neuron: both events must be recorded before elapsed_time");
    return checked(
        [&] { return static_cast<neuronrt::Event*>(end)->elapsed_ms_since(*static_cast<neuronrt::Event*>(start)); });
  }

  bool queryStream(const c10::Stream& stream) const override { return queue_of(stream).query(); }

  void synchronizeStream(const c10::Stream& stream) const override {
    checked([&] { queue_of(stream).synchronize(); });
  }

  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    checked([&] { runtime().synchronize_device(device_index < 0 ? current_device() : device_index); });
  }

  void recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream) const override {
    caching_allocator().recordStream(data_ptr, stream);
  }
};

}  // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, NeuronGuardImpl);

}  // namespace torch_neuronx
