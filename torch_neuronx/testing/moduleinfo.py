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
}


@functools.cache
def declare_neuron_moduleinfo():
    """Adds neuron's entries to the ModuleInfo database; once per process."""
    from torch.testing._internal.common_modules import module_db
    from torch.testing._internal.opinfo.core import DecorateInfo

    modules = {info.module_cls.__name__: info for info in module_db}
    for (name, cls_name, test_name), why in SKIPS.items():
        if name not in modules:
            raise KeyError(f"torch_neuronx.testing: no ModuleInfo for {name} in torch {torch.__version__}")
        info = modules[name]
        skip = DecorateInfo(unittest.skip(why), cls_name, test_name, device_type=DEVICE_TYPE)
        info.decorators = (*info.decorators, skip)
