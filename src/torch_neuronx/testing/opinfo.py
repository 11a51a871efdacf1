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

_CPU_FAILS = "the CPU kernel neuron runs fails it too: PyTorch expects this failure on the CPU"

# (op name, test class, test name) -> why the test fails on neuron
EXPECTED_FAILURES = {
    ("_refs.where", "TestCommon", "test_python_ref_errors"): (
        "the reference raises torch._prims_common's device message, not the one the error input "
        "expects; PyTorch expects this failure on cuda and mps too (the CPU has no such input)"
    ),
    ("nn.functional.alpha_dropout", "TestCommon", "test_compare_cpu"): (
        "a random op: neuron's generator draws its own numbers, as every accelerator's does (CUDA skips "
        "test_compare_cpu)"
    ),
    ("linalg.eig", "TestCommon", "test_out"): _CPU_FAILS + " (its out= kernel restrides the eigenvectors)",
    ("nn.functional.avg_pool3d", "TestCommon", "test_out"): _CPU_FAILS,
    ("randn", "TestCommon", "test_out"): _CPU_FAILS + " (two calls draw different numbers)",
    ("native_group_norm", "TestCommon", "test_noncontiguous_samples"): _CPU_FAILS + " (it requires contiguous input)",
    ("_native_batch_norm_legit", "TestCommon", "test_out_warning"): _CPU_FAILS,
    ("nn.functional.logsigmoid", "TestCommon", "test_out_warning"): _CPU_FAILS,
}

_ONE_KERNEL = "neuron runs the CPU kernel, so it matches the CPU exactly where CUDA's kernel differs"

# (op name, test class, test name) -> why a failure PyTorch expects on every device is not neuron's
PASSES = {
    **{(f"special.{name}", "TestCommon", "test_compare_cpu"): _ONE_KERNEL for name in (
        "chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w",
        "hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p",
        "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
        "shifted_chebyshev_polynomial_w", "zeta")},
    ("_refs.special.zeta", "TestCommon", "test_compare_cpu"): _ONE_KERNEL,
    ("linalg.lu", "TestCommon", "test_compare_cpu"): _ONE_KERNEL,
    ("linalg.lu_factor", "TestCommon", "test_compare_cpu"): _ONE_KERNEL,
    ("linalg.lu_factor_ex", "TestCommon", "test_compare_cpu"): _ONE_KERNEL,
    ("native_batch_norm", "TestCommon", "test_compare_cpu"): _ONE_KERNEL,
    ("_native_batch_norm_legit", "TestCommon", "test_compare_cpu"): _ONE_KERNEL,
    ("mode", "TestCommon", "test_out_warning"): "neuron's out= tensors resize with PyTorch's warning",
    ("normal", "TestCommon", "test_out_warning"): "neuron's out= tensors resize with PyTorch's warning",
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
    for (name, cls_name, test_name), _why in PASSES.items():
        found = False
        for op in _named(ops, name):
            op.decorators, lifted = lift_expected_failures(op.decorators, cls_name, test_name)
            found = found or lifted
        if not found:
            raise KeyError(f"torch_neuronx.testing: {name} expects no failure of {cls_name}.{test_name} on neuron")


def lift_expected_failures(decorators, cls_name, test_name):
    """`decorators` with their expected failures of cls_name.test_name made inactive on neuron
    (OpInfo and ModuleInfo keep them as DecorateInfo); and whether there was one."""
    from torch.testing._internal.opinfo.core import DecorateInfo

    class NotOnNeuron(DecorateInfo):
        __slots__ = ()

        def is_active(self, cls, test, device_type, dtype, param_kwargs):
            return device_type != DEVICE_TYPE and super().is_active(cls, test, device_type, dtype, param_kwargs)

    out, lifted = [], False
    for d in decorators:
        if (isinstance(d, DecorateInfo) and unittest.expectedFailure in d.decorators and d.cls_name == cls_name
                and d.test_name == test_name and d.device_type in (None, DEVICE_TYPE)):
            d = NotOnNeuron(d.decorators, d.cls_name, d.test_name, device_type=d.device_type, dtypes=d.dtypes,
                            active_if=d.active_if)
            lifted = True
        out.append(d)
    return tuple(out), lifted


def _named(ops, name):
    if name not in ops:
        raise KeyError(f"torch_neuronx.testing: no OpInfo named {name!r} in torch {torch.__version__}")
    return ops[name]
