// How an op runs on neuron, and why: the one file that decides it.
//
// Every ATen op reaching the neuron device takes exactly one of these paths:
// - typed kernel: a kernel written for the device (csrc/aten/*: elementwise, reductions, matmul,
//   softmax, losses, copies, fills, ...). Its meta function runs on the host, the output is
//   allocated on the device and the CPU kernel is queued as a task. Always async.
// - composite: PyTorch decomposes the op into other ops before it reaches the device (linear,
//   dropout, most views); each of those runs by its own plan.
// - boxed: everything else reaches one boxed entry (boxed_entry.cpp), which runs the op by the
//   plan this file makes for it, once, from its schema and tags and the overrides table
//   (op_overrides.cpp):
//     async  the op's meta kernel runs on the host over shape-only mirrors of the arguments (bad
//            arguments raise at the call, as on CUDA) and sizes the outputs, which are allocated
//            on the device; the op's CPU kernel (its out= overload where it has a CPU kernel of
//            its own, else the op followed by a copy into the outputs) runs as a task over views
//            of device memory. Random ops get a generator derived from the neuron generator's
//            seed and offset when the call is made, so results follow torch.neuron.manual_seed.
//            The task checks that the kernel left every output as allocated; if not, it fails
//            loudly (never a silent wrong result) and names this file.
//     sync   for ops whose outputs meta cannot size (they depend on tensor values: nonzero,
//            unique, boolean masks), that return host values or views, or that have no meta
//            kernel: the CPU kernel still runs as a task on the stream, on device memory, and the
//            caller waits for it; what it allocates comes from the device (no copy).
//     copy   the CPU fallback: tensors are copied to host memory, computed there and copied
//            back. Only where an override or TORCH_NEURONX_OP_POLICY asks for it;
//            TORCH_NEURONX_FALLBACK=warn|error|silent says what a copy does.
//   A single call of an async op may still run sync, counted with its reason: a host tensor
//   argument, or a meta kernel that raised (the CPU kernel then decides, and raises its error).
//
// `torch_neuronx.explain("aten::op")` prints the plan of an op; `op_counts()` counts the calls.
#include "pipeline/op_policy.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "core/errors.h"
#include "neuronrt/config.h"
#include "pipeline/op_overrides.h"

namespace torch_neuronx {
namespace {

// ---- the user's overrides (TORCH_NEURONX_OP_POLICY) -------------------------------------------

std::string route_of(const c10::OperatorHandle& op);

// A kernel written for the device (not the boxed entry, registered for the claimed ops): it
// always runs async, whatever the policy says.
bool has_typed_kernel(const c10::OperatorHandle& op) {
  if (!op.hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) return false;
  for (const auto& c : claimed_ops())
    if ("aten::" + c == op_display_name(op)) return false;
  return true;
}

// Refuses an entry the policy could not honour, so that explain() and op_counts() always show
// what the user asked for. `op` is "ns::name" (every overload) or "ns::name.overload".
void check_entry(const std::string& op, const std::string& mode, const char* setting) {
  const auto dot = op.find('.', op.find("::"));
  const bool exact = dot != std::string::npos;
  const std::string base = op.substr(0, dot);
  std::vector<c10::OperatorHandle> ops;
  if (exact) {
    if (auto h = c10::Dispatcher::singleton().findOp({base, op.substr(dot + 1)})) ops.push_back(*h);
  } else {
    // Not overloads_of(): its table is read once, and other libraries may still register ops.
    for (const auto& name : c10::Dispatcher::singleton().getAllOpNames())
      if (name.name == base)
        if (auto h = c10::Dispatcher::singleton().findOp(name)) ops.push_back(*h);
  }
  if (ops.empty()) {
    // Another library's ops may register after this one loads; aten's are all there.
    TORCH_CHECK_VALUE(op.rfind("aten::", 0) != 0, setting, ": there is no operator ", op,
                      " (names are such as aten::add, for every overload, or aten::add.Tensor)");
    return;
  }
  std::string composite;
  size_t planned = 0;
  for (const auto& h : ops) {
    const std::string name = op_display_name(h);
    TORCH_CHECK_VALUE(!has_typed_kernel(h), setting, ": ", op, "=", mode, " cannot apply to ", name,
                      ": it has a typed neuron kernel, which always runs async (torch_neuronx.explain('", name,
                      "') says how each op runs)");
    const std::string route = route_of(h);
    if (route.empty())
      ++planned;
    else
      composite = name + " is " + route;
  }
  // A composite overload of a named op is fine while another overload runs by a plan.
  TORCH_CHECK_VALUE(planned > 0, setting, ": ", op, "=", mode, " cannot apply: ", composite,
                    "; set the policy of those ops instead");
}

std::unordered_map<std::string, Mode> parse_policy(const std::string& spec, const char* setting) {
  std::unordered_map<std::string, Mode> out;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    TORCH_CHECK_VALUE(eq != std::string::npos, setting, ": '", item, "' is not op=mode (e.g. aten::nonzero=sync)");
    const std::string op = item.substr(0, eq), mode = item.substr(eq + 1);
    TORCH_CHECK_VALUE(op.find("::") != std::string::npos && op.find("::") > 0, setting, ": '", op,
                      "' is not an operator name such as aten::add or aten::add.Tensor");
    TORCH_CHECK_VALUE(!out.count(op), setting, ": ", op, " is named twice");
    if (mode == "async")
      out[op] = Mode::kAsync;
    else if (mode == "sync")
      out[op] = Mode::kSync;
    else if (mode == "copy")
      out[op] = Mode::kCopy;
    else
      TORCH_CHECK_VALUE(false, setting, ": mode '", mode, "' of ", op, " is not async, sync or copy");
    check_entry(op, mode, setting);
  }
  return out;
}

// Read once, at import (check_op_policy); ops are planned once.
const std::unordered_map<std::string, Mode>& user_modes() {
  static const auto* modes = [] {
    return new std::unordered_map<std::string, Mode>(checked(
        [] { return parse_policy(neuronrt::config::text("TORCH_NEURONX_OP_POLICY"), "TORCH_NEURONX_OP_POLICY"); }));
  }();
  return *modes;
}

std::optional<Mode> user_mode(const std::string& name, const std::string& base) {
  const auto& modes = user_modes();
  auto it = modes.find(name);
  if (it == modes.end()) it = modes.find(base);
  if (it == modes.end()) return std::nullopt;
  return it->second;
}

// ---- the rules -----------------------------------------------------------------------------

bool is_tensor(const c10::TypePtr& t) { return t->kind() == c10::TypeKind::TensorType; }
bool is_tensor_list(const c10::TypePtr& t) {
  auto l = t->cast<c10::ListType>();
  return l && l->getElementType()->kind() == c10::TypeKind::TensorType;
}
bool is_optional_tensor(const c10::TypePtr& t) {
  auto o = t->cast<c10::OptionalType>();
  return o && o->getElementType()->kind() == c10::TypeKind::TensorType;
}
bool is_written(const c10::Argument& a) { return a.alias_info() && a.alias_info()->isWrite(); }
bool has_kind(const c10::TypePtr& t, c10::TypeKind kind) {
  if (t->kind() == kind) return true;
  if (auto o = t->cast<c10::OptionalType>()) return o->getElementType()->kind() == kind;
  return false;
}

// Overload names of every operator, by operator name (read once).
const std::vector<std::string>& overloads_of(const std::string& name) {
  static const auto* all = [] {
    auto* m = new std::unordered_map<std::string, std::vector<std::string>>();
    for (const auto& op : c10::Dispatcher::singleton().getAllOpNames()) (*m)[op.name].push_back(op.overload_name);
    return m;
  }();
  static const std::vector<std::string> none;
  auto it = all->find(name);
  return it == all->end() ? none : it->second;
}

// The out= overload computing `schema`'s fresh returns: the same arguments, then one written
// Tensor (or Tensor[]) per return. Usually "<overload>_out" or "out", but backward ops call theirs
// "grad_input" and unary reductions "unary_out", so every overload of the name is a candidate.
// Only one with a CPU kernel of its own counts: a generated out= wrapper is the op plus a copy.
std::optional<c10::OperatorHandle> find_out_overload(const c10::FunctionSchema& schema) {
  const auto& overload = schema.overload_name();
  std::vector<std::string> candidates;
  if (!overload.empty()) candidates.push_back(overload + "_out");
  candidates.push_back("out");
  for (const auto& o : overloads_of(schema.name()))
    if (o != overload) candidates.push_back(o);
  const size_t nargs = schema.arguments().size(), nret = schema.returns().size();
  for (const auto& c : candidates) {
    auto h = c10::Dispatcher::singleton().findOp({schema.name(), c});
    if (!h) continue;
    const auto& s = h->schema();
    if (s.arguments().size() != nargs + nret) continue;
    bool ok = s.returns().size() == nret || s.returns().empty();
    for (size_t i = 0; i < nargs && ok; ++i) {
      const auto& a = schema.arguments()[i];
      const auto& b = s.arguments()[i];
      ok = a.name() == b.name() && *a.type() == *b.type() && (bool)a.alias_info() == (bool)b.alias_info();
    }
    for (size_t r = 0; r < nret && ok; ++r) {
      const auto& b = s.arguments()[nargs + r];
      ok = is_written(b) && *b.type() == *schema.returns()[r].type();
    }
    if (ok && h->hasKernelForDispatchKey(c10::DispatchKey::CPU)) return h;
  }
  return std::nullopt;
}

struct Decision {
  Mode mode;
  std::string reason;
};

Decision sync_because(const std::string& why) { return {Mode::kSync, why}; }

// The rules, in order; `r` receives the async plan.
Decision decide(const c10::OperatorHandle& op, OpRecord& r, unsigned flags) {
  const auto& schema = op.schema();
  if (op.hasTag(at::Tag::dynamic_output_shape) || op.hasTag(at::Tag::data_dependent_output))
    return sync_because("its output shape or value depends on tensor values");
  if (op.hasTag(at::Tag::inplace_view) || op.hasTag(at::Tag::maybe_aliasing_or_mutating))
    return sync_because("it changes or may return a view of its input's metadata");
  for (const auto& a : schema.arguments()) {
    if (has_kind(a.type(), c10::TypeKind::StorageType)) return sync_because("it takes a Storage argument");
    if (a.alias_info() && !is_written(a)) return sync_because("it returns a view of an argument");
    if (is_written(a) && !is_tensor(a.type()) && !is_tensor_list(a.type()) && !is_optional_tensor(a.type()))
      return sync_because("it writes an argument of type " + a.type()->str());
  }
  for (const auto& ret : schema.returns()) {
    if (!is_tensor(ret.type()) && !is_tensor_list(ret.type())) return sync_because("it returns a host value");
    if (ret.alias_info()) {
      int arg = -1;
      for (size_t i = 0; i < schema.arguments().size() && arg < 0; ++i) {
        const auto& info = schema.arguments()[i].alias_info();
        if (info && info->isWrite() && info->beforeSets() == ret.alias_info()->beforeSets()) arg = static_cast<int>(i);
      }
      if (arg < 0 || !ret.alias_info()->isWrite()) return sync_because("it returns a view of an argument");
      r.return_arg.push_back(arg);
    } else {
      r.return_arg.push_back(-1);
    }
  }
  if (!op.hasComputedKernelForDispatchKey(c10::DispatchKey::Meta))
    return sync_because("it has no meta kernel to size its outputs");
  if (!op.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU))
    return {Mode::kCopy, "it has no CPU kernel to run on device memory"};
  bool fresh = false;
  for (int a : r.return_arg) fresh = fresh || a < 0;
  if (fresh && !(flags & kNoOutKernel)) r.out_op = find_out_overload(schema);
  std::string what = "meta sizes the outputs on the host; ";
  if (!fresh) {
    what += "the CPU kernel runs as a task on the stream, writing its arguments on the device";
  } else if (r.out_op) {
    what += "the CPU out= kernel (" + op_display_name(*r.out_op) + ") runs as a task into them";
  } else {
    what += "the CPU kernel runs as a task and its results are copied into them";
  }
  return {Mode::kAsync, what};
}

// For an out= op (its written arguments are keyword-only): the functional overload computing the
// same thing, whose meta gives the layout CPU kernels give a resized out= tensor.
std::optional<c10::OperatorHandle> find_functional_of(const c10::FunctionSchema& schema) {
  size_t nouts = 0;
  for (const auto& a : schema.arguments()) nouts += a.kwarg_only() && is_written(a) && is_tensor(a.type());
  if (nouts == 0) return std::nullopt;
  const size_t nargs = schema.arguments().size() - nouts;
  for (const auto& o : overloads_of(schema.name())) {
    if (o == schema.overload_name()) continue;
    auto h = c10::Dispatcher::singleton().findOp({schema.name(), o});
    if (!h || !h->hasComputedKernelForDispatchKey(c10::DispatchKey::Meta)) continue;
    const auto& f = h->schema();
    if (f.arguments().size() != nargs || f.returns().size() != nouts) continue;
    bool ok = true;
    for (size_t i = 0; i < nargs && ok; ++i) {
      const auto& a = schema.arguments()[i];
      const auto& b = f.arguments()[i];
      ok = a.name() == b.name() && *a.type() == *b.type() && !b.alias_info();
    }
    for (const auto& ret : f.returns()) ok = ok && is_tensor(ret.type()) && !ret.alias_info();
    if (ok) return h;
  }
  return std::nullopt;
}

std::unique_ptr<OpRecord> make_record(const c10::OperatorHandle& op) {
  auto r = std::make_unique<OpRecord>();
  r->name = op_display_name(op);
  const std::string base = op.schema().name();
  // Rows naming this op: an exact "aten::name.overload" row replaces rows naming every overload.
  bool exact_row = false;
  for (const auto& o : overrides()) exact_row = exact_row || (o.op == r->name && std::strchr(o.op, '.'));
  unsigned flags = 0;
  int mode = kRules;
  std::string whys;
  for (const auto& o : overrides()) {
    if (!(o.op == r->name || (!exact_row && o.op == base))) continue;
    flags |= o.flags;
    if (o.mode != kRules) mode = o.mode;
    if (o.rule) r->rule = o.rule;
    if (o.arg_rule) r->arg_rule = o.arg_rule;
    whys += (whys.empty() ? "" : "; ") + std::string(o.why);
  }
  r->contiguous_outputs = flags & kContiguousOutputs;
  r->quiet_resize = flags & kQuietResize;
  r->out_scratch = flags & kOutScratch;
  r->widened_results = flags & kWidenedResults;
  r->split_invariant = flags & kSplitInvariant;
  // A pointwise CPU out= kernel (TensorIterator) lays a resized out= tensor out as its inputs, as
  // the functional op's meta does; the op's own meta (Python's out_wrapper) keeps it contiguous.
  if ((flags & kFunctionalLayout) || op.hasTag(at::Tag::pointwise)) r->functional_op = find_functional_of(op.schema());
  Decision d = decide(op, *r, flags);
  if (mode != kRules)
    d = {static_cast<Mode>(mode), whys};
  else if (!whys.empty())
    d.reason += " (overrides: " + whys + ")";
  if (const auto m = user_mode(r->name, base))
    d = {*m, std::string("set by TORCH_NEURONX_OP_POLICY (was: ") + d.reason + ")"};
  if (d.mode != Mode::kAsync) r->out_op.reset();
  r->mode = d.mode;
  r->reason = std::move(d.reason);
  return r;
}

std::mutex records_mu;
std::unordered_map<const c10::FunctionSchema*, OpRecord*>& records() {
  static auto* m = new std::unordered_map<const c10::FunctionSchema*, OpRecord*>();
  return *m;
}

// How an op reaches the device, from the dispatcher's table.
std::string route_of(const c10::OperatorHandle& op) {
  if (op.hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) return "";
  if (op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd))
    return "composite: PyTorch decomposes it (CompositeImplicitAutograd) before it reaches the device; "
           "the ops it decomposes into run by their own plans";
  if (op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
      op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional))
    return "composite: its CompositeExplicitAutograd kernel runs for every device and calls other ops, "
           "which run by their own plans";
  return "";
}

}  // namespace

std::string op_display_name(const c10::OperatorHandle& op) {
  const auto& name = op.operator_name();
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

OpRecord& record_for(const c10::OperatorHandle& op) {
  // Each thread remembers what it looked up, so the common case takes no lock.
  thread_local std::unordered_map<const c10::FunctionSchema*, OpRecord*> seen;
  const auto* key = &op.schema();  // stable for a registered operator
  auto it = seen.find(key);
  if (C10_LIKELY(it != seen.end())) return *it->second;
  OpRecord* r;
  {
    std::lock_guard<std::mutex> lock(records_mu);
    auto& slot = records()[key];
    if (!slot) {
      std::unique_ptr<OpRecord> made = make_record(op);
      // An op with a typed kernel that reaches a boxed path (a sparse call) counts on that record.
      if (OpRecord* typed = find_record(made->name)) {
        slot = typed;
      } else {
        slot = made.release();
        add_record(slot);
      }
    }
    r = slot;
  }
  seen.emplace(key, r);
  return *r;
}

void check_op_policy() { user_modes(); }

std::vector<std::string> claimed_ops() {
  std::vector<std::string> out;
  for (const auto& o : overrides())
    if (o.flags & kClaim) out.emplace_back(std::string(o.op).substr(6));  // without "aten::"
  return out;
}

std::string explain(const std::string& name) {
  std::string base = name, overload;
  const auto sep = name.find("::");
  const auto dot = name.find('.', sep == std::string::npos ? 0 : sep);
  if (dot != std::string::npos) {
    base = name.substr(0, dot);
    overload = name.substr(dot + 1);
  }
  std::vector<c10::OperatorHandle> ops;
  if (dot != std::string::npos) {
    if (auto h = c10::Dispatcher::singleton().findOp({base, overload})) ops.push_back(*h);
  } else {
    for (const auto& o : overloads_of(base))
      if (auto h = c10::Dispatcher::singleton().findOp({base, o})) ops.push_back(*h);
  }
  TORCH_CHECK_VALUE(!ops.empty(), "neuron: no operator named '", name,
                    "' (use a name such as aten::add or aten::add.Tensor)");
  std::ostringstream out;
  for (const auto& op : ops) {
    const std::string full = op_display_name(op);
    OpRecord* r = find_record(full);
    std::string route = route_of(op);
    out << full << ": ";
    if (r && r->typed) {
      out << "async, typed kernel: " << r->reason;
    } else if (!route.empty() && !r) {
      out << route;
    } else {
      OpRecord& rec = r ? *r : record_for(op);
      out << mode_name(rec.mode) << " (boxed): " << rec.reason;
      r = &rec;
    }
    if (r) {
      out << ". Calls: async " << r->calls[0].load() << ", sync " << r->calls[1].load() << ", copy "
          << r->calls[2].load();
      if (const int64_t w = r->first_waits.load())
        out << " (" << w << " async calls waited: the first of their signature)";
      if (const int64_t n = r->solo.load())
        out << " (" << n << " ran on the queue worker alone: small, and the same bits however the work is split)";
      if (r->mode == Mode::kAsync && r->concatenable) {
        out << "; concatenable: with concatenation on, its async calls that do not wait join the stream's "
               "segment ("
            << r->concatenated.load() << " ran concatenated)";
      } else {
        out << "; not concatenable ("
            << (r->mode != Mode::kAsync ? "its calls do not run async" : "its task is queued outside the op pipeline")
            << ")";
      }
      if (!r->typed) out << " (meta kernel asked " << r->meta_calls.load() << " times)";
      if (r->nki_source.load())
        out << "; TORCH_NEURONX_KERNELS=nki: calls whose shapes and dtypes fit run the NKI library kernel "
            << r->nki_kernel << " in their task instead of the CPU kernel (" << r->nki_calls.load() << " did)";
      for (Mode m : {Mode::kSync, Mode::kCopy}) {
        for (const auto& [why, n] : r->call_reasons(m)) out << "; " << n << " " << mode_name(m) << " because " << why;
      }
    }
    out << "\n";
  }
  std::string s = out.str();
  s.pop_back();
  return s;
}

}  // namespace torch_neuronx
