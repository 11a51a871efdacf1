// The element-wise reduction a collective applies to the ranks' contributions.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <torch/csrc/distributed/c10d/Types.hpp>

namespace torch_neuronx {

struct Reduction {
  c10d::ReduceOp::RedOpType op = c10d::ReduceOp::SUM;
  double premul = 1.0;  // PREMUL_SUM's factor
  int ranks = 1;        // AVG's divisor
};

// Raises a clear error at the call when `dtype` cannot be reduced with `op` (AVG of integers,
// bitwise ops on floats, PREMUL_SUM with a factor that is not a number).
Reduction make_reduction(const c10d::ReduceOp& op, c10::ScalarType dtype, int ranks, const char* collective);
std::string reduction_name(const Reduction& r);

// The op gloo runs for `r`: AVG and PREMUL_SUM are sums there, their scaling applied around it
// (the host transport) or inside the host (the hierarchical collectives).
c10d::ReduceOp gloo_op(const Reduction& r);

// outs[k][i] = src[0][i] op src[1][i] op ... op src[n-1][i], in that order, for every output k
// (a collective writes the result into every rank's tensor at once); outputs may be sources.
// 16-bit floats accumulate in float32.
void reduce_into(void* const* outs, int nouts, const void* const* src, int n, int64_t count, c10::ScalarType dtype,
                 const Reduction& r);

}  // namespace torch_neuronx
