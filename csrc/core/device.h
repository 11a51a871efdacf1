// Shared glue between PyTorch and the runtime: current device and stream, error conversion.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/util/Exception.h>

#include "core/errors.h"
#include "neuronrt/runtime.h"

namespace torch_neuronx {

constexpr c10::DeviceType kNeuron = c10::DeviceType::PrivateUse1;

// The runtime, with configuration errors turned into c10::Error.
neuronrt::Runtime& runtime();
int device_count() noexcept;

c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex index);
void check_device_index(c10::DeviceIndex index);

// Streams: id 0 is the default stream of a device; pool ids follow (see device.cpp).
c10::Stream current_stream(c10::DeviceIndex index = -1);
c10::Stream default_stream(c10::DeviceIndex index = -1);
c10::Stream stream_from_pool(c10::DeviceIndex index, bool high_priority);
c10::Stream new_stream(c10::DeviceIndex index, int priority);
void set_current_stream(const c10::Stream& stream);
int stream_priority(const c10::Stream& stream);
neuronrt::Queue& queue_of(const c10::Stream& stream);
inline neuronrt::Queue& current_queue(c10::DeviceIndex index = -1) { return queue_of(current_stream(index)); }

}  // namespace torch_neuronx
