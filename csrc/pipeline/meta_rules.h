// Corrections to meta kernels where the CPU kernel, which is what runs and what users compare
// with, decides otherwise: their answers, and the argument checks they lack. Each is named in
// op_policy.cpp's overrides table.
#pragma once

#include <ATen/core/ivalue.h>

#include "pipeline/shape_cache.h"

namespace torch_neuronx::meta_rules {

using Results = std::vector<OutputMeta*>;

// native_layer_norm: the CPU keeps mean/rstd in the input's dtype unless the weights are float.
void layer_norm_stats(const c10::IValue* args, const Results& results);
// The batch norm family: saved statistics in the input's dtype unless the parameters are float;
// empty when not training.
void batch_norm_stats(const c10::IValue* args, const Results& results);           // native_batch_norm, _native_batch_norm_legit
void batch_norm_stats_no_stats(const c10::IValue* args, const Results& results);  // _native_batch_norm_legit.no_stats
void batch_norm_stats_eval(const c10::IValue* args, const Results& results);      // ..._no_training, _batch_norm_no_update
void batch_norm_stats_train(const c10::IValue* args, const Results& results);     // _batch_norm_with_update

// Argument checks of CPU kernels that meta kernels lack (ArgCheck): the CPU's messages.
void check_uniform(const c10::IValue* args);          // uniform_(self, from, to)
void check_complex(const c10::IValue* args);          // complex(real, imag), complex.out
void check_masked_fill(const c10::IValue* args);      // masked_fill_.Scalar(self, mask, value)
void check_masked_scatter(const c10::IValue* args);   // masked_scatter_(self, mask, source)
void check_aminmax_out(const c10::IValue* args);      // aminmax.out(self, dim, keepdim, min, max)
void check_bucketize(const c10::IValue* args);        // bucketize(self, boundaries, ...)
void check_multinomial(const c10::IValue* args);      // multinomial(self, num_samples, replacement, generator, out?)
void check_float_inplace(const c10::IValue* args);    // logit_(self, ...): a float result into self
void check_convolution(const c10::IValue* args);      // convolution(input, weight, bias, stride, padding, dilation, ...)

}  // namespace torch_neuronx::meta_rules
