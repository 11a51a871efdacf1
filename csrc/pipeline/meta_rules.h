// Corrections to meta kernels' answers where the CPU kernel, which is what runs and what users
// compare with, decides otherwise. Each is named in op_policy.cpp's overrides table.
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

}  // namespace torch_neuronx::meta_rules
