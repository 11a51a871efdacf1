// Typed neuron kernels for PyTorch's structured ops: the fast path of the op pipeline (see
// csrc/pipeline/op_policy.cpp). The op's own meta function runs on the host (shape, dtype and
// device checks raise at the call, as on CUDA) and allocates the device output; the CPU kernel then
// runs as a task on the stream, over CPU views of device memory. One helper per variant:
// functional, in-place, out=. Each call is counted on the op's record. The first call of each
// signature waits for its kernel, so the checks only the CPU kernel makes also raise at the call
// (pipeline/first_call.h).
#pragma once

#include <ATen/TensorIterator.h>
#include <ATen/TensorMeta.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>

#include <array>
#include <functional>
#include <tuple>
#include <type_traits>
#include <vector>

#include "aten/fast_elementwise.h"
#include "aten/solo_ops.h"
#include "core/storage.h"
#include "exec/device_check.h"
#include "exec/executor.h"
#include "exec/tensor_desc.h"
#include "nki/kernel_source.h"
#include "pipeline/first_call.h"
#include "pipeline/op_record.h"

namespace torch_neuronx {

// ---- what a task captures of each argument --------------------------------------------------

inline TensorDesc capture(const at::Tensor& t) { return TensorDesc::of(t); }
inline std::optional<TensorDesc> capture(const std::optional<at::Tensor>& t) {
  if (!t.has_value()) return std::nullopt;
  return TensorDesc::of(*t);
}
inline std::vector<int64_t> capture(c10::IntArrayRef a) { return a.vec(); }
inline std::optional<std::vector<int64_t>> capture(at::OptionalIntArrayRef a) {
  if (!a.has_value()) return std::nullopt;
  return a->vec();
}
inline std::string capture(c10::string_view s) { return std::string(s); }
inline std::optional<std::string> capture(std::optional<c10::string_view> s) {
  if (!s.has_value()) return std::nullopt;
  return std::string(*s);
}
template <class T>
struct is_view_type : std::false_type {};
template <class T>
struct is_view_type<c10::ArrayRef<T>> : std::true_type {};
template <class T>
struct is_view_type<c10::OptionalArrayRef<T>> : std::true_type {};
template <>
struct is_view_type<c10::string_view> : std::true_type {};

// Everything else (numbers, enums, Scalar, optionals of those) is held by value. A view type
// reaching here would dangle once the op returns, so none may.
template <class T>
T capture(const T& v) {
  static_assert(!is_view_type<T>::value, "a view argument needs an owning capture overload");
  return v;
}

// Back from the captured form to what at::cpu:: functions take (on the worker).
template <class T>
const T& pass(const T& v) {
  return v;
}
inline at::Tensor pass(const TensorDesc& d) { return d.view(); }
inline std::optional<at::Tensor> pass(const std::optional<TensorDesc>& d) {
  if (!d.has_value()) return std::nullopt;
  return d->view();
}
inline std::optional<c10::string_view> pass(const std::optional<std::string>& v) {
  if (!v.has_value()) return std::nullopt;
  return c10::string_view(*v);
}
inline at::OptionalIntArrayRef pass(const std::optional<std::vector<int64_t>>& v) {
  if (!v.has_value()) return std::nullopt;
  return at::IntArrayRef(*v);
}

// Structured meta functions take optional tensors and scalars by reference wrappers.
template <class T>
const T& meta_arg(const T& v) {
  return v;
}
inline at::OptionalTensorRef meta_arg(const std::optional<at::Tensor>& t) {
  return t.has_value() && t->defined() ? at::OptionalTensorRef(*t) : at::OptionalTensorRef();
}
inline at::OptionalScalarRef meta_arg(const std::optional<c10::Scalar>& s) {
  return s.has_value() ? at::OptionalScalarRef(&*s) : at::OptionalScalarRef();
}

template <class T>
void collect_tensors(c10::SmallVectorImpl<const at::TensorBase*>& out, const T& v) {
  if constexpr (std::is_base_of_v<at::TensorBase, std::decay_t<T>>) out.push_back(&v);
  if constexpr (std::is_same_v<std::decay_t<T>, std::optional<at::Tensor>>) {
    if (v.has_value()) out.push_back(&*v);
  }
}
template <class... Args>
c10::DeviceIndex check_args(const char* op, const Args&... args) {
  c10::SmallVector<const at::TensorBase*, 8> ts;
  (collect_tensors(ts, args), ...);
  const auto device = check_devices(op, ts);
  return device >= 0 ? device : current_device();
}

// ---- meta classes with neuron outputs ---------------------------------------------------------

template <class Meta>
constexpr bool kIsIterator = std::is_base_of_v<at::TensorIteratorBase, Meta>;

template <class Meta, size_t N>
struct FunctionalOp final : Meta {
  std::array<at::Tensor, N> outputs_;
  c10::DeviceIndex device = -1;
  const at::Tensor& maybe_get_output(int64_t i) override { return outputs_[i]; }
  void set_output_raw_strided(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides,
                              at::TensorOptions options) override {
    const auto dtype = c10::typeMetaToScalarType(options.dtype());
    if (strides.empty()) {
      outputs_[i] =
          empty_neuron(sizes, dtype, device, options.memory_format_opt().value_or(c10::MemoryFormat::Contiguous));
    } else {
      outputs_[i] = empty_neuron(sizes, strides, dtype, device);
    }
    if constexpr (kIsIterator<Meta>) at::TensorIteratorBase::set_output_raw_strided(i, sizes, strides, options);
  }
};

template <class Meta, size_t N>
struct OutOp final : Meta {
  std::array<std::reference_wrapper<const at::Tensor>, N> outputs_;
  bool inplace_ = false;  // the output is the op's self: it is never resized (CPU's rule)
  template <class... Ts>
  explicit OutOp(const Ts&... outs) : outputs_{std::cref(outs)...} {}
  const at::Tensor& maybe_get_output(int64_t i) override { return outputs_[i].get(); }
  void set_output_raw_strided(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides,
                              at::TensorOptions options) override {
    const auto& out = outputs_[i].get();
    TORCH_CHECK(options.dtype() == out.dtype(), "Expected out tensor to have dtype ", options.dtype(), ", but got ",
                out.dtype(), " instead");
    TORCH_CHECK(out.device().type() == kNeuron, "Expected out tensor to be on neuron, but got ", out.device());
    TORCH_CHECK(!inplace_ || out.sizes() == sizes, "Bad in-place call: input tensor size ", out.sizes(),
                " and output tensor size ", sizes, " should match");
    if (!inplace_ && at::native::resize_output(out, sizes)) {
      if (!strides.empty()) {
        out.as_strided_(sizes, strides);
      } else if (options.memory_format_opt().has_value()) {
        out.unsafeGetTensorImpl()->empty_tensor_restride(*options.memory_format_opt());
      }
    }
    if constexpr (kIsIterator<Meta>) at::TensorIteratorBase::set_output_raw_strided(i, sizes, strides, options);
  }
};

// ---- the three variants ----------------------------------------------------------------------

// Queues `kernel(cpu_outputs..., captured_args...)` of op `Meta`, on the worker alone where
// solo_call says so.
template <class Meta, size_t N, class Kernel, class... Args>
void queue_kernel(c10::DeviceIndex device, OpRecord& rec, Kernel kernel, const std::array<at::Tensor, N>& outs,
                  const Args&... args) {
  std::array<TensorDesc, N> out_descs;
  for (size_t i = 0; i < N; ++i) out_descs[i] = TensorDesc::of(outs[i]);
  // The outputs' dtypes are in the signature: an out= call's may be one the kernel refuses.
  Signature sig(rec);
  for (const auto& o : outs) sig.add(o);
  (sig.add(args), ...);
  rec.count(Mode::kAsync);
  bool solo = false;
  if constexpr (N == 1) solo = solo_call<Meta>(rec, outs[0], args...);
  launch_op(device, rec, std::move(sig),
            [kernel, solo, out_descs = std::move(out_descs), captured = std::make_tuple(capture(args)...)] {
              SoloTeam team(solo);
              std::array<at::Tensor, N> o;
              for (size_t i = 0; i < N; ++i) o[i] = out_descs[i].view();
              std::apply(
                  [&](auto&... out) { std::apply([&](const auto&... a) { kernel(out..., pass(a)...); }, captured); },
                  o);
            });
}

// Elementwise ops whose result, for floating inputs of one dtype and one contiguous shape, is a
// contiguous tensor of that dtype and shape. For such calls (the bulk of a model's pointwise
// work) the meta function could only conclude that, so its TensorIterator build is skipped.
template <class Meta>
struct SameShapeElementwise : std::false_type {};

template <class T>
bool same_shape_operand(const T& v, const at::Tensor*& first) {
  if constexpr (std::is_same_v<std::decay_t<T>, at::Tensor>) {
    if (!is_neuron(v) || !v.is_contiguous() || !c10::isFloatingType(v.scalar_type())) return false;
    if (!first) {
      first = &v;
      return true;
    }
    return v.scalar_type() == first->scalar_type() && v.sizes() == first->sizes() && v.device() == first->device();
  } else {
    return !std::is_same_v<std::decay_t<T>, std::optional<at::Tensor>>;
  }
}

template <class... Args>
const at::Tensor* same_shape_call(const Args&... args) {
  const at::Tensor* first = nullptr;
  const bool ok = (same_shape_operand(args, first) && ...);
  return ok ? first : nullptr;
}

template <class Meta, size_t N = 1, class Kernel, class... Args>
std::array<at::Tensor, N> structured_functional(OpRecord& rec, Kernel kernel, const Args&... args) {
  if constexpr (N == 1 && SameShapeElementwise<Meta>::value) {
    if (const at::Tensor* like = same_shape_call(args...)) {
      std::array<at::Tensor, 1> out{empty_neuron(like->sizes(), like->scalar_type(), like->device().index())};
      if constexpr (FastElementwise<Meta>::value) {
        if (FastElementwise<Meta>::launch(rec, out[0], args...)) return out;
      }
      queue_kernel<Meta, 1>(like->device().index(), rec, kernel, out, args...);
      return out;
    }
  }
  FunctionalOp<Meta, N> op;
  op.device = check_args(rec.name.c_str(), args...);
  op.meta(meta_arg(args)...);
  if (C10_UNLIKELY(nki::source_active.load(std::memory_order_relaxed)) &&
      nki::run_typed_from_source<N>(op.device, rec, op.outputs_, args...))
    return op.outputs_;
  queue_kernel<Meta, N>(op.device, rec, kernel, op.outputs_, args...);
  return op.outputs_;
}

template <class Meta, class Kernel, class... Args>
at::Tensor& structured_inplace(OpRecord& rec, Kernel kernel, at::Tensor& self, const Args&... args) {
  OutOp<Meta, 1> op(self);
  op.inplace_ = true;
  const auto device = check_args(rec.name.c_str(), self, args...);
  op.meta(self, meta_arg(args)...);
  Signature sig(rec);
  sig.add(self);
  (sig.add(args), ...);
  rec.count(Mode::kAsync);
  const bool solo = solo_call<Meta>(rec, self, self, args...);
  // One CPU view serves as both output and input, so the kernel sees a true in-place call.
  launch_op(device, rec, std::move(sig),
            [kernel, solo, d = TensorDesc::of(self), captured = std::make_tuple(capture(args)...)] {
              SoloTeam team(solo);
              at::Tensor v = d.view();
              std::apply([&](const auto&... a) { kernel(v, v, pass(a)...); }, captured);
            });
  return self;
}

template <class Meta, size_t N = 1, class Kernel, class Outs, class... Args>
void structured_out(OpRecord& rec, Kernel kernel, const Outs& outs, const Args&... args) {
  auto op = std::apply([](const auto&... o) { return OutOp<Meta, N>(o...); }, outs);
  const auto device = std::apply([&](const auto&... o) { return check_args(rec.name.c_str(), o..., args...); }, outs);
  op.meta(meta_arg(args)...);
  std::array<at::Tensor, N> arr = std::apply([](const auto&... o) { return std::array<at::Tensor, N>{o...}; }, outs);
  queue_kernel<Meta, N>(device, rec, kernel, arr, args...);
}

}  // namespace torch_neuronx

// The kernel for a structured op: its CPU out= function.
#define NX_CPU_OUT(fn) [](auto&&... a) { at::cpu::fn(a...); }
