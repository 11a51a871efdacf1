// torch_neuronx._C: thin bindings over the runtime and the torch glue.
#include <torch/csrc/Generator.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <thread>

#include "aten/sparse_ops.h"
#include "compile/kernel_launch.h"
#include "core/allocator.h"
#include "core/device.h"
#include "core/device_tracer.h"
#include "core/generator.h"
#include "core/shared_storage.h"
#include "core/storage.h"
#include "exec/executor.h"
#include "exec/kernel_alloc.h"
#include "neuronrt/config.h"
#include "neuronrt/ipc.h"
#include "pipeline/op_policy.h"
#include "pipeline/op_record.h"

namespace py = pybind11;
using namespace torch_neuronx;

namespace torch_neuronx {
void init_distributed_bindings(py::module& m);  // csrc/distributed/bindings.cpp
void init_graph_bindings(py::module& m);        // csrc/python/graphs.cpp
void init_nki_bindings(py::module& m);          // csrc/python/nki.cpp
void init_memory_bindings(py::module& m);       // csrc/python/memory.cpp
}  // namespace torch_neuronx

PYBIND11_MODULE(_C, m) {
  m.doc() = "torch-neuronx native extension (software NeuronCore runtime)";
  init_distributed_bindings(m);
  init_graph_bindings(m);
  init_nki_bindings(m);
  init_memory_bindings(m);
  register_compressed_sparse_ops();

  m.def("_device_count", [] { return device_count(); });
  m.def("_runtime_error", []() -> std::string {
    try {
      neuronrt::Runtime::get();
      return "";
    } catch (const std::exception& e) {
      return e.what();
    }
  });
  m.def("_current_device", [] { return static_cast<int>(current_device()); });
  m.def("_set_device", [](int d) { set_current_device(static_cast<c10::DeviceIndex>(d)); });
  // Waits for every queue of the device, checking for Ctrl-C (KeyboardInterrupt) while it waits.
  m.def("_synchronize", [](int d) {
    const auto device = d < 0 ? current_device() : d;
    for (neuronrt::Queue* q : checked([&] { return runtime().queues_of(device); })) {
      checked([&] {
        q->refuse_while_capturing("synchronize");
        q->submit_gathered();
      });
      const uint64_t seq = q->last_submitted();
      for (;;) {
        bool done;
        {
          py::gil_scoped_release released;
          done = q->wait_for(seq, std::chrono::microseconds(50000));
        }
        if (done) break;
        if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      }
      checked([&] { q->raise_error_through(seq); });
    }
  });
  // A compiled graph's launches: one task on the current stream (Queue::begin_program).
  m.def("_program_begin", [](int d) {
    checked([&] { current_queue(static_cast<c10::DeviceIndex>(d)).begin_program("neuron::compiled_program"); });
  });
  m.def("_program_end", [](int d) { checked([&] { current_queue(static_cast<c10::DeviceIndex>(d)).end_program(); }); });
  // Tasks submitted so far to the current stream of device `d` (tests count launches with it).
  m.def("_tasks_submitted", [](int d) {
    return checked([&] { return current_queue(static_cast<c10::DeviceIndex>(d)).last_submitted(); });
  });
  m.def(
      "_shutdown",
      [] {
        // A runtime that never started (a bad setting) has nothing to stop, and starting it here
        // would raise its error a second time, from the atexit callback.
        neuronrt::Runtime* rt = neuronrt::Runtime::existing();
        if (rt && !neuronrt::Runtime::in_forked_child()) rt->shutdown();
      },
      py::call_guard<py::gil_scoped_release>());
  m.def("_in_bad_fork", [] { return neuronrt::Runtime::in_forked_child(); });
  // Publishes this process's state and starts the current device's default queue. A current
  // device with an uncorrectable memory error gets no queue: that must not stop a process using
  // the other devices (work on the bad one raises at the call), and its state says why.
  m.def("_init", [] {
    auto& rt = runtime();
    rt.publish();
    if (rt.usable(current_device())) current_queue();
  });
  m.def("_is_initialized", [] { return neuronrt::Runtime::started(); });
  m.def("_device_properties", [](int d) {
    check_device_index(static_cast<c10::DeviceIndex>(d));
    const auto& topo = runtime().topology();
    const auto& core = runtime().core(d);
    const auto* p = topo.profile;
    py::dict out;
    // The name as the Neuron runtime reports the chip (tools such as TorchTitan's MFU table match
    // it); that this core is the software one is in `software` and `description`.
    out["name"] = p->name;
    out["description"] = "Trainium" + p->name.substr(3) + " (" + p->name + ", software NeuronCore)";
    out["software"] = true;
    out["profile"] = p->name;
    out["core_version"] = p->core_version;
    out["total_memory"] = core.hbm_bytes;
    out["logical_core"] = core.global_index;
    out["chip"] = core.chip;
    out["lnc"] = topo.lnc;
    out["physical_cores_per_chip"] = p->physical_cores;
    out["logical_cores_per_chip"] = topo.logical_cores_per_chip();
    out["hbm_bytes_per_s"] = p->hbm_bytes_per_s / topo.logical_cores_per_chip();
    out["dense_bf16_flops"] = p->dense_bf16_flops / topo.logical_cores_per_chip();
    out["dense_fp32_flops"] = p->dense_fp32_flops / topo.logical_cores_per_chip();
    out["sbuf_bytes"] = p->sbuf_bytes * topo.lnc;
    out["psum_bytes"] = p->psum_bytes * topo.lnc;
    return out;
  });
  m.def("_runtime_config", [] {
    py::dict out;
    auto& rt = runtime();
    out["launch_blocking"] = rt.launch_blocking();
    out["sanitize"] = rt.sanitize();
    out["chips"] = rt.topology().chips;
    out["profile"] = rt.topology().profile->name;
    return out;
  });
  // A compiled kernel as a task on the current stream (see compile/kernel_launch.h).
  m.def("_launch_cpu_kernel", [](uintptr_t fn, const std::string& name, const std::string& kinds, py::tuple args) {
    std::vector<c10::IValue> values;
    values.reserve(args.size());
    for (const auto& a : args) {
      if (THPVariable_Check(a.ptr())) {
        values.emplace_back(THPVariable_Unpack(a.ptr()));
      } else if (py::isinstance<py::bool_>(a)) {
        values.emplace_back(a.cast<bool>());
      } else if (py::isinstance<py::int_>(a)) {
        values.emplace_back(a.cast<int64_t>());
      } else {
        values.emplace_back(a.cast<double>());
      }
    }
    launch_cpu_kernel(reinterpret_cast<void*>(fn), name, kinds, values);
  });
  m.def("_device_health", [](int device) {
    check_device_index(static_cast<c10::DeviceIndex>(device));
    std::string why;
    std::string status = checked([&] { return runtime().device_health(device, &why); });
    return py::make_tuple(status, why);
  });
  m.def("_set_span_estimator", [](py::object fn) {
    // Leaked with the estimator: the profiler may price spans during interpreter teardown.
    auto* held = new py::object(std::move(fn));
    set_span_estimator([held](const std::vector<SpanOp>& ops) {
      std::vector<std::optional<std::pair<double, double>>> out(ops.size());
      py::gil_scoped_acquire gil;
      try {
        py::list query;
        for (const auto& op : ops) query.append(py::make_tuple(op.name, op.dims, op.types, op.concrete));
        py::list prices = (*held)(query);
        for (size_t i = 0; i < ops.size() && i < prices.size(); ++i) {
          if (!prices[i].is_none()) out[i] = prices[i].cast<std::pair<double, double>>();
        }
      } catch (const py::error_already_set& e) {
        // A trace without estimates beats no trace: the profiler's own output stays whole.
        PyErr_WarnEx(PyExc_RuntimeWarning,
                     (std::string("neuron: pricing the trace's spans failed: ") + e.what()).c_str(), 1);
      }
      return out;
    });
  });
  m.def("_set_memory_fraction", [](double fraction, int d) {
    caching_allocator().set_memory_fraction(fraction, static_cast<c10::DeviceIndex>(d));
  });
  m.def("_memory_fraction",
        [](int d) { return caching_allocator().memory_fraction(static_cast<c10::DeviceIndex>(d)); });
  // Time the device's queues have spent running tasks, summed over its streams.
  m.def("_busy_ns", [](int d) {
    uint64_t ns = 0;
    for (neuronrt::Queue* q : checked([&] { return runtime().queues_of(d); })) ns += q->busy_ns();
    return ns;
  });
  // torch.multiprocessing of neuron tensors (torch_neuronx/multiprocessing.py).
  m.def("_share_storage", [](const at::Tensor& t) {
    const ShareHandle h = share_storage(t.storage());
    return py::make_tuple(h.mem_fd, h.offset, h.bytes, h.counters_fd, h.slot, h.own_slot);
  });
  m.def("_open_shared_tensor",
        [](int mem_fd, uint64_t offset, uint64_t bytes, int counters_fd, int slot, int device, at::ScalarType dtype,
           std::vector<int64_t> sizes, std::vector<int64_t> strides, int64_t storage_offset) {
          return open_shared_tensor(mem_fd, offset, bytes, counters_fd, slot, static_cast<c10::DeviceIndex>(device),
                                    dtype, sizes, strides, storage_offset);
        });
  m.def("_share_count", [](int slot) { return neuronrt::ShareCounters::mine().count(slot); });
  m.def("_share_release", [](int slot) { neuronrt::ShareCounters::mine().release(slot); });
  m.def("_cpu_allocator_is_pytorchs", [] { return cpu_allocator_is_pytorchs(); });
  m.def("_started_ns", [] { return runtime().started_ns(); });
  m.def("_transfer_stats", [] {
    py::dict out;
    auto& c = runtime().counters();
    out["host_to_device_bytes"] = c.h2d_bytes.load();
    out["device_to_host_bytes"] = c.d2h_bytes.load();
    out["device_to_device_bytes"] = c.d2d_bytes.load();
    return out;
  });
  m.def("_stream_priority", [](int device, int64_t id) {
    return stream_priority(
        c10::Stream(c10::Stream::UNSAFE, c10::Device(kNeuron, static_cast<c10::DeviceIndex>(device)), id));
  });
  m.def("_default_generator", [](int d) {
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(default_generator(static_cast<c10::DeviceIndex>(d))));
  });
  // Like torch.cuda._sleep: keeps the current stream busy, so tests can see what waits for it.
  m.def("_sleep", [](double ms) {
    launch(current_device(), "neuron::sleep",
           [ms] { std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms)); });
  });
  // {op: (async, sync, copy, first_waits, concatenated, solo)} of ops with at least one call.
  m.def("_op_counts", [] {
    py::dict out;
    for (OpRecord* r : all_records()) {
      const int64_t a = r->calls[0].load(), s = r->calls[1].load(), c = r->calls[2].load();
      if (a || s || c)
        out[py::str(r->name)] = py::make_tuple(a, s, c, r->first_waits.load(), r->concatenated.load(), r->solo.load());
    }
    return out;
  });
  // Eager op concatenation (executor.h, Queue::defer).
  m.def("_configure_concatenation", [] {
    checked([] {
      concatenation_enabled.store(neuronrt::config::flag("TORCH_NEURONX_ENABLE_CONCATENATION"));
      neuronrt::Queue::set_concat_limit(static_cast<size_t>(
          neuronrt::config::integer("TORCH_NEURONX_CONCATENATION_BUFFER_SIZE_LIMIT", 1024, 1, 1 << 20)));
    });
  });
  m.def("_set_concatenation", [](bool on) {
    // Turning it off closes every open segment, so no task waits in a buffer nobody fills.
    concatenation_enabled.store(on);
    if (!on && neuronrt::Runtime::started()) {
      for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
        if (!runtime().usable(d)) continue;
        for (neuronrt::Queue* q : checked([&] { return runtime().queues_of(d); }))
          checked([&] { q->submit_gathered(); });
      }
    }
  });
  m.def("_concatenation_enabled", [] { return concatenation_enabled.load(); });
  m.def("_set_concatenation_limit", [](int64_t n) {
    TORCH_CHECK_VALUE(n >= 1, "neuron: the concatenation buffer limit must be at least 1 op, not ", n);
    neuronrt::Queue::set_concat_limit(static_cast<size_t>(n));
  });
  m.def("_concat_stats", [] {
    const auto s = neuronrt::Queue::concat_stats();
    return py::make_tuple(s.segments_built, s.segments_hit, s.tasks_concatenated);
  });
  m.def("_reset_concat_stats", [] { neuronrt::Queue::reset_concat_stats(); });
  // {op: {mode: {reason: calls}}} for the sync and copy calls.
  m.def("_op_reasons", [] {
    py::dict out;
    for (OpRecord* r : all_records()) {
      py::dict modes;
      for (Mode mode : {Mode::kSync, Mode::kCopy}) {
        const int64_t n = r->calls[static_cast<int>(mode)].load();
        if (!n) continue;
        auto reasons = r->call_reasons(mode);
        int64_t explained = 0;
        for (const auto& [why, k] : reasons) explained += k;
        if (n > explained) reasons[r->reason] += n - explained;  // calls that followed the plan
        modes[mode_name(mode)] = reasons;
      }
      if (!modes.empty()) out[py::str(r->name)] = modes;
    }
    return out;
  });
  m.def("_reset_op_counts", [] { reset_all_counts(); });
  m.def("_explain", [](const std::string& name) { return explain(name); });
  m.def("_config_flag",
        [](const std::string& name) { return checked([&] { return neuronrt::config::flag(name.c_str()); }); });
  m.def("_config_text",
        [](const std::string& name) { return checked([&] { return neuronrt::config::text(name.c_str()); }); });
  m.def("_log_areas", [] { return checked([] { return neuronrt::config::items("TORCH_NEURONX_LOG", {"compile"}); }); });
  m.def("_check_op_policy", [] { check_op_policy(); });
  m.def("_config_bytes", [](const std::string& name, uint64_t fallback) {
    return checked([&] { return neuronrt::config::bytes(name.c_str(), fallback); });
  });
  m.def("_settings", [] {
    py::list out;
    for (const auto& s : neuronrt::config::all()) out.append(py::make_tuple(s.name, s.default_value, s.meaning));
    return out;
  });
  m.def("_device_memory_used", [](int d) { return runtime().memory(d).used(); });
  m.def("_is_pinned", [](uintptr_t p) { return is_pinned_ptr(reinterpret_cast<void*>(p)); });
}
