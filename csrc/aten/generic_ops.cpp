// Ops without a dedicated neuron kernel. Two mechanisms, both counted per op:
//  - "generic": the op's CPU kernel runs in place on device memory (the software NeuronCore's
//    memory is host-addressable). Inputs become CPU views of device storage; every allocation
//    the kernel makes comes from the device allocator, so outputs are device tensors without a
//    copy; views map back onto the device storage. The stream drains first and the kernel runs
//    on the host thread as the stream's next task (synchronous, memory guard held).
//  - "fallback": copy to host memory, run there, copy back (at::native::cpu_fallback). Used for
//    ops listed in TORCH_NEURONX_FORCE_FALLBACK and for outputs the generic path cannot place.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/CPUFallback.h>
#include <c10/core/CPUAllocator.h>
#include <torch/library.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <unordered_map>

#include "aten/generic_ops.h"
#include "aten/op_stats.h"
#include "aten/queued_ops.h"
#include "core/allocator.h"
#include "core/generator.h"
#include "core/storage.h"

namespace torch_neuronx {
namespace {

// ---- CPU allocations inside a generic kernel come from the device --------------------------

thread_local int tls_redirect_device = -1;

// CPU kernels may use raw_allocate/raw_deallocate (oneDNN does), which need the data pointer to
// be the DataPtr's context. Redirected blocks therefore carry their pointer as context, and this
// table finds the caching allocator's block again when they are freed.
std::mutex redirected_mu;
std::unordered_map<void*, void*> redirected_blocks;  // data pointer -> caching allocator context
c10::DeleterFnPtr base_raw_delete = nullptr;

void free_redirected(void* ptr) {
  void* ctx = nullptr;
  {
    std::lock_guard<std::mutex> lock(redirected_mu);
    auto it = redirected_blocks.find(ptr);
    if (it != redirected_blocks.end()) {
      ctx = it->second;
      redirected_blocks.erase(it);
    }
  }
  if (ctx) {
    caching_allocator().raw_deleter()(ctx);
  } else if (base_raw_delete) {
    base_raw_delete(ptr);  // host memory allocated outside a generic kernel
  }
}

bool from_device_allocator(const c10::DataPtr& p) {
  return caching_allocator().owns(p) || p.get_deleter() == &free_redirected;
}

struct RedirectingCPUAllocator final : c10::Allocator {
  c10::Allocator* base = nullptr;
  c10::DataPtr allocate(size_t n) override {
    if (C10_LIKELY(tls_redirect_device < 0) || n == 0) return base->allocate(n);
    c10::DataPtr p = caching_allocator().allocate_on(static_cast<c10::DeviceIndex>(tls_redirect_device), n);
    void* data = p.get();
    void* ctx = p.release_context();
    {
      std::lock_guard<std::mutex> lock(redirected_mu);
      redirected_blocks[data] = ctx;
    }
    return {data, data, &free_redirected, c10::Device(c10::kCPU)};
  }
  // Frees redirected blocks and, for anything else, defers to the original CPU allocator.
  c10::DeleterFnPtr raw_deleter() const override { return &free_redirected; }
  void copy_data(void* dst, const void* src, std::size_t count) const override {
    std::memcpy(dst, src, count);
  }
};

RedirectingCPUAllocator& redirecting_allocator() {
  static RedirectingCPUAllocator* a = [] {
    auto* r = new RedirectingCPUAllocator();
    r->base = c10::GetCPUAllocator();
    base_raw_delete = r->base->raw_deleter();
    c10::SetCPUAllocator(r, /*priority=*/10);
    return r;
  }();
  return *a;
}

struct RedirectScope {
  int saved;
  explicit RedirectScope(int device) : saved(tls_redirect_device) { tls_redirect_device = device; }
  ~RedirectScope() { tls_redirect_device = saved; }
};

// ---- argument translation --------------------------------------------------------------------

struct Translation {
  c10::DeviceIndex device = -1;
  bool has_host_tensor = false;  // a CPU tensor that is not a 0-dim scalar
  // device storage -> CPU alias storage over the same memory
  std::unordered_map<c10::StorageImpl*, c10::Storage> storages;
  std::unordered_map<c10::StorageImpl*, c10::StorageImpl*> alias_to_device;
  std::unordered_map<c10::TensorImpl*, at::Tensor> alias_to_original;  // CPU alias -> device tensor
  std::vector<std::pair<at::Tensor, at::Tensor>> mutable_pairs;        // (device, CPU alias)
  std::unordered_map<c10::StorageImpl*, c10::Storage> adopted;         // CPU output storage -> device
};

void note_device(Translation& tr, const at::Tensor& t, const c10::OperatorHandle& op) {
  const auto idx = t.device().index();
  if (tr.device < 0) tr.device = idx;
  TORCH_CHECK(tr.device == idx, "Expected all tensors to be on the same device, but found at least two devices, neuron:",
              static_cast<int>(tr.device), " and neuron:", static_cast<int>(idx), "! (in ", op.schema().name(), ")");
}

void note_host(Translation& tr, const at::Tensor& t) {
  if (t.defined() && t.device().is_cpu() && t.dim() > 0) tr.has_host_tensor = true;
}

at::Tensor to_alias(Translation& tr, const at::Tensor& t, bool is_write) {
  auto* key = t.storage().unsafeGetStorageImpl();
  auto it = tr.storages.find(key);
  if (it == tr.storages.end()) {
    c10::Storage alias(c10::Storage::use_byte_size_t(), t.storage().nbytes(),
                       c10::DataPtr(const_cast<void*>(t.storage().data()), c10::Device(c10::kCPU)),
                       &redirecting_allocator(), /*resizable=*/true);
    tr.alias_to_device[alias.unsafeGetStorageImpl()] = key;
    it = tr.storages.emplace(key, std::move(alias)).first;
  }
  at::Tensor alias = cpu_tensor_on(it->second, t);
  // Holding the device tensor keeps the storages behind the raw keys above alive.
  tr.alias_to_original[alias.unsafeGetTensorImpl()] = t;
  if (is_write) tr.mutable_pairs.emplace_back(t, alias);
  return alias;
}

c10::IValue translate_arg(Translation& tr, const c10::IValue& v, bool is_write, const c10::OperatorHandle& op) {
  if (v.isTensor()) {
    const auto& t = v.toTensor();
    note_host(tr, t);
    if (!is_neuron(t)) return v;
    note_device(tr, t, op);
    return to_alias(tr, t, is_write);
  }
  if (v.isTensorList()) {
    auto list = v.toTensorList();
    c10::List<at::Tensor> out;
    out.reserve(list.size());
    for (const at::Tensor& t : list) {
      if (is_neuron(t)) {
        note_device(tr, t, op);
        out.push_back(to_alias(tr, t, is_write));
      } else {
        note_host(tr, t);
        out.push_back(t);
      }
    }
    return out;
  }
  if (v.isOptionalTensorList()) {
    auto list = v.toOptionalTensorList();
    c10::List<std::optional<at::Tensor>> out;
    for (const std::optional<at::Tensor>& t : list) {
      if (t.has_value() && is_neuron(*t)) {
        note_device(tr, *t, op);
        out.push_back(to_alias(tr, *t, is_write));
      } else {
        out.push_back(t);
      }
    }
    return out;
  }
  if (v.isDevice() && v.toDevice().type() == kNeuron) {
    const auto d = v.toDevice();
    if (tr.device < 0) tr.device = d.has_index() ? d.index() : current_device();
    return c10::IValue(c10::Device(c10::kCPU));
  }
  return v;
}

int64_t total_numel(const Translation& tr) {
  int64_t n = 0;
  for (const auto& [impl, t] : tr.alias_to_original) n += t.numel();
  return n;
}

// A CPU result of the kernel, as a device tensor.
at::Tensor to_device(Translation& tr, const at::Tensor& t, const c10::OperatorHandle& op) {
  if (!t.defined() || !t.device().is_cpu()) return t;
  auto orig = tr.alias_to_original.find(t.unsafeGetTensorImpl());
  if (orig != tr.alias_to_original.end()) return orig->second;
  auto* cpu_storage = t.storage().unsafeGetStorageImpl();
  c10::Storage device_storage;
  auto aliased = tr.alias_to_device.find(cpu_storage);
  if (aliased != tr.alias_to_device.end()) {
    device_storage = c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(aliased->second));
  } else if (auto adopted = tr.adopted.find(cpu_storage); adopted != tr.adopted.end()) {
    device_storage = adopted->second;
  } else if (t.storage().nbytes() == 0 || from_device_allocator(t.storage().data_ptr())) {
    c10::DataPtr dp = cpu_storage->set_data_ptr(c10::DataPtr());
    dp.unsafe_set_device(c10::Device(kNeuron, tr.device));
    if (!dp.get()) dp = caching_allocator().allocate_on(tr.device, 0);
    device_storage = c10::Storage(c10::Storage::use_byte_size_t(), cpu_storage->nbytes(), std::move(dp),
                                  &caching_allocator(), /*resizable=*/true);
    tr.adopted[cpu_storage] = device_storage;
  } else {
    // Host memory the device allocator did not provide (a kernel-internal buffer): copy it.
    record_fallback(op, "output copied from host");
    auto out = empty_neuron(t.sizes(), t.strides(), t.scalar_type(), tr.device);
    out.copy_(t);
    return out;
  }
  check_trainium_dtype(t.scalar_type());
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(device_storage),
                                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), t.dtype());
  impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  return at::Tensor(std::move(impl));
}

c10::IValue translate_result(Translation& tr, const c10::IValue& v, const c10::OperatorHandle& op) {
  if (v.isTensor()) return to_device(tr, v.toTensor(), op);
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) out.push_back(to_device(tr, t, op));
    return out;
  }
  return v;
}

// Mutated arguments whose kernel resized them: move the new memory and shape to the device tensor.
void write_back(Translation& tr) {
  for (auto& [device_t, alias] : tr.mutable_pairs) {
    auto* alias_storage = alias.storage().unsafeGetStorageImpl();
    auto* dev_storage = device_t.storage().unsafeGetStorageImpl();
    if (alias_storage->data() != dev_storage->data() || alias_storage->nbytes() != dev_storage->nbytes()) {
      if (from_device_allocator(alias_storage->data_ptr())) {
        c10::DataPtr dp = alias_storage->set_data_ptr(c10::DataPtr());
        dp.unsafe_set_device(device_t.device());
        dev_storage->set_data_ptr_noswap(std::move(dp));
        dev_storage->set_nbytes(alias_storage->nbytes());
      }
    }
    if (device_t.sizes() != alias.sizes() || device_t.strides() != alias.strides() ||
        device_t.storage_offset() != alias.storage_offset()) {
      device_t.unsafeGetTensorImpl()->set_sizes_and_strides(alias.sizes(), alias.strides(), alias.storage_offset());
    }
  }
}

bool is_generator_type(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::GeneratorType) return true;
  if (auto opt = type->cast<c10::OptionalType>()) return opt->getElementType()->kind() == c10::TypeKind::GeneratorType;
  return false;
}

}  // namespace

void run_generic(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  Translation tr;
  c10::IValue* args = stack->data() + (stack->size() - nargs);
  for (size_t i = 0; i < nargs; ++i) {
    const auto& info = schema.arguments()[i].alias_info();
    const bool is_write = info && info->isWrite();
    args[i] = translate_arg(tr, args[i], is_write, op);
  }
  TORCH_CHECK(!(tr.has_host_tensor && !tr.alias_to_original.empty()),
              "Expected all tensors to be on the same device, but found at least two devices, neuron:",
              static_cast<int>(tr.device), " and cpu! (in ", schema.name(), ")");
  if (tr.device < 0) tr.device = current_device();
  for (size_t i = 0; i < nargs; ++i) {
    if (is_generator_type(schema.arguments()[i].type()) && (args[i].isNone() || args[i].isGenerator())) {
      std::optional<at::Generator> g;
      if (args[i].isGenerator()) g = args[i].toGenerator();
      args[i] = c10::IValue(resolve_generator(g, tr.device)->cpu_generator_for(total_numel(tr)));
    }
  }
  record_generic(op);
  run_now(tr.device, [&] {
    RedirectScope redirect(tr.device);
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  });
  write_back(tr);
  const size_t nret = schema.returns().size();
  c10::IValue* rets = stack->data() + (stack->size() - nret);
  for (size_t i = 0; i < nret; ++i) rets[i] = translate_result(tr, rets[i], op);
}

namespace {

std::set<std::string>& forced_fallback_ops() {
  static std::set<std::string> ops = [] {
    std::set<std::string> s;
    if (const char* v = std::getenv("TORCH_NEURONX_FORCE_FALLBACK")) {
      std::stringstream ss(v);
      std::string item;
      while (std::getline(ss, item, ',')) if (!item.empty()) s.insert(item);
    }
    return s;
  }();
  return ops;
}
std::mutex forced_mu;

void neuron_boxed_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  bool forced;
  {
    std::lock_guard<std::mutex> lock(forced_mu);
    const auto& f = forced_fallback_ops();
    forced = !f.empty() && (f.count(op.schema().name()) || f.count(op_display_name(op)));
  }
  if (forced) {
    record_fallback(op, "forced by TORCH_NEURONX_FORCE_FALLBACK");
    at::native::cpu_fallback(op, stack);
    return;
  }
  if (try_queue(op, stack)) return;
  run_generic(op, stack);
}

}  // namespace

void set_forced_fallback_ops(const std::vector<std::string>& ops) {
  std::lock_guard<std::mutex> lock(forced_mu);
  forced_fallback_ops() = std::set<std::string>(ops.begin(), ops.end());
}

void install_cpu_allocator_redirect() { redirecting_allocator(); }

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&neuron_boxed_kernel>());
}

// Convolution's composite kernels send devices other than CPU/CUDA to convolution_overrideable;
// taking the ops themselves runs ATen's CPU convolution (oneDNN) in place instead.
//
// The others have a CPU kernel and a composite one that is a different algorithm (layer and group
// norm, addr: computed in the input dtype rather than in float). The CPU kernel is what a user
// compares against, and it is one task rather than a dozen, so it wins. mode.values' composite
// kernel accepts only CPU, CUDA and XPU tensors.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* op : {"convolution", "convolution_backward", "native_layer_norm", "native_group_norm", "addr",
                         "addr.out", "_stack", "_stack.out", "all.dims", "all.dims_out", "any.dims", "any.dims_out",
                         "linalg__powsum", "mode.values"}) {
    m.impl(op, torch::CppFunction::makeFromBoxedFunction<&neuron_boxed_kernel>());
  }
}

}  // namespace torch_neuronx
