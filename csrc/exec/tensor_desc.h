// How kernels see device memory. A queued task holds a TensorDesc of each tensor (its memory and
// layout, inline, no TensorImpl crossing threads) and turns it into a CPU tensor over the same
// bytes when it runs. The software NeuronCore's memory is host-addressable, so ATen's CPU kernels
// run on it unchanged; a hardware runtime would replace these views with its own kernels.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>
#include <c10/core/Storage.h>
#include <c10/util/SmallVector.h>

namespace torch_neuronx {

// Whether two layouts address the same elements the same way: equal sizes, and equal strides
// except on dimensions of size 1 (whose stride means nothing; kernels and meta pick them freely).
bool same_layout(c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::IntArrayRef other_sizes,
                 c10::IntArrayRef other_strides);

// A CPU tensor over `storage` with the given metadata: the one place CPU views are built.
at::Tensor make_cpu_tensor(c10::Storage storage, caffe2::TypeMeta dtype, c10::IntArrayRef sizes,
                           c10::IntArrayRef strides, int64_t offset);

// A non-owning CPU storage over the same bytes as `storage`; `allocator` (may be null) serves a
// kernel that resizes it.
c10::Storage cpu_storage_alias(const c10::Storage& storage, c10::Allocator* allocator = nullptr,
                               bool resizable = false);

// `v` with the lazy conjugate / negative bits set where asked (a tensor's, or a result's).
at::Tensor with_bits(at::Tensor v, bool conj, bool neg);

// A CPU tensor over the same memory as `t` (device or pinned host), owning nothing: the memory
// must outlive it, which stream order guarantees for the stream that allocated it.
at::Tensor cpu_view(const at::Tensor& t);

// What a task holds of a tensor. A 0-dim CPU tensor (a scalar operand) is held by value, read
// when the task is made, as CUDA reads it.
// While a task runs, the views it makes of one device storage share one CPU storage, as the
// device tensors share theirs: the CPU kernel then sees that an out= tensor overlaps an input and
// raises as it does on the CPU, instead of computing over memory it is overwriting.
class ViewScope {
 public:
  ViewScope();
  ~ViewScope();
  ViewScope(const ViewScope&) = delete;
  ViewScope& operator=(const ViewScope&) = delete;
  // The calling thread's innermost scope, or nullptr.
  static ViewScope* current();
  c10::Storage storage_for(void* base, size_t nbytes);

 private:
  ViewScope* outer_;
  c10::SmallVector<std::pair<void*, c10::Storage>, 8> storages_;
};

struct TensorDesc {
  void* base = nullptr;  // the whole storage: kernels may restride an output within it
  size_t nbytes = 0;
  int64_t offset = 0;  // in elements
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  bool defined = false;
  bool host_scalar = false;
  bool wrapped_number = false;
  // The lazy conjugate / negative bits: ops that read them themselves (copy_, mm, ...) get them on
  // the view, as the CPU kernel would.
  bool conj = false, neg = false;
  c10::Scalar scalar;
  c10::SmallVector<int64_t, 5> sizes, strides;

  static TensorDesc of(const at::Tensor& t);
  at::Tensor view() const;  // on the worker
  // Whether `v` (a view a kernel was given) still has the memory and layout described.
  bool describes(const at::Tensor& v) const;
};

}  // namespace torch_neuronx
