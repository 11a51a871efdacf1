// torch.neuron.memory's history and snapshot (torch.cuda.memory's _record_memory_history and
// _snapshot, in the same format).
#include <torch/csrc/profiler/combined_traceback.h>
#include <torch/csrc/utils/pybind.h>

#include "core/allocator.h"
#include "core/device.h"
#include "core/memory_history.h"

namespace py = pybind11;

// From torch/csrc/profiler/python/combined_traceback.h, which needs a JSON library PyTorch's
// wheel does not ship: torch_python's stack symbolizer and its Python unwinder.
namespace torch {
std::vector<pybind11::object> py_symbolize(std::vector<CapturedTraceback*>& to_symbolize);
void installCapturedTracebackPython();
}  // namespace torch

namespace torch_neuronx {
namespace {

// Stacks to Python frame lists, symbolized together (frames shared between stacks are resolved once).
std::vector<py::object> frames_of(const std::vector<std::shared_ptr<torch::CapturedTraceback>>& stacks) {
  std::vector<torch::CapturedTraceback*> present;
  for (const auto& s : stacks)
    if (s) present.push_back(s.get());
  std::vector<py::object> symbolized = torch::py_symbolize(present);
  std::vector<py::object> out;
  size_t next = 0;
  for (const auto& s : stacks) out.push_back(s ? symbolized[next++] : py::list());
  return out;
}

py::dict snapshot() {
  const auto segments = caching_allocator().segments();
  const auto entries = memory_history().entries();
  std::vector<std::shared_ptr<torch::CapturedTraceback>> stacks;
  for (const auto& seg : segments)
    for (const auto& b : seg.blocks) stacks.push_back(b.frames);
  for (const auto& e : entries) stacks.push_back(e.frames);
  const auto frames = frames_of(stacks);
  size_t next = 0;

  py::list segs;
  for (const auto& seg : segments) {
    py::dict d;
    uint64_t allocated = 0, active = 0, requested = 0;
    py::list blocks;
    for (const auto& b : seg.blocks) {
      py::dict block;
      block["address"] = b.address;
      block["size"] = b.size;
      block["requested_size"] = b.requested;
      block["state"] = b.state;
      block["frames"] = frames[next++];
      blocks.append(block);
      if (std::string(b.state) == "active_allocated") allocated += b.size, requested += b.requested;
      if (std::string(b.state) != "inactive") active += b.size;
    }
    d["device"] = seg.device;
    d["address"] = seg.address;
    d["total_size"] = seg.total_size;
    d["allocated_size"] = allocated;
    d["active_size"] = active;
    d["requested_size"] = requested;
    d["stream"] = seg.stream;
    d["segment_type"] = seg.small ? "small" : "large";
    d["segment_pool_id"] = py::make_tuple(0, 0);
    d["is_expandable"] = false;
    d["frames"] = py::list();
    d["blocks"] = blocks;
    segs.append(d);
  }
  const int devices = device_count();
  py::list traces;
  std::vector<py::list> per_device(devices);
  for (const auto& e : entries) {
    py::dict t;
    t["action"] = e.action;
    t["addr"] = e.addr;
    t["size"] = e.size;
    t["stream"] = e.stream;
    t["time_us"] = e.time_us;
    t["frames"] = frames[next++];
    if (std::string(e.action) == "oom") t["device_free"] = e.device_free;
    if (e.device >= 0 && e.device < devices) per_device[e.device].append(t);
  }
  for (auto& l : per_device) traces.append(l);
  py::dict out;
  out["segments"] = segs;
  out["device_traces"] = traces;
  out["allocator_settings"] = py::dict();
  return out;
}

}  // namespace

void init_memory_bindings(py::module& m) {
  m.def("_record_memory_history", [](const std::string& enabled, const std::string& context, const std::string& stacks,
                                     size_t max_entries, bool clear) {
    torch::installCapturedTracebackPython();
    memory_history().configure(enabled, context, stacks, max_entries, clear);
  });
  m.def("_memory_snapshot", &snapshot);
}

}  // namespace torch_neuronx
