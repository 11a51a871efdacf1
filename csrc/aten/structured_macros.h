// Declares and registers the neuron variants of one structured op.
//   NX_FIO: functional, in-place and out=; PARAMS/ARGS are what follows `self`, with a leading
//           comma, in parentheses: (, const Tensor& other) / (, other).
//   NX_FO:  functional and out=; PARAMS/ARGS are all of them: (const Tensor& a) / (a).
#pragma once

#include <torch/library.h>

#include "aten/structured.h"

#define NX_EXPAND(...) __VA_ARGS__
#define NX_KERNEL "structured meta on the host, the CPU kernel as a task on the stream"

#define NX_FIO(ID, SF, SI, SO, META, CPUFN, PARAMS, ARGS) \
  NX_FIO_K(ID, SF, SI, SO, META, NX_CPU_OUT(CPUFN), PARAMS, ARGS)

// NX_FIO with the kernel given as a callable (outputs first, then the op's arguments).
#define NX_FIO_K(ID, SF, SI, SO, META, KERNEL, PARAMS, ARGS)                                             \
  OpRecord& ID##_rec_f = typed_op("aten::" SF, NX_KERNEL);                                               \
  OpRecord& ID##_rec_i = typed_op("aten::" SI, NX_KERNEL);                                               \
  OpRecord& ID##_rec_o = typed_op("aten::" SO, NX_KERNEL);                                               \
  at::Tensor ID##_functional(const at::Tensor& self NX_EXPAND PARAMS) {                                  \
    return structured_functional<at::meta::META>(ID##_rec_f, KERNEL, self NX_EXPAND ARGS)[0];            \
  }                                                                                                      \
  at::Tensor& ID##_inplace(at::Tensor& self NX_EXPAND PARAMS) {                                          \
    return structured_inplace<at::meta::META>(ID##_rec_i, KERNEL, self NX_EXPAND ARGS);                  \
  }                                                                                                      \
  at::Tensor& ID##_out(const at::Tensor& self NX_EXPAND PARAMS, at::Tensor& out) {                       \
    structured_out<at::meta::META>(ID##_rec_o, KERNEL, std::forward_as_tuple(out), self NX_EXPAND ARGS); \
    return out;                                                                                          \
  }                                                                                                      \
  TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {                                                             \
    m.impl(SF, TORCH_FN(ID##_functional));                                                               \
    m.impl(SI, TORCH_FN(ID##_inplace));                                                                  \
    m.impl(SO, TORCH_FN(ID##_out));                                                                      \
  }

#define NX_FO(ID, SF, SO, META, CPUFN, PARAMS, ARGS) NX_FO_K(ID, SF, SO, META, NX_CPU_OUT(CPUFN), PARAMS, ARGS)

// NX_FO with the kernel given as a callable (outputs first, then the op's arguments).
#define NX_FO_K(ID, SF, SO, META, KERNEL, PARAMS, ARGS)                                             \
  OpRecord& ID##_rec_f = typed_op("aten::" SF, NX_KERNEL);                                          \
  OpRecord& ID##_rec_o = typed_op("aten::" SO, NX_KERNEL);                                          \
  at::Tensor ID##_functional(NX_EXPAND PARAMS) {                                                    \
    return structured_functional<at::meta::META>(ID##_rec_f, KERNEL, NX_EXPAND ARGS)[0];            \
  }                                                                                                 \
  at::Tensor& ID##_out(NX_EXPAND PARAMS, at::Tensor& out) {                                         \
    structured_out<at::meta::META>(ID##_rec_o, KERNEL, std::forward_as_tuple(out), NX_EXPAND ARGS); \
    return out;                                                                                     \
  }                                                                                                 \
  TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {                                                        \
    m.impl(SF, TORCH_FN(ID##_functional));                                                          \
    m.impl(SO, TORCH_FN(ID##_out));                                                                 \
  }

// Two outputs (values and indices, output and total_weight...).
#define NX_FO2(ID, SF, SO, META, CPUFN, PARAMS, ARGS)                                                              \
  OpRecord& ID##_rec_f = typed_op("aten::" SF, NX_KERNEL);                                                         \
  OpRecord& ID##_rec_o = typed_op("aten::" SO, NX_KERNEL);                                                         \
  std::tuple<at::Tensor, at::Tensor> ID##_functional(NX_EXPAND PARAMS) {                                           \
    auto o = structured_functional<at::meta::META, 2>(ID##_rec_f, NX_CPU_OUT(CPUFN), NX_EXPAND ARGS);              \
    return {o[0], o[1]};                                                                                           \
  }                                                                                                                \
  std::tuple<at::Tensor&, at::Tensor&> ID##_out(NX_EXPAND PARAMS, at::Tensor& a, at::Tensor& b) {                  \
    structured_out<at::meta::META, 2>(ID##_rec_o, NX_CPU_OUT(CPUFN), std::forward_as_tuple(a, b), NX_EXPAND ARGS); \
    return {a, b};                                                                                                 \
  }                                                                                                                \
  TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {                                                                       \
    m.impl(SF, TORCH_FN(ID##_functional));                                                                         \
    m.impl(SO, TORCH_FN(ID##_out));                                                                                \
  }
