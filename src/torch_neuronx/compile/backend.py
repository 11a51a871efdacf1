"""`torch.compile(model, backend="neuron")`.

How a graph becomes a neuron program:
1. Dynamo captures the graph, with static shapes first and symbolic ones where it saw a dimension
   change (automatic dynamic shapes), or where the user asked (`dynamic=True`, `mark_dynamic`).
   A neuron program has static shapes, as on Trainium: a symbolic graph is traced once and
   specialized per concrete input signature at its first call with it (compile/per_shape.py), a static
   program each, without a new Dynamo trace. Varying lengths therefore never reach Dynamo's
   recompile limit; each program is compiled once per process, and cached on disk.
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

`mode="reduce-overhead"` replays each program from a NeuronGraph (compile/graphed.py).

Every compile, cache hit, recompile (with its reason) and graph break is counted:
`torch_neuronx.compile_stats()`; `TORCH_NEURONX_LOG=compile` prints a line per compile.
"""
from __future__ import annotations

import warnings

import torch

from . import cache, graphed, per_shape, stats

_warned_modes: set = set()


def _symbolic(x) -> bool:
    if isinstance(x, torch.SymInt):
        return True
    if isinstance(x, torch.Tensor):
        return any(isinstance(s, torch.SymInt) for s in (*x.shape, *x.stride()))
    return False


def _compile(gm, example_inputs, options, graph: bool):
    from torch._inductor.compile_fx import compile_fx

    return cache.compile_with_cache(gm, example_inputs, options,
                                    lambda: compile_fx(gm, example_inputs, config_patches=options or {}), graph=graph)


def neuron_backend(gm: torch.fx.GraphModule, example_inputs, mode: str | None = None, options: dict | None = None):
    """The Dynamo backend "neuron"."""
    from . import inductor

    if mode and mode not in ("default", "reduce-overhead") and mode not in _warned_modes:
        _warned_modes.add(mode)
        warnings.warn(f"neuron: torch.compile mode={mode!r} has no separate meaning on neuron (programs are "
                      "already one static launch sequence); compiling as mode='default'", stacklevel=2)
    inductor.register()
    if any(_symbolic(x) for x in example_inputs):
        stats.graph_received(gm)  # its programs are counted as each signature compiles
        program = per_shape.PerShape(gm, example_inputs, lambda g, inputs: _compile(g, inputs, options, graph=False))
    else:
        program = _compile(gm, example_inputs, options, graph=True)
    return graphed.Graphed(program) if mode == "reduce-overhead" else program


neuron_backend.__name__ = "neuron"
