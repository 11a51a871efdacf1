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


_pending: dict = {}  # module name -> patches waiting for its import


class _AfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target_module=None):
        patches = _pending.pop(name, None)
        if patches is None:
            return None
        spec = importlib.util.find_spec(name)
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            for patch in patches:
                patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


def after_import(target: str, patch) -> None:
    """Runs patch(module) once `target` is imported (now, if it already is): heavy modules are
    patched when, and if, something imports them."""
    if target in sys.modules:
        patch(sys.modules[target])
        return
    if not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())
    _pending.setdefault(target, []).append(patch)


def device_test_naming() -> None:
    """torch.testing._internal.common_device_type names PrivateUse1 test classes "...PRIVATEUSE1"
    until a test class has run once; naming the base "neuron" up front makes
    instantiate_device_type_tests(..., only_for="neuron") create "...NEURON" classes."""

    def patch(module):
        module.PrivateUse1TestBase.device_type = "neuron"

    after_import("torch.testing._internal.common_device_type", patch)


def dynamo_static_neuron_shapes() -> None:
    """Dynamo's automatic dynamic shapes (torch._dynamo.variables.builder._automatic_dynamic) turn
    a dimension symbolic when a recompile sees it change. A neuron program has static shapes (each
    new shape is a new program, as on Trainium), so neuron tensors stay static unless the user asks
    for dynamic shapes (dynamic=True, mark_dynamic), which the neuron backend refuses clearly."""

    def patch(builder):
        original = builder._automatic_dynamic
        if getattr(original, "_neuron", False):
            return

        def automatic_dynamic(e, tx, source, static_shapes, *args, **kwargs):
            import torch._dynamo.config as config

            if config.assume_static_by_default and getattr(e, "device", None) is not None and e.device.type == "neuron":
                static_shapes = True
            return original(e, tx, source, static_shapes, *args, **kwargs)

        automatic_dynamic._neuron = True
        builder._automatic_dynamic = automatic_dynamic

    after_import("torch._dynamo.variables.builder", patch)


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


def inductor_cpu_like_neuron() -> None:
    """Inductor's scheduler asks `node.is_cpu()` (device.type == "cpu") to pick the fusion and
    loop-reindexing rules of its C++ code generator, which writes neuron's kernels too (the software
    NeuronCore's memory is host-addressable). Neuron nodes answer as CPU nodes do there. Applied
    only when Inductor is set up for neuron (torch_neuronx.compile.inductor)."""
    from torch._inductor import scheduler

    is_cpu = scheduler.BaseSchedulerNode.is_cpu
    if getattr(is_cpu, "_neuron", False):
        return

    def neuron_or_cpu(self) -> bool:
        device = self.get_device()
        return device is not None and device.type in ("cpu", "neuron")

    neuron_or_cpu._neuron = True
    scheduler.BaseSchedulerNode.is_cpu = neuron_or_cpu

    # torch._inductor.utils.get_current_backend names the code generator of the current device
    # and answers "triton" (config.cuda_backend) for devices it does not list; neuron's is the C++
    # one (config.cpu_backend). Each module that imported the function gets the wrapped one.
    import importlib

    from torch._inductor import utils

    original = utils.get_current_backend

    def current_backend(device_type=None):
        from torch._inductor.virtualized import V

        if not device_type:
            device_type = V.graph.get_current_device_or_throw().type
        return original("cpu" if device_type == "neuron" else device_type)

    for name in ("torch._inductor.utils", "torch._inductor.codegen.common", "torch._inductor.scheduler",
                 "torch._inductor.kernel.mm_common"):
        module = importlib.import_module(name)
        if getattr(module, "get_current_backend", None) is original:
            module.get_current_backend = current_backend


def inductor_neuron_compile_cache(compile_fx_module) -> None:
    """Inductor has one cache folder per process for every device's graphs (TORCHINDUCTOR_CACHE_DIR,
    read at each use); neuron programs have their own cache (torch_neuronx.compile.cache: versioned,
    verified, evicted whole). torch._inductor.compile_fx.compile_fx is the default backend's entry
    (torch.compile's Inductor wrapper and Dynamo's "inductor" backend import it at each call): a
    graph whose inputs are on neuron is compiled with the neuron cache, as the "neuron" backend's
    graphs are; any other graph goes through unchanged, with Inductor's own cache."""
    import functools

    original = compile_fx_module.compile_fx
    if getattr(original, "_neuron", False):
        return

    @functools.wraps(original)
    def compile_fx(model_, example_inputs_, *args, **kwargs):
        if not any(isinstance(x, torch.Tensor) and x.device.type == "neuron" for x in example_inputs_):
            return original(model_, example_inputs_, *args, **kwargs)
        from .compile import cache

        return cache.compile_with_cache(model_, example_inputs_, kwargs.get("config_patches"),
                                        lambda: original(model_, example_inputs_, *args, **kwargs))

    compile_fx._neuron = True
    compile_fx_module.compile_fx = compile_fx


def install() -> None:
    tensor_printing()
    device_test_naming()
    linear_cross_entropy_defaults()
    dynamo_static_neuron_shapes()
