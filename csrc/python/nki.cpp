// Bindings of NKI programs (csrc/nki/program.h): torch_neuronx/nki/_trace.py builds one per
// kernel signature from plain tuples, then runs it on host tensors or launches it on neuron.
#include <torch/csrc/Dtype.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include <map>
#include <memory>

#include "nki/kernel_source.h"
#include "nki/program.h"
#include "pipeline/op_policy.h"

namespace py = pybind11;

namespace torch_neuronx {
namespace {

c10::ScalarType to_scalar_type(const py::handle& h) {
  TORCH_CHECK(THPDtype_Check(h.ptr()), "nki: an operand's dtype must be a torch.dtype");
  return reinterpret_cast<THPDtype*>(h.ptr())->scalar_type;
}

// (space, index, dtype, byte_offset, sizes, strides)
nki::Operand to_operand(const py::handle& h) {
  const auto t = h.cast<py::tuple>();
  nki::Operand o;
  o.space = t[0].cast<int32_t>();
  o.index = t[1].cast<int32_t>();
  o.dtype = to_scalar_type(t[2]);
  o.byte_offset = t[3].cast<int64_t>();
  for (auto v : t[4]) o.sizes.push_back(v.cast<int64_t>());
  for (auto v : t[5]) o.strides.push_back(v.cast<int64_t>());
  return o;
}

// (op, operands, ints, floats)
nki::Step to_step(const py::handle& h) {
  const auto t = h.cast<py::tuple>();
  nki::Step s;
  s.op = t[0].cast<int32_t>();
  for (auto o : t[1]) s.operands.push_back(to_operand(o));
  for (auto v : t[2]) s.i.push_back(v.cast<int64_t>());
  for (auto v : t[3]) s.f.push_back(v.cast<double>());
  return s;
}

py::object& kernel_source() {
  static auto* fn = new py::object();  // leaked: queue workers may outlive the interpreter's teardown
  return *fn;
}

}  // namespace

std::shared_ptr<const nki::Program> nki::program_for(OpRecord& rec, const std::vector<c10::IValue>& args) {
  py::gil_scoped_acquire gil;
  py::tuple values(args.size());
  for (size_t i = 0; i < args.size(); ++i) values[i] = torch::jit::toPyObject(args[i]);
  py::object program = kernel_source()(rec.name, values);
  if (program.is_none()) return nullptr;
  return program.cast<std::shared_ptr<nki::Program>>();
}

void init_nki_bindings(py::module& m) {
  py::class_<nki::Program, std::shared_ptr<nki::Program>>(m, "_NkiProgram")
      .def(py::init([](const std::string& name, const py::list& steps, std::vector<at::Tensor> constants,
                       int64_t sbuf_row, int64_t psum_row, int registers, const py::list& io) {
        std::vector<nki::Step> out;
        out.reserve(steps.size());
        for (auto s : steps) out.push_back(to_step(s));
        std::vector<nki::Program::Io> tensors;  // (numel, dtype)
        for (auto t : io) {
          const auto pair = t.cast<py::tuple>();
          tensors.push_back({pair[0].cast<int64_t>(), to_scalar_type(pair[1])});
        }
        return std::make_shared<nki::Program>(name, std::move(out), std::move(constants), sbuf_row, psum_row, registers,
                                              std::move(tensors));
      }))
      .def("__len__", &nki::Program::size)
      .def_property_readonly("serial", &nki::Program::serial)
      .def(
          "run", [](const nki::Program& p, const std::vector<at::Tensor>& hbm) { p.run(hbm); },
          py::call_guard<py::gil_scoped_release>())
      .def("launch", [](const nki::Program& p, const std::vector<at::Tensor>& hbm) { p.launch(hbm); });
  // TORCH_NEURONX_KERNELS=nki (torch_neuronx/nki/eager.py): `source(op_name, args)` answers each
  // call of the ops named with a program or None; each op's description shows in explain().
  m.def("_set_nki_kernel_source", [](py::function source, const std::map<std::string, std::string>& ops) {
    kernel_source() = std::move(source);
    for (const auto& [name, what] : ops) {
      // A typed kernel's record exists from load; a boxed op's is made here, as on its first call.
      OpRecord* rec = find_record(name);
      if (!rec) {
        const auto dot = name.find('.', name.find("::"));
        const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(
            name.substr(0, dot).c_str(), dot == std::string::npos ? "" : name.substr(dot + 1).c_str());
        rec = &record_for(op);
      }
      rec->nki_kernel = what;
      rec->nki_source.store(true);
    }
    nki::source_active.store(true);
  });
  m.attr("_nki_activations") = nki::Program::activation_names();
  m.attr("_nki_binaries") = nki::Program::binary_names();
  m.attr("_nki_reductions") = nki::Program::reduce_names();
}

}  // namespace torch_neuronx
