// Sync: the op's CPU kernel runs as a task on the stream, on device memory, while the caller
// waits; for ops whose results the host must see to go on (shapes that depend on values, host
// values, views). Arguments become CPU tensors over the device storages (resizable, so out=
// kernels can grow them); what the kernel allocates comes from the device (kernel_alloc.h), so its
// results become device tensors without a copy, and views map back onto the device storage.
#include <ATen/core/Tensor.h>
#include <c10/core/TensorImpl.h>

#include <unordered_map>
#include <vector>

#include "core/allocator.h"
#include "core/storage.h"
#include "exec/device_check.h"
#include "exec/executor.h"
#include "exec/ivalue_walk.h"
#include "exec/kernel_alloc.h"
#include "exec/tensor_desc.h"
#include "pipeline/call_args.h"
#include "pipeline/runners.h"

namespace torch_neuronx {
namespace {

struct Translation {
  c10::DeviceIndex device = -1;
  int64_t numel = 0;
  // device storage -> CPU alias over the same memory, and back
  std::unordered_map<c10::StorageImpl*, c10::Storage> aliases;
  std::unordered_map<c10::StorageImpl*, c10::StorageImpl*> alias_to_device;
  std::unordered_map<c10::TensorImpl*, at::Tensor> alias_to_original;  // CPU alias -> device tensor
  std::vector<std::pair<at::Tensor, at::Tensor>> written;              // (device, CPU alias)
  std::unordered_map<c10::StorageImpl*, c10::Storage> adopted;         // kernel-made storage -> device
};

at::Tensor to_alias(Translation& tr, const at::Tensor& t, bool is_write) {
  auto* key = t.storage().unsafeGetStorageImpl();
  auto it = tr.aliases.find(key);
  if (it == tr.aliases.end()) {
    c10::Storage alias = cpu_storage_alias(t.storage(), kernel_cpu_allocator(), /*resizable=*/true);
    tr.alias_to_device[alias.unsafeGetStorageImpl()] = key;
    it = tr.aliases.emplace(key, std::move(alias)).first;
  }
  at::Tensor alias = make_cpu_tensor(it->second, t.dtype(), t.sizes(), t.strides(), t.storage_offset());
  tr.alias_to_original[alias.unsafeGetTensorImpl()] = t;  // keeps the storages behind the raw keys alive
  if (is_write) tr.written.emplace_back(t, alias);
  return alias;
}

// A CPU result of the kernel, as a device tensor.
at::Tensor to_device(Translation& tr, OpRecord& rec, const at::Tensor& t) {
  if (!t.defined() || !t.device().is_cpu()) return t;
  auto orig = tr.alias_to_original.find(t.unsafeGetTensorImpl());
  if (orig != tr.alias_to_original.end()) return orig->second;
  auto* cpu_storage = t.storage().unsafeGetStorageImpl();
  c10::Storage device_storage;
  if (auto aliased = tr.alias_to_device.find(cpu_storage); aliased != tr.alias_to_device.end()) {
    device_storage = c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(aliased->second));
  } else if (auto adopted = tr.adopted.find(cpu_storage); adopted != tr.adopted.end()) {
    device_storage = adopted->second;
  } else if (t.storage().nbytes() == 0 || holds_device_memory(t.storage().data_ptr())) {
    c10::DataPtr dp = cpu_storage->set_data_ptr(c10::DataPtr());
    dp = dp.get() ? to_device_data_ptr(std::move(dp), tr.device) : caching_allocator().allocate_on(tr.device, 0);
    device_storage = c10::Storage(c10::Storage::use_byte_size_t(), cpu_storage->nbytes(), std::move(dp),
                                  &caching_allocator(), /*resizable=*/true);
    tr.adopted[cpu_storage] = device_storage;
  } else {
    // Host memory the kernel did not get from the device (a buffer of its own): copied.
    note_copy(rec, "its result was host memory, copied to the device");
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

// Written arguments the kernel resized or restrided: their device tensors take the new memory
// and layout.
void write_back(Translation& tr) {
  for (auto& [device_t, alias] : tr.written) {
    auto* alias_storage = alias.storage().unsafeGetStorageImpl();
    auto* dev_storage = device_t.storage().unsafeGetStorageImpl();
    if ((alias_storage->data() != dev_storage->data() || alias_storage->nbytes() != dev_storage->nbytes()) &&
        holds_device_memory(alias_storage->data_ptr())) {
      dev_storage->set_data_ptr_noswap(to_device_data_ptr(alias_storage->set_data_ptr(c10::DataPtr()), tr.device));
      dev_storage->set_nbytes(alias_storage->nbytes());
    }
    if (device_t.sizes() != alias.sizes() || device_t.strides() != alias.strides() ||
        device_t.storage_offset() != alias.storage_offset()) {
      device_t.unsafeGetTensorImpl()->set_sizes_and_strides(alias.sizes(), alias.strides(), alias.storage_offset());
    }
  }
}

}  // namespace

void run_op_sync(const c10::OperatorHandle& op, OpRecord& rec, torch::jit::Stack* stack, const std::string& why) {
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  Translation tr;
  DeviceCheck check(rec.name.c_str());
  c10::IValue* args = stack->data() + (stack->size() - nargs);
  for (size_t i = 0; i < nargs; ++i) {
    const bool written = is_written(schema, i);
    for_each_tensor(args[i], [&](const at::Tensor& t) {
      check.add(t, written);
      if (is_neuron(t)) tr.numel += t.numel();
    });
  }
  tr.device = check.device();
  for (size_t i = 0; i < nargs && tr.device < 0; ++i) tr.device = named_device(args[i]);
  if (tr.device < 0) tr.device = current_device();
  for (size_t i = 0; i < nargs; ++i) {
    if (auto cpu = cpu_form(schema.arguments()[i], args[i], tr.device, tr.numel)) {
      args[i] = std::move(*cpu);
      continue;
    }
    const bool written = is_written(schema, i);
    args[i] = map_tensors(args[i], [&](const at::Tensor& t) { return is_neuron(t) ? to_alias(tr, t, written) : t; });
  }
  if (why.empty()) {
    rec.count(Mode::kSync);
  } else {
    rec.count(Mode::kSync, why);
  }
  // The kernel pops its arguments on the worker. Held here too, none it drops is the last C++
  // reference to a tensor Python owns: letting go of that one takes the GIL, which the caller (a
  // __torch_dispatch__, DTensor's) may hold while it waits for the worker.
  const std::vector<c10::IValue> held(args, args + nargs);
  run_sync(tr.device, rec.name.c_str(), [&] { op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack); });
  write_back(tr);
  const size_t nret = schema.returns().size();
  c10::IValue* rets = stack->data() + (stack->size() - nret);
  for (size_t i = 0; i < nret; ++i)
    rets[i] = map_tensors(rets[i], [&](const at::Tensor& t) { return to_device(tr, rec, t); });
}

}  // namespace torch_neuronx
