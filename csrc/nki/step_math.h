#pragma once

// The elementwise arithmetic of an NKI program's steps (program.cpp runs the steps): the engines'
// activation, ALU and reduction tables Python names its ops by, and the functions computing them
// over whole tiles.

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "nki/program.h"

namespace torch_neuronx::nki::math {

extern const std::vector<std::string> kActivations, kBinaries, kReductions;

// fn(x), in place where ATen has the in-place op (x is the step's own fp32 copy).
at::Tensor activate(int64_t fn, at::Tensor& x);
at::Tensor binary(int64_t op, const at::Tensor& a, const at::Tensor& b);
at::Tensor reduce_trailing(int64_t op, const at::Tensor& x, int64_t first);
bool is_integral(const at::Tensor& t);
at::Tensor fp32(const at::Tensor& t);
void matmul(const at::Tensor& dst, const at::Tensor& st, const at::Tensor& mv, bool accumulate);
float alu(int64_t op, float a, float b);
at::Tensor fp32_rows(const at::Tensor& t);
// The scan's result, written to `out` ([P, n] fp32 rows, each dense) if defined, else to a fresh one;
// `initial` undefined starts every partition from the step's immediate.
at::Tensor scan(const at::Tensor& data0, const at::Tensor& data1, const at::Tensor& initial, const Step& s,
                at::Tensor out = {});

}  // namespace torch_neuronx::nki::math
