"""Graph capture on neuron: torch.neuron.NeuronGraph, torch.neuron.graph, graph_pool_handle and
make_graphed_callables, with torch.cuda.graphs' API and rules.

A capture records what is queued on the capturing stream, from any thread, instead of running
it (neuronrt::Queue::begin_capture); a replay queues the whole recording as ONE task of the
current stream, so a loop of small ops costs one launch instead of one per op. While a stream
captures, memory allocated for it comes from the capture's private pool, and no block freed
meanwhile is handed out again while the graph lives (the recorded work keeps its addresses): the
tensors a capture creates are the graph's static outputs, which each replay overwrites.

Anything that waits for the capturing stream — `.item()`, printing a tensor, copying it to the
host, synchronize — raises "operation not permitted when stream is capturing" and invalidates
the capture, as on CUDA; the stream stays usable. What a replay cannot do differently from the
capture: inputs are the tensors the capture read (copy new values into them), and shapes are fixed.

Random ops draw fresh numbers at each replay, as on CUDA: a random op captured takes its own
generator from the neuron generator at capture (which advances as if the op had run), and each
replay continues that generator's sequence. So the first replay draws what the op would have
drawn at capture, the same seed before the capture gives the same replays, and replays neither
read nor advance the neuron generator (torch.neuron.manual_seed after the capture does not
change them; on CUDA, a replay advances the generator and follows a later manual_seed).
"""
from __future__ import annotations

import gc
import itertools
from typing import Optional

import torch

from . import _C

_pool_ids = itertools.count(1)


def graph_pool_handle() -> tuple:
    """A handle for `pool=`: graphs given the same handle may share memory (here each graph keeps
    its own private memory; the handle is accepted so CUDA code runs unchanged)."""
    return (0, next(_pool_ids))


def is_current_stream_capturing() -> bool:
    return bool(_C._is_current_stream_capturing())


class NeuronGraph:
    """A captured sequence of neuron work, replayed as one task (torch.cuda.CUDAGraph's API)."""

    def __init__(self, keep_graph: bool = False):
        self._graph = None
        self._pool = None

    def capture_begin(self, pool: Optional[tuple] = None, capture_error_mode: str = "global") -> None:
        if capture_error_mode not in ("global", "thread_local", "relaxed"):
            raise ValueError(f"neuron: capture_error_mode must be 'global', 'thread_local' or 'relaxed', not "
                             f"{capture_error_mode!r}")
        if self._graph is not None:
            raise RuntimeError("neuron: this NeuronGraph already holds a capture; reset() it first")
        if torch.neuron.current_stream() == torch.neuron.default_stream():
            raise RuntimeError("neuron: cannot capture on the default stream; capture on another stream "
                               "(torch.neuron.graph does so by default)")
        self._pool = pool if pool is not None else graph_pool_handle()
        _C._graph_capture_begin()

    def capture_end(self) -> None:
        self._graph = _C._graph_capture_end()

    def replay(self) -> None:
        if self._graph is None:
            raise RuntimeError("neuron: replay() of a NeuronGraph with no capture; capture it first")
        self._graph.replay()

    def reset(self) -> None:
        """Drops the capture and gives its memory back (after the replays queued so far)."""
        if self._graph is None:
            return
        graph, self._graph = self._graph, None
        torch.neuron.synchronize(graph.device)  # replays in flight still use the pool's memory
        graph.release()

    def pool(self) -> tuple:
        if self._pool is None:
            raise RuntimeError("neuron: pool() of a NeuronGraph that was never captured")
        return self._pool

    @property
    def num_tasks(self) -> int:
        """How many tasks the capture recorded (each op, kernel or copy is one)."""
        return self._graph.tasks if self._graph is not None else 0

    def __del__(self):
        # At interpreter shutdown the module's globals (even _C's functions) may already be None.
        try:
            if self._graph is not None and not is_current_stream_capturing():
                self.reset()
        except Exception:  # noqa: BLE001
            pass


class graph:
    """`with torch.neuron.graph(g): ...` captures the block into `g` (torch.cuda.graph's rules):
    the device is synchronized first, and the capture runs on a side stream unless `stream` is
    given. If the block raises, the capture ends without a graph and the block's error propagates.
    `_collect_garbage=False` skips the gc.collect() before the capture (which frees tensors held
    only by reference cycles, as torch.cuda.graph does): compile/graphed.py captures again whenever
    a static cache moves (each `generate` makes a new one), and a collection of a process holding
    a Hugging Face model took 110 ms, longer than the 32 decode steps the capture serves."""

    default_capture_stream: Optional[torch.Stream] = None

    def __init__(self, neuron_graph: NeuronGraph, pool: Optional[tuple] = None,
                 stream: Optional[torch.Stream] = None, capture_error_mode: str = "global", *,
                 _collect_garbage: bool = True):
        if stream is None:
            if graph.default_capture_stream is None:
                graph.default_capture_stream = torch.neuron.Stream()
            stream = graph.default_capture_stream
        self.neuron_graph, self.pool, self.capture_error_mode = neuron_graph, pool, capture_error_mode
        self.capture_stream, self.collect_garbage = stream, _collect_garbage
        self.stream_ctx = torch.neuron.stream(stream)

    def __enter__(self):
        torch.neuron.synchronize()
        if self.collect_garbage:
            gc.collect()
        self.stream_ctx.__enter__()
        try:
            self.neuron_graph.capture_begin(self.pool, capture_error_mode=self.capture_error_mode)
        except BaseException:
            self.stream_ctx.__exit__(None, None, None)
            raise

    def __exit__(self, exc_type, exc, tb):
        try:
            try:
                self.neuron_graph.capture_end()
            except RuntimeError:
                if exc_type is None:
                    raise
        finally:
            self.stream_ctx.__exit__(exc_type, exc, tb)
        return False


def make_graphed_callables(callables, sample_args, num_warmup_iters: int = 3, allow_unused_input: bool = False,
                           pool: Optional[tuple] = None):
    """Graphed versions of modules or functions (torch.cuda.make_graphed_callables): each call
    copies its tensor arguments into the captured ones and replays the forward graph; its backward
    replays the captured backward graph. Arguments must have the sample's shapes and dtypes."""
    just_one = not isinstance(callables, tuple)
    if just_one:
        callables, sample_args = (callables,), (sample_args,)
    if len(callables) != len(sample_args):
        raise ValueError("neuron: make_graphed_callables needs one tuple of sample arguments per callable")
    results = []
    for func, args in zip(callables, sample_args):
        args = args if isinstance(args, tuple) else (args,)
        if not all(isinstance(a, torch.Tensor) and a.device.type == "neuron" for a in args):
            raise TypeError("neuron: make_graphed_callables takes neuron tensors as sample arguments")
        if isinstance(func, torch.nn.Module) and (func._backward_hooks or func._forward_hooks or
                                                  func._forward_pre_hooks):
            raise RuntimeError("neuron: make_graphed_callables does not support modules with hooks")
        results.append(_graph_one(func, args, num_warmup_iters, allow_unused_input, pool))
    return results[0] if just_one else tuple(results)


def _graph_one(func, args, num_warmup_iters, allow_unused_input, pool):
    params = tuple(func.parameters()) if isinstance(func, torch.nn.Module) else ()
    static_inputs = args + params
    needs_grad = [t for t in static_inputs if t.requires_grad]

    def forward_and_grads():
        flat = torch.utils._pytree.tree_leaves(func(*args))
        differentiable = [o for o in flat if isinstance(o, torch.Tensor) and o.requires_grad]
        if differentiable and needs_grad:
            torch.autograd.grad(differentiable, needs_grad, grad_outputs=[torch.ones_like(o) for o in differentiable],
                                allow_unused=allow_unused_input)

    side = torch.neuron.Stream()
    side.wait_stream(torch.neuron.current_stream())
    with torch.neuron.stream(side):
        for _ in range(num_warmup_iters):  # the first call of each op runs and checks before capture
            forward_and_grads()
    torch.neuron.current_stream().wait_stream(side)

    fwd = NeuronGraph()
    with graph(fwd, pool=pool):
        outputs = func(*args)
    flat_out, spec = torch.utils._pytree.tree_flatten(outputs)
    differentiable = [o for o in flat_out if isinstance(o, torch.Tensor) and o.requires_grad]
    static_grad_outputs = [torch.empty_like(o) for o in differentiable]
    bwd = NeuronGraph()
    grads = ()
    if differentiable and needs_grad:
        with graph(bwd, pool=pool):
            grads = torch.autograd.grad(differentiable, needs_grad, grad_outputs=static_grad_outputs,
                                        allow_unused=allow_unused_input)
    grad_of = dict(zip((id(t) for t in needs_grad), grads))
    static_grad_inputs = [grad_of.get(id(t)) for t in static_inputs]
    out_is_tensor = [isinstance(o, torch.Tensor) for o in flat_out]

    class Graphed(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            for static, given in zip(static_inputs[:len(args)], inputs[:len(args)]):
                if static.data_ptr() != given.data_ptr():
                    static.copy_(given)
            fwd.replay()
            return tuple(o.detach() if t else o for o, t in zip(flat_out, out_is_tensor))

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, *grad_outputs):
            given = [g for o, g in zip(flat_out, grad_outputs) if isinstance(o, torch.Tensor) and o.requires_grad]
            for static, g in zip(static_grad_outputs, given):
                if g is None:
                    static.zero_()
                elif static.data_ptr() != g.data_ptr():
                    static.copy_(g)
            if static_grad_outputs:
                bwd.replay()
            return tuple(g.detach() if g is not None else None for g in static_grad_inputs)

    def graphed(*user_args):
        if len(user_args) != len(args):
            raise TypeError(f"neuron: the graphed callable takes {len(args)} tensor arguments, got {len(user_args)}")
        for given, sample in zip(user_args, args):
            if not isinstance(given, torch.Tensor) or given.shape != sample.shape or given.dtype != sample.dtype:
                raise RuntimeError("neuron: a graphed callable replays the shapes and dtypes it was captured with: "
                                   f"expected {tuple(sample.shape)} {sample.dtype}, got "
                                   f"{tuple(given.shape) if isinstance(given, torch.Tensor) else type(given)}")
        flat = Graphed.apply(*user_args, *params)
        return torch.utils._pytree.tree_unflatten(list(flat), spec)

    graphed._graphs = (fwd, bwd)  # they live as long as the callable
    if isinstance(func, torch.nn.Module):
        eager_forward = func.forward

        def forward(*user_args):
            return graphed(*user_args) if func.training == training_at_capture else eager_forward(*user_args)

        training_at_capture = func.training
        func.forward = forward
        func._neuron_graphs = graphed._graphs
        return func
    return graphed
