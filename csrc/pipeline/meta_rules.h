// Corrections to meta kernels where the CPU kernel, which is what runs and what users compare
// with, decides otherwise: their answers, the argument checks they lack, and arguments the CPU
// kernel takes in another form. Each is named in the overrides table (op_overrides.cpp).
#pragma once

#include <ATen/core/ivalue.h>

#include "pipeline/shape_cache.h"

namespace torch_neuronx::meta_rules {

using Results = std::vector<OutputMeta*>;

// The batch norm family: saved statistics in the input's dtype unless the parameters are float;
// empty when not training.
void batch_norm_stats(const c10::IValue* args, const Results& results);  // native_batch_norm, _native_batch_norm_legit
void batch_norm_stats_no_stats(const c10::IValue* args, const Results& results);  // _native_batch_norm_legit.no_stats
void batch_norm_stats_eval(const c10::IValue* args, const Results& results);   // ..._no_training, _batch_norm_no_update
void batch_norm_stats_train(const c10::IValue* args, const Results& results);  // _batch_norm_with_update
// native_batch_norm_backward: a gradient its output_mask leaves out is undefined (meta gives the
// input's gradient always; the CPU and CUDA kernels compute none).
void batch_norm_backward_masked(const c10::IValue* args, const Results& results);
// convolution, _convolution, convolution_backward: outputs (the input's and the weight's gradients)
// channels-last when the input or the weight is, as cuDNN and the CPU lay them out (meta keeps them
// contiguous: a meta tensor has no device to choose by). Vision models run channels-last.
// native_group_norm_backward: the input's gradient in the input's memory format, as the CPU's.
void convolution_memory_format(const c10::IValue* args, const Results& results);
void convolution_backward_memory_format(const c10::IValue* args, const Results& results);
void group_norm_backward_memory_format(const c10::IValue* args, const Results& results);
// Output strides as the CPU kernel gives them: a complex input's real result is contiguous (abs.out,
// angle; meta keeps the input's layout); so is nan_to_num.out's of an integer input; the FFTs lay
// their output out as MKL does (_sort_dims and _exec_fft in mkl/SpectralOps.cpp: batch dimensions
// outermost in the input's order, then the transformed ones), contiguous without MKL.
void complex_to_real_contiguous(const c10::IValue* args, const Results& results);
void integral_input_contiguous(const c10::IValue* args, const Results& results);
void fft_r2c_cpu_layout(const c10::IValue* args, const Results& results);  // _fft_r2c(self, dim, norm, onesided)
void fft_c2c_cpu_layout(const c10::IValue* args, const Results& results);  // _fft_c2c(self, dim, norm, forward)
void fft_c2r_cpu_layout(const c10::IValue* args, const Results& results);  // _fft_c2r(self, dim, norm, last_dim_size)
// The margin losses' 0-dim results where meta says (nframe,).
void multi_margin_loss_0d(const c10::IValue* args, const Results& results);       // multi_margin_loss
void multilabel_margin_loss_0d(const c10::IValue* args, const Results& results);  // multilabel_margin_loss_forward
// nansum(self, dim=[], keepdim): an empty dim list reduces every dimension, as sum does (meta
// reduces none).
void empty_dim_reduces_all(const c10::IValue* args, const Results& results);
// _weight_norm_interface(v, g, dim): the norms of a half g are float, as the CPU and CUDA kernels
// keep them (meta says half; it widens bfloat16 only).
void weight_norm_float_norms(const c10::IValue* args, const Results& results);

// Argument checks of CPU kernels that meta kernels lack (ArgRule): the CPU's messages.
// (Checks that depend only on dtypes, ranks and mode arguments need none: the first call of each
// signature raises the CPU kernel's own error at the call, pipeline/first_call.h.)
void check_uniform(c10::IValue* args);         // uniform_(self, from, to)
void check_random_from(c10::IValue* args);     // random_.from(self, from, to?, generator)
void check_random_to(c10::IValue* args);       // random_.to(self, to, generator)
void check_masked_fill(c10::IValue* args);     // masked_fill_.Scalar(self, mask, value)
void check_masked_scatter(c10::IValue* args);  // masked_scatter_(self, mask, source)
void check_multinomial(c10::IValue* args);     // multinomial(self, num_samples, replacement, generator, out?)
void check_convolution(c10::IValue* args);     // convolution(input, weight, bias, stride, padding, dilation, ...)

// Arguments brought to what the CPU kernel takes (ArgRule).
// native_layer_norm_backward: mean/rstd of a half or bfloat16 input are float, as on CUDA (the
// forward widens them, op_policy.cpp); the CPU kernel takes them in the input's dtype unless the
// weights are float. Narrowing gives back the CPU forward's values exactly.
void layer_norm_backward_stats(c10::IValue* args);

}  // namespace torch_neuronx::meta_rules
