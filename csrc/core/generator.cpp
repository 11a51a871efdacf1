#include "core/generator.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/TensorBase.h>
#include <c10/core/TensorImpl.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <vector>

#include "core/device.h"

namespace torch_neuronx {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

NeuronGenerator::NeuronGenerator(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(kNeuron, device), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(seed) {}

void NeuronGenerator::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}
void NeuronGenerator::set_offset(uint64_t offset) { offset_ = offset; }
uint64_t NeuronGenerator::get_offset() const { return offset_; }
uint64_t NeuronGenerator::current_seed() const { return seed_; }

uint64_t NeuronGenerator::seed() {
  const uint64_t s = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  set_current_seed(s);
  return s;
}

void NeuronGenerator::set_state(const c10::TensorImpl& state) {
  TORCH_CHECK(state.dtype() == caffe2::TypeMeta::Make<uint8_t>() && state.numel() == 16 && state.device().is_cpu(),
              "neuron: RNG state must be a CPU uint8 tensor of 16 bytes (seed, offset), got ", state.numel(),
              " elements");
  int64_t vals[2];
  std::memcpy(vals, state.data(), 16);
  seed_ = static_cast<uint64_t>(vals[0]);
  offset_ = static_cast<uint64_t>(vals[1]);
}

c10::intrusive_ptr<c10::TensorImpl> NeuronGenerator::get_state() const {
  auto t = at::detail::empty_cpu({16}, at::kByte, std::nullopt, std::nullopt, std::nullopt, std::nullopt);
  const int64_t vals[2] = {static_cast<int64_t>(seed_), static_cast<int64_t>(offset_)};
  std::memcpy(t.mutable_data_ptr(), vals, 16);
  return t.getIntrusivePtr();
}

at::Generator NeuronGenerator::cpu_generator_for(uint64_t numel) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t s = splitmix64(seed_ ^ splitmix64(offset_));
  // Offsets advance in blocks of 4, as Philox draws 4 values per counter.
  offset_ += (numel + 3) / 4 * 4;
  return at::make_generator<at::CPUGeneratorImpl>(s);
}

NeuronGenerator* NeuronGenerator::clone_impl() const {
  auto* g = new NeuronGenerator(device().index(), seed_);
  g->offset_ = offset_;
  return g;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::once_flag once;
  static std::vector<at::Generator> gens;
  std::call_once(once, [] {
    for (int i = 0; i < device_count(); ++i) {
      gens.push_back(at::make_generator<NeuronGenerator>(static_cast<c10::DeviceIndex>(i)));
    }
  });
  if (device < 0) device = current_device();
  check_device_index(device);
  return gens[device];
}

at::Generator new_generator(c10::DeviceIndex device) {
  if (device < 0) device = current_device();
  check_device_index(device);
  return at::make_generator<NeuronGenerator>(device);
}

NeuronGenerator* resolve_generator(const std::optional<at::Generator>& gen, c10::DeviceIndex device) {
  const at::Generator& g = (gen.has_value() && gen->defined()) ? *gen : default_generator(device);
  TORCH_CHECK(g.device().type() == kNeuron, "neuron: expected a neuron generator, got one for ", g.device());
  return static_cast<NeuronGenerator*>(g.unsafeGetGeneratorImpl());
}

}  // namespace torch_neuronx
