"""torch.compile(mode="reduce-overhead") with backend "neuron": a compiled program replayed from a
NeuronGraph (torch_neuronx/graphs.py), as CUDA's mode replays CUDA graphs.

Per input signature, the first call runs the program (its ops' first calls check themselves), the
second captures it — on parameters and static buffers (a static KV cache) in place, on copies of
its other tensors — and every call from then on copies its tensors into the graph's and replays:
the program's kernel launches and buffer allocations are recorded once, and a replay is one task. An input the program
mutates is copied back after the replay. Outputs are returned as copies, so a later replay never
changes a result already returned. Calls that need autograd (an input requires grad) and calls
made while a capture is in progress run the program as it is.
"""
from __future__ import annotations

import torch

from .per_shape import signature


def _static_address(t: torch.Tensor) -> bool:
    """Parameters and what Dynamo marked static (a static KV cache): the graph uses them in place."""
    return isinstance(t, torch.nn.Parameter) or hasattr(t, "_dynamo_static_input_type")


class _Captured:
    def __init__(self, program, args):
        # The graph's inputs: parameters and static buffers themselves, copies of the other tensors.
        self.inputs = [a.clone() if isinstance(a, torch.Tensor) and not _static_address(a) else a for a in args]
        versions = [a._version if isinstance(a, torch.Tensor) else None for a in self.inputs]
        self.graph = torch.neuron.NeuronGraph()
        with torch.neuron.graph(self.graph):
            self.outputs = program(*self.inputs)
        self.mutated = {i for i, a in enumerate(self.inputs)
                        if isinstance(a, torch.Tensor) and a._version != versions[i]}

    def run(self, args):
        moved = []
        for i, (static, given) in enumerate(zip(self.inputs, args)):
            if isinstance(static, torch.Tensor) and static.data_ptr() != given.data_ptr():
                static.copy_(given)
                moved.append(i)
        self.graph.replay()
        for i in moved:
            if i in self.mutated:
                args[i].copy_(self.inputs[i])
        return torch.utils._pytree.tree_map(lambda o: o.clone() if isinstance(o, torch.Tensor) else o, self.outputs)


class Graphed:
    """The callable the backend returns for mode="reduce-overhead"."""

    def __init__(self, program):
        self.program = program
        self.captured: dict = {}  # signature -> None (warmed up) or _Captured

    def __call__(self, *args):
        if (torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)) or \
                torch.neuron.is_current_stream_capturing():
            return self.program(*args)
        key = signature(args, value_only=())
        if key not in self.captured:
            self.captured[key] = None
            return self.program(*args)
        entry = self.captured[key]
        if entry is None:
            entry = self.captured[key] = _Captured(self.program, args)
        return entry.run(list(args))
