// What the shape cache and the first-call signatures are keyed by: 64-bit words compared whole
// and hashed (FNV-1a), in a table cleared when full, so keys that never repeat (new shapes each
// step) cannot grow it without limit; a cleared entry costs one more lookup's work, nothing else.
#pragma once

#include <c10/util/SmallVector.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>

namespace torch_neuronx {

template <unsigned N>
class WordKey {
 public:
  size_t hash() const {
    size_t h = 1469598103934665603ULL;
    for (int64_t w : words_) h = (h ^ static_cast<size_t>(w)) * 1099511628211ULL;
    return h;
  }
  bool operator==(const WordKey& o) const { return words_ == o.words_; }

 protected:
  void word(int64_t w) { words_.push_back(w); }

 private:
  c10::SmallVector<int64_t, N> words_;
};

template <class Key, class Value>
class BoundedTable {
 public:
  explicit BoundedTable(size_t max_entries) : max_(max_entries) {}

  std::optional<Value> find(const Key& key) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it == map_.end()) return std::nullopt;
    return it->second;
  }

  void insert(Key key, Value value) {
    std::lock_guard<std::mutex> lock(mu_);
    if (map_.size() >= max_) map_.clear();
    map_[std::move(key)] = std::move(value);
  }

 private:
  struct Hash {
    size_t operator()(const Key& k) const { return k.hash(); }
  };
  const size_t max_;
  mutable std::mutex mu_;
  std::unordered_map<Key, Value, Hash> map_;
};

}  // namespace torch_neuronx
