// Async: the op's meta kernel sizes its outputs on the host and its CPU kernel runs as a task on
// the stream over views of device memory (the plan is op_policy.cpp's). The host never waits.
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <c10/util/accumulate.h>
#include <c10/util/strides.h>

#include <algorithm>
#include <sstream>
#include <vector>

#include "core/storage.h"
#include "exec/device_check.h"
#include "exec/executor.h"
#include "exec/ivalue_walk.h"
#include "exec/solo_team.h"
#include "exec/tensor_desc.h"
#include "nki/kernel_source.h"
#include "pipeline/call_args.h"
#include "pipeline/first_call.h"
#include "pipeline/runners.h"
#include "pipeline/shape_cache.h"

namespace torch_neuronx {
namespace {

// What the task holds of a call: its arguments with every tensor replaced by a placeholder, the
// tensors' descriptors in walk order, and the fresh outputs.
struct Captured {
  torch::jit::Stack args;
  std::vector<TensorDesc> tensors;
  std::vector<TensorDesc> outputs;
  std::vector<int> output_counts;  // per fresh return: -1 a Tensor, else a Tensor[]'s length
};

// The next fresh return, from the flat list of outputs: a Tensor, or a Tensor[] of `count`.
c10::IValue next_return(const std::vector<at::Tensor>& outs, size_t* k, int count) {
  if (count < 0) return outs[(*k)++];
  c10::List<at::Tensor> l;
  for (int j = 0; j < count; ++j) l.push_back(outs[(*k)++]);
  return l;
}

std::string layout_text(c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::ScalarType dtype) {
  std::ostringstream s;
  s << dtype << " sizes " << sizes << " strides " << strides;
  return s.str();
}

// The kernel did not leave an output as meta said: its result is not where the caller looks.
[[noreturn]] void kernel_disagrees(const OpRecord& rec, const std::string& what) {
  TORCH_CHECK(false, "neuron: the CPU kernel of ", rec.name, " disagreed with its meta kernel: ", what,
              ". This call's result is wrong. Please report it; until it is fixed, run with "
              "TORCH_NEURONX_OP_POLICY=",
              rec.name,
              "=sync (and add the op to the overrides table op_policy.cpp reads, csrc/pipeline/op_overrides.cpp).");
}

void check_left_as_allocated(const OpRecord& rec, const TensorDesc& d, const at::Tensor& v, const char* which) {
  if (d.describes(v)) return;
  kernel_disagrees(rec, std::string("it moved or restrided ") + which + " (allocated as " +
                            layout_text(d.sizes, d.strides, d.dtype) + ", left as " +
                            (v.defined() ? layout_text(v.sizes(), v.strides(), v.scalar_type()) : "undefined") + ")");
}

// Copies a fresh result of the kernel into the output meta sized.
void copy_result(const OpRecord& rec, const TensorDesc& out, const at::Tensor& result) {
  if (!out.defined) {
    if (result.defined()) kernel_disagrees(rec, "it returned a tensor where meta said none");
    return;
  }
  const bool dtype_ok =
      result.defined() && (result.scalar_type() == out.dtype ||
                           (rec.widened_results && c10::promoteTypes(result.scalar_type(), out.dtype) == out.dtype));
  if (!dtype_ok || result.sizes() != c10::IntArrayRef(out.sizes)) {
    kernel_disagrees(rec, "it returned " +
                              (result.defined() ? layout_text(result.sizes(), result.strides(), result.scalar_type())
                                                : std::string("nothing")) +
                              " where meta said " + layout_text(out.sizes, out.strides, out.dtype));
  }
  out.view().copy_(result);
}

// On the worker.
void run_task(const c10::OperatorHandle& op, const OpRecord& rec, const Captured& c) {
  const auto& schema = op.schema();
  torch::jit::Stack s;
  s.reserve(c.args.size() + c.output_counts.size());
  std::vector<std::pair<size_t, at::Tensor>> written;      // (index into c.tensors, its view)
  std::vector<std::pair<at::Tensor, at::Tensor>> scratch;  // (an out= tensor's view, what the kernel writes)
  size_t next = 0;
  for (size_t i = 0; i < c.args.size(); ++i) {
    const bool w = is_written(schema, i);
    const bool to_scratch = rec.out_scratch && w && schema.arguments()[i].is_out();
    s.push_back(map_tensors(c.args[i], [&](const at::Tensor&) {
      at::Tensor v = c.tensors[next].view();
      if (w) written.emplace_back(next, v);
      ++next;
      if (!to_scratch || !v.defined()) return v;
      scratch.emplace_back(v, at::empty({0}, v.options()));
      return scratch.back().second;
    }));
  }
  std::vector<at::Tensor> outs;
  outs.reserve(c.outputs.size());
  for (const auto& d : c.outputs) outs.push_back(d.view());
  const auto cpu = c10::DispatchKeySet(c10::DispatchKey::CPU);

  if (c.output_counts.empty()) {
    op.redispatchBoxed(cpu, &s);
  } else if (rec.out_op) {
    size_t k = 0;
    for (int n : c.output_counts) s.push_back(next_return(outs, &k, n));
    rec.out_op->redispatchBoxed(cpu, &s);
    for (size_t i = 0; i < outs.size(); ++i) check_left_as_allocated(rec, c.outputs[i], outs[i], "an output");
  } else {
    op.redispatchBoxed(cpu, &s);
    const size_t nret = schema.returns().size();
    size_t k = 0, fresh = 0;
    for (size_t r = 0; r < nret; ++r) {
      if (rec.return_arg[r] >= 0) continue;
      const c10::IValue& result = s[s.size() - nret + r];
      const int n = c.output_counts[fresh++];
      if (n < 0) {
        copy_result(rec, c.outputs[k++], result.isTensor() ? result.toTensor() : at::Tensor());
      } else {
        const auto list = result.toTensorList();
        if (static_cast<int>(list.size()) != n) kernel_disagrees(rec, "it returned a list of another length");
        for (const at::Tensor& t : list) copy_result(rec, c.outputs[k++], t);
      }
    }
  }
  for (const auto& [v, t] : scratch) {
    if (t.sizes() != v.sizes()) kernel_disagrees(rec, "it sized an out= tensor otherwise");
    v.copy_(t);
  }
  for (const auto& [i, v] : written) check_left_as_allocated(rec, c.tensors[i], v, "a written argument");
}

// Whether no tensor of the call (its arguments as resized, its fresh outputs) is larger than a kernel
// that may run alone runs alone for.
bool solo_sized(const Captured& c) {
  const auto small = [](const TensorDesc& d) { return c10::multiply_integers(d.sizes) <= kSoloElements; };
  return std::all_of(c.tensors.begin(), c.tensors.end(), small) &&
         std::all_of(c.outputs.begin(), c.outputs.end(), small);
}

// The meta kernel's argument: device tensors become shape-only mirrors, the device the meta one.
c10::IValue mirror(const c10::IValue& v) {
  if (v.isDevice() && v.toDevice().type() == kNeuron) return c10::IValue(c10::Device(c10::kMeta));
  return map_tensors(v, [](const at::Tensor& t) -> at::Tensor {
    if (!is_neuron(t)) return t;
    return with_bits(at::Tensor(at::detail::empty_strided_meta(t.sizes(), t.strides(), t.scalar_type())), t.is_conj(),
                     t.is_neg());
  });
}

// An out= tensor that changes shape takes the layout of the functional op's result, as CPU
// kernels give it (meta kernels written in Python keep out= tensors contiguous).
void take_functional_layouts(const OpRecord& rec, const c10::FunctionSchema& schema, const c10::IValue* args,
                             MetaAnswer* answer) {
  const size_t nargs = schema.arguments().size();
  const auto is_out = [&](size_t i) {
    return is_written(schema, i) && schema.arguments()[i].kwarg_only() && args[i].isTensor();
  };
  bool resized = false;
  size_t k = 0;
  for (size_t i = 0; i < nargs; ++i) {
    if (!is_written(schema, i)) continue;
    for_each_tensor(args[i], [&](const at::Tensor& t) {
      const OutputMeta& m = answer->written[k++];
      resized = resized || (is_out(i) && t.defined() && m.defined && t.sizes() != c10::IntArrayRef(m.sizes));
    });
  }
  if (!resized) return;
  const size_t nin = rec.functional_op->schema().arguments().size();
  torch::jit::Stack f;
  for (size_t i = 0; i < nin; ++i) f.push_back(mirror(args[i]));
  try {
    rec.functional_op->redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &f);
  } catch (const std::exception&) {
    return;  // meta's own answer stands
  }
  k = 0;
  size_t result = 0;
  for (size_t i = 0; i < nargs; ++i) {
    if (!is_written(schema, i)) continue;
    for_each_tensor(args[i], [&](const at::Tensor& t) {
      OutputMeta& m = answer->written[k++];
      if (!is_out(i) || result >= f.size()) return;
      const c10::IValue& r = f[result++];
      if (!r.isTensor() || !t.defined() || !m.defined || t.sizes() == c10::IntArrayRef(m.sizes)) return;
      const at::Tensor& like = r.toTensor();
      if (like.sizes() == c10::IntArrayRef(m.sizes)) m.strides.assign(like.strides().begin(), like.strides().end());
    });
  }
}

// Asks the meta kernel. False (with `why`) when it cannot answer for this call.
bool ask_meta(const c10::OperatorHandle& op, OpRecord& rec, const c10::IValue* args, MetaAnswer* answer,
              std::string* why) {
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size(), nret = schema.returns().size();
  torch::jit::Stack meta;
  meta.reserve(nargs);
  for (size_t i = 0; i < nargs; ++i) {
    // An empty out= mirror: meta resizes it without the warning the CPU kernel does not give.
    const bool quiet = rec.quiet_resize && is_written(schema, i) && schema.arguments()[i].is_out();
    meta.push_back(quiet ? map_tensors(args[i],
                                       [](const at::Tensor& t) {
                                         return at::Tensor(at::detail::empty_strided_meta({0}, {1}, t.scalar_type()));
                                       })
                         : mirror(args[i]));
  }
  const torch::jit::Stack mirrors = meta;  // the kernel consumes its stack; out= mirrors are resized in place
  rec.meta_calls.fetch_add(1, std::memory_order_relaxed);
  try {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta);
  } catch (const c10::NotImplementedError&) {
    rec.no_meta.store(true, std::memory_order_relaxed);
    *why = "its meta kernel is not implemented";
    return false;
  } catch (const std::exception&) {
    *why = "its meta kernel raised, so the CPU kernel decides (and raises its error, if any)";
    return false;
  }
  for (size_t i = 0; i < nargs; ++i) {
    if (is_written(schema, i))
      for_each_tensor(mirrors[i], [&](const at::Tensor& t) { answer->written.push_back(OutputMeta::of(t)); });
  }
  for (size_t r = 0; r < nret; ++r) {
    if (rec.return_arg[r] >= 0) continue;
    const c10::IValue& v = meta[meta.size() - nret + r];
    if (v.isTensor()) {
      answer->outputs.push_back(OutputMeta::of(v.toTensor()));
      answer->output_counts.push_back(-1);
    } else if (v.isTensorList()) {
      const auto list = v.toTensorList();
      for (const at::Tensor& t : list) answer->outputs.push_back(OutputMeta::of(t));
      answer->output_counts.push_back(static_cast<int>(list.size()));
    } else {
      *why = "its meta kernel returned no tensor";
      return false;
    }
  }
  if (rec.functional_op) take_functional_layouts(rec, schema, args, answer);
  if (rec.rule) {
    // The results: the fresh outputs, or an out= op's out= tensors.
    std::vector<OutputMeta*> results;
    for (auto& m : answer->outputs) results.push_back(&m);
    if (results.empty()) {
      size_t k = 0;
      for (size_t i = 0; i < nargs; ++i) {
        if (!is_written(schema, i)) continue;
        for_each_tensor(args[i], [&](const at::Tensor&) {
          if (schema.arguments()[i].kwarg_only()) results.push_back(&answer->written[k]);
          ++k;
        });
      }
    }
    rec.rule(args, results);
  }
  if (rec.contiguous_outputs) {
    for (auto& m : answer->outputs) m.strides = c10::contiguous_strides(m.sizes);
  }
  return true;
}

// Out= arguments of another shape take the layouts meta gave them, as the CPU kernel would have
// (with PyTorch's warning when a non-empty out= tensor is resized); one of the right shape keeps
// its layout, as structured kernels keep it.
// `quiet`: no warning here, because the meta kernel just ran on mirrors of these tensors and gave
// it (one warning per call), or because the CPU kernel gives none (kQuietResize).
void size_written_args(const c10::FunctionSchema& schema, c10::IValue* args, const MetaAnswer& answer, bool quiet) {
  size_t k = 0;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    if (!is_written(schema, i)) continue;
    for_each_tensor(args[i], [&](const at::Tensor& t) {
      const OutputMeta& m = answer.written[k++];
      if (!t.defined() || !m.defined) return;
      if (t.sizes() == c10::IntArrayRef(m.sizes)) return;
      // Only out= arguments resize; an in-place op's self keeps its shape (CPU's rule).
      TORCH_CHECK(schema.arguments()[i].is_out(), "Bad in-place call: input tensor size ", t.sizes(),
                  " and output tensor size ", c10::IntArrayRef(m.sizes), " should match");
      // Growing an out= tensor that is also an input would change the input under the kernel
      // (the task would find it resized and fail at a later sync): refuse it here.
      for (size_t j = 0; j < schema.arguments().size(); ++j) {
        if (is_written(schema, j)) continue;
        for_each_tensor(args[j], [&](const at::Tensor& in) {
          TORCH_CHECK(!in.defined() || !in.is_alias_of(t),
                      "unsupported operation: some elements of the input tensor and the written-to tensor refer to a "
                      "single memory location (",
                      schema.name(), "'s out= tensor is also its input '", schema.arguments()[j].name(),
                      "' and would have to be resized from ", t.sizes(), " to ", c10::IntArrayRef(m.sizes),
                      "). Please clone() the tensor before performing the operation.");
        });
      }
      if (quiet) {
        t.resize_(m.sizes);
      } else {
        at::native::resize_output(t, m.sizes);
      }
      if (!same_layout(t.sizes(), t.strides(), m.sizes, m.strides)) t.as_strided_(m.sizes, m.strides);
    });
  }
}

}  // namespace

bool run_op_async(const c10::OperatorHandle& op, OpRecord& rec, torch::jit::Stack* stack, std::string* why) {
  if (rec.no_meta.load(std::memory_order_relaxed)) {
    *why = "its meta kernel is not implemented";
    return false;
  }
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size(), nret = schema.returns().size();
  c10::IValue* args = stack->data() + (stack->size() - nargs);

  // One walk: the device check, the shape key, the elements a random op draws for.
  DeviceCheck check(rec.name.c_str());
  ShapeKey key(&schema);
  Signature sig(rec);
  bool host_tensor = false;
  int64_t numel = 0;
  c10::DeviceIndex device_arg = -1;
  bool written = false, out_arg = false;
  c10::SmallVector<std::pair<const c10::TensorImpl*, bool>, 8> tensors;
  const auto visit = [&](const at::Tensor& t) {
    if (!written && t.defined() && !is_neuron(t) && !(t.device().is_cpu() && t.dim() == 0)) {
      host_tensor = true;
      return;
    }
    check.add(t, written);
    // An out= tensor whose elements alias each other is refused before anything resizes it, as
    // CUDA's kernels refuse it: some CPU out= kernels (narrow_copy, avg_pool3d) write it as if it
    // were contiguous, past its storage into other tensors' device memory.
    if (out_arg && t.defined()) at::assert_no_internal_overlap(t);
    key.add_tensor(t);
    if (is_neuron(t)) {
      numel += t.numel();
      tensors.emplace_back(t.unsafeGetTensorImpl(), written);
    }
  };
  for (size_t i = 0; i < nargs; ++i) {
    const c10::IValue& a = args[i];
    written = is_written(schema, i);
    out_arg = written && schema.arguments()[i].kwarg_only();
    sig.add_ivalue(a, schema.arguments()[i].real_type());
    if (a.isOptionalTensorList()) {
      const auto list = a.toOptionalTensorList();
      key.add_value(static_cast<int64_t>(list.size()));
      for (const std::optional<at::Tensor>& t : list) {
        if (t.has_value()) {
          visit(*t);
        } else {
          key.add_value(c10::IValue());
        }
      }
    } else if (a.isTensorList()) {
      key.add_value(static_cast<int64_t>(a.toTensorList().size()));
      for_each_tensor(a, visit);
    } else if (a.isTensor()) {
      visit(a.toTensor());
    } else if (a.isGenerator()) {
      key.add_value(c10::IValue());
    } else if (a.isDevice()) {
      const auto d = a.toDevice();
      if (device_arg < 0) device_arg = named_device(a);
      key.add_value(static_cast<int64_t>(d.type()) * 1000 + d.index());
    } else {
      key.add_value(a);
    }
  }
  sig.add_sharing(tensors);
  if (host_tensor) {
    *why = "a host tensor argument (only 0-dim CPU tensors mix with neuron tensors)";
    return false;
  }
  c10::DeviceIndex device = check.device();
  if (device < 0) device = device_arg >= 0 ? device_arg : current_device();

  std::optional<MetaAnswer> answer;
  if (key.usable()) answer = find_answer(key);
  const bool asked = !answer;
  if (asked) {
    MetaAnswer fresh;
    if (!ask_meta(op, rec, args, &fresh, why)) return false;
    if (key.usable()) remember_answer(std::move(key), fresh);
    answer = std::move(fresh);
  }
  size_written_args(schema, args, *answer, asked || rec.quiet_resize);

  // What the task needs, read now: the arguments as they are after resizing, in the CPU
  // kernel's form (a generator for each random draw is taken here, in call order).
  Captured c;
  c.args.reserve(nargs);
  for (size_t i = 0; i < nargs; ++i) {
    if (auto cpu = cpu_form(schema.arguments()[i], args[i], device, numel)) {
      c.args.push_back(std::move(*cpu));
      continue;
    }
    c.args.push_back(map_tensors(args[i], [&](const at::Tensor& t) {
      c.tensors.push_back(TensorDesc::of(t));
      return at::Tensor();
    }));
  }
  std::vector<at::Tensor> outputs;
  outputs.reserve(answer->outputs.size());
  for (const OutputMeta& m : answer->outputs) {
    outputs.push_back(m.defined ? with_bits(empty_neuron(m.sizes, m.strides, m.dtype, device), m.conj, m.neg)
                                : at::Tensor());
    c.outputs.push_back(TensorDesc::of(outputs.back()));
    sig.add(outputs.back());  // an empty result (pdist of one row) skips the kernel's dtype checks
  }
  c.output_counts = answer->output_counts;

  torch::jit::Stack results;
  results.reserve(nret);
  size_t k = 0, fresh = 0;
  for (size_t r = 0; r < nret; ++r) {
    if (rec.return_arg[r] >= 0) {
      results.push_back(args[rec.return_arg[r]]);
      continue;
    }
    results.push_back(next_return(outputs, &k, answer->output_counts[fresh++]));
  }
  // TORCH_NEURONX_KERNELS=nki: the task may run an NKI library kernel instead (fresh outputs only).
  if (C10_UNLIKELY(rec.nki_source.load(std::memory_order_relaxed)) &&
      std::none_of(rec.return_arg.begin(), rec.return_arg.end(), [](int r) { return r >= 0; }) &&
      nki::run_from_source(device, rec, std::vector<c10::IValue>(args, args + nargs), outputs)) {
    stack->erase(stack->end() - nargs, stack->end());
    for (auto& r : results) stack->push_back(std::move(r));
    return true;
  }
  rec.count(Mode::kAsync);
  const bool solo = rec.count_solo(rec.split_invariant && solo_sized(c));
  launch_op(device, rec, std::move(sig), [op, &rec, c = std::move(c), solo] {
    SoloTeam team(solo);
    run_task(op, rec, c);
  });
  stack->erase(stack->end() - nargs, stack->end());
  for (auto& r : results) stack->push_back(std::move(r));
  return true;
}

}  // namespace torch_neuronx
