// The overrides table: every exception to op_policy.cpp's rules, with its reason.
#include "pipeline/op_overrides.h"

#include "pipeline/meta_rules.h"

namespace torch_neuronx {
namespace {

constexpr int kSyncMode = static_cast<int>(Mode::kSync);
namespace mr = meta_rules;

constexpr const char* kPadWhy = "its CPU kernel lays the output out as the input; CUDA's and meta's is contiguous";

constexpr const char* kComplexToReal =
    "the CPU (and CUDA) compute a complex input's real result in scratch and resize it contiguous";
constexpr const char* kFftWhy =
    "the CPU's (MKL) layout, which neuron's fake tensors give too; meta on a device-less tensor gives cuFFT's";

// Every exception to the rules, with its reason. Add a row here, never a branch elsewhere.
const Override kOverrides[] = {
    // Composite kernels that would send neuron to convolution_overrideable: take the ops, so the
    // CPU's convolution runs as a task. Not aten::convolution: its composite calls _convolution,
    // the op torch.jit.trace records (it records no convolution).
    {"aten::_convolution", kRules, kClaim, "its composite kernel would call convolution_overrideable",
     mr::convolution_memory_format, mr::check_convolution},
    {"aten::convolution_backward", kRules, kClaim, "its composite kernel would call convolution_backward_overrideable",
     mr::convolution_backward_memory_format},
    // A composite kernel that computes differently from the CPU kernel (in the input dtype
    // rather than in float): the CPU kernel is what users compare with, and one task, not many.
    {"aten::native_layer_norm", kRules, kClaim, "the CPU kernel, not the composite one, is the reference"},
    {"aten::native_group_norm", kRules, kClaim, "the CPU kernel, not the composite one, is the reference"},
    {"aten::native_group_norm_backward", kRules, 0, "the CPU lays the input's gradient out as the input",
     mr::group_norm_backward_memory_format},
    {"aten::addr", kRules, kClaim, "the CPU kernel, not the composite one, is the reference"},
    {"aten::addr.out", kRules, kClaim, "its composite kernel would copy into an out= tensor on any device"},
    {"aten::_stack", kRules, kClaim, "one kernel rather than a cat of unsqueezed inputs"},
    {"aten::all.dims", kRules, kClaim, "one kernel rather than a chain of reductions"},
    {"aten::any.dims", kRules, kClaim, "one kernel rather than a chain of reductions"},
    {"aten::linalg__powsum", kRules, kClaim, "one kernel rather than a chain of ops"},
    {"aten::mode.values", kRules, kClaim, "its composite kernel accepts only CPU, CUDA and XPU tensors"},
    // MoE experts: the composite kernel copies the group offsets to the host and waits for them
    // before each call; claimed, the CPU's loop over groups reads them in the task, on the device.
    {"aten::_grouped_mm", kRules, kClaim, "its composite kernel reads the group offsets on the host (a sync)"},

    // CUDA's float mean/rstd for half and bfloat16 inputs (what FakeTensor and compiled graphs
    // expect): the CPU kernel's statistics, widened; its backward takes them narrowed again.
    {"aten::native_layer_norm", kRules, kWidenedResults,
     "mean/rstd are float for half and bfloat16 inputs, as on CUDA"},
    {"aten::native_layer_norm_backward", kRules, 0,
     "the CPU kernel takes mean/rstd in the input's dtype unless the weights are float", nullptr,
     mr::layer_norm_backward_stats},

    // Meta kernels follow CUDA; where the CPU kernel (what runs, and what users compare with)
    // decides dtypes or shapes otherwise, a rule corrects meta's answer.
    {"aten::native_batch_norm", kRules, kNoOutKernel,
     "the CPU's saved statistics follow the input dtype and are empty in eval", mr::batch_norm_stats},
    {"aten::_native_batch_norm_legit", kRules, kNoOutKernel,
     "the CPU's saved statistics follow the input dtype and are empty in eval", mr::batch_norm_stats},
    {"aten::_native_batch_norm_legit.no_stats", kRules, kNoOutKernel,
     "the CPU's saved statistics follow the input dtype and are empty in eval", mr::batch_norm_stats_no_stats},
    {"aten::_native_batch_norm_legit_no_training", kRules, kNoOutKernel,
     "the CPU's saved statistics follow the input dtype and are empty in eval", mr::batch_norm_stats_eval},
    {"aten::_batch_norm_with_update", kRules, kNoOutKernel, "the CPU's saved statistics follow the input dtype",
     mr::batch_norm_stats_train},
    {"aten::_batch_norm_no_update", kRules, kNoOutKernel, "the CPU's saved statistics are empty in eval",
     mr::batch_norm_stats_eval},
    {"aten::native_batch_norm_backward", kRules, 0, "the CPU computes no gradient its output_mask leaves out",
     mr::batch_norm_backward_masked},
    // Output strides where meta's answer differs from what the CPU kernel gives (and CUDA, where
    // they share the native code).
    {"aten::abs.out", kRules, 0, kComplexToReal, mr::complex_to_real_contiguous},
    {"aten::angle", kRules, 0, kComplexToReal, mr::complex_to_real_contiguous},
    {"aten::nan_to_num.out", kRules, 0, "the CPU copies an integer input into an out= tensor resized contiguous",
     mr::integral_input_contiguous},
    {"aten::_fft_r2c", kRules, 0, kFftWhy, mr::fft_r2c_cpu_layout},
    {"aten::_fft_c2c", kRules, 0, kFftWhy, mr::fft_c2c_cpu_layout},
    {"aten::_fft_c2r", kRules, 0, kFftWhy, mr::fft_c2r_cpu_layout},
    {"aten::_fft_r2c.out", kRules, 0, "its CPU out= kernel resizes out= contiguous, as meta does"},
    {"aten::_fft_c2c.out", kRules, 0, "its CPU out= kernel resizes out= contiguous, as meta does"},
    {"aten::_fft_c2r.out", kRules, 0, "its CPU out= kernel resizes out= contiguous, as meta does"},
    {"aten::nonzero_static", kRules, kContiguousOutputs,
     "the CPU returns a contiguous result where meta transposes it"},
    // Structured CPU out= kernels give an out= tensor they resize the functional result's layout;
    // these ops' meta kernels (Python) keep it contiguous.
    {"aten::cat.out", kRules, kFunctionalLayout | kSplitInvariant,
     "a resized out= tensor takes the inputs' memory format"},
    // Kernels whose bits cannot follow the split (exec/solo_team.h): moves of data, and fused Adam,
    // which splits its work in 64-byte units, so its scalar tail is only the tensor's last elements.
    {"aten::index_select", kRules, kSplitInvariant, "small calls run on the queue worker alone"},
    {"aten::_fused_adam_", kRules, kSplitInvariant, "small calls run on the queue worker alone"},
    {"aten::_fused_adamw_", kRules, kSplitInvariant, "small calls run on the queue worker alone"},
    {"aten::cholesky_inverse.out", kRules, kFunctionalLayout, "a resized out= tensor is column-major"},
    {"aten::linalg_lu_solve.out", kRules, kFunctionalLayout, "a resized out= tensor is column-major"},
    {"aten::linalg_lu_factor_ex.out", kRules, kFunctionalLayout, "a resized out= tensor is column-major"},
    {"aten::linalg_qr.out", kRules, kFunctionalLayout, "a resized out= tensor is column-major"},
    {"aten::triangular_solve.X", kRules, kFunctionalLayout, "a resized out= tensor is column-major"},
    {"aten::ormqr.out", kRules, kFunctionalLayout, "a resized out= tensor is column-major"},
    {"aten::linalg_householder_product.out", kRules, kFunctionalLayout, "a resized out= tensor is column-major"},
    {"aten::linalg_ldl_factor_ex.out", kRules, kFunctionalLayout, "a resized out= tensor is column-major"},
    {"aten::linalg_ldl_solve.out", kRules, kFunctionalLayout, "a resized out= tensor is column-major"},
    {"aten::_linalg_eigh.eigenvalues", kRules, kFunctionalLayout, "a resized out= tensor is column-major"},
    // out= kernels that use or reshape their output as scratch: the task runs the op and copies.
    // The pads' CPU kernels lay out their output, and the gradient of their input, as the input
    // (channels-last), restriding an out= tensor in place; CUDA's and meta's are contiguous.
    {"aten::reflection_pad1d", kRules, kNoOutKernel | kOutScratch, kPadWhy},
    {"aten::reflection_pad2d", kRules, kNoOutKernel | kOutScratch, kPadWhy},
    {"aten::reflection_pad3d", kRules, kNoOutKernel | kOutScratch, kPadWhy},
    {"aten::replication_pad1d", kRules, kNoOutKernel | kOutScratch, kPadWhy},
    {"aten::replication_pad2d", kRules, kNoOutKernel | kOutScratch, kPadWhy},
    {"aten::replication_pad3d", kRules, kNoOutKernel | kOutScratch, kPadWhy},
    {"aten::reflection_pad1d_backward", kRules, kNoOutKernel | kOutScratch, kPadWhy},
    {"aten::reflection_pad2d_backward", kRules, kNoOutKernel | kOutScratch, kPadWhy},
    {"aten::reflection_pad3d_backward", kRules, kNoOutKernel | kOutScratch, kPadWhy},
    {"aten::replication_pad1d_backward", kRules, kNoOutKernel | kOutScratch, kPadWhy},
    {"aten::replication_pad2d_backward", kRules, kNoOutKernel | kOutScratch, kPadWhy},
    {"aten::replication_pad3d_backward", kRules, kNoOutKernel | kOutScratch, kPadWhy},
    {"aten::huber_loss", kRules, kNoOutKernel, "its out= kernel uses the output as scratch of the input's size"},
    {"aten::binary_cross_entropy", kRules, kNoOutKernel,
     "its out= kernel uses the output as scratch of the input's size"},
    // CPU out= kernels that resize a wrong-sized out= tensor without PyTorch's warning.
    {"aten::addbmm", kRules, kQuietResize, "the CPU resizes its out= tensor quietly"},
    {"aten::linspace", kRules, kQuietResize, "the CPU resizes its out= tensor quietly"},
    {"aten::logspace", kRules, kQuietResize, "the CPU resizes its out= tensor quietly"},
    {"aten::log_sigmoid_forward", kRules, kQuietResize, "the CPU resizes its out= tensors quietly"},
    {"aten::narrow_copy", kRules, kQuietResize, "the CPU resizes its out= tensor quietly"},
    {"aten::eye", kRules, kQuietResize, "the CPU resizes its out= tensor quietly"},
    {"aten::bernoulli", kRules, kQuietResize, "the CPU resizes its out= tensor quietly"},
    // Argument errors the CPU kernel raises inside its task that depend on sizes or numbers, which
    // a call's signature leaves out (pipeline/first_call.h): raised at every call.
    {"aten::uniform_", kRules, 0, "the CPU kernel checks from <= to", nullptr, mr::check_uniform},
    {"aten::random_.from", kRules, 0, "the CPU kernel checks the range against the dtype", nullptr,
     mr::check_random_from},
    {"aten::random_.to", kRules, 0, "the CPU kernel checks the range against the dtype", nullptr, mr::check_random_to},
    {"aten::masked_fill_.Scalar", kRules, 0, "the CPU kernel checks that the value fits the dtype", nullptr,
     mr::check_masked_fill},
    {"aten::masked_scatter_", kRules, 0, "the CPU kernel checks the mask and the source", nullptr,
     mr::check_masked_scatter},
    {"aten::multinomial", kRules, kQuietResize, "the CPU kernel checks the input's dtype and resizes out= quietly",
     nullptr, mr::check_multinomial},
    // Meta answers the CPU kernel does not give.
    {"aten::multi_margin_loss", kRules, 0, "the CPU gives a 0-dim loss for a 0-dim target with reduction none",
     mr::multi_margin_loss_0d},
    {"aten::multilabel_margin_loss_forward", kRules, 0, "the CPU gives a 0-dim loss for a 0-dim or 1-dim target",
     mr::multilabel_margin_loss_0d},
    {"aten::nansum", kRules, 0, "the CPU reduces every dimension for an empty dim list, as sum does",
     mr::empty_dim_reduces_all},
    {"aten::_weight_norm_interface", kRules, 0, "the CPU (and CUDA) keep a half g's norms in float",
     mr::weight_norm_float_norms},
    // Sync: the CPU kernel decides what meta cannot predict.
    {"aten::_embedding_bag_forward_only", kSyncMode, 0,
     "its CPU kernel sizes offset2bag, bag_size and max_indices differently from meta"},
    {"aten::_embedding_bag", kSyncMode, 0,
     "its CPU kernel sizes offset2bag, bag_size and max_indices differently from meta"},
    {"aten::max_unpool2d", kSyncMode, 0, "the CPU kernel follows the input's memory format, which meta does not"},
    {"aten::linalg_eig", kSyncMode, 0,
     "the CPU's LAPACK kernel returns column-major results where meta says row-major"},
};

}  // namespace

c10::ArrayRef<Override> overrides() { return kOverrides; }

}  // namespace torch_neuronx
