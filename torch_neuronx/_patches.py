"""Every change this package makes to PyTorch's own Python modules, in one place. Each works
around one upstream behaviour, named in its docstring; none changes what other devices do."""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys

import torch


def tensor_printing() -> None:
    """torch._tensor_str formats values through float64, which Trainium lacks (and which would
    warn): neuron tensors are formatted from a host copy; the device suffix stays."""
    import torch._tensor_str as ts

    inner = ts._tensor_str
    if getattr(inner, "_neuron", False):
        return

    def _tensor_str(self, indent):
        if self.device.type == "neuron":
            self = self.cpu()
        return inner(self, indent)

    _tensor_str._neuron = True
    ts._tensor_str = _tensor_str


def device_test_naming() -> None:
    """torch.testing._internal.common_device_type names PrivateUse1 test classes "...PRIVATEUSE1"
    until a test class has run once; naming the base "neuron" up front makes
    instantiate_device_type_tests(..., only_for="neuron") create "...NEURON" classes. The module
    is heavy, so it is patched when (and if) something imports it."""
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


def linear_cross_entropy_defaults() -> None:
    """linear_cross_entropy's chunked path picks its accumulation dtype and policy per device
    (torch.nn.modules.linear_cross_entropy_options._AUTO_DEFAULTS) and gives devices it does not
    list bfloat16/float16 accumulation. Trainium's matmul engine accumulates in float32 (PSUM), so
    neuron declares what the CPU declares: float32 accumulation, with the CPU's policy."""
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


def install() -> None:
    tensor_printing()
    device_test_naming()
    linear_cross_entropy_defaults()
