"""`torch.compile(model, backend="neuron")`.

How a graph becomes a neuron program:
1. Dynamo captures the graph. Neuron tensors keep static shapes (each new shape is a new program,
   as on Trainium): automatic dynamic shapes are off for them, and `dynamic=True` (or
   `mark_dynamic`) is refused with an error that says what to do.
2. AOTAutograd splits forward and backward and functionalizes them (input mutations are applied
   back after the call).
3. Inductor lowers each graph; its C++ code generator writes the kernels for the software
   NeuronCore (compile/inductor.py) and its wrapper plans the buffers, reusing them by liveness.
4. Each call is one task on the current stream: the wrapper's kernel launches and extern kernels
   (matmul and the like are neuron ops) form a program that holds one queue position; the worker
   starts each kernel as it is launched (inductor.program_call): asynchronous, ordered with eager
   ops, never touching device memory from the host.
5. Compiled programs (kernels and graphs, forward and backward) are cached on disk under
   TORCH_NEURONX_CACHE_DIR, one verified entry per compile, keyed by the graph, input
   shapes/dtypes/strides, the compiler versions and flags, and the device profile
   (compile/cache.py); a second process compiling the same model starts warm.

Every compile, cache hit, recompile (with its reason) and graph break is counted:
`torch_neuronx.compile_stats()`; `TORCH_NEURONX_LOG=compile` prints a line per compile.
"""
from __future__ import annotations

import warnings

import torch

from . import cache

_warned_modes: set = set()


class NeuronCompileError(RuntimeError):
    """A graph the neuron backend cannot compile, with what to do instead."""


def _symbolic(x) -> bool:
    if isinstance(x, torch.SymInt):
        return True
    if isinstance(x, torch.Tensor):
        return any(isinstance(s, torch.SymInt) for s in (*x.shape, *x.stride()))
    return False


def _check_static(gm, example_inputs) -> None:
    if any(_symbolic(x) for x in example_inputs):
        raise NeuronCompileError(
            "neuron: torch.compile with dynamic shapes (dynamic=True, or torch._dynamo.mark_dynamic) is not "
            "supported: a neuron program has static shapes. Compile with dynamic=False (the default for neuron "
            "tensors): each new input shape compiles a new program, counted in torch_neuronx.compile_stats(). To "
            "bound the number of programs, pad inputs to a few fixed lengths (e.g. a static KV cache).")


def _devices(example_inputs) -> set:
    return {x.device.type for x in example_inputs if isinstance(x, torch.Tensor)}


def neuron_backend(gm: torch.fx.GraphModule, example_inputs, mode: str | None = None, options: dict | None = None):
    """The Dynamo backend "neuron"."""
    from torch._inductor.compile_fx import compile_fx

    from . import inductor

    if mode and mode != "default" and mode not in _warned_modes:
        _warned_modes.add(mode)
        warnings.warn(f"neuron: torch.compile mode={mode!r} has no separate meaning on neuron (there are no CUDA "
                      "graphs and programs are already one static launch sequence); compiling as mode='default'",
                      stacklevel=2)
    _check_static(gm, example_inputs)
    inductor.register()
    return cache.compile_with_cache(gm, example_inputs, options,
                                    lambda: compile_fx(gm, example_inputs, config_patches=options or {}))


neuron_backend.__name__ = "neuron"
