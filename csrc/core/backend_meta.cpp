// Tensor backend metadata: named flags a neuron tensor carries beside its data
// (torch._utils.set_tensor_metadata / get_tensor_metadata). PyTorch keeps them where it keeps a
// device's backend metadata: through torch.save / torch.load on neuron, detach and
// torch._C._copy_backend_meta. A tensor loaded onto another device drops them, as CUDA tensors
// have none. Flags are immutable once attached: setting flags attaches a new record, so tensors
// that share one (a detached alias) never see each other's later changes.
#include <c10/core/TensorImpl.h>
#include <torch/csrc/jit/serialization/pickler_helper.h>

#include <map>
#include <string>
#include <unordered_map>

namespace torch_neuronx {
namespace {

struct NeuronMeta final : c10::BackendMeta {
  std::map<std::string, bool> flags;  // only true flags: absent means false, as for conj and neg
};

const NeuronMeta* meta_of(const at::Tensor& t) {
  return dynamic_cast<const NeuronMeta*>(t.unsafeGetTensorImpl()->get_backend_meta());
}

void get_flags(const at::Tensor& t, std::unordered_map<std::string, bool>& out) {
  if (const NeuronMeta* m = meta_of(t)) {
    for (const auto& [name, on] : m->flags) out[name] = on;
  }
}

void set_flags(const at::Tensor& t, std::unordered_map<std::string, bool>& in) {
  if (in.empty()) return;
  auto next = c10::make_intrusive<NeuronMeta>();
  if (const NeuronMeta* m = meta_of(t)) next->flags = m->flags;
  for (const auto& [name, on] : in) {
    if (on) {
      next->flags[name] = true;
    } else {
      next->flags.erase(name);
    }
  }
  t.unsafeGetTensorImpl()->set_backend_meta(std::move(next));
}

const int registered = [] {
  torch::jit::TensorBackendMetaRegistry(c10::DeviceType::PrivateUse1, get_flags, set_flags);
  return 0;
}();

}  // namespace
}  // namespace torch_neuronx
