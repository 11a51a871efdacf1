#include "neuronrt/profile.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <stdexcept>

#include "neuronrt/config.h"
#include "neuronrt/memory.h"

namespace neuronrt {
namespace {

// Figures from AWS's Trainium2/Trainium3 architecture pages (see shared/docs/trainium.md).
const std::vector<ChipProfile>& profiles() {
  static const std::vector<ChipProfile> all = {
      {"trn2", "NeuronCore-v3", 8, 96 * kGiB, 2.9e12, 667e12, 181e12, 1299e12, 3.5e12, 1.28e12, 28ull << 20,
       2ull << 20},
      {"trn3", "NeuronCore-v4", 8, 144 * kGiB, 4.9e12, 671e12, 183e12, 2517e12, 3.5e12, 2.56e12, 32ull << 20,
       2ull << 20},
  };
  return all;
}

// A core number of `item` (a core, or the bounds of a range of them) in the list `spec`.
int parse_core(const std::string& text, const std::string& item, const std::string& spec) {
  bool digits = !text.empty() && text.size() <= 7;
  for (char c : text) digits = digits && c >= '0' && c <= '9';
  if (!digits) {
    throw std::invalid_argument("NEURON_RT_VISIBLE_CORES='" + spec + "': '" + item +
                                "' is not a core number or a range of them such as 0-3 (cores count from 0)");
  }
  return std::stoi(text);
}

}  // namespace

const ChipProfile* find_profile(const std::string& name) {
  for (const auto& p : profiles())
    if (p.name == name) return &p;
  return nullptr;
}

std::vector<std::string> profile_names() {
  std::vector<std::string> names;
  for (const auto& p : profiles()) names.push_back(p.name);
  return names;
}

std::vector<int> parse_core_list(const std::string& spec, int limit) {
  std::set<int> out;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    auto dash = item.find('-');
    int lo, hi;
    if (dash == std::string::npos) {
      lo = hi = parse_core(item, item, spec);
    } else {
      lo = parse_core(item.substr(0, dash), item, spec);
      hi = parse_core(item.substr(dash + 1), item, spec);
    }
    if (hi < lo || hi >= limit) {
      throw std::invalid_argument("NEURON_RT_VISIBLE_CORES='" + spec + "': range '" + item + "' is outside the " +
                                  std::to_string(limit) + " logical cores of this instance");
    }
    for (int i = lo; i <= hi; ++i) out.insert(i);
  }
  if (out.empty()) throw std::invalid_argument("NEURON_RT_VISIBLE_CORES='" + spec + "' names no core");
  return {out.begin(), out.end()};
}

Topology Topology::make(const std::string& profile, int lnc, int chips, const std::string& visible_cores,
                        uint64_t hbm_override) {
  Topology t;
  t.profile = find_profile(profile);
  if (!t.profile) {
    std::string known;
    for (auto& n : profile_names()) known += (known.empty() ? "" : ", ") + n;
    throw std::invalid_argument("TORCH_NEURONX_PROFILE: unknown profile '" + profile + "' (known: " + known + ")");
  }
  if (lnc != 1 && lnc != 2)
    throw std::invalid_argument("NEURON_LOGICAL_NC_CONFIG must be 1 or 2, got " + std::to_string(lnc));
  if (chips < 1 || chips > 64)
    throw std::invalid_argument("TORCH_NEURONX_CHIPS must be in 1..64, got " + std::to_string(chips));
  t.lnc = lnc;
  t.chips = chips;
  const int per_chip = t.logical_cores_per_chip();
  const int total = per_chip * chips;
  std::vector<int> visible;
  if (visible_cores.empty()) {
    for (int i = 0; i < total; ++i) visible.push_back(i);
  } else {
    visible = parse_core_list(visible_cores, total);
  }
  if (visible.size() > static_cast<size_t>(kMaxDevices)) {
    throw std::invalid_argument(std::to_string(visible.size()) + " logical cores are visible, more than the " +
                                std::to_string(kMaxDevices) +
                                " devices a process can address; narrow them with "
                                "NEURON_RT_VISIBLE_CORES");
  }
  const uint64_t hbm = hbm_override ? hbm_override : t.profile->hbm_bytes / per_chip;
  for (size_t i = 0; i < visible.size(); ++i) {
    t.cores.push_back({static_cast<int>(i), visible[i], visible[i] / per_chip, hbm});
  }
  return t;
}

Topology Topology::from_env() {
  const std::string profile = config::text("TORCH_NEURONX_PROFILE", "trn2");
  const int lnc = static_cast<int>(config::integer("NEURON_LOGICAL_NC_CONFIG", 2, 1, 2));
  const int chips = static_cast<int>(config::integer("TORCH_NEURONX_CHIPS", 1, 1, 64));
  const uint64_t hbm_override = config::bytes("TORCH_NEURONX_HBM_BYTES", 0, DeviceMemory::kMaxCapacity);
  return make(profile, lnc, chips, config::text("NEURON_RT_VISIBLE_CORES"), hbm_override);
}

}  // namespace neuronrt
