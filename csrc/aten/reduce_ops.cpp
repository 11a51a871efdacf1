// Reductions, scans and the matmul family, asynchronous on the stream.
#include <ATen/core/Tensor.h>
#include <ATen/ops/addmm_cpu_dispatch.h>
#include <ATen/ops/addmm_meta.h>
#include <ATen/ops/addmv_cpu_dispatch.h>
#include <ATen/ops/addmv_meta.h>
#include <ATen/ops/all_cpu_dispatch.h>
#include <ATen/ops/all_meta.h>
#include <ATen/ops/amax_cpu_dispatch.h>
#include <ATen/ops/amax_meta.h>
#include <ATen/ops/amin_cpu_dispatch.h>
#include <ATen/ops/amin_meta.h>
#include <ATen/ops/any_cpu_dispatch.h>
#include <ATen/ops/any_meta.h>
#include <ATen/ops/argmax_cpu_dispatch.h>
#include <ATen/ops/argmax_meta.h>
#include <ATen/ops/argmin_cpu_dispatch.h>
#include <ATen/ops/argmin_meta.h>
#include <ATen/ops/baddbmm_cpu_dispatch.h>
#include <ATen/ops/baddbmm_meta.h>
#include <ATen/ops/bmm_cpu_dispatch.h>
#include <ATen/ops/bmm_meta.h>
#include <ATen/ops/cumprod_cpu_dispatch.h>
#include <ATen/ops/cumprod_meta.h>
#include <ATen/ops/cumsum_cpu_dispatch.h>
#include <ATen/ops/cumsum_meta.h>
#include <ATen/ops/linalg_vector_norm_cpu_dispatch.h>
#include <ATen/ops/linalg_vector_norm_meta.h>
#include <ATen/ops/max_cpu_dispatch.h>
#include <ATen/ops/max_meta.h>
#include <ATen/ops/mean_cpu_dispatch.h>
#include <ATen/ops/mean_meta.h>
#include <ATen/ops/min_cpu_dispatch.h>
#include <ATen/ops/min_meta.h>
#include <ATen/ops/mm_cpu_dispatch.h>
#include <ATen/ops/mm_meta.h>
#include <ATen/ops/prod_cpu_dispatch.h>
#include <ATen/ops/prod_meta.h>
#include <ATen/ops/sum_cpu_dispatch.h>
#include <ATen/ops/sum_meta.h>
#include <torch/library.h>

#include <tuple>

#include "aten/structured_macros.h"

namespace torch_neuronx {

namespace {

using at::Scalar;
using at::Tensor;

NX_FO(sum_dim, "sum.dim_IntList", "sum.IntList_out", structured_sum_dim_IntList, sum_out,
      (const Tensor& self, at::OptionalIntArrayRef dim, bool keepdim, std::optional<at::ScalarType> dtype),
      (self, dim, keepdim, dtype))
NX_FO(mean_dim, "mean.dim", "mean.out", structured_mean_dim, mean_out,
      (const Tensor& self, at::OptionalIntArrayRef dim, bool keepdim, std::optional<at::ScalarType> dtype),
      (self, dim, keepdim, dtype))
NX_FO(amax, "amax", "amax.out", structured_amax, amax_out, (const Tensor& self, at::IntArrayRef dim, bool keepdim),
      (self, dim, keepdim))
NX_FO(amin, "amin", "amin.out", structured_amin, amin_out, (const Tensor& self, at::IntArrayRef dim, bool keepdim),
      (self, dim, keepdim))
NX_FO(argmax, "argmax", "argmax.out", structured_argmax, argmax_out,
      (const Tensor& self, std::optional<int64_t> dim, bool keepdim), (self, dim, keepdim))
NX_FO(argmin, "argmin", "argmin.out", structured_argmin, argmin_out,
      (const Tensor& self, std::optional<int64_t> dim, bool keepdim), (self, dim, keepdim))
NX_FO(prod_dim, "prod.dim_int", "prod.int_out", structured_prod_dim_int, prod_out,
      (const Tensor& self, int64_t dim, bool keepdim, std::optional<at::ScalarType> dtype), (self, dim, keepdim, dtype))
NX_FO2(max_dim, "max.dim", "max.dim_max", structured_max_dim, max_out, (const Tensor& self, int64_t dim, bool keepdim),
       (self, dim, keepdim))
NX_FO2(min_dim, "min.dim", "min.dim_min", structured_min_dim, min_out, (const Tensor& self, int64_t dim, bool keepdim),
       (self, dim, keepdim))
NX_FIO(cumsum, "cumsum", "cumsum_", "cumsum.out", structured_cumsum, cumsum_out,
       (, int64_t dim, std::optional<at::ScalarType> dtype), (, dim, dtype))
NX_FIO(cumprod, "cumprod", "cumprod_", "cumprod.out", structured_cumprod, cumprod_out,
       (, int64_t dim, std::optional<at::ScalarType> dtype), (, dim, dtype))
NX_FO(linalg_vector_norm, "linalg_vector_norm", "linalg_vector_norm.out", structured_linalg_vector_norm,
      linalg_vector_norm_out,
      (const Tensor& self, const Scalar& ord, at::OptionalIntArrayRef dim, bool keepdim,
       std::optional<at::ScalarType> dtype),
      (self, ord, dim, keepdim, dtype))
NX_FO(any_dim, "any.dim", "any.out", structured_any_dim, any_out, (const Tensor& self, int64_t dim, bool keepdim),
      (self, dim, keepdim))
NX_FO(all_dim, "all.dim", "all.out", structured_all_dim, all_out, (const Tensor& self, int64_t dim, bool keepdim),
      (self, dim, keepdim))
NX_FO(any_all, "any", "any.all_out", structured_any, any_out, (const Tensor& self), (self))
NX_FO(all_all, "all", "all.all_out", structured_all, all_out, (const Tensor& self), (self))

NX_FO_K(mm, "mm", "mm.out", structured_mm, NX_CPU_OUT(mm_out), (const Tensor& self, const Tensor& mat2), (self, mat2))
NX_FO_K(bmm, "bmm", "bmm.out", structured_bmm, NX_CPU_OUT(bmm_out), (const Tensor& self, const Tensor& mat2),
        (self, mat2))
NX_FIO_K(addmm, "addmm", "addmm_", "addmm.out", structured_addmm, NX_CPU_OUT(addmm_out),
         (, const Tensor& mat1, const Tensor& mat2, const Scalar& beta, const Scalar& alpha),
         (, mat1, mat2, beta, alpha))
NX_FIO_K(baddbmm, "baddbmm", "baddbmm_", "baddbmm.out", structured_baddbmm, NX_CPU_OUT(baddbmm_out),
         (, const Tensor& batch1, const Tensor& batch2, const Scalar& beta, const Scalar& alpha),
         (, batch1, batch2, beta, alpha))
NX_FIO(addmv, "addmv", "addmv_", "addmv.out", structured_addmv, addmv_out,
       (, const Tensor& mat, const Tensor& vec, const Scalar& beta, const Scalar& alpha), (, mat, vec, beta, alpha))

}  // namespace
}  // namespace torch_neuronx
