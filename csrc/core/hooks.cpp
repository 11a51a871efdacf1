// PrivateUse1 hooks: availability, devices, generators, pinned memory and storage resizing.
#include <ATen/detail/PrivateUse1HooksInterface.h>

#include "core/allocator.h"
#include "core/device.h"
#include "core/generator.h"
#include "core/storage.h"

namespace torch_neuronx {
namespace {

struct NeuronHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex index) const override { return index >= 0 && index < device_count(); }
  void init() const override { runtime(); }
  c10::DeviceIndex deviceCount() const override { return static_cast<c10::DeviceIndex>(device_count()); }
  void setCurrentDevice(c10::DeviceIndex d) const override { set_current_device(d); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    auto old = current_device();
    set_current_device(d);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override { return exchangeDevice(d); }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex d) const override { return default_generator(d); }
  at::Generator getNewGenerator(c10::DeviceIndex d) const override { return new_generator(d); }
  at::Device getDeviceFromPtr(void* data) const override {
    const int d = runtime().device_of(data);
    TORCH_CHECK(d >= 0, "neuron: pointer ", data, " is not in any neuron device's memory");
    return at::Device(kNeuron, static_cast<c10::DeviceIndex>(d));
  }
  bool isPinnedPtr(const void* data) const override { return is_pinned_ptr(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return pinned_host_allocator(); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resize_storage_bytes(storage.unsafeGetStorageImpl(), newsize);
  }
};

// Registered at load time so that `import torch_neuronx._C` alone makes the hooks reachable.
struct Registerer {
  Registerer() {
    static NeuronHooks hooks;
    at::RegisterPrivateUse1HooksInterface(&hooks);
  }
} registerer;

}  // namespace
}  // namespace torch_neuronx
