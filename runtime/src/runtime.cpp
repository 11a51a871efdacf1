#include "neuronrt/runtime.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "neuronrt/config.h"

namespace neuronrt {
namespace {

const Runtime* g_sanitized = nullptr;
Runtime* g_runtime = nullptr;
std::atomic<bool> g_started{false};  // a queue exists: the device was used
std::atomic<bool> g_forked_child{false};
std::atomic<bool> g_stopped{false};

void after_fork_in_child() {
  if (g_started.load()) g_forked_child.store(true);
}
struct sigaction g_previous_segv;

// Names the fault when the host touched device memory, then lets the default action end the
// process (the access re-faults once the handler is gone).
void on_segv(int sig, siginfo_t* info, void* ctx) {
  const int device = g_sanitized ? g_sanitized->device_of(info->si_addr) : -1;
  if (device >= 0) {
    char msg[160];
    const int n = snprintf(msg, sizeof msg,
                           "neuron sanitizer: host access to neuron device memory at %p (neuron:%d) outside "
                           "a queued task\n",
                           info->si_addr, device);
    if (n > 0) (void)!write(2, msg, static_cast<size_t>(n));
    // The access faults again on return, into the handler that was there before (Python's
    // faulthandler prints the offending thread's Python stack), else the default action.
    sigaction(SIGSEGV, &g_previous_segv, nullptr);
    return;
  }
  sigaction(SIGSEGV, &g_previous_segv, nullptr);
  (void)sig;
  (void)ctx;
}

}  // namespace

RuntimeOptions RuntimeOptions::from_env() {
  RuntimeOptions o;
  o.topology = Topology::from_env();
  o.launch_blocking = config::flag("NEURON_LAUNCH_BLOCKING");
  o.sanitize = config::flag("TORCH_NEURONX_SANITIZE");
  if (const auto spec = config::raw("TORCH_NEURONX_INJECT_FAULT"))
    o.faults = health::parse_faults(*spec, static_cast<int>(o.topology.cores.size()));
  o.publish_health = config::choice("TORCH_NEURONX_HEALTH", "1", {"1", "0"}) == "1";
  o.watchdog = std::chrono::seconds(config::integer("TORCH_NEURONX_WATCHDOG_S", 30, 1, 86400));
  o.correctable_limit = config::integer("TORCH_NEURONX_CORRECTABLE_LIMIT", 16, 0, 1'000'000'000);
  return o;
}

Runtime::Runtime(RuntimeOptions options) : opts_(std::move(options)) {
  static const bool registered = (pthread_atfork(nullptr, nullptr, &after_fork_in_child), true);
  (void)registered;
  for (const auto& c : opts_.topology.cores) {
    memory_.push_back(std::make_unique<DeviceMemory>(c.hbm_bytes, c.index));
    queues_.emplace_back(kMaxQueuesPerDevice);
  }
  faults_.resize(memory_.size());
  for (const auto& f : opts_.faults) {
    auto& d = faults_.at(f.device);
    if (f.kind == health::Fault::kHbmUncorrectable) d.uncorrectable += f.count;
    if (f.kind == health::Fault::kHbmCorrectable) d.correctable += f.count;
    d.corrupt = d.corrupt || f.kind == health::Fault::kCorrupt;
    d.hang = d.hang || f.kind == health::Fault::kHang;
  }
  for (const auto& d : faults_) unusable_.push_back(d.uncorrectable > 0);
  queue_index_.reset(new std::atomic<Queue*>[memory_.size() * kMaxQueuesPerDevice]);
  for (size_t i = 0; i < memory_.size() * kMaxQueuesPerDevice; ++i) queue_index_[i].store(nullptr);
  if (opts_.sanitize) {
    for (auto& m : memory_) m->set_host_access(false);
    if (!g_sanitized) {
      g_sanitized = this;
      struct sigaction sa{};
      sa.sa_sigaction = on_segv;
      sa.sa_flags = SA_SIGINFO;
      sigaction(SIGSEGV, &sa, &g_previous_segv);
    }
  }
}

Runtime::~Runtime() {
  // The monitor first (it reads the queues), then the queues: their workers may still be running
  // tasks that touch device memory. Hung queues run again.
  releasing_.store(true);
  std::unique_ptr<health::Monitor> monitor;
  {
    std::lock_guard<std::mutex> lock(queues_mu_);  // its thread may be asking device_health
    monitor = std::move(monitor_);
  }
  monitor.reset();
  queues_.clear();
}

Runtime& Runtime::get() {
  if (g_forked_child.load(std::memory_order_relaxed)) {
    throw std::runtime_error(
        "neuron: cannot re-initialize the neuron runtime in a forked subprocess: the parent used the device before "
        "fork(). To use the neuron device with multiprocessing, use the 'spawn' start method");
  }
  // Leaked on purpose: tensors freed during interpreter shutdown still return memory here.
  static Runtime* rt = g_runtime = new Runtime(RuntimeOptions::from_env());
  return *rt;
}

Runtime* Runtime::existing() { return g_runtime; }

bool Runtime::in_forked_child() { return g_forked_child.load(std::memory_order_relaxed); }

bool Runtime::started() { return g_started.load(std::memory_order_relaxed); }

int Runtime::visible_devices() noexcept {
  if (g_runtime) return g_runtime->device_count();
  try {
    return get().device_count();
  } catch (...) {
    return 0;
  }
}

bool Runtime::stopped() { return g_stopped.load(std::memory_order_relaxed); }

void Runtime::shutdown() {
  if (g_stopped.exchange(true) || g_forked_child.load()) return;
  releasing_.store(true);
  // First the monitor (it reads the queues); its state file goes with it. Hung queues run again.
  std::unique_ptr<health::Monitor> monitor;
  {
    std::lock_guard<std::mutex> lock(queues_mu_);
    monitor = std::move(monitor_);
  }
  monitor.reset();
  std::vector<Queue*> all;
  {
    std::lock_guard<std::mutex> lock(queues_mu_);
    for (auto& device : queues_)
      for (auto& q : device)
        if (q) all.push_back(q.get());
  }
  for (Queue* q : all) q->shutdown();
}

const LogicalCore& Runtime::core(int device) const {
  if (device < 0 || device >= device_count()) {
    throw std::out_of_range("neuron: invalid device index " + std::to_string(device) + " (" +
                            std::to_string(device_count()) + " visible)");
  }
  return opts_.topology.cores[device];
}

DeviceMemory& Runtime::memory(int device) {
  core(device);
  return *memory_[device];
}

Queue& Runtime::queue(int device, int id) {
  if (device >= 0 && device < device_count() && id >= 0 && id < kMaxQueuesPerDevice) {
    if (Queue* q = queue_index_[device * kMaxQueuesPerDevice + id].load(std::memory_order_acquire)) return *q;
  }
  core(device);
  if (id < 0 || id >= kMaxQueuesPerDevice) {
    throw std::out_of_range("neuron: invalid queue id " + std::to_string(id));
  }
  // A device with an uncorrectable memory error gets no queue (nor memory: the allocator asks
  // too), so every op on it is refused.
  check_usable(device);
  Queue* q = make_queue(device, id);
  publish();
  return *q;
}

void Runtime::check_usable(int device) {
  core(device);
  if (!unusable_[device]) return;
  publish();
  throw std::runtime_error("neuron:" + std::to_string(device) +
                           " has an uncorrectable HBM memory error: its memory cannot be trusted, so no work runs "
                           "on it (torch.neuron.device_health(" +
                           std::to_string(device) + ") is 'unhealthy'; nobs status shows it)");
}

Queue* Runtime::make_queue(int device, int id) {
  std::lock_guard<std::mutex> lock(queues_mu_);
  auto& slot = queues_[device][id];
  if (!slot) {
    QueueOptions qo;
    qo.name = "neuron:" + std::to_string(device) + " stream " + std::to_string(id);
    qo.tag = id;
    qo.device = device;
    // The sanitizer keeps device memory closed whenever no task runs, so the host may only
    // run while tasks are not: every submit waits.
    qo.blocking = opts_.launch_blocking || opts_.sanitize;
    if (opts_.sanitize) {
      qo.enter = [this] { enter_task(); };
      qo.leave = [this] { leave_task(); };
    }
    if (faults_[device].hang)
      qo.enter = [this, enter = qo.enter] {
        wait_while_hung();
        if (enter) enter();
      };
    if (g_stopped.load()) throw std::runtime_error("neuron: the runtime has shut down (the interpreter is exiting)");
    slot = std::make_unique<Queue>(std::move(qo));
    g_started.store(true);
    queue_index_[device * kMaxQueuesPerDevice + id].store(slot.get(), std::memory_order_release);
  }
  return slot.get();
}

void Runtime::publish() {
  if (!opts_.publish_health) return;
  std::call_once(monitor_once_, [this] {
    try {
      auto m =
          std::make_unique<health::Monitor>(*this, health::state_dir(), std::chrono::milliseconds(100), opts_.watchdog);
      std::lock_guard<std::mutex> lock(queues_mu_);
      if (!g_stopped.load()) monitor_ = std::move(m);
    } catch (const std::exception& e) {
      fprintf(stderr, "%s\n", e.what());  // the device works; only its state is not published
    }
  });
}

health::Monitor* Runtime::monitor() {
  std::lock_guard<std::mutex> lock(queues_mu_);
  return monitor_.get();
}

void Runtime::wait_while_hung() const {
  // An injected hang: the queue starts nothing until the runtime shuts down (which then drains it).
  while (!releasing_.load(std::memory_order_relaxed)) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

std::string Runtime::device_health(int device, std::string* why) {
  const auto& f = faults(device);
  std::string reason;
  if (f.uncorrectable > 0) {
    reason = std::to_string(f.uncorrectable) + " uncorrectable HBM memory error(s)";
  } else if (static_cast<int64_t>(f.correctable) > opts_.correctable_limit) {
    reason = std::to_string(f.correctable) + " correctable HBM memory errors, over the limit of " +
             std::to_string(opts_.correctable_limit) + " (TORCH_NEURONX_CORRECTABLE_LIMIT)";
  } else {
    std::lock_guard<std::mutex> lock(queues_mu_);  // the monitor lives while it is held
    if (monitor_ && monitor_->hung(device, &reason)) reason = "hung: " + reason;
  }
  if (why) *why = reason;
  return reason.empty() ? "healthy" : "unhealthy";
}

void Runtime::enter_task() {
  std::lock_guard<std::mutex> lock(guard_mu_);
  if (guard_depth_++ == 0)
    for (auto& m : memory_) m->set_host_access(true);
}

void Runtime::leave_task() {
  std::lock_guard<std::mutex> lock(guard_mu_);
  if (--guard_depth_ == 0)
    for (auto& m : memory_) m->set_host_access(false);
}

std::vector<Queue*> Runtime::queues_of(int device) {
  core(device);
  std::vector<Queue*> qs;
  std::lock_guard<std::mutex> lock(queues_mu_);
  for (auto& q : queues_[device])
    if (q) qs.push_back(q.get());
  return qs;
}

void Runtime::synchronize_device(int device) {
  for (Queue* q : queues_of(device)) q->synchronize();
}

void Runtime::synchronize_all() {
  for (int d = 0; d < device_count(); ++d) synchronize_device(d);
}

int Runtime::device_of(const void* ptr) const {
  for (size_t d = 0; d < memory_.size(); ++d)
    if (memory_[d]->contains(ptr)) return static_cast<int>(d);
  return -1;
}

uint64_t Runtime::copy_async(Queue& queue, void* dst, const void* src, size_t bytes, int direction) {
  auto& counter = direction == kHostToDevice   ? counters_.h2d_bytes
                  : direction == kDeviceToHost ? counters_.d2h_bytes
                                               : counters_.d2d_bytes;
  counter.fetch_add(bytes, std::memory_order_relaxed);
  // An injected corruption: what is read back from the device has a flipped bit (the exponent of
  // its first float), which only a check against known values can tell.
  const bool corrupt = direction == kDeviceToHost && queue.device() >= 0 && faults_[queue.device()].corrupt;
  // Named as CUDA's copies are, by direction: profilers show the name, and trace tools class a
  // "Memcpy ..." span as a memory copy.
  const char* name = direction == kHostToDevice   ? "Memcpy HtoD"
                     : direction == kDeviceToHost ? "Memcpy DtoH"
                                                  : "Memcpy DtoD";
  return queue.submit(name, [dst, src, bytes, corrupt] {
    std::memcpy(dst, src, bytes);
    if (corrupt && bytes >= 4) static_cast<unsigned char*>(dst)[3] ^= 0x40;
  });
}

}  // namespace neuronrt
