// Python bindings of the neuron c10d backend: the factory torch_neuronx/distributed.py registers.
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include "core/errors.h"
#include "distributed/process_group.h"
#include "neuronrt/config.h"

namespace torch_neuronx {

void init_distributed_bindings(pybind11::module& m) {
  m.def(
      "_create_process_group",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout,
         std::string label, std::optional<c10::intrusive_ptr<c10d::Backend>> host,
         std::optional<c10::intrusive_ptr<c10d::Store>> local_store, int local_rank, int local_size,
         std::optional<c10::intrusive_ptr<c10d::Backend>> leaders, std::string hosts, int host_index,
         std::vector<std::vector<int>> layout) -> c10::intrusive_ptr<c10d::Backend> {
        std::optional<ProcessGroupNeuron::Hosts> h;
        if (local_store) {
          TORCH_CHECK(host_index >= 0 && host_index < static_cast<int>(layout.size()) &&
                          static_cast<int>(layout[host_index].size()) == local_size &&
                          layout[host_index][local_rank] == rank,
                      "neuron: a hybrid group's host layout does not place rank ", rank, " on host ", host_index);
          h = ProcessGroupNeuron::Hosts{*local_store,     local_rank,
                                        local_size,       leaders.value_or(c10::intrusive_ptr<c10d::Backend>()),
                                        std::move(hosts), HostLayout{host_index, std::move(layout)}};
        }
        pybind11::gil_scoped_release no_gil;  // the rendezvous waits for the other ranks
        return c10::make_intrusive<ProcessGroupNeuron>(store, rank, size, timeout, std::move(label),
                                                       host.value_or(c10::intrusive_ptr<c10d::Backend>()),
                                                       std::move(h));
      },
      pybind11::arg("store"), pybind11::arg("rank"), pybind11::arg("size"), pybind11::arg("timeout"),
      pybind11::arg("label"), pybind11::arg("host") = pybind11::none(), pybind11::arg("local_store") = pybind11::none(),
      pybind11::arg("local_rank") = 0, pybind11::arg("local_size") = 1, pybind11::arg("leaders") = pybind11::none(),
      pybind11::arg("hosts") = "", pybind11::arg("host_index") = 0,
      pybind11::arg("layout") = std::vector<std::vector<int>>());
  m.def("_dist_transport_setting", [] {
    return checked(
        [] { return neuronrt::config::choice("TORCH_NEURONX_DIST_TRANSPORT", "auto", {"auto", "shm", "host"}); });
  });
  // torch's Backend binding has no way to set a timeout (its ProcessGroupGloo and NCCL bindings
  // each bind their own _set_default_timeout): the neuron backend's, for _patches.process_group_timeouts.
  m.def("_set_process_group_timeout",
        [](const c10::intrusive_ptr<c10d::Backend>& backend, std::chrono::milliseconds timeout) {
          auto* pg = dynamic_cast<ProcessGroupNeuron*>(backend.get());
          TORCH_CHECK(pg != nullptr, "neuron: not a neuron process group backend: ", backend->getBackendName());
          pg->setTimeout(timeout);
        });
  m.def("_process_group_transport", [](const c10::intrusive_ptr<c10d::Backend>& backend) -> std::string {
    auto* pg = dynamic_cast<ProcessGroupNeuron*>(backend.get());
    TORCH_CHECK(pg != nullptr, "neuron: not a neuron process group backend: ", backend->getBackendName());
    return pg->transport();
  });
}

}  // namespace torch_neuronx
