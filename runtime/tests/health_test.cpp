// Device health: injected faults, the state file a process publishes, the watchdog and the trust
// rules of the state directory.
#include "neuronrt/health.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "neuronrt/runtime.h"

using neuronrt::Queue;
using neuronrt::Runtime;
using neuronrt::RuntimeOptions;
using neuronrt::Topology;
namespace health = neuronrt::health;

namespace {

std::string temp_dir() {
  char tmpl[] = "/tmp/neuronrt-health-XXXXXX";
  const char* dir = mkdtemp(tmpl);  // mode 0700
  if (dir == nullptr) throw std::runtime_error("mkdtemp failed");
  return dir;
}

std::string error_of(const std::string& spec) {
  try {
    health::parse_faults(spec, 4);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

RuntimeOptions options(std::vector<health::Injected> faults) {
  RuntimeOptions o;
  o.topology = Topology::make("trn2", 2, 1, "0-1", 1 << 20);
  o.faults = std::move(faults);
  return o;
}

}  // namespace

TEST(Health, ParsesFaultsAndNamesWhatIsWrong) {
  const auto faults = health::parse_faults("hbm_correctable@1:20,hang@3,corrupt@0,hbm_uncorrectable@2", 4);
  ASSERT_EQ(faults.size(), 4u);
  EXPECT_EQ(faults[0].kind, health::Fault::kHbmCorrectable);
  EXPECT_EQ(faults[0].device, 1);
  EXPECT_EQ(faults[0].count, 20);
  EXPECT_EQ(faults[1].kind, health::Fault::kHang);
  EXPECT_EQ(faults[3].count, 1);
  EXPECT_NE(error_of("meltdown@0").find("TORCH_NEURONX_INJECT_FAULT: 'meltdown@0': unknown kind"), std::string::npos);
  EXPECT_NE(error_of("hang").find("no @device"), std::string::npos);
  EXPECT_NE(error_of("hang@4").find("from 0 to 3"), std::string::npos);
  EXPECT_NE(error_of("corrupt@0:3").find("only hbm_* faults take a count"), std::string::npos);
  EXPECT_NE(error_of("hbm_correctable@0:x").find("whole number"), std::string::npos);
  EXPECT_FALSE(error_of("").empty());
}

TEST(Health, AnUncorrectableErrorRefusesWorkAndCorruptionFlipsWhatIsReadBack) {
  Runtime rt(options({{health::Fault::kHbmUncorrectable, 0, 1}, {health::Fault::kCorrupt, 1, 1}}));
  EXPECT_EQ(rt.device_health(0), "unhealthy");
  try {
    rt.queue(0, 0);
    FAIL() << "work on a device with an uncorrectable memory error must raise";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("uncorrectable HBM memory error"), std::string::npos);
  }
  EXPECT_EQ(rt.device_health(1), "healthy");  // corruption is silent: only a golden check finds it
  const float value = 1.0f;
  float back = 0.0f;
  void* dev = rt.memory(1).allocate(sizeof value);
  Queue& q = rt.queue(1, 0);
  rt.copy_async(q, dev, &value, sizeof value, Runtime::kHostToDevice);
  rt.copy_async(q, &back, dev, sizeof back, Runtime::kDeviceToHost);
  q.synchronize();
  EXPECT_NE(back, value);
  rt.memory(1).free(dev);
}

TEST(Health, PublishesStateAndTheWatchdogFindsAHungQueue) {
  const std::string dir = temp_dir();
  setenv("TORCH_NEURONX_STATE_DIR", dir.c_str(), 1);
  const std::string path = dir + "/" + std::to_string(getpid()) + ".json";
  {
    auto o = options({{health::Fault::kHbmCorrectable, 0, 3}, {health::Fault::kHang, 1, 1}});
    o.publish_health = true;
    o.watchdog = std::chrono::milliseconds(300);
    Runtime rt(o);
    rt.queue(0, 0).submit("work", [] {});
    rt.synchronize_device(0);
    ASSERT_NE(rt.monitor(), nullptr);
    struct stat st{};
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    rt.queue(1, 0).submit("stuck", [] {});
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    std::string why;
    EXPECT_EQ(rt.device_health(1, &why), "unhealthy");
    EXPECT_NE(why.find("hung"), std::string::npos) << why;
    EXPECT_EQ(rt.device_health(0), "healthy");  // 3 correctable errors: under the limit
    std::ifstream f(path);
    std::stringstream text;
    text << f.rdbuf();
    EXPECT_NE(text.str().find("\"pid\": " + std::to_string(getpid())), std::string::npos);
    EXPECT_NE(text.str().find("\"correctable\": 3"), std::string::npos);
    EXPECT_NE(text.str().find("\"hung\": true"), std::string::npos);
    EXPECT_NE(text.str().find("\"health\": \"unhealthy\", \"health_reason\": \"hung: "), std::string::npos);
  }  // the runtime's end releases the hung queue and removes its state
  struct stat st{};
  EXPECT_NE(stat(path.c_str(), &st), 0);
  unsetenv("TORCH_NEURONX_STATE_DIR");
  rmdir(dir.c_str());
}

TEST(Health, WorkRefusedOnAFaultyDeviceIsPublishedFirst) {
  const std::string dir = temp_dir();
  setenv("TORCH_NEURONX_STATE_DIR", dir.c_str(), 1);
  const std::string path = dir + "/" + std::to_string(getpid()) + ".json";
  {
    auto o = options({{health::Fault::kHbmUncorrectable, 0, 1}});
    o.publish_health = true;
    Runtime rt(o);
    EXPECT_FALSE(rt.usable(0));
    EXPECT_TRUE(rt.usable(1));
    // The process's first work is on the faulty device: it is refused, and the state that the
    // error points to (nobs) already says why.
    EXPECT_THROW(rt.queue(0, 0), std::runtime_error);
    ASSERT_NE(rt.monitor(), nullptr);
    std::ifstream f(path);
    std::stringstream text;
    text << f.rdbuf();
    EXPECT_NE(text.str().find("{\"index\": 0, "), std::string::npos) << text.str();
    struct stat ns{};  // the pid namespace, for readers to tell whether they can see this pid
    ASSERT_EQ(stat("/proc/self/ns/pid", &ns), 0);
    EXPECT_NE(text.str().find("\"pid_ns\": " + std::to_string(ns.st_ino) + ", "), std::string::npos) << text.str();
    EXPECT_NE(text.str().find("\"uncorrectable\": 1, \"hung\": false, \"last_error\": \"\", \"health\": "
                              "\"unhealthy\", \"health_reason\": \"1 uncorrectable HBM memory error(s)\""),
              std::string::npos)
        << text.str();
    EXPECT_NE(text.str().find("\"uncorrectable\": 0, \"hung\": false, \"last_error\": \"\", \"health\": "
                              "\"healthy\""),
              std::string::npos)
        << text.str();
    rt.queue(1, 0).submit("work", [] {});  // the other device still works
    rt.synchronize_device(1);
  }
  unsetenv("TORCH_NEURONX_STATE_DIR");
  rmdir(dir.c_str());
}

TEST(Health, AStateDirectoryOthersMayEnterIsNotTrusted) {
  const std::string dir = temp_dir();
  chmod(dir.c_str(), 0755);
  setenv("TORCH_NEURONX_STATE_DIR", dir.c_str(), 1);
  EXPECT_THROW(health::state_dir(), std::runtime_error);
  chmod(dir.c_str(), 0700);
  EXPECT_EQ(health::state_dir(), dir);
  unsetenv("TORCH_NEURONX_STATE_DIR");
  rmdir(dir.c_str());
}
