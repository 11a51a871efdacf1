// torch.histc with CUDA's dtype support. The CPU kernel takes floating inputs only; CUDA also
// counts integer inputs (in the input's dtype), and transformers' MoE layers rely on that to
// count tokens per expert on any accelerator. Integer inputs are counted here with CUDA's
// arithmetic (64-bit integers); floating ones run the CPU kernel. Either way, one task.
#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/aminmax.h>
#include <ATen/ops/histc_cpu_dispatch.h>
#include <torch/library.h>

#include "core/storage.h"
#include "exec/device_check.h"
#include "exec/executor.h"
#include "exec/tensor_desc.h"
#include "pipeline/op_record.h"

namespace torch_neuronx {
namespace {

OpRecord& histc_rec = typed_op("aten::histc", "counts integer inputs as CUDA does; floating inputs run the CPU kernel");
OpRecord& histc_out_rec =
    typed_op("aten::histc.out", "counts integer inputs as CUDA does; floating inputs run the CPU kernel");

// On the worker. CUDA's rule: bounds in the input's type; equal bounds mean the data's min and
// max; equal again, widened by one; values outside are not counted; the top edge is in the last bin.
template <class T>
void count_integers(const at::Tensor& self, int64_t bins, int64_t lo, int64_t hi, const at::Tensor& out) {
  if (lo == hi && self.numel() > 0) {
    auto [mn, mx] = at::aminmax(self);
    lo = mn.item<int64_t>();
    hi = mx.item<int64_t>();
  }
  if (lo == hi) {
    lo -= 1;
    hi += 1;
  }
  std::vector<int64_t> counts(bins, 0);
  const at::Tensor flat = self.contiguous().view(-1);
  const T* data = flat.const_data_ptr<T>();
  for (int64_t i = 0, n = flat.numel(); i < n; ++i) {
    const int64_t v = static_cast<int64_t>(data[i]);
    if (v < lo || v > hi) continue;
    int64_t bin = (v - lo) * bins / (hi - lo);
    if (bin == bins) bin -= 1;
    counts[bin]++;
  }
  T* o = out.mutable_data_ptr<T>();
  const int64_t stride = out.stride(0);
  for (int64_t b = 0; b < bins; ++b) o[b * stride] = static_cast<T>(counts[b]);
}

void check_args(const at::Tensor& self, int64_t bins, const at::Scalar& min, const at::Scalar& max) {
  TORCH_CHECK(bins > 0, "torch.histc: bins must be > 0, but got ", bins);
  TORCH_CHECK(!(min.toDouble() > max.toDouble()), "torch.histc: max must be larger than min");
  TORCH_CHECK(self.scalar_type() != at::kBool && !c10::isComplexType(self.scalar_type()), "torch.histc: input of type ",
              self.scalar_type(), " is not supported");
}

const bool histc_not_concatenable = (histc_rec.concatenable = histc_out_rec.concatenable = false, true);

void launch_histc(OpRecord& rec, const at::Tensor& self, int64_t bins, const at::Scalar& min, const at::Scalar& max,
                  const at::Tensor& out) {
  rec.count(Mode::kAsync);
  launch(self.device().index(), rec.name.c_str(), [s = TensorDesc::of(self), o = TensorDesc::of(out), bins, min, max] {
    at::Tensor self_v = s.view(), out_v = o.view();
    if (c10::isIntegralType(self_v.scalar_type(), /*includeBool=*/false)) {
      AT_DISPATCH_INTEGRAL_TYPES(self_v.scalar_type(), "histc_neuron",
                                 [&] { count_integers<scalar_t>(self_v, bins, min.toLong(), max.toLong(), out_v); });
    } else {
      at::cpu::histc_out(out_v, self_v, bins, min, max);
    }
  });
}

at::Tensor histc(const at::Tensor& self, int64_t bins, const at::Scalar& min, const at::Scalar& max) {
  check_devices("aten::histc", {&self});
  check_args(self, bins, min, max);
  at::Tensor out = empty_neuron({bins}, self.scalar_type(), self.device().index());
  launch_histc(histc_rec, self, bins, min, max, out);
  return out;
}

at::Tensor& histc_out(const at::Tensor& self, int64_t bins, const at::Scalar& min, const at::Scalar& max,
                      at::Tensor& out) {
  check_devices("aten::histc.out", {&self, &out});
  check_args(self, bins, min, max);
  TORCH_CHECK(out.scalar_type() == self.scalar_type(),
              "torch.histc: input tensor and hist should have the same dtype, ", "but got input ", self.scalar_type(),
              " and hist ", out.scalar_type());
  at::native::resize_output(out, {bins});
  launch_histc(histc_out_rec, self, bins, min, max, out);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("histc", TORCH_FN(histc));
  m.impl("histc.out", TORCH_FN(histc_out));
}

}  // namespace torch_neuronx
