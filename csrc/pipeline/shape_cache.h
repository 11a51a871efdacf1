// What meta kernels said, remembered per exact call metadata. A model repeats the same shapes
// every step, and a meta kernel (often Python, in torch._meta_registrations) costs 20-200 µs,
// so the async path asks it once per distinct call and reuses the answer. The key holds all
// that meta sees (dtypes, sizes and strides of every tensor, every argument's value), so two
// calls with equal keys get the same answer and pass the same checks.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "pipeline/word_key.h"

namespace torch_neuronx {

// Everything meta can see of a call of `op`: tensor dtypes, sizes and strides, and argument
// values. Two calls with equal keys get the same output metadata and pass the same argument checks.
class ShapeKey : public WordKey<32> {
 public:
  explicit ShapeKey(const void* op) { add(static_cast<int64_t>(reinterpret_cast<uintptr_t>(op))); }
  void add_tensor(const at::Tensor& t);
  void add_value(const c10::IValue& v);  // a value no key can hold makes the key unusable
  bool usable() const { return usable_; }

 private:
  void add(int64_t w) { word(w); }
  bool usable_ = true;
};

struct OutputMeta {
  c10::SmallVector<int64_t, 5> sizes, strides;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  bool defined = true;
  bool conj = false, neg = false;  // a lazy view the CPU returns (vdot(x, y.conj()) is conj(dot))

  static OutputMeta of(const at::Tensor& t);
};

// What meta said of one call.
struct MetaAnswer {
  std::vector<OutputMeta> written;  // each written argument's tensors, in walk order
  std::vector<OutputMeta> outputs;  // each fresh return's tensors, in order
  std::vector<int> output_counts;   // per fresh return: -1 for a Tensor, else the Tensor[]'s length
};

std::optional<MetaAnswer> find_answer(const ShapeKey& key);
void remember_answer(ShapeKey key, MetaAnswer answer);

}  // namespace torch_neuronx
