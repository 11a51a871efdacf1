"""torch.compile(mode="reduce-overhead") with backend "neuron", and with the default backend on
neuron tensors (torch_neuronx/_patches.py): a compiled program replayed from a NeuronGraph
(torch_neuronx/graphs.py), as CUDA's mode replays CUDA graphs.

Per input signature, the first call runs the program (its ops' first calls check themselves), the
second captures it — on parameters and static buffers (a static KV cache) in place, on copies of
its other tensors with their sizes and strides — and every call from then on copies its tensors
into the graph's and replays: the program's kernel launches and buffer allocations are recorded
once, and a replay is one task. Each copied input is copied back after the replay (a program may
write one from a kernel without a trace in its version counter).
Outputs are returned as copies, so a later replay never changes a result already returned. A
parameter or static buffer that moved since the capture (`p.data = ...`, `p.set_(...)`) makes the
next call capture again: the graph reads and writes the addresses it recorded.

What a replay cannot reproduce runs the program as it is, counted per reason in
torch_neuronx.compile_stats()["graph_fallbacks"] and warned once per reason (CUDA's mode skips
such graphs too): a CPU tensor argument (a 0-dim CPU tensor, or a Python float Dynamo passes as
one) is read when a kernel is launched, so a replay would repeat the capture's value; an input
whose elements overlap cannot be copied into; inputs that share memory, and outputs that are views
of an input or of one another, would lose that sharing through the copies. Calls that need
autograd (an input requires grad) and calls made while a capture is in progress also run the
program as it is.
"""
from __future__ import annotations

import torch

from . import stats
from .per_shape import signature

CPU_ARGUMENT = ("a CPU tensor argument (a 0-dim CPU tensor or a Python float) is read when the program is "
                "launched, so a replay would repeat the value of the capture")
OVERLAPPING_INPUT = "an input's elements overlap in memory (an expanded tensor), so it cannot be copied into the graph"
ALIASED_INPUTS = "two inputs share memory, which the graph's copies of them would not"
ALIASED_OUTPUTS = "an output is a view of an input or of another output, which a copy of it would not stay"


def _static_address(t: torch.Tensor) -> bool:
    """Parameters and what Dynamo marked static (a static KV cache): the graph uses them in place."""
    return isinstance(t, torch.nn.Parameter) or hasattr(t, "_dynamo_static_input_type")


def _memory(t: torch.Tensor):
    """The allocation a tensor lives in (None for one without memory, which shares nothing)."""
    storage = t.untyped_storage()
    return (t.device, storage.data_ptr()) if storage.nbytes() else None


def _shares_memory(tensors) -> bool:
    seen = [m for m in map(_memory, tensors) if m is not None]
    return len(set(seen)) != len(seen)


def _signature_fallback(args) -> str | None:
    """Why no graph can serve this input signature (sizes, strides, dtypes and devices decide it)."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if any(t.device.type != "neuron" for t in tensors):
        return CPU_ARGUMENT
    if any(torch._debug_has_internal_overlap(t) == 1 for t in tensors):  # 1: certainly (2: cannot tell)
        return OVERLAPPING_INPUT
    return None


def _outputs_fallback(args, outputs) -> str | None:
    """Why no graph can serve the program's outputs (found at the signature's first call)."""
    outs = [o for o in torch.utils._pytree.tree_leaves(outputs) if isinstance(o, torch.Tensor)]
    inputs = {m for m in (_memory(a) for a in args if isinstance(a, torch.Tensor)) if m is not None}
    if _shares_memory(outs) or any(_memory(o) in inputs for o in outs):
        return ALIASED_OUTPUTS
    return None


def _same_layout_copy(t: torch.Tensor) -> torch.Tensor:
    """A copy with t's sizes and strides: the program was compiled for that layout (clone() makes
    a strided view contiguous)."""
    copy = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device)
    return copy.copy_(t)


def _write_back(given: torch.Tensor, own: torch.Tensor, counted: bool) -> None:
    """Copies the graph's input back into the caller's. A compiled program may write an input from a
    kernel (Inductor keeps input mutations in the program) without bumping its version counter, so
    which inputs a replay wrote is unknown: each is copied back, which changes nothing in one the
    program only read, and bumps the version only of one whose version the program bumped."""
    if given.is_inference():  # no version counter; writable only in inference mode
        with torch.inference_mode():
            given.copy_(own)
    elif counted:
        given.copy_(own)
    else:
        with torch.autograd._unsafe_preserve_version_counter(given):
            given.copy_(own)


class _Captured:
    def __init__(self, program, args):
        # The graph's inputs: parameters and static buffers themselves, copies of the other tensors.
        self.inputs = [_same_layout_copy(a) if isinstance(a, torch.Tensor) and not _static_address(a) else a
                       for a in args]
        self.static = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and _static_address(a)]
        self.addresses = [args[i].data_ptr() for i in self.static]
        self.copies = [i for i, a in enumerate(self.inputs) if isinstance(a, torch.Tensor) and i not in self.static]
        versions = [a._version if isinstance(a, torch.Tensor) else None for a in self.inputs]
        self.graph = torch.neuron.NeuronGraph()
        with torch.neuron.graph(self.graph, _collect_garbage=False):
            self.outputs = program(*self.inputs)
        self.mutated = {i for i, a in enumerate(self.inputs)
                        if isinstance(a, torch.Tensor) and a._version != versions[i]}

    def holds(self, args) -> bool:
        """Whether the parameters and static buffers are still where the graph reads them."""
        return all(args[i].data_ptr() == address for i, address in zip(self.static, self.addresses))

    def run(self, args):
        copied = [i for i in self.copies if self.inputs[i].data_ptr() != args[i].data_ptr()]
        for i in copied:
            self.inputs[i].copy_(args[i])
        self.graph.replay()
        for i in copied:
            _write_back(args[i], self.inputs[i], counted=i in self.mutated)
        return torch.utils._pytree.tree_map(lambda o: o.clone() if isinstance(o, torch.Tensor) else o, self.outputs)

    def release(self) -> None:
        self.graph.reset()


class Graphed:
    """The callable both backends return for mode="reduce-overhead"."""

    def __init__(self, program):
        self.program = program
        # signature -> None (warmed up), _Captured, or why the signature runs without a graph
        self.captured: dict = {}

    def __call__(self, *args):
        if (torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)) or \
                torch.neuron.is_current_stream_capturing():
            return self.program(*args)
        key = signature(args, value_only=())
        if key not in self.captured:
            outputs = self.program(*args)
            self.captured[key] = _signature_fallback(args) or _outputs_fallback(args, outputs)
            return outputs
        entry = self.captured[key]
        reason = entry if isinstance(entry, str) else \
            ALIASED_INPUTS if _shares_memory(a for a in args if isinstance(a, torch.Tensor)) else None
        if reason is not None:
            stats.graph_fallback(reason)
            return self.program(*args)
        if entry is not None and not entry.holds(args):
            entry.release()
            stats.graph_recaptured()
            entry = None
        if entry is None:
            entry = self.captured[key] = _Captured(self.program, args)
        return entry.run(list(args))
