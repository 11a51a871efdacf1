// Ops without a dedicated neuron kernel, run asynchronously. Every ATen op has a meta kernel
// (C++, or Python in torch._meta_registrations) that computes its outputs' shapes, dtypes and
// strides and checks its arguments, and most have an out= overload. So the meta kernel runs on
// the host over shape-only mirrors of the arguments, the outputs are allocated on the device,
// and the CPU out= kernel is queued on the stream over CPU views of device memory -- the same
// contract as the dedicated kernels. Ops that write their arguments (in-place, out=) are queued
// as they are, once meta has checked them and sized the outputs.
//
// Meta kernels follow the CUDA kernels, and the CPU kernel sometimes differs (bfloat16 layer
// norm keeps its statistics in float on the CPU). So the first call of an op with a new argument
// signature runs synchronously and its result is compared with what meta predicted; only a
// signature whose prediction held is queued afterwards.
//
// Not for: random ops (the generator state is the host's), ops whose output shape depends on
// values (nonzero, unique, boolean masks: meta cannot tell), ops returning views or non-tensors.
// Those keep the synchronous generic path, which runs the CPU kernel at once.
#include "aten/queued_ops.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <c10/core/DispatchKeySet.h>

#include <exception>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "aten/generic_ops.h"
#include "aten/op_stats.h"
#include "aten/shape_cache.h"
#include "core/storage.h"

namespace torch_neuronx {
namespace {

// ---- which ops qualify (decided once per op) -------------------------------------------------

struct Plan {
  bool eligible = false;
  bool writes_args = false;                   // in-place or out=: the op runs as it is
  // Functional: the out= overload the task runs; without one, the task runs the op itself and
  // copies its results into the outputs.
  std::optional<c10::OperatorHandle> out_op;
  std::vector<size_t> return_args;            // writes_args: the argument each return is
};

bool is_plain_tensor(const c10::TypePtr& t) { return t->kind() == c10::TypeKind::TensorType; }

bool has_type(const c10::TypePtr& t, c10::TypeKind kind) {
  if (t->kind() == kind) return true;
  if (auto opt = t->cast<c10::OptionalType>()) return opt->getElementType()->kind() == kind;
  return false;
}

bool same_alias_set(const c10::AliasInfo& a, const c10::AliasInfo& b) {
  return a.beforeSets() == b.beforeSets();
}

// Overload names of every operator, by operator name (read once; plans are made under a lock).
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

// The out= overload computing `schema`: the same arguments, then one written tensor per return.
// It is usually "<overload>_out" or "out", but backward ops call theirs "grad_input" and
// unary reductions "unary_out", so every overload of the name is a candidate, likeliest first.
std::optional<c10::OperatorHandle> find_out_overload(const c10::FunctionSchema& schema) {
  const auto& overload = schema.overload_name();
  std::vector<std::string> candidates;
  if (!overload.empty()) candidates.push_back(overload + "_out");
  candidates.push_back("out");
  for (const auto& o : overloads_of(schema.name())) {
    if (o != overload) candidates.push_back(o);
  }
  const size_t nargs = schema.arguments().size(), nret = schema.returns().size();
  for (const auto& c : candidates) {
    auto h = c10::Dispatcher::singleton().findOp({schema.name(), c});
    if (!h) continue;
    const auto& s = h->schema();
    if (s.arguments().size() != nargs + nret || s.returns().size() != nret) continue;
    bool ok = true;
    for (size_t i = 0; i < nargs && ok; ++i) {
      const auto& a = schema.arguments()[i];
      const auto& b = s.arguments()[i];
      ok = a.name() == b.name() && *a.type() == *b.type() && !b.alias_info();
    }
    for (size_t i = nargs; i < nargs + nret && ok; ++i) {
      const auto& b = s.arguments()[i];
      ok = is_plain_tensor(b.type()) && b.alias_info() && b.alias_info()->isWrite();
    }
    if (ok && h->hasComputedKernelForDispatchKey(c10::DispatchKey::CPU)) return h;
  }
  return std::nullopt;
}

Plan make_plan(const c10::OperatorHandle& op) {
  Plan p;
  const auto& schema = op.schema();
  for (auto tag : {at::Tag::nondeterministic_seeded, at::Tag::dynamic_output_shape, at::Tag::data_dependent_output,
                   at::Tag::maybe_aliasing_or_mutating, at::Tag::inplace_view}) {
    if (op.hasTag(tag)) return p;
  }
  if (!op.hasComputedKernelForDispatchKey(c10::DispatchKey::Meta)) return p;
  for (const auto& a : schema.arguments()) {
    if (has_type(a.type(), c10::TypeKind::GeneratorType) || has_type(a.type(), c10::TypeKind::StorageType)) return p;
    if (!a.alias_info()) continue;
    if (!a.alias_info()->isWrite() || !is_plain_tensor(a.type())) return p;  // a view, or a written list
    p.writes_args = true;
  }
  for (const auto& r : schema.returns()) {
    if (!is_plain_tensor(r.type())) return p;
  }
  if (p.writes_args) {
    if (!op.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU)) return p;
    for (const auto& r : schema.returns()) {
      if (!r.alias_info()) return p;
      std::optional<size_t> found;
      for (size_t i = 0; i < schema.arguments().size() && !found; ++i) {
        const auto& info = schema.arguments()[i].alias_info();
        if (info && info->isWrite() && same_alias_set(*info, *r.alias_info())) found = i;
      }
      if (!found) return p;
      p.return_args.push_back(*found);
    }
  } else {
    if (schema.returns().empty()) return p;
    for (const auto& r : schema.returns()) {
      if (r.alias_info()) return p;
    }
    p.out_op = find_out_overload(schema);
    if (!p.out_op && !op.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU)) return p;
  }
  p.eligible = true;
  return p;
}

std::mutex plans_mu;
std::unordered_map<const c10::FunctionSchema*, Plan> plans;  // the schema's address is stable

const Plan& plan_for(const c10::OperatorHandle& op) {
  std::lock_guard<std::mutex> lock(plans_mu);
  auto it = plans.find(&op.schema());
  if (it == plans.end()) it = plans.emplace(&op.schema(), make_plan(op)).first;
  return it->second;
}

enum class Verdict { kUnknown, kHolds, kFails };
struct Checked {
  Verdict verdict = Verdict::kUnknown;
  // The CPU kernel's result dtypes where they differ from meta's (kUndefined: meta's holds).
  std::vector<c10::ScalarType> dtypes;
};
std::unordered_map<const c10::FunctionSchema*, std::unordered_map<size_t, Checked>> checks;  // under plans_mu

Checked check_for(const c10::OperatorHandle& op, size_t signature) {
  std::lock_guard<std::mutex> lock(plans_mu);
  auto& m = checks[&op.schema()];
  auto it = m.find(signature);
  return it == m.end() ? Checked{} : it->second;
}

void set_verdict(const c10::OperatorHandle& op, size_t signature, Verdict v,
                 std::vector<c10::ScalarType> dtypes = {}) {
  std::lock_guard<std::mutex> lock(plans_mu);
  checks[&op.schema()][signature] = Checked{v, std::move(dtypes)};
}

void mark_ineligible(const c10::OperatorHandle& op) {
  std::lock_guard<std::mutex> lock(plans_mu);
  plans[&op.schema()].eligible = false;
}

// ---- one call ----------------------------------------------------------------------------------

// What the task holds of one argument: a value, or descriptors of device tensors.
struct QueuedArg {
  enum Kind { kValue, kTensor, kTensorList, kOptionalTensorList } kind = kValue;
  c10::IValue value;
  std::vector<TensorDesc> tensors;
  std::vector<bool> present;  // kOptionalTensorList: which entries are tensors
};

struct Call {
  c10::DeviceIndex device = -1;
  bool ok = true;  // false: an argument this path does not take (host tensor, device argument)
  size_t signature = 0;  // what decides the outputs' dtypes and layouts, beyond shapes
};

void mix(Call& c, size_t v) { c.signature ^= v + 0x9e3779b97f4a7c15ULL + (c.signature << 6) + (c.signature >> 2); }

// False for a tensor this path does not take.
bool note(Call& c, const at::Tensor& t) {
  if (!t.defined()) return true;
  if (t.device().type() == kNeuron) {
    if (c.device < 0) c.device = t.device().index();
    if (c.device != t.device().index()) c.ok = false;  // the generic path raises the device error
  } else if (!t.device().is_cpu() || t.dim() > 0) {
    c.ok = false;  // only 0-dim host tensors (scalars) mix with device tensors
  }
  return c.ok;
}

TensorDesc describe(Call& c, const at::Tensor& t) {
  // Some out= kernels use the output as scratch of the input's size when it has more than one
  // element, so the element count's class is part of the signature too.
  const size_t numel_class = t.numel() == 0 ? 0 : t.numel() == 1 ? 1 : 2;
  mix(c, static_cast<size_t>(t.scalar_type()) * 16 + numel_class * 4 + (t.is_contiguous() ? 2 : 0) +
             (t.dim() == 0 ? 1 : 0));
  // Which dimensions have size 1: layouts are checked on the others, so these must match too.
  size_t ones = static_cast<size_t>(t.dim()) << 32;
  for (int64_t d = 0; d < t.dim() && d < 32; ++d) ones |= (t.size(d) == 1 ? size_t{1} << d : 0);
  mix(c, ones);
  return note(c, t) ? TensorDesc::of(t) : TensorDesc();
}

at::Tensor meta_mirror(const at::Tensor& t) {
  if (!t.defined() || t.device().type() != kNeuron) return t;
  return at::detail::empty_strided_meta(t.sizes(), t.strides(), t.scalar_type());
}

// The task's capture of an argument; it also goes into the signature and the shape key.
void capture_arg(Call& c, ShapeKey& key, const c10::IValue& v, QueuedArg& q) {
  if (v.isTensor() && v.toTensor().defined()) {
    q.kind = QueuedArg::kTensor;
    q.tensors.push_back(describe(c, v.toTensor()));
    key.add_tensor(v.toTensor());
    return;
  }
  if (v.isTensorList()) {
    q.kind = QueuedArg::kTensorList;
    const auto list = v.toTensorList();
    key.add_value(static_cast<int64_t>(list.size()));
    for (const at::Tensor& t : list) {
      q.tensors.push_back(describe(c, t));
      key.add_tensor(t);
    }
    return;
  }
  if (v.isOptionalTensorList()) {
    q.kind = QueuedArg::kOptionalTensorList;
    const auto list = v.toOptionalTensorList();
    key.add_value(static_cast<int64_t>(list.size()));
    for (const std::optional<at::Tensor>& t : list) {
      const bool present = t.has_value() && t->defined();
      q.present.push_back(present);
      if (present) q.tensors.push_back(describe(c, *t));
      key.add_tensor(present ? *t : at::Tensor());
    }
    return;
  }
  if (v.isDevice() || v.isGenerator() || v.isStorage()) c.ok = false;
  if (v.isBool()) mix(c, v.toBool() ? 11 : 13);
  if (v.isInt()) mix(c, static_cast<size_t>(v.toInt()) * 31 + 7);  // dims, reductions, dtypes
  if (v.isNone()) mix(c, 17);
  if (!v.isTensor()) key.add_value(v);
  else key.add_tensor(at::Tensor());
  q.value = v;
}

// The meta kernel's argument: device tensors become shape-only mirrors.
c10::IValue mirror_arg(const c10::IValue& v) {
  if (v.isTensor()) return meta_mirror(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> mirrors;
    for (const at::Tensor& t : v.toTensorList()) mirrors.push_back(meta_mirror(t));
    return mirrors;
  }
  if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> mirrors;
    for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
      if (t.has_value() && t->defined()) {
        mirrors.push_back(meta_mirror(*t));
      } else {
        mirrors.push_back(std::nullopt);
      }
    }
    return mirrors;
  }
  return v;
}

// On the worker: the CPU kernel's argument.
c10::IValue unpack(const QueuedArg& q) {
  switch (q.kind) {
    case QueuedArg::kTensor:
      return q.tensors[0].view();
    case QueuedArg::kTensorList: {
      c10::List<at::Tensor> l;
      l.reserve(q.tensors.size());
      for (const auto& d : q.tensors) l.push_back(d.view());
      return l;
    }
    case QueuedArg::kOptionalTensorList: {
      c10::List<std::optional<at::Tensor>> l;
      size_t next = 0;
      for (bool present : q.present) {
        if (present) {
          l.push_back(q.tensors[next++].view());
        } else {
          l.push_back(std::nullopt);
        }
      }
      return l;
    }
    case QueuedArg::kValue:
      break;
  }
  return q.value;
}

// Runs the CPU kernel over views of the captured arguments. The checks want the arguments it
// ran on (to see whether it restrided an output); the queued tasks do not, and skip the copy.
torch::jit::Stack run_cpu(const c10::OperatorHandle& op, const std::vector<QueuedArg>& captured,
                          bool want_args = false) {
  torch::jit::Stack s;
  s.reserve(captured.size());
  for (const auto& q : captured) s.push_back(unpack(q));
  torch::jit::Stack args;
  if (want_args) args = s;
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &s);
  return args;
}

// A functional op's task: the out= kernel over the outputs (the last captured arguments), or the
// op itself and a copy of its results into them. Returns the arguments it ran on.
torch::jit::Stack run_into_outputs(const c10::OperatorHandle& op, const std::optional<c10::OperatorHandle>& out_op,
                                   const std::vector<QueuedArg>& captured, bool want_args = false) {
  if (out_op) return run_cpu(*out_op, captured, want_args);
  const size_t nargs = op.schema().arguments().size();
  torch::jit::Stack all;
  all.reserve(captured.size());
  for (const auto& q : captured) all.push_back(unpack(q));
  torch::jit::Stack s(all.begin(), all.begin() + nargs);
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &s);
  for (size_t r = 0; r < s.size(); ++r) all[nargs + r].toTensor().copy_(s[r].toTensor());
  return all;
}

struct DiscardWarnings final : c10::WarningHandler {
  void process(const c10::Warning&) override {}
};

// Runs `op` at once over `call`, in which the arguments at the positions in `scratch` are fresh
// outputs; true if the kernel ran and left each of them as allocated. Its warnings are the
// scratch run's, not the user's call's, so they are dropped.
template <class Run>
bool leaves_outputs_in_place(c10::DeviceIndex device, const Run& run, const std::vector<QueuedArg>& call,
                             const std::vector<std::pair<size_t, at::Tensor>>& scratch) {
  bool holds = true;
  run_now(device, [&] {
    DiscardWarnings discard;
    c10::WarningUtils::WarningHandlerGuard guard(&discard);
    try {
      auto views = run(call);
      for (const auto& [i, buf] : scratch) {
        const at::Tensor& v = views[i].toTensor();
        holds = holds && v.storage().data() == buf.storage().data() && v.sizes() == buf.sizes() &&
                v.strides() == buf.strides() && v.storage_offset() == buf.storage_offset();
      }
    } catch (const std::exception&) {
      holds = false;
    }
  });
  return holds;
}

QueuedArg tensor_arg(const at::Tensor& t) {
  QueuedArg q;
  q.kind = QueuedArg::kTensor;
  q.tensors.push_back(TensorDesc::of(t));
  return q;
}

// Strides of size-1 dimensions mean nothing, and CPU kernels and meta pick them differently.
bool same_layout(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes()) return false;
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (a.size(d) > 1 && a.stride(d) != b.stride(d)) return false;
  }
  return true;
}

bool written_tensor(const c10::FunctionSchema& schema, const torch::jit::Stack& args, size_t i) {
  const auto& info = schema.arguments()[i].alias_info();
  return info && info->isWrite() && args[i].isTensor() && args[i].toTensor().defined();
}

OutputMeta meta_of(const at::Tensor& t, c10::ScalarType dtype) {
  OutputMeta m;
  m.sizes.assign(t.sizes().begin(), t.sizes().end());
  m.strides.assign(t.strides().begin(), t.strides().end());
  m.dtype = dtype;
  return m;
}

// Written arguments (out= tensors of the wrong shape) take the shapes meta gave them before the
// kernel is queued, as the CPU kernel would have given them.
void size_written_args(const c10::FunctionSchema& schema, const torch::jit::Stack& args,
                       const std::vector<OutputMeta>& shapes) {
  size_t k = 0;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    if (!written_tensor(schema, args, i)) continue;
    at::Tensor real = args[i].toTensor();
    const OutputMeta& m = shapes[k++];
    if (real.sizes() == c10::IntArrayRef(m.sizes) && real.strides() == c10::IntArrayRef(m.strides)) continue;
    real.resize_(m.sizes);
    if (real.strides() != c10::IntArrayRef(m.strides)) real.as_strided_(m.sizes, m.strides);
  }
}

// The first call of an in-place or out= op with a signature. The generic path computes it; the
// written tensors must end up as meta shaped their mirrors. out= kernels then run once more,
// over scratch outputs that meta sized, which they must leave as allocated: some use an output
// as scratch of the input's size.
void check_writing_op(const c10::OperatorHandle& op, const Call& call, torch::jit::Stack* stack,
                      const torch::jit::Stack& args, const torch::jit::Stack& meta_args,
                      const std::vector<QueuedArg>& captured) {
  const auto& schema = op.schema();
  run_generic(op, stack);  // a user error raises here, and leaves the verdict open
  bool holds = true, out_only = true;
  std::vector<QueuedArg> scratch_call = captured;
  std::vector<std::pair<size_t, at::Tensor>> scratch;
  for (size_t i = 0; i < args.size() && holds; ++i) {
    if (!written_tensor(schema, args, i)) continue;
    const at::Tensor& t = args[i].toTensor();
    const at::Tensor& m = meta_args[i].toTensor();
    holds = t.scalar_type() == m.scalar_type() && same_layout(t, m);
    out_only = out_only && schema.arguments()[i].kwarg_only();
    auto buf = empty_neuron(m.sizes(), m.strides(), m.scalar_type(), call.device);
    scratch_call[i] = tensor_arg(buf);
    scratch.emplace_back(i, std::move(buf));
  }
  if (holds && out_only) {
    holds = leaves_outputs_in_place(call.device, [&](const auto& c) { return run_cpu(op, c, true); }, scratch_call, scratch);
  }
  set_verdict(op, call.signature, holds ? Verdict::kHolds : Verdict::kFails);
}

// The first call of a functional op with a signature. The generic path computes it; its results
// must have the shapes and strides meta predicted. The dtypes are the CPU kernel's: where meta's
// differ (bfloat16 layer norm keeps float32 statistics on the CPU), the CPU's are remembered.
// Then the out= kernel runs once over scratch outputs, which it must leave as allocated: out=
// kernels may restride or reallocate their outputs.
void check_functional_op(const c10::OperatorHandle& op, const std::optional<c10::OperatorHandle>& out_op,
                         const Call& call,
                         torch::jit::Stack* stack, const torch::jit::Stack& meta,
                         std::vector<QueuedArg> captured) {
  const size_t nargs = op.schema().arguments().size(), nret = op.schema().returns().size();
  run_generic(op, stack);  // a user error raises here, and leaves the verdict open
  bool holds = true;
  std::vector<c10::ScalarType> dtypes(nret, c10::ScalarType::Undefined);
  std::vector<std::pair<size_t, at::Tensor>> scratch;
  for (size_t r = 0; r < nret && holds; ++r) {
    const at::Tensor& a = (*stack)[stack->size() - nret + r].toTensor();
    const at::Tensor& m = meta[r].toTensor();
    holds = a.defined() && same_layout(a, m);
    if (holds && a.scalar_type() != m.scalar_type()) dtypes[r] = a.scalar_type();
    if (holds) scratch.emplace_back(nargs + r, empty_neuron(m.sizes(), m.strides(), a.scalar_type(), call.device));
  }
  if (holds) {
    for (const auto& [i, t] : scratch) captured.push_back(tensor_arg(t));
    holds = leaves_outputs_in_place(
        call.device, [&](const auto& c) { return run_into_outputs(op, out_op, c, true); }, captured, scratch);
  }
  set_verdict(op, call.signature, holds ? Verdict::kHolds : Verdict::kFails, std::move(dtypes));
}

}  // namespace

bool try_queue(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const Plan& plan = plan_for(op);
  if (!plan.eligible) return false;
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size(), nret = schema.returns().size();
  const size_t first = stack->size() - nargs;
  const torch::jit::Stack args(stack->begin() + first, stack->end());

  Call call;
  ShapeKey key;
  std::vector<QueuedArg> captured(nargs);
  for (size_t i = 0; i < nargs; ++i) capture_arg(call, key, args[i], captured[i]);
  if (!call.ok || call.device < 0) return false;
  const Checked checked = check_for(op, call.signature);
  if (checked.verdict == Verdict::kFails) return false;

  // The outputs' (or written arguments') shapes: remembered for this exact call, or from meta.
  std::optional<std::vector<OutputMeta>> shapes;
  if (checked.verdict == Verdict::kHolds && key.usable()) shapes = find_shapes(&schema, key);
  if (!shapes) {
    torch::jit::Stack meta;
    meta.reserve(nargs);
    for (const auto& v : args) meta.push_back(mirror_arg(v));
    const torch::jit::Stack meta_args = meta;  // the meta kernel consumes its stack
    try {
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta);
    } catch (const c10::NotImplementedError&) {
      mark_ineligible(op);  // no usable meta kernel after all
      return false;
    } catch (const std::exception&) {
      return false;  // bad arguments, or a value-dependent shape: the CPU kernel raises or decides
    }
    if (checked.verdict == Verdict::kUnknown) {
      if (plan.writes_args) {
        check_writing_op(op, call, stack, args, meta_args, captured);
      } else {
        for (size_t r = 0; r < nret; ++r) {
          if (!meta[r].toTensor().defined()) return false;
        }
        check_functional_op(op, plan.out_op, call, stack, meta, std::move(captured));
      }
      return true;
    }
    shapes.emplace();
    if (plan.writes_args) {
      for (size_t i = 0; i < nargs; ++i) {
        if (written_tensor(schema, args, i)) {
          const at::Tensor& m = meta_args[i].toTensor();
          shapes->push_back(meta_of(m, m.scalar_type()));
        }
      }
    } else {
      for (size_t r = 0; r < nret; ++r) {
        const at::Tensor& m = meta[r].toTensor();
        if (!m.defined()) return false;
        const auto learned = r < checked.dtypes.size() ? checked.dtypes[r] : c10::ScalarType::Undefined;
        shapes->push_back(meta_of(m, learned == c10::ScalarType::Undefined ? m.scalar_type() : learned));
      }
    }
    if (key.usable()) remember_shapes(&schema, std::move(key), *shapes);
  }

  torch::jit::Stack results;
  if (plan.writes_args) {
    size_written_args(schema, args, *shapes);
    // Resizing may have moved a written tensor's storage: describe it as it is now.
    for (size_t i = 0; i < nargs; ++i) {
      if (written_tensor(schema, args, i)) captured[i] = tensor_arg(args[i].toTensor());
    }
    for (size_t r = 0; r < nret; ++r) results.push_back(args[plan.return_args[r]]);
    launch(call.device, schema.name().c_str(), [op, captured = std::move(captured)] { run_cpu(op, captured); });
  } else {
    for (const OutputMeta& m : *shapes) {
      at::Tensor out = empty_neuron(m.sizes, m.strides, m.dtype, call.device);
      captured.push_back(tensor_arg(out));
      results.push_back(std::move(out));
    }
    launch(call.device, schema.name().c_str(),
           [op, out_op = plan.out_op, captured = std::move(captured)] { run_into_outputs(op, out_op, captured); });
  }
  record_queued(op);
  stack->erase(stack->begin() + first, stack->end());
  for (auto& r : results) stack->push_back(std::move(r));
  return true;
}

}  // namespace torch_neuronx
