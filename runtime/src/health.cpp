#include "neuronrt/health.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "neuronrt/config.h"
#include "neuronrt/runtime.h"

namespace neuronrt::health {
namespace {

constexpr const char* kVar = "TORCH_NEURONX_INJECT_FAULT";

std::invalid_argument bad_fault(const std::string& part, const std::string& why) {
  return std::invalid_argument(std::string(kVar) + ": '" + part + "': " + why +
                               " (expected kind@device[:count], kind one of hbm_uncorrectable, hbm_correctable, "
                               "corrupt, hang; several separated by commas)");
}

std::string command_line() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  for (char& c : raw)
    if (c == '\0') c = ' ';
  while (!raw.empty() && raw.back() == ' ') raw.pop_back();
  if (raw.size() <= 200) return raw;
  // Cut before the character that straddles byte 200 (back over its UTF-8 continuation bytes,
  // at most three): half a character would make the whole file undecodable as UTF-8.
  size_t n = 200;
  for (int i = 0; i < 3 && n > 0 && (static_cast<unsigned char>(raw[n]) & 0xC0) == 0x80; ++i) --n;
  return raw.substr(0, n);
}

uint64_t start_time_in(const std::string& stat_path) {
  std::ifstream f(stat_path);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');  // the command may hold spaces and parentheses
  if (paren == std::string::npos) return 0;
  std::stringstream rest(text.substr(paren + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i)
    if (i == 22) return std::stoull(field);
  return 0;
}

// The inode of this process's pid namespace: a reader in another namespace cannot look its pid up
// in its own /proc, so it must not judge from there whether the process still runs. 0 if unknown.
uint64_t pid_namespace() {
  struct stat st{};
  return stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::vector<Injected> parse_faults(const std::string& spec, int devices) {
  std::vector<Injected> out;
  std::stringstream in(spec);
  std::string part;
  while (std::getline(in, part, ',')) {
    const size_t at = part.find('@');
    if (at == std::string::npos) throw bad_fault(part, "no @device");
    const std::string kind = part.substr(0, at);
    Injected f{};
    if (kind == "hbm_uncorrectable") {
      f.kind = Fault::kHbmUncorrectable;
    } else if (kind == "hbm_correctable") {
      f.kind = Fault::kHbmCorrectable;
    } else if (kind == "corrupt") {
      f.kind = Fault::kCorrupt;
    } else if (kind == "hang") {
      f.kind = Fault::kHang;
    } else {
      throw bad_fault(part, "unknown kind '" + kind + "'");
    }
    std::string where = part.substr(at + 1);
    f.count = 1;
    if (const size_t colon = where.find(':'); colon != std::string::npos) {
      if (f.kind != Fault::kHbmCorrectable && f.kind != Fault::kHbmUncorrectable)
        throw bad_fault(part, "only hbm_* faults take a count");
      f.count = config::parse_integer(where.substr(colon + 1), kVar, 1, 1'000'000'000);
      where = where.substr(0, colon);
    }
    if (devices <= 0) throw bad_fault(part, "no device is visible");
    f.device = static_cast<int>(config::parse_integer(where, kVar, 0, devices - 1));
    out.push_back(f);
  }
  if (out.empty()) throw bad_fault(spec, "no fault");
  return out;
}

std::string state_dir() {
  std::string dir = config::text("TORCH_NEURONX_STATE_DIR");
  if (dir.empty()) dir = "/dev/shm/torch-neuronx-" + std::to_string(getuid());
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw std::runtime_error("neuron: cannot create the state directory " + dir + ": " + std::strerror(errno));
  struct stat st{};
  if (lstat(dir.c_str(), &st) != 0)
    throw std::runtime_error("neuron: cannot read the state directory " + dir + ": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077) != 0) {
    throw std::runtime_error("neuron: the state directory " + dir +
                             " is not a directory of this user that only it may enter (mode 0700); "
                             "its state is not trusted, and nothing is published there");
  }
  return dir;
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

uint64_t start_time(int pid) { return start_time_in("/proc/" + std::to_string(pid) + "/stat"); }

Monitor::Monitor(Runtime& runtime, std::string dir, std::chrono::milliseconds period,
                 std::chrono::milliseconds hung_after)
    : rt_(runtime),
      dir_(std::move(dir)),
      path_(dir_ + "/" + std::to_string(getpid()) + ".json"),
      period_(period),
      hung_after_(hung_after),
      // /proc/self, not /proc/<getpid()>: a /proc mounted for another pid namespace names
      // another process by this pid.
      start_time_(start_time_in("/proc/self/stat")),
      pid_ns_(pid_namespace()) {
  tick();
  thread_ = std::thread([this] { loop(); });
}

Monitor::~Monitor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  unlink(path_.c_str());
}

void Monitor::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, period_, [this] { return stop_; })) {
    lock.unlock();
    tick();
    lock.lock();
  }
}

bool Monitor::hung(int device, std::string* why) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = hung_.find(device);
  if (it == hung_.end()) return false;
  if (why) *why = it->second;
  return true;
}

void Monitor::tick() {
  // The watchdog: a queue with work that has not finished a task for hung_after_ is hung.
  const auto now = std::chrono::steady_clock::now();
  std::map<int, std::string> hung;
  for (int d = 0; d < rt_.device_count(); ++d) {
    for (Queue* q : rt_.queues_of(d)) {
      std::lock_guard<std::mutex> lock(mu_);
      const uint64_t done = q->tasks_completed();
      auto [it, fresh] = progress_.try_emplace({d, q->tag()}, Progress{done, now});
      Progress& p = it->second;
      if (fresh) continue;
      if (done != p.completed || q->last_submitted() == done) {
        p.completed = done;
        p.since = now;
      } else if (now - p.since > hung_after_) {
        const auto secs = std::chrono::duration_cast<std::chrono::seconds>(now - p.since).count();
        hung[d] = q->name() + " has finished no task for " + std::to_string(secs) + " s with " +
                  std::to_string(q->last_submitted() - done) + " queued (watchdog limit " +
                  std::to_string(hung_after_.count() / 1000) + " s)";
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    hung_ = std::move(hung);
  }
  const std::string text = render();
  const std::string tmp = path_ + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd >= 0) {
    const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    close(fd);
    if (!ok || rename(tmp.c_str(), path_.c_str()) != 0) unlink(tmp.c_str());
  }
}

std::string Monitor::render() {
  const Topology& topo = rt_.topology();
  std::ostringstream o;
  o << "{\"version\": 1, \"pid\": " << getpid() << ", \"start_time\": " << start_time_ << ", \"pid_ns\": " << pid_ns_
    << ", \"uid\": " << getuid() << ", \"command\": \"" << json_escape(command_line()) << "\", \"profile\": \""
    << topo.profile->name << "\", \"lnc\": " << topo.lnc << ", \"updated_unix_ms\": " << unix_ms()
    << ", \"watchdog_s\": " << hung_after_.count() / 1000.0 << ", \"correctable_limit\": " << rt_.correctable_limit()
    << ", \"devices\": [";
  for (int d = 0; d < rt_.device_count(); ++d) {
    uint64_t tasks = 0, failed = 0, queued = 0, busy = 0;
    std::string error;
    const auto queues = rt_.queues_of(d);
    for (Queue* q : queues) {
      const uint64_t done = q->tasks_completed();
      tasks += done;
      queued += q->last_submitted() - done;
      failed += q->tasks_failed();
      busy += q->busy_ns();
      if (std::string e = q->last_error(); !e.empty()) error = e;
    }
    std::string why;
    const bool is_hung = hung(d, &why);
    if (is_hung) error = why;
    std::string reason;
    const std::string health = rt_.device_health(d, &reason);
    const DeviceFaults& f = rt_.faults(d);
    DeviceMemory& mem = rt_.memory(d);
    o << (d ? ", " : "") << "{\"index\": " << d << ", \"memory_total\": " << mem.capacity()
      << ", \"memory_used\": " << mem.used() << ", \"queues\": " << queues.size() << ", \"tasks\": " << tasks
      << ", \"failed\": " << failed << ", \"queued\": " << queued << ", \"busy_ns\": " << busy
      << ", \"correctable\": " << f.correctable << ", \"uncorrectable\": " << f.uncorrectable
      << ", \"hung\": " << (is_hung ? "true" : "false") << ", \"last_error\": \"" << json_escape(error)
      << "\", \"health\": \"" << health << "\", \"health_reason\": \"" << json_escape(reason) << "\"}";
  }
  o << "]}\n";
  return o.str();
}

}  // namespace neuronrt::health
