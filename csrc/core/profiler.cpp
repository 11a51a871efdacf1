// Profiler hooks for neuron (torch.autograd.profiler.profile(use_device="neuron") and the legacy
// event path): device events are timing events on the current stream, so an op's device time is
// the time its tasks took on the queue, as CUDA's events measure kernels.
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <memory>

#include "core/device.h"
#include "core/errors.h"

namespace torch_neuronx {
namespace {

using torch::profiler::impl::ProfilerVoidEventStub;

struct NeuronProfilerStubs final : torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event, int64_t* cpu_ns) const override {
    const c10::DeviceIndex d = current_device();
    if (device != nullptr) *device = d;
    auto e = std::make_shared<neuronrt::Event>(/*timing=*/true);
    checked([&] { e->record(current_queue(d)); });
    if (cpu_ns != nullptr) *cpu_ns = c10::getTime();
    *event = std::move(e);
  }
  // Microseconds, as the profiler expects of every device.
  float elapsed(const ProfilerVoidEventStub* start, const ProfilerVoidEventStub* end) const override {
    auto* a = static_cast<const neuronrt::Event*>(start->get());
    auto* b = static_cast<const neuronrt::Event*>(end->get());
    return checked([&] {
      a->synchronize();
      b->synchronize();
      return static_cast<float>(b->elapsed_ms_since(*a) * 1000.0);
    });
  }
  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}
  bool enabled() const override { return true; }
  void onEachDevice(std::function<void(int)> op) const override {
    const c10::DeviceIndex old = current_device();
    for (int d = 0; d < device_count(); ++d) {
      set_current_device(static_cast<c10::DeviceIndex>(d));
      op(d);
    }
    set_current_device(old);
  }
  void synchronize() const override {
    checked([] { runtime().synchronize_device(current_device()); });
  }
};

const bool registered = [] {
  static NeuronProfilerStubs stubs;
  torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  return true;
}();

}  // namespace
}  // namespace torch_neuronx
