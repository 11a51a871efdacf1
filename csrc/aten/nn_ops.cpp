// Softmax, losses, gather/scatter/index, top-k/sort, triangular, fill and dropout.
#include <ATen/core/Reduction.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/_log_softmax_backward_data_cpu_dispatch.h>
#include <ATen/ops/_log_softmax_backward_data_meta.h>
#include <ATen/ops/_log_softmax_cpu_dispatch.h>
#include <ATen/ops/_log_softmax_meta.h>
#include <ATen/ops/_softmax_backward_data_cpu_dispatch.h>
#include <ATen/ops/_softmax_backward_data_meta.h>
#include <ATen/ops/_softmax_cpu_dispatch.h>
#include <ATen/ops/_softmax_meta.h>
#include <ATen/ops/gather_cpu_dispatch.h>
#include <ATen/ops/gather_meta.h>
#include <ATen/ops/index_add_cpu_dispatch.h>
#include <ATen/ops/index_add_meta.h>
#include <ATen/ops/index_copy_cpu_dispatch.h>
#include <ATen/ops/index_copy_meta.h>
#include <ATen/ops/mse_loss_cpu_dispatch.h>
#include <ATen/ops/mse_loss_meta.h>
#include <ATen/ops/nll_loss_backward_cpu_dispatch.h>
#include <ATen/ops/nll_loss_backward_meta.h>
#include <ATen/ops/nll_loss_forward_cpu_dispatch.h>
#include <ATen/ops/nll_loss_forward_meta.h>
#include <ATen/ops/scatter_add_cpu_dispatch.h>
#include <ATen/ops/scatter_add_meta.h>
#include <ATen/ops/scatter_cpu_dispatch.h>
#include <ATen/ops/scatter_meta.h>
#include <ATen/ops/sort_cpu_dispatch.h>
#include <ATen/ops/sort_meta.h>
#include <ATen/ops/topk_cpu_dispatch.h>
#include <ATen/ops/topk_meta.h>
#include <ATen/ops/tril_cpu_dispatch.h>
#include <ATen/ops/tril_meta.h>
#include <ATen/ops/triu_cpu_dispatch.h>
#include <ATen/ops/triu_meta.h>
#include <torch/library.h>

#include "aten/structured_macros.h"

namespace torch_neuronx {
namespace {

using at::Scalar;
using at::Tensor;

NX_FO(softmax, "_softmax", "_softmax.out", structured__softmax, _softmax_out,
      (const Tensor& self, int64_t dim, bool half_to_float), (self, dim, half_to_float))
NX_FO(log_softmax, "_log_softmax", "_log_softmax.out", structured__log_softmax, _log_softmax_out,
      (const Tensor& self, int64_t dim, bool half_to_float), (self, dim, half_to_float))
NX_FO(softmax_backward, "_softmax_backward_data", "_softmax_backward_data.out", structured__softmax_backward_data,
      _softmax_backward_data_out,
      (const Tensor& grad_output, const Tensor& output, int64_t dim, at::ScalarType input_dtype),
      (grad_output, output, dim, input_dtype))
NX_FO(log_softmax_backward, "_log_softmax_backward_data", "_log_softmax_backward_data.out",
      structured__log_softmax_backward_data, _log_softmax_backward_data_out,
      (const Tensor& grad_output, const Tensor& output, int64_t dim, at::ScalarType input_dtype),
      (grad_output, output, dim, input_dtype))
NX_FO2(nll_loss_forward, "nll_loss_forward", "nll_loss_forward.output", structured_nll_loss_forward,
       nll_loss_forward_out,
       (const Tensor& self, const Tensor& target, const std::optional<Tensor>& weight, int64_t reduction,
        int64_t ignore_index),
       (self, target, weight, reduction, ignore_index))
NX_FO(nll_loss_backward, "nll_loss_backward", "nll_loss_backward.grad_input", structured_nll_loss_backward,
      nll_loss_backward_out,
      (const Tensor& grad_output, const Tensor& self, const Tensor& target, const std::optional<Tensor>& weight,
       int64_t reduction, int64_t ignore_index, const Tensor& total_weight),
      (grad_output, self, target, weight, reduction, ignore_index, total_weight))
// The CPU's reducing mse_loss out= kernel uses its 0-dim output as scratch of the input's size.
void mse_loss_kernel(Tensor& out, const Tensor& self, const Tensor& target, int64_t reduction) {
  if (reduction == at::Reduction::None) {
    at::cpu::mse_loss_out(out, self, target, reduction);
  } else {
    out.copy_(at::cpu::mse_loss(self, target, reduction));
  }
}
NX_FO_K(mse_loss, "mse_loss", "mse_loss.out", structured_mse_loss, mse_loss_kernel,
        (const Tensor& self, const Tensor& target, int64_t reduction), (self, target, reduction))
NX_FO(gather, "gather", "gather.out", structured_gather, gather_out,
      (const Tensor& self, int64_t dim, const Tensor& index, bool sparse_grad), (self, dim, index, sparse_grad))
NX_FIO(scatter_src, "scatter.src", "scatter_.src", "scatter.src_out", structured_scatter_src, scatter_out,
       (, int64_t dim, const Tensor& index, const Tensor& src), (, dim, index, src))
NX_FIO(scatter_value, "scatter.value", "scatter_.value", "scatter.value_out", structured_scatter_value, scatter_out,
       (, int64_t dim, const Tensor& index, const Scalar& value), (, dim, index, value))
NX_FIO(scatter_add, "scatter_add", "scatter_add_", "scatter_add.out", structured_scatter_add, scatter_add_out,
       (, int64_t dim, const Tensor& index, const Tensor& src), (, dim, index, src))
NX_FIO(index_add, "index_add", "index_add_", "index_add.out", structured_index_add, index_add_out,
       (, int64_t dim, const Tensor& index, const Tensor& source, const Scalar& alpha), (, dim, index, source, alpha))
NX_FIO(index_copy, "index_copy", "index_copy_", "index_copy.out", structured_index_copy, index_copy_out,
       (, int64_t dim, const Tensor& index, const Tensor& source), (, dim, index, source))
NX_FO2(topk, "topk", "topk.values", structured_topk, topk_out,
       (const Tensor& self, int64_t k, int64_t dim, bool largest, bool sorted), (self, k, dim, largest, sorted))
NX_FO2(sort_stable, "sort.stable", "sort.values_stable", structured_sort_stable, sort_out,
       (const Tensor& self, std::optional<bool> stable, int64_t dim, bool descending), (self, stable, dim, descending))
NX_FIO(tril, "tril", "tril_", "tril.out", structured_tril, tril_out, (, int64_t diagonal), (, diagonal))
NX_FIO(triu, "triu", "triu_", "triu.out", structured_triu, triu_out, (, int64_t diagonal), (, diagonal))

// fill_/zero_ back torch.zeros/ones/full and optimizer state initialisation.
OpRecord& fill_scalar_rec = typed_op("aten::fill_.Scalar", "a fill task on the stream");
OpRecord& fill_tensor_rec = typed_op("aten::fill_.Tensor", "a fill task on the stream");
OpRecord& zero_rec = typed_op("aten::zero_", "a fill task on the stream");

// Every element gets the same value, so a small fill runs on the worker alone (exec/solo_team.h).
bool solo_fill(OpRecord& rec, const Tensor& self) { return rec.count_solo(self.numel() <= kSoloElements); }

Tensor& fill_with(OpRecord& rec, Tensor& self, const Scalar& value) {
  rec.count(Mode::kAsync);
  if (self.numel() == 0) return self;
  launch_queued(self.device().index(), rec,
                reinterpret_cast<uintptr_t>(&rec) * 31 + static_cast<uint64_t>(self.scalar_type()),
                [d = TensorDesc::of(self), value, solo = solo_fill(rec, self)] {
                  SoloTeam team(solo);
                  d.view().fill_(value);
                });
  return self;
}

Tensor& fill_scalar(Tensor& self, const Scalar& value) { return fill_with(fill_scalar_rec, self, value); }

Tensor& fill_tensor(Tensor& self, const Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ", value.dim(),
              " dimensions.");
  if (value.device().type() != kNeuron) return fill_with(fill_tensor_rec, self, value.item());
  check_devices("aten::fill_.Tensor", {&self, &value});
  fill_tensor_rec.count(Mode::kAsync);
  launch(self.device().index(), fill_tensor_rec.name.c_str(),
         [d = TensorDesc::of(self), s = TensorDesc::of(value), solo = solo_fill(fill_tensor_rec, self)] {
           SoloTeam team(solo);
           d.view().fill_(s.view());
         });
  return self;
}

Tensor& zero_(Tensor& self) { return fill_with(zero_rec, self, 0); }

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("fill_.Scalar", TORCH_FN(fill_scalar));
  m.impl("fill_.Tensor", TORCH_FN(fill_tensor));
  m.impl("zero_", TORCH_FN(zero_));
}

}  // namespace torch_neuronx
