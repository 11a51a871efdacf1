// The neuron device's Kineto activity profiler (torch.profiler's ProfilerActivity.PrivateUse1).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace torch_neuronx {

// What torch.profiler recorded of the host op that queued a device span: its name and, with
// record_shapes=True, its inputs as the profiler writes them.
struct SpanOp {
  std::string name, dims, types, concrete;
};
// Trn2 and Trn3 estimates (µs) per op; nullopt where an op cannot be priced. Set by the Python
// layer (torch_neuronx.cost_model), called once per trace with the distinct ops of its spans.
using SpanEstimator = std::function<std::vector<std::optional<std::pair<double, double>>>(const std::vector<SpanOp>&)>;
void set_span_estimator(SpanEstimator estimator);

}  // namespace torch_neuronx
