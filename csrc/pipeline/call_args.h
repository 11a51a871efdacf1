// What the async and sync runners both do to a boxed call's arguments.
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>

#include <optional>

namespace torch_neuronx {

// Whether argument `i` is written (an in-place self or an out= tensor).
bool is_written(const c10::FunctionSchema& schema, size_t i);

// The form the CPU kernel takes of a non-tensor argument, or nullopt when it takes it as it is: a
// neuron device becomes the CPU, and a generator argument (given or defaulted) the CPU generator
// for this draw of `numel` elements on `device` (the neuron generator's offset moves past it now,
// in call order).
std::optional<c10::IValue> cpu_form(const c10::Argument& arg, const c10::IValue& value, c10::DeviceIndex device,
                                    int64_t numel);

// The device a call names through a device argument, or -1.
c10::DeviceIndex named_device(const c10::IValue& value);

}  // namespace torch_neuronx
