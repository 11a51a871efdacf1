"""Neuron's entries in PyTorch's ModuleInfo database (test_modules.py), where neuron differs from
the CPU on purpose, each with its reason. Like OpInfo, ModuleInfo holds a device it does not know to
the CPU's expectations."""
import functools
import unittest

import torch

DEVICE_TYPE = "neuron"

_CUDA_LAYOUT = ("neuron gives CUDA's contiguous output for a channels-last input (the CPU's kernel gives "
                "channels-last); PyTorch skips this test on CUDA, MPS and XPU alike")

# (module class name, test class, test name) -> why neuron skips the test
SKIPS = {
    ("ReflectionPad2d", "TestModule", "test_memory_format"): _CUDA_LAYOUT,
    ("ReflectionPad3d", "TestModule", "test_memory_format"): _CUDA_LAYOUT,
    ("ReplicationPad2d", "TestModule", "test_memory_format"): _CUDA_LAYOUT,
    ("ReplicationPad3d", "TestModule", "test_memory_format"): _CUDA_LAYOUT,
    ("GroupNorm", "TestModule", "test_memory_format"): (
        "PyTorch's autograd formula for native_group_norm makes the input and its gradient contiguous on "
        "every device but the CPU and XPU, so the gradient is contiguous as on CUDA; PyTorch skips this test on "
        "CUDA, MPS and XPU alike"
    ),
}


@functools.cache
def declare_neuron_moduleinfo():
    """Adds neuron's entries to the ModuleInfo database; once per process."""
    from torch.testing._internal.common_modules import module_db
    from torch.testing._internal.opinfo.core import DecorateInfo

    from torch.testing._internal.common_device_type import toleranceOverride

    modules = {info.module_cls.__name__: info for info in module_db}
    # Neuron runs the CPU's kernels, so the tolerances PyTorch grants the CPU's results are neuron's.
    for info in module_db:
        for d in tuple(info.decorators):
            if (isinstance(d, DecorateInfo) and d.device_type == "cpu"
                    and any(isinstance(x, toleranceOverride) for x in d.decorators)):
                info.decorators = (*info.decorators, DecorateInfo(
                    [x for x in d.decorators if isinstance(x, toleranceOverride)], d.cls_name, d.test_name,
                    device_type=DEVICE_TYPE, dtypes=d.dtypes, active_if=d.active_if))
    for (name, cls_name, test_name), why in SKIPS.items():
        if name not in modules:
            raise KeyError(f"torch_neuronx.testing: no ModuleInfo for {name} in torch {torch.__version__}")
        info = modules[name]
        skip = DecorateInfo(unittest.skip(why), cls_name, test_name, device_type=DEVICE_TYPE)
        info.decorators = (*info.decorators, skip)
