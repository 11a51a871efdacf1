// Bindings of graph capture (torch.neuron.NeuronGraph): a stream's queue records its tasks
// (neuronrt::Queue::begin_capture) while the allocator keeps the addresses they use alive (a
// capture pool); a replay queues the recorded tasks as one task of the current stream.
#include <torch/csrc/utils/pybind.h>

#include <memory>

#include "core/allocator.h"
#include "core/device.h"
#include "core/errors.h"

namespace py = pybind11;

namespace torch_neuronx {
namespace {

struct CapturedGraph {
  c10::DeviceIndex device = -1;
  std::shared_ptr<neuronrt::Queue::Graph> graph;
  std::shared_ptr<CachingAllocator::CapturePool> pool;

  void release() {
    graph.reset();  // the recorded tasks, and the tensors they hold
    caching_allocator().release_capture_pool(device, pool);
    pool.reset();
  }
};

}  // namespace

void init_graph_bindings(py::module& m) {
  py::class_<CapturedGraph>(m, "_CapturedGraph")
      .def_property_readonly("tasks",
                             [](const CapturedGraph& g) { return g.graph ? neuronrt::Queue::task_count(*g.graph) : 0; })
      .def_property_readonly("device", [](const CapturedGraph& g) { return static_cast<int>(g.device); })
      .def("replay",
           [](CapturedGraph& g) {
             TORCH_CHECK(g.graph, "neuron: replay of a graph that was reset; capture it again");
             TORCH_CHECK(
                 current_device() == g.device, "neuron: the graph was captured on neuron:", static_cast<int>(g.device),
                 " and must be replayed there (the current device is neuron:", static_cast<int>(current_device()), ")");
             checked([&] { current_queue(g.device).replay(g.graph, "neuron::graph_replay"); });
           })
      .def("release", [](CapturedGraph& g) { g.release(); });

  m.def("_is_current_stream_capturing", [] { return current_queue(current_device()).capturing(); });

  // Starts capturing the current stream of the current device.
  m.def("_graph_capture_begin", [] {
    const c10::DeviceIndex device = current_device();
    auto& queue = current_queue(device);
    checked([&] { caching_allocator().begin_capture_pool(device, current_stream(device).id()); });
    try {
      queue.begin_capture();
    } catch (...) {
      caching_allocator().end_capture_pool(device);
      rethrow_as_torch_error();
    }
  });

  // Ends the capture on the current stream: the graph, or the error that invalidated it (whose
  // memory is then released at once: nothing will replay).
  m.def("_graph_capture_end", [] {
    const c10::DeviceIndex device = current_device();
    auto& queue = current_queue(device);
    CapturedGraph g;
    g.device = device;
    try {
      g.graph = queue.end_capture();
    } catch (...) {
      caching_allocator().release_capture_pool(device, caching_allocator().end_capture_pool(device));
      rethrow_as_torch_error();
    }
    g.pool = caching_allocator().end_capture_pool(device);
    return g;
  });
}

}  // namespace torch_neuronx
