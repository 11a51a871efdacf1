#include "neuronrt/config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "neuronrt/profile.h"

using namespace neuronrt;

namespace {

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Config, BytesAcceptUnitsAndRejectJunk) {
  EXPECT_EQ(config::parse_bytes("268435456", "X"), 268435456u);
  EXPECT_EQ(config::parse_bytes("256MiB", "X"), 256u << 20);
  EXPECT_EQ(config::parse_bytes("1GiB", "X"), 1u << 30);
  for (const char* bad : {"256MB", "1e9", " 100", "100 ", "-1", "", "0", "12.5GiB", "99999999999999999999999"}) {
    const std::string msg = error_of([&] { config::parse_bytes(bad, "TORCH_NEURONX_HBM_BYTES"); });
    EXPECT_NE(msg.find("TORCH_NEURONX_HBM_BYTES"), std::string::npos) << bad;
  }
}

TEST(Config, IntegersAreWholeAndInRange) {
  EXPECT_EQ(config::parse_integer("3", "X", 1, 4), 3);
  for (const char* bad : {"3.0", " 3", "0x3", "5", "0", "three"}) {
    EXPECT_NE(error_of([&] { config::parse_integer(bad, "TORCH_NEURONX_CHIPS", 1, 4); }).find("TORCH_NEURONX_CHIPS"),
              std::string::npos)
        << bad;
  }
}

TEST(Config, EnvironmentIsReadStrictly) {
  setenv("TORCH_NEURONX_SANITIZE", "yes", 1);
  EXPECT_NE(error_of([] { config::flag("TORCH_NEURONX_SANITIZE"); }).find("TORCH_NEURONX_SANITIZE"), std::string::npos);
  setenv("TORCH_NEURONX_SANITIZE", "0", 1);
  EXPECT_FALSE(config::flag("TORCH_NEURONX_SANITIZE"));
  unsetenv("TORCH_NEURONX_SANITIZE");
  setenv("TORCH_NEURONX_FALLBACK", "loud", 1);
  EXPECT_NE(
      error_of([] { config::choice("TORCH_NEURONX_FALLBACK", "warn", {"warn", "error", "silent"}); }).find("warn"),
      std::string::npos);
  unsetenv("TORCH_NEURONX_FALLBACK");
  EXPECT_THROW(config::raw("TORCH_NEURONX_NOT_A_SETTING"), std::logic_error);
}

TEST(Config, TopologyFromEnvironmentUsesTheParsers) {
  setenv("TORCH_NEURONX_HBM_BYTES", "256MiB", 1);
  EXPECT_EQ(Topology::from_env().cores[0].hbm_bytes, 256u << 20);
  setenv("TORCH_NEURONX_HBM_BYTES", "256MB", 1);
  EXPECT_THROW(Topology::from_env(), std::invalid_argument);
  unsetenv("TORCH_NEURONX_HBM_BYTES");
  setenv("TORCH_NEURONX_CHIPS", "17", 1);
  EXPECT_EQ(Topology::from_env().cores.size(), 68u);  // beyond 64 devices
  setenv("NEURON_LOGICAL_NC_CONFIG", "1", 1);
  EXPECT_NE(error_of([] { Topology::from_env(); }).find("NEURON_RT_VISIBLE_CORES"), std::string::npos);  // 136 > 128
  unsetenv("NEURON_LOGICAL_NC_CONFIG");
  unsetenv("TORCH_NEURONX_CHIPS");
}
