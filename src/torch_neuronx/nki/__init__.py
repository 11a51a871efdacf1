"""NKI on neuron: the Neuron Kernel Interface (Neuron SDK 2.33's `nki`, `nki.language`, `nki.isa`)
running on the software NeuronCore.

    import torch_neuronx.nki as nki
    import torch_neuronx.nki.language as nl
    import torch_neuronx.nki.isa as nisa

A kernel is traced once per signature (argument shapes and dtypes, the other arguments, the launch
grid, the device profile, strict mode) into a program of whole-tile steps, with every hardware rule
checked at the instruction that breaks it. Called with neuron tensors, the program runs as one
task on the current stream — asynchronous and ordered with eager ops — and the kernel returns
neuron tensors; called with NumPy arrays (or through `nki.simulate`) it runs on the host and
returns NumPy arrays. `nki.estimate` gives the kernel's time on Trainium from the per-instruction
cost model (_cost.py).
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import itertools
import math
import struct
import time
from typing import NamedTuple

import numpy as np
import torch
from torch._subclasses import fake_tensor as _fake_tensor

from .. import cost_model as _cost_model
from ..compile import stats as _stats
from . import _cost, _profile
from . import _trace as T
from ._errors import NkiTraceError, NkiValidationError
from ._tensor import HBM, SHARED_HBM, NkiTensor

__all__ = ["jit", "simulate", "estimate", "benchmark", "nki_op", "Spec", "NkiValidationError", "NkiTraceError",
           "language", "isa", "typing", "collectives", "dtype"]


def _strict() -> bool:
    from .. import _C

    return bool(_C._config_flag("TORCH_NEURONX_STRICT"))


class Spec(NamedTuple):
    """A tensor argument by its shape and dtype only: what a kernel is traced on (nki.estimate, and
    the eager kernel source, trace without data)."""
    shape: tuple
    dtype: torch.dtype


_TENSORS = (torch.Tensor, np.ndarray, Spec)


def _spec(a) -> Spec:
    """(shape, dtype) of a tensor argument; a symbolic size (a compiled graph's) specializes."""
    if isinstance(a, Spec):
        return a
    if isinstance(a, np.ndarray):
        try:
            dtype = torch.from_numpy(np.empty(0, dtype=a.dtype)).dtype
        except TypeError:
            raise TypeError(f"nki: NumPy dtype {a.dtype} has no torch dtype; pass float32, float16, int32, int8, "
                            f"uint8 or bool arrays") from None
    else:
        dtype = a.dtype
    return Spec(tuple(int(n) for n in a.shape), dtype)


def _value_key(a):
    """A non-tensor argument as a cache key. Floats are keyed by their bits: 0.0 == -0.0 and NaN != NaN
    as values, but a kernel traced with one must not serve the other (or never be found again)."""
    if isinstance(a, float):
        return ("f", struct.pack("<d", a))
    if isinstance(a, complex):
        return ("c", struct.pack("<dd", a.real, a.imag))
    if isinstance(a, tuple):
        return tuple((type(x).__name__, _value_key(x)) for x in a)
    if isinstance(a, language.NKIObject):  # a config dataclass (often unhashable): keyed by its fields
        key = (type(a).__qualname__, tuple((k, type(v).__name__, _value_key(v)) for k, v in _compared_fields(a)))
        try:
            hash(key)
            return key
        except TypeError:  # a field holds a dict or array: the config's own hash, if it defines one
            pass           # (rotational_topk's config hashes all but its dict of constant files)
        try:
            hash(a)
        except TypeError:
            raise TypeError(f"nki: a {type(a).__name__} kernel argument has unhashable fields and no __hash__ of "
                            f"its own; a traced kernel is cached by its arguments") from None
        return (type(a).__qualname__, "self", a)
    if isinstance(a, list):  # a list field of such a config (a kernel's own arguments may not be lists)
        return ("list", tuple(_value_key(x) for x in a))
    return a


def _compared_fields(a) -> list:
    """A config's fields as its own equality sees them: a dataclass's compare=True fields (a field it
    keeps out of ==, as rotational_topk's cache of constant arrays, stays out of the key), else vars."""
    if dataclasses.is_dataclass(a):
        return sorted((f.name, getattr(a, f.name)) for f in dataclasses.fields(a) if f.compare)
    return sorted(vars(a).items())


class _Traced:
    __slots__ = ("program", "trace", "outputs", "result", "written_args", "scratch")


class Kernel:
    """What `nki.jit` returns: call it, or launch an SPMD grid with `kernel[gx, gy](...)`."""

    def __init__(self, fn, grid=(1,), cache=None, launch=None):
        self.fn, self.grid = fn, grid
        self.launch = grid if launch is None else launch  # the grid as written: nl.nc places programs
        self._cache = {} if cache is None else cache
        functools.update_wrapper(self, fn)

    def __getitem__(self, grid):
        """`kernel[g0, g1, ...]`: each entry an int, `nl.nc(n)` or `nl.spmd_dim(...)` (its number of
        programs; which physical core runs a program changes no result on the software core)."""
        grid = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
        if not grid:
            raise ValueError("nki: a launch grid has at least one dimension")
        return Kernel(self.fn, tuple(language.grid_size(g) for g in grid), self._cache, grid)

    def __call__(self, *args, **kwargs):
        return _run(self, args, kwargs, "auto")

    # --- tracing --------------------------------------------------------------------------
    def _traced(self, args, kwargs, profile) -> tuple[_Traced, list]:
        tensors, key = [], [self.grid, profile.name, _strict()]
        for a in list(args) + [kwargs[k] for k in sorted(kwargs)]:
            if isinstance(a, _TENSORS):
                key.append(("t", *_spec(a)))
                tensors.append(a)
            elif isinstance(a, (list, dict, set)):
                raise TypeError(f"nki: kernel {self.fn.__name__} takes a {type(a).__name__} argument; kernel "
                                f"arguments must be hashable (pass a tuple)")
            else:
                key.append(("v", type(a).__name__, _value_key(a)))
        key.extend(sorted(kwargs))
        key = tuple(key)
        traced = self._cache.get(key)
        _stats.count_nki_call(traced is None)
        if traced is None:
            traced = self._cache[key] = self._trace(args, kwargs, profile)
        return traced, tensors

    def _check_annotations(self, args, kwargs):
        """Each tensor argument annotated `nt.tensor[shape, dtype]` is what it declares (nki.typing)."""
        try:
            bound = inspect.signature(self.fn).bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"nki: kernel {self.fn.__name__}: {e}") from None
        try:  # string annotations (a module under `from __future__ import annotations`) evaluated
            annotations = inspect.get_annotations(self.fn, eval_str=True)
        except Exception:  # one naming what the module lacks: the rest are not worth failing a kernel for
            annotations = self.fn.__annotations__
        for name, value in bound.arguments.items():
            ann = annotations.get(name)
            if isinstance(ann, typing.TensorType) and isinstance(value, _TENSORS):
                ann.check(name, *_spec(value))

    def _trace(self, args, kwargs, profile) -> _Traced:
        trace = T.Trace(profile, _strict())
        index = itertools.count()

        def symbolic(a):
            return trace.argument(*_spec(a), next(index)) if isinstance(a, _TENSORS) else a

        sym_args = [symbolic(a) for a in args]
        sym_kwargs = {k: symbolic(kwargs[k]) for k in sorted(kwargs)}
        self._check_annotations(args, kwargs)
        result = None
        with trace:
            trace.grid = self.grid
            phases = []
            for n, pid in enumerate(itertools.product(*(range(g) for g in self.grid))):
                trace.program_id, trace.shared_cursor, trace.phase = pid, 0, 0
                out = self.fn(*sym_args, **sym_kwargs)
                phases.append(trace.phase)
                if n == 0:
                    result = out
            if len(set(phases)) > 1:
                raise NkiValidationError(f"nki: core_barrier/sendrecv: the programs of {self.fn.__name__}'s launch "
                                         f"pass {phases} barriers and exchanges (by program): a core would wait "
                                         f"for one that never arrives")
        returned = result if isinstance(result, (tuple, list)) else (() if result is None else (result,))
        for r in returned:
            # An argument comes back as the caller's own tensor, written in place (nki-library's
            # kernels return the output buffer they were given); a returned nl.hbm tensor (program
            # 0's, under a grid) becomes an output as a shared_hbm one is.
            whole = (isinstance(r, NkiTensor) and r.offset == 0 and r.size == math.prod(r.storage.shape)
                     and r.is_contiguous())  # the whole tensor, perhaps reshaped
            if not (whole and r.buffer in (HBM, SHARED_HBM)):
                raise NkiValidationError(f"nki: kernel {self.fn.__name__} returns {r!r}; a kernel returns whole "
                                         f"HBM tensors (ones it allocated, or its arguments)")
            if r.storage.role[0] == "scratch":
                r.storage.role = ("out", len(trace.shared))
                trace.shared.append(r.storage)
        t = _Traced()
        t.trace = trace
        t.program = trace.build(self.fn.__name__)
        t.outputs = [(s.shape, s.dtype) for s in trace.hbm if s.role[0] == "out"]
        t.scratch = [(s.shape, s.dtype) for s in trace.hbm if s.role[0] == "scratch"]
        order = [s for s in trace.hbm if s.role[0] == "out"]
        t.result = (type(result) if isinstance(result, (tuple, list)) else None,
                    [("arg" if r.storage.role[0] == "arg" else "out",
                      r.storage.role[1] if r.storage.role[0] == "arg" else order.index(r.storage), tuple(r.shape))
                     for r in returned], result is None)
        written = {st.id for ins in trace.instrs for st, _, _ in ins.writes}
        t.written_args = [s.role[1] for s in trace.hbm if s.role[0] == "arg" and s.id in written]
        return t


def _pack(traced: _Traced, outs, args):
    kind, picks, none = traced.result
    if none:
        return None
    values = [outs[i] if where == "out" else args[i] for where, i, _ in picks]
    values = [v if tuple(v.shape) == shape else v.reshape(shape) for v, (_, _, shape) in zip(values, picks)]
    return kind(values) if kind is not None else values[0]


def _is_fake(t) -> bool:
    return isinstance(t, torch.Tensor) and (t.device.type == "meta" or _fake_tensor.is_fake(t))


def _classify(kernel, tensors, mode):
    numpy = [isinstance(t, np.ndarray) for t in tensors]
    if any(numpy) and not all(numpy):
        raise TypeError(f"nki: kernel {kernel.fn.__name__} was given both NumPy arrays and torch tensors; pass one "
                        f"kind")
    if all(numpy) and tensors:
        return "numpy"
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        raise RuntimeError(f"nki: kernel {kernel.fn.__name__} was given tensors on several devices "
                           f"({', '.join(sorted(map(str, devices)))}); an NKI kernel runs on one NeuronCore")
    device = next(iter(devices), None)
    if device is not None and device.type == "meta":
        return "neuron"  # shapes only
    if mode == "simulate":
        if device is not None and device.type != "cpu":
            raise RuntimeError(f"nki.simulate runs on host memory; kernel {kernel.fn.__name__} was given {device} "
                               f"tensors (call the kernel directly to run it on neuron)")
        return "host"
    if device is None or device.type != "neuron":
        where = device if device is not None else "no tensors"
        raise RuntimeError(f"nki: kernel {kernel.fn.__name__} runs on neuron tensors or NumPy arrays, got {where}; "
                           f"move the tensors with .to('neuron'), or run it on the host with nki.simulate(kernel)")
    return "neuron"


def _run(kernel: Kernel, args, kwargs, mode, profile=None):
    tensors = [a for a in list(args) + [kwargs[k] for k in sorted(kwargs)]
               if isinstance(a, (torch.Tensor, np.ndarray))]
    where = _classify(kernel, tensors, mode)
    traced, tensors = kernel._traced(args, kwargs, _profile.current(profile))
    _cost_model.record_nki(kernel.fn.__name__, traced.trace.instrs)
    for i in traced.written_args:
        t = tensors[i]
        contiguous = t.is_contiguous() if isinstance(t, torch.Tensor) else t.flags["C_CONTIGUOUS"]
        if not contiguous:
            raise RuntimeError(f"nki: kernel {kernel.fn.__name__} writes argument {i} in place; pass it contiguous")
    if where == "neuron":
        device = tensors[0].device if tensors else torch.device("neuron", torch.neuron.current_device())
        outs = [torch.empty(s, dtype=d, device=device) for s, d in traced.outputs]
        if not any(_is_fake(t) for t in tensors):  # a fake call (torch.compile, nki_op's fake) only needs shapes
            hbm = [t.contiguous() for t in tensors]
            scratch = [torch.empty(s, dtype=d, device=device) for s, d in traced.scratch]
            traced.program.launch(hbm + outs + scratch)
        return _pack(traced, outs, tensors)
    host = [torch.from_numpy(np.ascontiguousarray(t)) if isinstance(t, np.ndarray) else t.contiguous()
            for t in tensors]
    outs = [torch.empty(s, dtype=d) for s, d in traced.outputs]
    scratch = [torch.empty(s, dtype=d) for s, d in traced.scratch]
    traced.program.run(host + outs + scratch)
    if where == "numpy":
        outs = [o.numpy() for o in outs]
    return _pack(traced, outs, tensors)


def jit(fn=None, **options):
    """Makes `fn` an NKI kernel. 2.33's `compile_config=`/`specialization_config=` tune AWS's compiler
    and change no result here. `mode="trace"` (or "auto"), which nki-library's own kernels still pass,
    is what nki.jit does anyway; the old API's other modes and `platform_target=` are refused, as
    NKI 0.3+ refuses them."""
    if options.get("mode") in ("trace", "auto"):
        options.pop("mode")
    for gone in ("mode", "platform_target"):
        if gone in options:
            raise TypeError(f"nki.jit: {gone}= was removed in NKI 0.3; call the kernel with neuron tensors, or "
                            f"simulate it with nki.simulate(kernel)(...)")
    if fn is None:
        return lambda f: jit(f, **options)
    return fn if isinstance(fn, Kernel) else Kernel(fn)


def simulate(kernel):
    """Runs the kernel on the host: NumPy arrays in and out (or CPU torch tensors in and out)."""
    kernel = jit(kernel)
    return functools.wraps(kernel.fn)(lambda *args, **kwargs: _run(kernel, args, kwargs, "simulate"))


def estimate(kernel, profile: str | None = None, lnc: int = 1):
    """`nki.estimate(kernel)(*args)`: the kernel's cost-model estimate (_cost.Estimate) on the current
    device profile, or `profile="trn2"` / `"trn3"`. Nothing runs; arguments give shapes and dtypes.
    The programs of a launch grid run on the physical cores `nl.nc` names (concurrently, each with
    its own engines and DMA queues); a grid without `nl.nc` shares its programs out over `lnc`
    cores (2: a logical core of two, nki-library's `kernel[2]`) or runs them on one."""
    kernel = jit(kernel)
    if lnc not in _profile.LNC_DEGREES:
        raise ValueError(f"nki.estimate: lnc={lnc!r}; a logical NeuronCore groups 1 or 2 physical cores")

    def run(*args, **kwargs):
        traced, _ = kernel._traced(args, kwargs, _profile.current(profile))
        return _cost.estimate(traced.trace.instrs, traced.trace.profile,
                              lambda pid: language.core_of(kernel.launch, pid, lnc))

    return run


class BenchmarkResult:
    def __init__(self, estimate, measured_ms, where):
        self.estimate, self.measured_ms, self.where = estimate, measured_ms, where

    def __str__(self):
        return (f"{self.estimate}\nmeasured on the software NeuronCore ({self.where}): {self.measured_ms:.3f} ms "
                f"per call (host execution, not a hardware figure)")


def benchmark(kernel=None, *, warmup: int = 2, iters: int = 10, profile: str | None = None):
    """`nki.benchmark(kernel)(*args)` runs the kernel `warmup + iters` times and returns (and prints)
    the cost model's estimate of the profile's hardware, beside the time the software NeuronCore
    took."""
    if kernel is None:
        return lambda k: benchmark(k, warmup=warmup, iters=iters, profile=profile)
    kernel = jit(kernel)

    def run(*args, **kwargs):
        tensors = [a for a in args if isinstance(a, (torch.Tensor, np.ndarray))]
        where = _classify(kernel, tensors, "auto" if any(isinstance(t, torch.Tensor) for t in tensors) else
                          "simulate")
        sync = torch.neuron.synchronize if where == "neuron" else (lambda: None)
        for _ in range(warmup):
            kernel(*args, **kwargs)
        sync()
        start = time.perf_counter()
        for _ in range(iters):
            kernel(*args, **kwargs)
        sync()
        measured = (time.perf_counter() - start) / max(iters, 1) * 1e3
        result = BenchmarkResult(estimate(kernel, profile)(*args, **kwargs), measured, where)
        print(result)
        return result

    return run


def nki_op(name: str, mutates_args=(), device_types=None, schema=None):
    """Makes a function that calls NKI kernels a PyTorch custom op (torch.library.custom_op): one
    node under torch.compile, with autograd by `.register_autograd(backward, setup_context=...)`.
    Its fake implementation is the function itself on fake tensors, where each kernel is traced
    on shapes and launches nothing: no meta function to write."""

    def wrap(fn):
        op = torch.library.custom_op(name, mutates_args=mutates_args, device_types=device_types, schema=schema)(fn)
        op.register_fake(fn)
        return op

    return wrap


from . import collectives, isa, language, typing  # noqa: E402,F401
from ._dtypes import dtype  # noqa: E402,F401  (nki.dtype: the type of nl.float32 and friends)
