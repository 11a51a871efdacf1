#include "neuronrt/config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "neuronrt/memory.h"
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

TEST(Config, BytesAboveTheMaximumAreRefusedBeforeTheyOverflow) {
  EXPECT_EQ(config::parse_bytes("1TiB", "X", DeviceMemory::kMaxCapacity), DeviceMemory::kMaxCapacity);
  // 2^62 and 2^62 + 1 MiB: four times them (the address range) wraps to 0 and to 4 MiB.
  for (const char* big : {"4611686018427387904", "4611686018428436480", "1025GiB", "2TiB"}) {
    const std::string msg =
        error_of([&] { config::parse_bytes(big, "TORCH_NEURONX_HBM_BYTES", DeviceMemory::kMaxCapacity); });
    EXPECT_NE(msg.find("TORCH_NEURONX_HBM_BYTES"), std::string::npos) << big;
    EXPECT_NE(msg.find(std::to_string(DeviceMemory::kMaxCapacity)), std::string::npos) << msg;
  }
  EXPECT_THROW(DeviceMemory(DeviceMemory::kMaxCapacity + 1), std::invalid_argument);
}

TEST(Config, ItemsAreEachOneOfTheAllowed) {
  setenv("TORCH_NEURONX_LOG", "compile", 1);
  EXPECT_EQ(config::items("TORCH_NEURONX_LOG", {"compile"}), std::vector<std::string>{"compile"});
  for (const char* bad : {"everything", "compile,", "compile,all", " compile"}) {
    setenv("TORCH_NEURONX_LOG", bad, 1);
    const std::string msg = error_of([] { config::items("TORCH_NEURONX_LOG", {"compile"}); });
    EXPECT_NE(msg.find("TORCH_NEURONX_LOG"), std::string::npos) << bad;
    EXPECT_NE(msg.find("compile"), std::string::npos) << bad;
  }
  unsetenv("TORCH_NEURONX_LOG");
  EXPECT_TRUE(config::items("TORCH_NEURONX_LOG", {"compile"}).empty());
}

TEST(Config, VisibleCoresErrorsShowTheValue) {
  EXPECT_EQ(parse_core_list("1-2,0", 4), (std::vector<int>{0, 1, 2}));
  for (const char* bad : {"-1", "1--2", "a", "2-1", "0-4", "1,-3"}) {
    const std::string msg = error_of([&] { parse_core_list(bad, 4); });
    EXPECT_NE(msg.find("NEURON_RT_VISIBLE_CORES='" + std::string(bad) + "'"), std::string::npos) << msg;
  }
}
