"""torch-neuronx: the `neuron` device for PyTorch (AWS Trainium2/Trainium3).

Importing this package (which `import torch` does by itself through the `torch.backends` entry
point, unless TORCH_DEVICE_BACKEND_AUTOLOAD=0) registers the `neuron` device and `torch.neuron`.
Without Trainium hardware the device is the software NeuronCore built into the extension.
"""


def _autoload():
    """Entry point of the `torch.backends` group: importing the package does the work. Defined
    before `import torch` because importing this package first makes torch autoload it while
    it is still initialising."""


import torch  # noqa: E402


def _load_extension():
    """The built extension registers the device's kernels, allocator and hooks. Run from a source
    checkout (which has no built extension), this finds the installed one."""
    try:
        from . import _C

        return _C
    except ImportError:
        import glob
        import importlib.util
        import os
        import sys

        here = os.path.dirname(os.path.abspath(__file__))
        for entry in sys.path:
            for path in glob.glob(os.path.join(entry or ".", "torch_neuronx", "_C*.so")):
                if os.path.dirname(os.path.abspath(path)) == here:
                    continue
                spec = importlib.util.spec_from_file_location(__name__ + "._C", path)
                module = importlib.util.module_from_spec(spec)
                sys.modules[spec.name] = module
                spec.loader.exec_module(module)
                return module
        raise


_C = _load_extension()

if torch._C._get_privateuse1_backend_name() != "neuron":
    torch.utils.rename_privateuse1_backend("neuron")

from . import neuron as _neuron_module  # noqa: E402

if not hasattr(torch, "neuron"):
    torch._register_device_module("neuron", _neuron_module)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )


def _install_printing():
    # torch formats tensor values through float64, which Trainium lacks (and would warn about);
    # the values are formatted from a host copy instead, the device suffix stays.
    import torch._tensor_str as ts

    inner = ts._tensor_str

    def _tensor_str(self, indent):
        if self.device.type == "neuron":
            self = self.cpu()
        return inner(self, indent)

    ts._tensor_str = _tensor_str


_install_printing()


def _install_device_test_naming():
    # PyTorch's device-generic test machinery names PrivateUse1 test classes "...PRIVATEUSE1"
    # until a test class has run once; naming the base "neuron" up front makes
    # instantiate_device_type_tests(..., only_for="neuron") create "...NEURON" classes. The module
    # is heavy, so it is patched when (and if) something imports it.
    import importlib.abc
    import importlib.util
    import sys

    target = "torch.testing._internal.common_device_type"

    def patch(module):
        module.PrivateUse1TestBase.device_type = "neuron"

    if target in sys.modules:
        patch(sys.modules[target])
        return

    class _Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target_module=None):
            if name != target:
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            exec_module = spec.loader.exec_module

            def exec_and_patch(module):
                exec_module(module)
                patch(module)

            spec.loader.exec_module = exec_and_patch
            return spec

    sys.meta_path.insert(0, _Finder())


_install_device_test_naming()


def _install_linear_cross_entropy_defaults():
    # linear_cross_entropy's chunked path picks its accumulation dtype and policy per device, and
    # gives devices it does not list bfloat16/float16 accumulation. Trainium's matmul engine takes
    # bfloat16/float16 operands and accumulates in float32 (PSUM), so neuron declares what the CPU
    # and CUDA declare: float32 accumulation, with the CPU's policy.
    try:
        from torch.nn.modules import linear_cross_entropy_options as lce
    except ImportError:
        return
    options = getattr(lce, "LinearCrossEntropyOptions", None)
    resolve = getattr(options, "_resolve_auto_acc_dtype", None)
    if not hasattr(lce, "_AUTO_DEFAULTS") or resolve is None:
        return
    for dtype in (torch.bfloat16, torch.float16):
        cpu = lce._AUTO_DEFAULTS.get(("cpu", dtype))
        if cpu is not None:
            lce._AUTO_DEFAULTS.setdefault(("neuron", dtype), cpu)

    def resolve_auto_acc_dtype(dtype, device):
        if device is not None and device.type == "neuron" and dtype in (torch.float16, torch.bfloat16):
            return torch.float32
        return resolve(dtype, device)

    options._resolve_auto_acc_dtype = staticmethod(resolve_auto_acc_dtype)


_install_linear_cross_entropy_defaults()

from .ops import get_fallback_ops, get_generic_ops, get_queued_ops, reset_fallback_ops  # noqa: E402

__version__ = "0.1.0"
__all__ = ["get_fallback_ops", "reset_fallback_ops", "get_generic_ops", "get_queued_ops"]
