#include "pipeline/first_call.h"

#include <ATen/MemoryOverlap.h>

#include <algorithm>
#include <cstring>

namespace torch_neuronx {
namespace {

BoundedTable<Signature, bool>& known() {
  static auto* t = new BoundedTable<Signature, bool>(1 << 16);
  return *t;
}

c10::TypePtr unwrap_optional(const c10::TypePtr& t) {
  if (auto opt = t->cast<c10::OptionalType>()) return opt->getElementType();
  return t;
}

}  // namespace

void Signature::add_tensor(const at::Tensor& t) {
  if (!t.defined()) {
    word(-1);
    return;
  }
  word(static_cast<int64_t>(t.scalar_type()));
  // Contiguity in the memory formats a kernel may require: flags the tensor keeps, no scan.
  int64_t bits = t.numel() == 0 ? 1 : 0;
  if (t.layout() == at::kStrided) {
    if (t.is_contiguous()) bits |= 2;
    if (t.dim() == 4 && t.is_contiguous(at::MemoryFormat::ChannelsLast)) bits |= 4;
    if (t.dim() == 5 && t.is_contiguous(at::MemoryFormat::ChannelsLast3d)) bits |= 4;
    // Elements that alias each other (an expanded tensor): out= kernels refuse to write them.
    if (!(bits & 2) && at::has_internal_overlap(t) == at::MemOverlap::Yes) bits |= 8;
  }
  word((static_cast<int64_t>(t.device().type()) * 64 + t.dim()) * 16 + bits);
  if (t.unsafeGetTensorImpl()->is_wrapped_number()) word(-3);
}

void Signature::add_text(std::string_view s) {
  word(400 + static_cast<int64_t>(s.size()));
  for (size_t i = 0; i < s.size(); i += 8) {
    int64_t w = 0;
    std::memcpy(&w, s.data() + i, std::min<size_t>(8, s.size() - i));
    word(w);
  }
}

void Signature::add_ivalue(const c10::IValue& v, const c10::TypePtr& real_type) {
  if (v.isTensor()) {
    add_tensor(v.toTensor());
  } else if (v.isTensorList()) {
    word(500);
    for (const at::Tensor& t : v.toTensorList()) add_tensor(t);
  } else if (v.isOptionalTensorList()) {
    word(501);
    for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
      if (t.has_value()) {
        add_tensor(*t);
      } else {
        word(-2);
      }
    }
  } else if (v.isNone()) {
    word(-2);
  } else if (v.isBool()) {
    add(v.toBool());
  } else if (v.isInt()) {
    // A dtype, layout or memory format is an int here too; either way the value counts.
    const bool plain_int = unwrap_optional(real_type)->kind() == c10::TypeKind::IntType;
    word(plain_int ? 300 : 600);
    word(v.toInt());
  } else if (v.isDouble()) {
    word(301);
  } else if (v.isScalar()) {
    add(v.toScalar());
  } else if (v.isString()) {
    add_text(v.toStringRef());
  } else if (v.isDevice()) {
    word(700 + static_cast<int64_t>(v.toDevice().type()));
  } else if (v.isBoolList()) {
    word(502);
    for (bool b : v.toBoolList()) add(b);
  } else if (v.isIntList()) {
    word(801);  // sizes
  } else if (v.isDoubleList()) {
    word(802);
  } else if (v.isGenerator()) {
    word(803);
  } else {
    word(809);  // other lists (int?[]): their kind
  }
}

void Signature::add_sharing(c10::ArrayRef<std::pair<const c10::TensorImpl*, bool>> tensors) {
  const size_t n = tensors.size();
  if (n < 2) return;
  const auto storage = [&](size_t i) { return tensors[i].first->storage().unsafeGetStorageImpl(); };
  if (n <= 16) {
    for (size_t i = 1; i < n; ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (storage(i) == storage(j) && (tensors[i].second || tensors[j].second)) {
          const auto overlap = at::get_overlap_status(tensors[i].first, tensors[j].first);
          word(1000 + static_cast<int64_t>(i * n + j) * 4 + static_cast<int64_t>(overlap));
        }
      }
    }
    return;
  }
  // Long lists (foreach ops): grouped by storage, not compared pairwise.
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return storage(a) < storage(b); });
  for (size_t g = 0; g < n;) {
    size_t e = g + 1;
    bool written = tensors[order[g]].second;
    while (e < n && storage(order[e]) == storage(order[g])) written |= tensors[order[e++]].second;
    if (e - g > 1 && written) {
      word(-4);
      for (size_t k = g; k < e; ++k) word(static_cast<int64_t>(order[k]));
    }
    g = e;
  }
}

Signature::Signature(const OpRecord& rec) { word(static_cast<int64_t>(reinterpret_cast<uintptr_t>(&rec))); }

bool known_signature(const Signature& sig) { return known().find(sig).has_value(); }

void ran_cleanly(Signature sig) { known().insert(std::move(sig), true); }

}  // namespace torch_neuronx
