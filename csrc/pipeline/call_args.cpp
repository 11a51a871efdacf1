#include "pipeline/call_args.h"

#include "core/device.h"
#include "core/generator.h"

namespace torch_neuronx {
namespace {

bool is_generator_type(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::GeneratorType) return true;
  auto opt = type->cast<c10::OptionalType>();
  return opt && opt->getElementType()->kind() == c10::TypeKind::GeneratorType;
}

}  // namespace

bool is_written(const c10::FunctionSchema& schema, size_t i) {
  const auto& info = schema.arguments()[i].alias_info();
  return info && info->isWrite();
}

std::optional<c10::IValue> cpu_form(const c10::Argument& arg, const c10::IValue& value, c10::DeviceIndex device,
                                    int64_t numel) {
  if (is_generator_type(arg.type()) && (value.isNone() || value.isGenerator())) {
    std::optional<at::Generator> g;
    if (value.isGenerator()) g = value.toGenerator();
    return c10::IValue(resolve_generator(g, device)->cpu_generator_for(numel));
  }
  if (value.isDevice() && value.toDevice().type() == kNeuron) return c10::IValue(c10::Device(c10::kCPU));
  return std::nullopt;
}

c10::DeviceIndex named_device(const c10::IValue& value) {
  if (!value.isDevice() || value.toDevice().type() != kNeuron) return -1;
  const auto d = value.toDevice();
  return d.has_index() ? d.index() : current_device();
}

}  // namespace torch_neuronx
