// The one walk over an operator's tensor arguments: a Tensor (defined or not), a Tensor[] or the
// present entries of a Tensor?[]. Everything that looks at a boxed call's tensors uses it.
#pragma once

#include <ATen/core/ivalue.h>

#include <optional>

namespace torch_neuronx {

template <class F>
void for_each_tensor(const c10::IValue& v, F&& f) {
  if (v.isTensor()) {
    f(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList()) f(t);
  } else if (v.isOptionalTensorList()) {
    for (const std::optional<at::Tensor>& t : v.toOptionalTensorList())
      if (t.has_value()) f(*t);
  }
}

// `v` with each tensor replaced by f(tensor); any other value unchanged.
template <class F>
c10::IValue map_tensors(const c10::IValue& v, F&& f) {
  if (v.isTensor()) return f(v.toTensor());
  if (v.isTensorList()) {
    const auto list = v.toTensorList();
    c10::List<at::Tensor> out;
    out.reserve(list.size());
    for (const at::Tensor& t : list) out.push_back(f(t));
    return out;
  }
  if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> out;
    for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
      if (t.has_value()) {
        out.push_back(std::optional<at::Tensor>(f(*t)));
      } else {
        out.push_back(std::nullopt);
      }
    }
    return out;
  }
  return v;
}

inline bool holds_tensors(const c10::IValue& v) { return v.isTensor() || v.isTensorList() || v.isOptionalTensorList(); }

}  // namespace torch_neuronx
