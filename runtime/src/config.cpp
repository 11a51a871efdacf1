#include "neuronrt/config.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace neuronrt::config {
namespace {

std::string quoted(const std::string& s) { return "'" + s + "'"; }

}  // namespace

const std::vector<Setting>& all() {
  static const std::vector<Setting> settings = {
      {"TORCH_NEURONX_PROFILE", "trn2", "device generation: trn2 or trn3"},
      {"NEURON_LOGICAL_NC_CONFIG", "2", "physical cores per logical core (LNC): 2 (4 devices per chip) or 1 (8)"},
      {"TORCH_NEURONX_CHIPS", "1", "number of chips on the instance"},
      {"NEURON_RT_VISIBLE_CORES", "", "visible logical cores, e.g. 0-1 or 3 (default: all)"},
      {"TORCH_NEURONX_HBM_BYTES", "",
       "device memory per logical core, overriding the profile (testing): bytes, or with KiB/MiB/GiB/TiB; at most "
       "1TiB"},
      {"NEURON_LAUNCH_BLOCKING", "0", "1: every queued task runs before the call returns; errors raise at the call"},
      {"TORCH_NEURONX_SANITIZE", "0",
       "1: device memory is inaccessible to the host outside queued tasks (mprotect); a host access is reported"},
      {"TORCH_NEURONX_STRICT", "0",
       "1: float64 and complex tensors raise (Trainium has neither; default: warn once), and NKI kernels "
       "poison fresh SBUF/PSUM tiles (NaN) so reading one never written shows"},
      {"TORCH_NEURONX_KERNELS", "cpu",
       "kernel source of eager ops: cpu (ATen's CPU kernels), or nki (mm, bmm, _softmax, native_layer_norm and SDPA "
       "forward run the "
       "NKI library kernels where their shapes and dtypes fit)"},
      {"TORCH_NEURONX_FALLBACK", "warn",
       "what a CPU fallback (copy to host and back) does: warn (once per op), error, silent"},
      {"TORCH_NEURONX_OP_POLICY", "",
       "per-op overrides of how boxed ops run: 'aten::op=sync,aten::other.overload=copy' (async, sync or copy); "
       "an op with a typed kernel, or composite, is refused"},
      {"TORCH_NEURONX_ENABLE_CONCATENATION", "0",
       "1: eager op concatenation: a stream's consecutive async ops form a segment, and a segment seen before "
       "runs as one queue task (off under torch.use_deterministic_algorithms)"},
      {"TORCH_NEURONX_CONCATENATION_BUFFER_SIZE_LIMIT", "1024", "the most ops one concatenation segment holds"},
      {"TORCH_NEURONX_CACHE_DIR", "",
       "where compiled programs are cached (default: $XDG_CACHE_HOME/torch_neuronx, else ~/.cache/torch_neuronx)"},
      {"TORCH_NEURONX_CACHE_SIZE", "10GiB",
       "size limit of the compile cache; least recently used entries go first, whole"},
      {"TORCH_NEURONX_VLLM_COMPILE", "0",
       "1: vLLM models are compiled (every bucket before the engine is ready); 0: eager"},
      {"TORCH_NEURONX_LOG", "", "comma-separated areas to log to stderr: compile (a line per compiled graph)"},
      {"TORCH_NEURONX_HEALTH", "1",
       "0: the runtime publishes no device state for nobs (1: a state file per process, rewritten ten times a "
       "second)"},
      {"TORCH_NEURONX_STATE_DIR", "",
       "where device state is published for nobs (default /dev/shm/torch-neuronx-<uid>; it must be a directory "
       "of this user with mode 0700)"},
      {"TORCH_NEURONX_INJECT_FAULT", "",
       "faults for drills and tests: kind@device[:count],... with kind hbm_uncorrectable (the device is unhealthy "
       "and refuses work), hbm_correctable (counted), corrupt (reads from the device come back wrong) or hang "
       "(its queues start nothing)"},
      {"TORCH_NEURONX_WATCHDOG_S", "30", "seconds a queue may finish no task while it has work before it is hung"},
      {"TORCH_NEURONX_CORRECTABLE_LIMIT", "16", "correctable memory errors a device may have and stay healthy"},
      {"TORCH_NEURONX_DIST_TRANSPORT", "auto",
       "how the neuron process-group backend moves data: auto (shared memory on one host, gloo across hosts), "
       "shm, or host (gloo, also on one host)"},
      {"TORCH_NEURONX_HOST_ID", "",
       "names this rank's host to the process group, instead of boot id + IPC, PID and network namespaces"},
  };
  return settings;
}

std::optional<std::string> raw(const char* name) {
  bool known = false;
  for (const auto& s : all()) known = known || std::strcmp(s.name, name) == 0;
  if (!known) throw std::logic_error(std::string("neuron config: ") + name + " is not a listed setting");
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

bool flag(const char* name) {
  const auto v = raw(name);
  if (!v) return false;
  if (*v == "1" || *v == "true" || *v == "on") return true;
  if (*v == "0" || *v == "false" || *v == "off") return false;
  throw std::invalid_argument(std::string(name) + "=" + quoted(*v) + ": expected 1 or 0 (true/false, on/off)");
}

int64_t parse_integer(const std::string& text, const char* what, int64_t min, int64_t max) {
  bool ok = !text.empty() && text.size() <= 18;
  for (size_t i = 0; ok && i < text.size(); ++i)
    ok = (text[i] >= '0' && text[i] <= '9') || (i == 0 && text[i] == '-' && text.size() > 1);
  if (!ok) {
    throw std::invalid_argument(std::string(what) + "=" + quoted(text) + ": expected a whole number from " +
                                std::to_string(min) + " to " + std::to_string(max));
  }
  const int64_t v = std::stoll(text);
  if (v < min || v > max) {
    throw std::invalid_argument(std::string(what) + "=" + quoted(text) + ": must be from " + std::to_string(min) +
                                " to " + std::to_string(max));
  }
  return v;
}

int64_t integer(const char* name, int64_t fallback, int64_t min, int64_t max) {
  const auto v = raw(name);
  return v ? parse_integer(*v, name, min, max) : fallback;
}

uint64_t parse_bytes(const std::string& text, const char* what, uint64_t max) {
  const auto bad = [&](const char* why) {
    return std::invalid_argument(std::string(what) + "=" + quoted(text) + ": " + why +
                                 " (a byte count such as 268435456, 256MiB or 1GiB)");
  };
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0) throw bad("expected a whole number of bytes");
  const std::string suffix = text.substr(digits);
  int shift = 0;
  if (suffix == "KiB")
    shift = 10;
  else if (suffix == "MiB")
    shift = 20;
  else if (suffix == "GiB")
    shift = 30;
  else if (suffix == "TiB")
    shift = 40;
  else if (!suffix.empty())
    throw bad("unknown unit");
  if (digits > 19) throw bad("too large");
  const unsigned long long n = std::stoull(text.substr(0, digits));
  if (n == 0) throw bad("must be at least 1");
  if (n > (max >> shift)) {
    throw std::invalid_argument(std::string(what) + "=" + quoted(text) + ": more than the largest value, " +
                                std::to_string(max) + " bytes");
  }
  return static_cast<uint64_t>(n) << shift;
}

uint64_t bytes(const char* name, uint64_t fallback, uint64_t max) {
  const auto v = raw(name);
  return v ? parse_bytes(*v, name, max) : fallback;
}

std::string choice(const char* name, const char* fallback, std::initializer_list<const char*> allowed) {
  const auto v = raw(name);
  if (!v) return fallback;
  std::string list;
  for (const char* a : allowed) {
    if (*v == a) return *v;
    list += (list.empty() ? "" : ", ") + std::string(a);
  }
  throw std::invalid_argument(std::string(name) + "=" + quoted(*v) + ": expected one of " + list);
}

std::vector<std::string> items(const char* name, std::initializer_list<const char*> allowed) {
  const auto v = raw(name);
  std::vector<std::string> out;
  if (!v) return out;
  std::string list;
  for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
  size_t start = 0;
  while (start <= v->size()) {
    const size_t comma = std::min(v->find(',', start), v->size());
    const std::string item = v->substr(start, comma - start);
    bool known = false;
    for (const char* a : allowed) known = known || item == a;
    if (!known) {
      throw std::invalid_argument(std::string(name) + "=" + quoted(*v) + ": " + quoted(item) + " is not one of " +
                                  list + " (a comma-separated list of them)");
    }
    out.push_back(item);
    start = comma + 1;
  }
  return out;
}

std::string text(const char* name, const char* fallback) {
  const auto v = raw(name);
  return v ? *v : std::string(fallback);
}

}  // namespace neuronrt::config
