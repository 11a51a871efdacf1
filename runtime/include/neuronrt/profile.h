// Device profiles of the Trainium generations and the topology of visible logical cores.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace neuronrt {

constexpr uint64_t kGiB = 1ull << 30;
// PyTorch device indices are int8: a process addresses at most this many logical cores.
constexpr int kMaxDevices = 128;

struct ChipProfile {
  std::string name;             // "trn2", "trn3"
  std::string core_version;     // "NeuronCore-v3"
  int physical_cores = 0;       // per chip
  uint64_t hbm_bytes = 0;       // per chip
  double hbm_bytes_per_s = 0;   // per chip
  double dense_bf16_flops = 0;  // per chip, per second
  double dense_fp32_flops = 0;
  double dense_fp8_flops = 0;
  double dma_bytes_per_s = 0;
  double link_bytes_per_s = 0;  // NeuronLink per chip
  uint64_t sbuf_bytes = 0;      // per physical core
  uint64_t psum_bytes = 0;      // per physical core
};

// nullptr for an unknown name.
const ChipProfile* find_profile(const std::string& name);
std::vector<std::string> profile_names();

struct LogicalCore {
  int index = 0;         // index among visible cores (the torch device index)
  int global_index = 0;  // index on the instance, before NEURON_RT_VISIBLE_CORES
  int chip = 0;
  uint64_t hbm_bytes = 0;  // capacity of this logical core's memory
};

struct Topology {
  const ChipProfile* profile = nullptr;
  int lnc = 2;  // physical cores per logical core
  int chips = 1;
  std::vector<LogicalCore> cores;

  int logical_cores_per_chip() const { return profile->physical_cores / lnc; }

  // Throws std::invalid_argument with a message naming the bad setting.
  static Topology make(const std::string& profile, int lnc, int chips, const std::string& visible_cores,
                       uint64_t hbm_override = 0);
  // TORCH_NEURONX_PROFILE, NEURON_LOGICAL_NC_CONFIG, TORCH_NEURONX_CHIPS,
  // NEURON_RT_VISIBLE_CORES, TORCH_NEURONX_HBM_BYTES (see config.h).
  static Topology from_env();
};

// "0-1", "3", "0,2-3" -> sorted unique indices; every index must be < limit.
std::vector<int> parse_core_list(const std::string& spec, int limit);

}  // namespace neuronrt
