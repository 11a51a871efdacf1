"""Neuron's entries in PyTorch's OpInfo database, where neuron differs from the CPU on purpose.

OpInfo keeps dtype lists and expected failures per device type; a device it does not know is
held to the CPU's. These are neuron's, each with its reason. `tests/test_device_type_tests.py`
checks that every declared dtype list is exactly the set of dtypes that run.
"""
import functools
import unittest

import torch
from torch.testing._internal.common_dtype import integral_types

DEVICE_TYPE = "neuron"

# op name -> (dtypes neuron runs beyond the CPU's list, why)
EXTRA_DTYPES = {
    "histc": (
        integral_types(),
        "integer inputs, as on CUDA: transformers' MoE layers count tokens per expert with an integer "
        "histc on every device but the CPU",
    ),
    "nn.functional.max_pool1d": (
        integral_types(),
        "off the CPU, PyTorch's composite runs it through max_pool2d_with_indices, whose kernel takes "
        "integers (as on MPS); the CPU has a float-only kernel of its own",
    ),
}

# (op name, test class, test name) -> why the test fails on neuron as it does on CUDA
EXPECTED_FAILURES = {
    ("_refs.where", "TestCommon", "test_python_ref_errors"): (
        "the reference raises torch._prims_common's device message, not the one the error input "
        "expects; PyTorch expects this failure on cuda and mps too (the CPU has no such input)"
    ),
}

@functools.cache
def declare_neuron_opinfo():
    """Adds neuron's entries to the OpInfo database; once per process."""
    from torch.testing._internal.common_methods_invocations import op_db, python_ref_db
    from torch.testing._internal.opinfo.core import DecorateInfo

    ops = {}
    for op in (*op_db, *python_ref_db):
        ops.setdefault(op.name, []).append(op)
    for name, (dtypes, _why) in EXTRA_DTYPES.items():
        for op in _named(ops, name):
            op.dtypesIf[DEVICE_TYPE] = set(op.dtypes) | set(dtypes)
    for (name, cls_name, test_name), _why in EXPECTED_FAILURES.items():
        for op in _named(ops, name):
            xfail = DecorateInfo(unittest.expectedFailure, cls_name, test_name, device_type=DEVICE_TYPE)
            op.decorators = (*op.decorators, xfail)


def _named(ops, name):
    if name not in ops:
        raise KeyError(f"torch_neuronx.testing: no OpInfo named {name!r} in torch {torch.__version__}")
    return ops[name]
