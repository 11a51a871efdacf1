// Philox-style generator of a neuron device: a seed and an offset that advances with every
// random op. Its state tensor is 16 bytes: seed (int64) then offset (int64), the layout
// DTensor's RNG tracker edits in place.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <optional>

namespace torch_neuronx {

class NeuronGenerator final : public c10::GeneratorImpl {
 public:
  explicit NeuronGenerator(c10::DeviceIndex device, uint64_t seed = c10::default_rng_seed_val);

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  // A CPU generator for one random op that will draw up to `numel` values: seeded from
  // (seed, offset), after which the offset moves past them. Same seed, same sequence.
  at::Generator cpu_generator_for(uint64_t numel);

 private:
  NeuronGenerator* clone_impl() const override;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);
// The generator a random op should use: `gen` if given (must be a neuron generator), else the
// default one of `device`.
NeuronGenerator* resolve_generator(const std::optional<at::Generator>& gen, c10::DeviceIndex device);

}  // namespace torch_neuronx
