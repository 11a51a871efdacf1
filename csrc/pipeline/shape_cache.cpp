#include "pipeline/shape_cache.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace torch_neuronx {
namespace {

int64_t bits_of(double d) {
  int64_t b;
  std::memcpy(&b, &d, sizeof b);
  return b;
}

BoundedTable<ShapeKey, MetaAnswer>& answers() {
  static auto* t = new BoundedTable<ShapeKey, MetaAnswer>(8192);
  return *t;
}

}  // namespace

void ShapeKey::add_tensor(const at::Tensor& t) {
  if (!t.defined()) {
    add(-1);
    return;
  }
  add(static_cast<int64_t>(t.scalar_type()));
  add(static_cast<int64_t>(t.device().type()));
  add(t.dim() * 4 + t.is_conj() * 2 + t.is_neg());  // the lazy bits can change meta's answer
  for (int64_t s : t.sizes()) add(s);
  for (int64_t s : t.strides()) add(s);
  if (!t.device().is_cpu()) return;
  if (t.dim() != 0) {
    usable_ = false;  // only 0-dim host tensors (scalars) take the queued path
    return;
  }
  // A host scalar operand: meta sees its value only through type promotion, but keep it exact.
  add(t.unsafeGetTensorImpl()->is_wrapped_number() ? 1 : 0);
  add_value(t.item());
}

void ShapeKey::add_value(const c10::IValue& v) {
  // Each kind adds a distinct tag first, so values of different kinds never collide.
  if (v.isNone()) {
    add(1);
  } else if (v.isInt()) {
    add(2);
    add(v.toInt());
  } else if (v.isBool()) {
    add(3);
    add(v.toBool() ? 1 : 0);
  } else if (v.isDouble()) {
    add(4);
    add(bits_of(v.toDouble()));
  } else if (v.isIntList()) {
    const auto l = v.toIntList();
    add(5);
    add(static_cast<int64_t>(l.size()));
    for (int64_t x : l) add(x);
  } else if (v.isDoubleList()) {
    const auto l = v.toDoubleList();
    add(6);
    add(static_cast<int64_t>(l.size()));
    for (double x : l) add(bits_of(x));
  } else if (v.isList()) {  // bool[], int?[], ... (tensor lists are keyed by the caller)
    const auto l = v.toListRef();
    add(9);
    add(static_cast<int64_t>(l.size()));
    for (const auto& x : l) add_value(x);
  } else if (v.isString()) {
    const std::string& str = v.toStringRef();
    add(7);
    add(static_cast<int64_t>(str.size()));
    for (size_t i = 0; i < str.size(); i += 8) {
      int64_t w = 0;
      std::memcpy(&w, str.data() + i, std::min<size_t>(8, str.size() - i));
      add(w);
    }
  } else if (v.isScalar()) {
    const auto s = v.toScalar();
    add(8);
    add(static_cast<int64_t>(s.type()));
    if (s.isFloatingPoint()) {
      add(bits_of(s.toDouble()));
    } else if (s.isIntegral(/*includeBool=*/true)) {
      add(s.toLong());
    } else {
      usable_ = false;  // complex and symbolic scalars
    }
  } else {
    usable_ = false;
  }
}

OutputMeta OutputMeta::of(const at::Tensor& t) {
  OutputMeta m;
  m.defined = t.defined();
  if (!m.defined) return m;
  m.sizes.assign(t.sizes().begin(), t.sizes().end());
  m.strides.assign(t.strides().begin(), t.strides().end());
  m.dtype = t.scalar_type();
  m.conj = t.is_conj();
  m.neg = t.is_neg();
  return m;
}

std::optional<MetaAnswer> find_answer(const ShapeKey& key) { return answers().find(key); }

void remember_answer(ShapeKey key, MetaAnswer answer) { answers().insert(std::move(key), std::move(answer)); }

}  // namespace torch_neuronx
