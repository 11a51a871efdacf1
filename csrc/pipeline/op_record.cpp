#include "pipeline/op_record.h"

#include <unordered_map>

#include "neuronrt/queue.h"

namespace torch_neuronx {
namespace {

struct Registry {
  std::mutex mu;
  std::unordered_map<std::string, OpRecord*> by_name;
};

Registry& registry() {
  static auto* r = new Registry();  // leaked: records outlive every op call, even at exit
  return *r;
}

// A concatenated task's ops are counted when its segment is queued (tags are records).
const bool counts_concatenated = (neuronrt::Queue::set_concatenated_hook([](void* tag) {
                                    static_cast<OpRecord*>(tag)->concatenated.fetch_add(1, std::memory_order_relaxed);
                                  }),
                                  true);

}  // namespace

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::kAsync:
      return "async";
    case Mode::kSync:
      return "sync";
    case Mode::kCopy:
      return "copy";
  }
  return "?";
}

void OpRecord::count(Mode m, const std::string& why) {
  count(m);
  std::lock_guard<std::mutex> lock(mu_);
  reasons_[static_cast<int>(m)][why]++;
}

std::map<std::string, int64_t> OpRecord::call_reasons(Mode m) const {
  std::lock_guard<std::mutex> lock(mu_);
  return reasons_[static_cast<int>(m)];
}

OpRecord& typed_op(const char* name, const char* what) {
  auto* r = new OpRecord();
  r->name = name;
  r->mode = Mode::kAsync;
  r->reason = what;
  r->typed = true;
  add_record(r);
  return *r;
}

void add_record(OpRecord* record) {
  auto& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  reg.by_name.emplace(record->name, record);
}

OpRecord* find_record(const std::string& name) {
  auto& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto it = reg.by_name.find(name);
  return it == reg.by_name.end() ? nullptr : it->second;
}

std::vector<OpRecord*> all_records() {
  auto& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  std::vector<OpRecord*> out;
  out.reserve(reg.by_name.size());
  for (auto& [name, r] : reg.by_name) out.push_back(r);
  return out;
}

void OpRecord::reset_counts() {
  for (auto& c : calls) c.store(0, std::memory_order_relaxed);
  first_waits.store(0, std::memory_order_relaxed);
  nki_calls.store(0, std::memory_order_relaxed);
  concatenated.store(0, std::memory_order_relaxed);
  solo.store(0, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& m : reasons_) m.clear();
}

void reset_all_counts() {
  for (OpRecord* r : all_records()) r->reset_counts();
}

}  // namespace torch_neuronx
