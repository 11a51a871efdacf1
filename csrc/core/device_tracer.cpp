// torch.profiler's device timeline for neuron: a Kineto activity profiler registered for
// PrivateUse1. While a trace records, the runtime keeps a span per task its queue workers run
// (neuronrt/trace.h); at the end each span becomes a kernel (or memcpy) activity on a lane per
// device and stream ("neuron:0" / "stream 7"), linked to the host op that queued it, with a
// runtime activity on the host thread for the submit and a flow between the two — the shape and
// the names a CUDA trace has (cudaLaunchKernel -> kernel), so PyTorch fills device_time_total, the
// trace viewers draw arrows, and trace tools (HTA, TensorBoard's plugin) read it as a CUDA trace.
#include "core/device_tracer.h"

#include <ATen/record_function.h>
#include <c10/util/irange.h>
#include <libkineto.h>
#include <output_base.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <unordered_map>

#include "neuronrt/trace.h"

namespace torch_neuronx {
namespace {

std::mutex g_estimator_mu;
SpanEstimator& estimator() {
  static auto* e = new SpanEstimator();  // leaked: a Python callable must not die after Python
  return *e;
}

using libkineto::ActivityType;

// The host ops that queue traced work: a RecordFunction callback, on only while a trace records,
// keeps each thread's open aten ops with what their inputs were (a RecordFunction's inputs live
// only during its start callbacks); a traced submit notes the innermost one, once per op, and the
// trace's spans are priced by their notes.
struct OpInput {
  enum Kind : uint8_t { kOther, kTensor, kTensorList, kBool, kInt, kDouble, kIntList } kind = kOther;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  std::vector<int64_t> ints;  // a tensor's shape, an int list, or the int
  double number = 0;
  // A tensor list's (aten::cat's inputs): each tensor's shape and dtype.
  std::vector<std::vector<int64_t>> shapes;
  std::vector<c10::ScalarType> dtypes;
};
struct OprEntry {
  const at::RecordFunction* fn = nullptr;
  std::string name;      // a copy: a function's own name dies with it (a compiled kernel's)
  std::string overload;  // "" for the default
  std::vector<OpInput> inputs;
  uint64_t note = 0;
};
struct OpStack {
  std::vector<OprEntry> open;
  size_t depth = 0;         // entries in use (the rest keep their capacity)
  uint64_t generation = 0;  // the trace the entries belong to: an earlier one's are stale
};
std::atomic<uint64_t> g_generation{0};
thread_local OpStack tls_ops;
std::mutex g_notes_mu;
// Under g_notes_mu: note n is notes()[n - 1], described (to text) only when the trace is priced.
std::vector<OprEntry>& notes() {
  static auto* n = new std::vector<OprEntry>();  // leaked: a trace may stop during teardown
  return *n;
}

std::unique_ptr<at::ObserverContext> on_op_enter(const at::RecordFunction& fn) {
  auto& st = tls_ops;
  if (const uint64_t g = g_generation.load(std::memory_order_relaxed); st.generation != g) {
    st.generation = g;
    st.depth = 0;
  }
  if (st.depth == st.open.size()) st.open.emplace_back();
  OprEntry& e = st.open[st.depth++];
  e.fn = &fn;
  e.name = fn.name();
  const auto op = fn.operator_name();
  e.overload = op ? op->overload_name : std::string();
  e.note = 0;
  const auto inputs = fn.inputs();
  e.inputs.resize(inputs.size());
  for (const auto i : c10::irange(inputs.size())) {
    const c10::IValue& v = inputs[i];
    OpInput& in = e.inputs[i];
    in.kind = OpInput::kOther;
    in.ints.clear();
    in.shapes.clear();
    in.dtypes.clear();
    if (v.isTensor() && v.toTensor().defined()) {
      in.kind = OpInput::kTensor;
      in.dtype = v.toTensor().scalar_type();
      in.ints.assign(v.toTensor().sizes().begin(), v.toTensor().sizes().end());
    } else if (v.isTensorList()) {
      in.kind = OpInput::kTensorList;
      for (const at::Tensor& t : v.toTensorVector()) {
        in.shapes.emplace_back(t.sizes().begin(), t.sizes().end());
        in.dtypes.push_back(t.scalar_type());
      }
    } else if (v.isBool()) {
      in.kind = OpInput::kBool;
      in.number = v.toBool();
    } else if (v.isInt()) {
      in.kind = OpInput::kInt;
      in.number = static_cast<double>(v.toInt());
    } else if (v.isDouble()) {
      in.kind = OpInput::kDouble;
      in.number = v.toDouble();
    } else if (v.isIntList()) {
      in.kind = OpInput::kIntList;
      in.ints = v.toIntVector();
    }
  }
  return nullptr;
}

void on_op_exit(const at::RecordFunction& fn, at::ObserverContext*) {
  auto& st = tls_ops;
  if (st.depth > 0 && st.open[st.depth - 1].fn == &fn) st.depth--;
}

// JSON lists, one entry per input: its shape, its dtype name, its value (scalars and int lists);
// a tensor list's entries are lists of its tensors' shapes and dtype names.
SpanOp describe(const OprEntry& e) {
  std::ostringstream dims, types, values;
  dims << '[';
  types << '[';
  values << '[';
  for (size_t i = 0; i < e.inputs.size(); ++i) {
    const OpInput& in = e.inputs[i];
    const char* sep = i == 0 ? "" : ", ";
    auto ints = [&](std::ostringstream& out) {
      out << '[';
      for (size_t j = 0; j < in.ints.size(); ++j) out << (j ? ", " : "") << in.ints[j];
      out << ']';
    };
    dims << sep;
    types << sep;
    values << sep;
    if (in.kind == OpInput::kTensor) {
      ints(dims);
      types << '"' << c10::toString(in.dtype) << '"';
    } else if (in.kind == OpInput::kTensorList) {
      dims << '[';
      types << '[';
      for (size_t j = 0; j < in.shapes.size(); ++j) {
        dims << (j ? ", [" : "[");
        for (size_t k = 0; k < in.shapes[j].size(); ++k) dims << (k ? ", " : "") << in.shapes[j][k];
        dims << ']';
        types << (j ? ", \"" : "\"") << c10::toString(in.dtypes[j]) << '"';
      }
      dims << ']';
      types << ']';
    } else {
      dims << "[]";
      types << "\"\"";
    }
    switch (in.kind) {
      case OpInput::kBool:
        values << (in.number != 0 ? "true" : "false");
        break;
      case OpInput::kInt:
        values << static_cast<int64_t>(in.number);
        break;
      case OpInput::kDouble:
        values << in.number;
        break;
      case OpInput::kIntList:
        ints(values);
        break;
      default:
        values << "null";
    }
  }
  dims << ']';
  types << ']';
  values << ']';
  std::string name = e.name;
  if (!e.overload.empty()) name += "." + e.overload;
  return {std::move(name), dims.str(), types.str(), values.str()};
}

uint64_t note_current_op() {
  auto& st = tls_ops;
  if (st.depth == 0 || st.generation != g_generation.load(std::memory_order_relaxed)) return 0;
  OprEntry& e = st.open[st.depth - 1];
  if (e.note != 0) return e.note;
  std::lock_guard<std::mutex> lock(g_notes_mu);
  notes().push_back(e);
  return e.note = notes().size();
}

std::mutex g_callback_mu;
std::optional<at::CallbackHandle> g_callback;  // under g_callback_mu

void watch_ops(bool on) {
  std::lock_guard<std::mutex> lock(g_callback_mu);
  if (on && !g_callback) {
    {
      std::lock_guard<std::mutex> lock(g_notes_mu);
      notes().clear();
    }
    g_generation.fetch_add(1);
    neuronrt::trace::set_note_source(&note_current_op);
    g_callback = at::addGlobalCallback(
        at::RecordFunctionCallback(on_op_enter, on_op_exit).needsInputs(true).scopes({at::RecordScope::FUNCTION}));
  } else if (!on && g_callback) {
    at::removeCallback(*g_callback);
    g_callback.reset();
    neuronrt::trace::set_note_source(nullptr);
  }
}

// The runtime names its copies as CUDA's are named ("Memcpy HtoD", ...; the strided ones end in
// " (strided)"), which is what HTA and TensorBoard's profiler plugin class as memory copies.
bool is_copy(const char* name) { return std::strncmp(name, "Memcpy ", 7) == 0; }

// A span's name in the trace. As on CUDA, a kernel is named for the code that ran, not for the op
// that queued it: were they one name, key_averages() would show two "aten::mm" rows (the host op
// and its kernel, each with the same device time). An eager op's task, "aten::add.Tensor", is the
// kernel "aten_add_Tensor_kernel" ("::" and "." become "_"); names that are kernel names already
// (a compiled graph's "cpp_fused_...", a collective's "ncclKernel_...", the copies) stay.
std::string kernel_name(const char* task) {
  if (task == nullptr) return "?";
  std::string name(task);
  if (name.find("::") == std::string::npos) return name;
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    if (name.compare(i, 2, "::") == 0) {
      out += '_';
      ++i;
    } else {
      out += name[i] == '.' ? '_' : name[i];
    }
  }
  return out + "_kernel";
}

class Session final : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    watch_ops(true);
    neuronrt::trace::start();
    status_ = libkineto::TraceStatus::RECORDING;
  }
  void stop() override {
    spans_ = neuronrt::trace::stop();
    watch_ops(false);
    dropped_ = neuronrt::trace::dropped();
    // Only the work queued while the trace records: a task queued before it began (in a
    // schedule's warmup step, the queue running behind the host) belongs to a host op that is not
    // in the trace, so it could link to none and would be priced by none. Each queue runs in
    // order, so this takes a prefix off a lane and leaves no gap in it.
    spans_.erase(std::remove_if(spans_.begin(), spans_.end(),
                                [](const neuronrt::trace::Span& s) { return s.origin.queued_ns == 0; }),
                 spans_.end());
    std::set<std::pair<int, int64_t>> lanes;
    for (const auto& s : spans_) lanes.emplace(s.device, s.stream);
    for (const auto& [device, stream] : lanes) {
      if (devices_.empty() || devices_.back() != device) devices_.push_back(device);
      lanes_.push_back({stream, stream, device, "stream " + std::to_string(stream)});
    }
    status_ = libkineto::TraceStatus::PROCESSING;
  }
  void pushCorrelationId(uint64_t id) override { neuronrt::trace::push_correlation(id); }
  void popCorrelationId() override { neuronrt::trace::pop_correlation(); }

  std::vector<std::string> errors() override {
    if (dropped_ == 0) return {};
    return {"neuron: " + std::to_string(dropped_) + " device spans were dropped (more than " +
            std::to_string(neuronrt::trace::kMaxSpans) + " in one trace)"};
  }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, [](int32_t) -> const libkineto::ITraceActivity* { return nullptr; }, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked_of,
                    int64_t start_time, int64_t end_time) override {
    buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
    buffer_->span = libkineto::TraceSpan(start_time, end_time, "neuron");
    buffer_->gpuOpCount = static_cast<int>(spans_.size());
    const int64_t pid = libkineto::processId();

    // The lanes: a process per device (the first one's is getDeviceInfo's, which also keeps
    // Kineto from naming device pids 0-15 "GPU n"), a thread per stream (getResourceInfos).
    for (size_t i = 1; i < devices_.size(); ++i) logger.handleDeviceInfo(device_info(devices_[i]), start_time);

    const auto estimates = estimate();
    // Correlation ids start at 2^16, not 1: HTA downcasts the trace's correlation column to the
    // narrowest integer type and then stores row numbers into a column of that type, which pandas
    // 3 refuses once a row number does not fit (a trace of fewer than 128 spans has int8 ids).
    uint32_t flow = (1u << 16) - 1;
    for (const auto& s : spans_) {
      const libkineto::ITraceActivity* op = s.origin.correlation != 0 ? linked_of(s.origin.correlation) : nullptr;
      const bool copy = s.name != nullptr && is_copy(s.name);
      // The launch is named as CUDA's runtime calls are, in CUDA's runtime category: HTA finds
      // launches by these names (its launch statistics and queue lengths) and joins them to their
      // kernels by the "correlation" both carry; the flow draws the same link in Perfetto.
      const uint32_t id = ++flow;
      auto& launch = add(ActivityType::CUDA_RUNTIME, copy ? "cudaMemcpyAsync" : "cudaLaunchKernel", id, op);
      launch.device = static_cast<int32_t>(pid);
      launch.resource = s.origin.thread;
      launch.threadId = s.origin.thread;
      launch.startTime = s.origin.queued_ns;
      launch.endTime = std::max(s.origin.queued_end_ns, s.origin.queued_ns);
      launch.flow.start = true;
      launch.addMetadata("correlation", id);
      auto& kernel =
          add(copy ? ActivityType::GPU_MEMCPY : ActivityType::CONCURRENT_KERNEL, kernel_name(s.name), id, op);
      kernel.device = s.device;
      kernel.resource = static_cast<int32_t>(s.stream);
      kernel.startTime = s.start_ns;
      kernel.endTime = s.end_ns;
      kernel.flow.start = false;
      kernel.addMetadata("device", s.device);
      kernel.addMetadata("stream", s.stream);
      kernel.addMetadata("correlation", id);
      if (auto it = estimates.find(s.origin.note); it != estimates.end()) {
        kernel.addMetadata("trn2 estimate us", it->second.first);
        kernel.addMetadata("trn3 estimate us", it->second.second);
      }
    }
    for (const auto& a : buffer_->activities) a->log(logger);
    spans_.clear();
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    if (devices_.empty()) return nullptr;
    return std::make_unique<libkineto::DeviceInfo>(device_info(devices_[0]));
  }
  std::vector<libkineto::ResourceInfo> getResourceInfos() override { return lanes_; }
  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return std::move(buffer_); }

 private:
  libkineto::GenericTraceActivity& add(ActivityType type, const std::string& name, uint32_t flow,
                                       const libkineto::ITraceActivity* op) {
    buffer_->emplace_activity(buffer_->span, type, name);
    auto& a = *buffer_->activities.back();
    a.id = static_cast<int32_t>(flow);
    a.flow.id = flow;
    a.flow.type = flow != 0 ? libkineto::kLinkAsyncCpuGpu : 0;
    a.linked = op;
    return a;
  }

  // The cost model's price of the host op behind each span, by note; one query per distinct op
  // and inputs.
  std::unordered_map<uint64_t, std::pair<double, double>> estimate() {
    std::unordered_map<uint64_t, std::pair<double, double>> out;
    SpanEstimator fn;
    {
      std::lock_guard<std::mutex> lock(g_estimator_mu);
      fn = estimator();
    }
    std::vector<OprEntry> noted;
    {
      std::lock_guard<std::mutex> lock(g_notes_mu);
      noted.swap(notes());
    }
    if (!fn || noted.empty()) return out;
    std::map<std::vector<std::string>, size_t> distinct;
    std::vector<SpanOp> queries;
    std::vector<size_t> query_of(noted.size());
    for (size_t n = 0; n < noted.size(); ++n) {
      const SpanOp op = describe(noted[n]);
      auto [it, fresh] =
          distinct.emplace(std::vector<std::string>{op.name, op.dims, op.types, op.concrete}, queries.size());
      if (fresh) queries.push_back(op);
      query_of[n] = it->second;
    }
    const auto prices = fn(queries);
    for (size_t n = 0; n < noted.size(); ++n) {
      const size_t q = query_of[n];
      if (q < prices.size() && prices[q]) out[n + 1] = *prices[q];
    }
    return out;
  }

  static libkineto::DeviceInfo device_info(int device) {
    return {device, 1000 + device, "neuron:" + std::to_string(device), "neuron"};
  }

  std::vector<neuronrt::trace::Span> spans_;
  std::vector<int> devices_;  // the devices the spans ran on, ascending
  std::vector<libkineto::ResourceInfo> lanes_;
  uint64_t dropped_ = 0;
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
};

class NeuronActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<ActivityType>& availableActivities() const override { return activities_; }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<ActivityType>& types,
                                                                 const libkineto::Config&) override {
    // Kernel activities come with ProfilerActivity.PrivateUse1 (the CPU group alone has none).
    if (types.count(ActivityType::CONCURRENT_KERNEL) == 0) return nullptr;
    return std::make_unique<Session>();
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t, int64_t, const std::set<ActivityType>& types,
                                                                 const libkineto::Config& config) override {
    return configure(types, config);
  }

 private:
  std::string name_{"neuron"};
  std::set<ActivityType> activities_{ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_MEMCPY,
                                     ActivityType::PRIVATEUSE1_RUNTIME};
};

REGISTER_PRIVATEUSE1_PROFILER(NeuronActivityProfiler);

}  // namespace

void set_span_estimator(SpanEstimator fn) {
  std::lock_guard<std::mutex> lock(g_estimator_mu);
  estimator() = std::move(fn);
}

}  // namespace torch_neuronx
