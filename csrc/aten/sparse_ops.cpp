// Sparse tensors on neuron (COO and the compressed layouts: CSR, CSC, BSR, BSC). A sparse neuron
// tensor is what a sparse CUDA tensor is: its indices and values, dense device tensors, and its
// sizes; PyTorch's own layout-generic kernels build it, read it and copy it. Sparse arithmetic
// (add, mm, coalesce, to_dense, ...) has no device kernel: it runs on the host, its tensors copied
// there and back, counted per op as a CPU fallback (TORCH_NEURONX_FALLBACK applies).
#include "aten/sparse_ops.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/_indices_native.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_native.h>
#include <ATen/ops/_values_native.h>
#include <ATen/ops/ccol_indices_native.h>
#include <ATen/ops/col_indices_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/copy_sparse_to_sparse_native.h>
#include <ATen/ops/crow_indices_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/indices_native.h>
#include <ATen/ops/is_coalesced_native.h>
#include <ATen/ops/row_indices_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/sparse_resize_and_clear_native.h>
#include <ATen/ops/sparse_resize_native.h>
#include <ATen/ops/values_native.h>
#include <torch/library.h>

#include <vector>

#include "core/storage.h"
#include "exec/device_check.h"
#include "exec/ivalue_walk.h"
#include "pipeline/op_policy.h"
#include "pipeline/runners.h"

namespace torch_neuronx {
namespace {

bool writes(const c10::FunctionSchema& schema, size_t i) {
  const auto* alias = schema.arguments()[i].alias_info();
  return alias && alias->isWrite();
}

// The op on the host: neuron tensors go to the CPU (sparse ones stay sparse), the CPU's kernel
// for their layouts runs, written arguments get the results back, returns go to the device.
void sparse_on_host(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  OpRecord& rec = record_for(op);
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  c10::IValue* args = stack->data() + (stack->size() - nargs);
  // CUDA's device rule, as for dense ops: a CPU tensor is no operand of a neuron one.
  DeviceCheck check(rec.name.c_str());
  for (size_t i = 0; i < nargs; ++i) {
    for_each_tensor(args[i], [&](const at::Tensor& t) { check.add(t, writes(schema, i)); });
  }
  // A factory has nothing to compute on the host: run there, it would land on this key again.
  TORCH_CHECK_NOT_IMPLEMENTED(check.device() >= 0, "neuron: ", rec.name,
                              " cannot make a sparse neuron tensor from no neuron tensor; make it on the CPU and "
                              "move it with .to('neuron')");
  const c10::Device device(kNeuron, check.device());
  note_copy(rec, "a sparse tensor: sparse kernels run on the host");
  std::vector<std::pair<at::Tensor, at::Tensor>> written;  // (host copy, device original)
  for (size_t i = 0; i < nargs; ++i) {
    const bool w = writes(schema, i);
    args[i] = map_tensors(args[i], [&](const at::Tensor& t) {
      if (!is_neuron(t)) return t;
      at::Tensor host = t.cpu();
      if (w) written.emplace_back(host, t);
      return host;
    });
  }
  {
    // Below autograd: the call being served already recorded its graph.
    at::AutoDispatchBelowADInplaceOrView below;
    op.callBoxed(stack);
  }
  for (auto& [host, original] : written) {
    // A strided out= tensor takes the result's sizes; sparse ones take them in copy_.
    if (original.layout() == at::kStrided && host.sizes() != original.sizes()) original.resize_(host.sizes());
    original.copy_(host);
  }
  const size_t nrets = schema.returns().size();
  for (size_t i = stack->size() - nrets; i < stack->size(); ++i) {
    (*stack)[i] = map_tensors((*stack)[i], [&](const at::Tensor& t) {
      for (const auto& [host, original] : written) {
        if (t.is_same(host)) return original;
      }
      return t.defined() && t.device().is_cpu() ? t.to(device) : t;
    });
  }
}

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&sparse_on_host>());
}

TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&sparse_on_host>());
}

// Dense to sparse: the same host path, from a dense neuron tensor.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* op : {"_to_sparse", "_to_sparse.sparse_dim", "_to_sparse_csr", "_to_sparse_csc", "_to_sparse_bsr",
                         "_to_sparse_bsc"}) {
    m.impl(op, torch::CppFunction::makeFromBoxedFunction<&sparse_on_host>());
  }
}

// What makes, reads and copies a sparse tensor: PyTorch's layout-generic kernels, which only touch
// the indices and values through other ops.
TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  // Kernels for every backend (CompositeExplicitAutograd[NonFunctional]: mm, mul, add, sum, ...)
  // serve the compressed sparse key and COO's mm/addmm before any fallback does, and refuse their
  // layouts. So those take the host path by name: COO's two here, and every compressed-layout op
  // with a CPU kernel once all static registrations are in (register_compressed_sparse_ops).
  for (const char* op : {"mm", "addmm"}) m.impl(op, torch::CppFunction::makeFromBoxedFunction<&sparse_on_host>());
  m.impl("_sparse_coo_tensor_with_dims_and_tensors", TORCH_FN(at::native::new_with_dims_and_tensor_sparse_symint));
  m.impl("_sparse_coo_tensor_with_dims", TORCH_FN(at::native::new_with_dims_sparse));
  m.impl("empty.memory_format", TORCH_FN(at::native::empty_sparse_symint));
  m.impl("_indices", TORCH_FN(at::native::_indices_sparse));
  m.impl("_values", TORCH_FN(at::native::_values_sparse));
  m.impl("indices", TORCH_FN(at::native::indices_sparse));
  m.impl("values", TORCH_FN(at::native::values_sparse));
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse));
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse));
  m.impl("is_coalesced", TORCH_FN(at::native::is_coalesced_sparse));
  m.impl("_coalesced_", TORCH_FN(at::native::_coalesced_sparse_));
  m.impl("sparse_resize_", TORCH_FN(at::native::sparse_resize_));
  m.impl("sparse_resize_and_clear_", TORCH_FN(at::native::sparse_resize_and_clear_));
  m.impl("copy_", TORCH_FN(at::native::copy_sparse_wrapper_));
  m.impl("copy_sparse_to_sparse_", TORCH_FN(at::native::copy_sparse_));
}

TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(at::native::empty_sparse_compressed_symint));
  m.impl("crow_indices", TORCH_FN(at::native::crow_indices_sparse_csr));
  m.impl("col_indices", TORCH_FN(at::native::col_indices_sparse_csr));
  m.impl("ccol_indices", TORCH_FN(at::native::ccol_indices_sparse_csr));
  m.impl("row_indices", TORCH_FN(at::native::row_indices_sparse_csr));
  m.impl("values", TORCH_FN(at::native::values_sparse_csr));
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse_csr));
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse_csr));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse_csr));
  m.impl("copy_", TORCH_FN(at::native::copy_sparse_compressed_));
}

}  // namespace

void register_compressed_sparse_ops() {
  static torch::Library lib(torch::Library::IMPL, "aten", c10::DispatchKey::SparseCsrPrivateUse1, __FILE__, __LINE__);
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    const auto op = dispatcher.findOp(name);
    // Ops neuron registers itself (the accessors above) keep their kernels.
    if (!op || !op->hasKernelForDispatchKey(c10::DispatchKey::SparseCsrCPU) ||
        op->hasKernelForDispatchKey(c10::DispatchKey::SparseCsrPrivateUse1)) {
      continue;
    }
    const std::string short_name = name.name.substr(6) + (name.overload_name.empty() ? "" : "." + name.overload_name);
    lib.impl(short_name.c_str(), torch::CppFunction::makeFromBoxedFunction<&sparse_on_host>());
  }
}

}  // namespace torch_neuronx
