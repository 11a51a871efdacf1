#pragma once

// Steps computed straight into their destination tile: one pass over the views as they lie (SBUF
// rows, access patterns, broadcasts), where the general path materialises fp32 copies of its
// operands and a result before writing it. The tracer flags the steps whose destination is apart
// from their inputs (or the same view, read element for element before it is written); these
// functions check the rest and say whether they took the step.

#include <ATen/core/Tensor.h>

namespace torch_neuronx::nki::direct {

// No element of `dst` is written twice (no dim steps 0 over more than one element).
bool writable(const at::Tensor& dst);

// dst = a op b for the ALU's arithmetic ops (add, subtract, multiply, divide, maximum, minimum),
// each element computed in fp32 and rounded once to dst's dtype, as the engines do; a and b are
// fp32/bf16 views of dst's shape, or fp32 0-dim tensors (an immediate). False (nothing done) for
// other ops, dtypes or shapes.
bool binary(int64_t op, const at::Tensor& dst, const at::Tensor& a, const at::Tensor& b);

// dst = src for tensors of one dtype and one shape, moving the widest words (16, 8, 4 or 2 bytes)
// that both layouts allow: a DMA's rows are runs of a few elements (an access pattern's
// innermost [1, n]), and the copy kernel's cost is per element. False (nothing done) otherwise.
bool copy(const at::Tensor& dst, const at::Tensor& src);

}  // namespace torch_neuronx::nki::direct
