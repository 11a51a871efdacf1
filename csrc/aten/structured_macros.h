// Declares and registers the neuron variants of one structured op.
//   NX_FIO: functional, in-place and out=; PARAMS/ARGS are what follows `self`, with a leading
//           comma, in parentheses: (, const Tensor& other) / (, other).
//   NX_FO:  functional and out=; PARAMS/ARGS are all of them: (const Tensor& a) / (a).
#pragma once

#include <torch/library.h>

#include "aten/structured.h"

#define NX_EXPAND(...) __VA_ARGS__

#define NX_FIO(ID, SF, SI, SO, META, CPUFN, PARAMS, ARGS)                                                 \
  at::Tensor ID##_functional(const at::Tensor& self NX_EXPAND PARAMS) {                                   \
    return structured_functional<at::meta::META>("aten::" SF, NX_CPU_OUT(CPUFN), self NX_EXPAND ARGS)[0]; \
  }                                                                                                        \
  at::Tensor& ID##_inplace(at::Tensor& self NX_EXPAND PARAMS) {                                           \
    return structured_inplace<at::meta::META>("aten::" SI, NX_CPU_OUT(CPUFN), self NX_EXPAND ARGS);       \
  }                                                                                                        \
  at::Tensor& ID##_out(const at::Tensor& self NX_EXPAND PARAMS, at::Tensor& out) {                        \
    structured_out<at::meta::META>("aten::" SO, NX_CPU_OUT(CPUFN), std::forward_as_tuple(out),            \
                                   self NX_EXPAND ARGS);                                                   \
    return out;                                                                                            \
  }                                                                                                        \
  TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {                                                               \
    m.impl(SF, TORCH_FN(ID##_functional));                                                                 \
    m.impl(SI, TORCH_FN(ID##_inplace));                                                                    \
    m.impl(SO, TORCH_FN(ID##_out));                                                                        \
  }

#define NX_FO(ID, SF, SO, META, CPUFN, PARAMS, ARGS)                                                  \
  at::Tensor ID##_functional(NX_EXPAND PARAMS) {                                                      \
    return structured_functional<at::meta::META>("aten::" SF, NX_CPU_OUT(CPUFN), NX_EXPAND ARGS)[0]; \
  }                                                                                                    \
  at::Tensor& ID##_out(NX_EXPAND PARAMS, at::Tensor& out) {                                           \
    structured_out<at::meta::META>("aten::" SO, NX_CPU_OUT(CPUFN), std::forward_as_tuple(out),        \
                                   NX_EXPAND ARGS);                                                    \
    return out;                                                                                        \
  }                                                                                                    \
  TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {                                                           \
    m.impl(SF, TORCH_FN(ID##_functional));                                                             \
    m.impl(SO, TORCH_FN(ID##_out));                                                                    \
  }

// Two outputs (values and indices, output and total_weight...).
#define NX_FO2(ID, SF, SO, META, CPUFN, PARAMS, ARGS)                                                 \
  std::tuple<at::Tensor, at::Tensor> ID##_functional(NX_EXPAND PARAMS) {                              \
    auto o = structured_functional<at::meta::META, 2>("aten::" SF, NX_CPU_OUT(CPUFN), NX_EXPAND ARGS); \
    return {o[0], o[1]};                                                                               \
  }                                                                                                    \
  std::tuple<at::Tensor&, at::Tensor&> ID##_out(NX_EXPAND PARAMS, at::Tensor& a, at::Tensor& b) {     \
    structured_out<at::meta::META, 2>("aten::" SO, NX_CPU_OUT(CPUFN), std::forward_as_tuple(a, b),    \
                                      NX_EXPAND ARGS);                                                 \
    return {a, b};                                                                                     \
  }                                                                                                    \
  TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {                                                           \
    m.impl(SF, TORCH_FN(ID##_functional));                                                             \
    m.impl(SO, TORCH_FN(ID##_out));                                                                    \
  }
