"""Trainium's time for PyTorch code, op by op, from rooflines of the device profile.

`torch_neuronx.estimate(fn, *args, profile="trn2", **kwargs)` runs `fn` (on neuron, CPU, meta or
fake tensors: only shapes and dtypes are read, so a model far larger than this host can be
estimated on the meta device) and prices every ATen op it dispatches on one logical NeuronCore:

- matmuls, convolutions and attention (their FLOPs by PyTorch's flop counter, or the attention
  formula) on the Tensor Engine at its peak for the dtype;
- transcendental elementwise ops on the Scalar engine and all other elementwise ops, reductions
  and copies on the Vector engine, at one element per lane (128 lanes) per engine cycle;
- the bytes the op reads and writes at the logical core's share of HBM bandwidth; a collective
  (torch.distributed's functional collectives) twice its buffer at the core's share of NeuronLink;
- a fixed cost per op (an instruction stream's start and its DMA descriptors).

An op takes max(compute, memory) + the fixed cost; what bounds it is the largest of the three.
Views and metadata ops cost nothing. An NKI kernel (directly or inside an `nki_op`) is priced by
its own instruction-level model (`nki.estimate`), bound by its busiest engine. The profile figures
are AWS's (shared/docs/trainium.md); this is an analytic estimate of the hardware, never a
measurement of this host.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from . import _C
from .nki import _profile


@dataclass(frozen=True)
class Roofline:
    """One chip's figures, AWS's (per chip: 8 physical cores). The engines' clocks are the NKI
    profile's (nki/_profile.py)."""
    name: str
    tensor_flops: dict  # dtype -> dense FLOP/s per chip
    hbm_bytes_per_s: float
    link_bytes_per_s: float  # NeuronLink per chip
    fixed_us: float = 1.5

    @property
    def vector_hz(self) -> float:
        return _profile.PROFILES[self.name].vector_hz

    @property
    def scalar_hz(self) -> float:
        return _profile.PROFILES[self.name].scalar_hz


ROOFLINES = {
    "trn2": Roofline("trn2", {torch.bfloat16: 667e12, torch.float16: 667e12, torch.float32: 181e12,
                              torch.float8_e4m3fn: 1299e12, torch.float8_e5m2: 1299e12},
                     hbm_bytes_per_s=2.9e12, link_bytes_per_s=1.28e12),
    "trn3": Roofline("trn3", {torch.bfloat16: 671e12, torch.float16: 671e12, torch.float32: 183e12,
                              torch.float8_e4m3fn: 2517e12, torch.float8_e5m2: 2517e12},
                     hbm_bytes_per_s=4.9e12, link_bytes_per_s=2.56e12),
}
PHYSICAL_CORES = 8
LANES = 128

_ZERO_COST = {"view", "_unsafe_view", "reshape", "t", "transpose", "permute", "expand", "as_strided", "slice", "select",
              "detach", "alias", "unsqueeze", "squeeze", "split", "split_with_sizes", "unbind", "chunk", "narrow",
              "_reshape_alias", "lift_fresh", "empty", "empty_like", "empty_strided", "new_empty", "set_",
              "resize_", "_to_copy_meta", "lift", "view_as", "expand_as", "flatten", "unflatten", "movedim",
              "diagonal", "real", "imag", "_fused_sdp_choice", "sym_size", "sym_stride", "sym_numel", "dim",
              "is_same_size", "_local_scalar_dense", "item", "_assert_async", "_assert_tensor_metadata"}
_SCALAR = {"exp", "exp2", "expm1", "log", "log1p", "log2", "tanh", "sigmoid", "gelu", "silu", "erf", "erfc", "sin",
           "cos", "rsqrt", "sqrt", "reciprocal", "pow", "softplus", "mish", "_softmax", "_safe_softmax", "_log_softmax",
           "softmax", "log_softmax", "gelu_backward", "silu_backward", "sigmoid_backward", "tanh_backward",
           "_softmax_backward_data", "_log_softmax_backward_data", "atan", "logit", "elu", "selu", "celu"}
_ATTENTION = {"_scaled_dot_product_fused_attention_overrideable", "_scaled_dot_product_flash_attention_for_cpu",
              "_scaled_dot_product_fused_attention_overrideable_backward",
              "_scaled_dot_product_flash_attention_for_cpu_backward"}


_PRICED = ("aten", "_c10d_functional", "prims")
_active = threading.local()


@dataclass
class OpCost:
    name: str
    shapes: list
    dtype: str
    flops: float
    bytes: int
    engine: str
    bound: str
    us: float


@dataclass
class Estimate:
    profile: str
    lnc: int
    ops: list = field(default_factory=list)

    @property
    def total_us(self) -> float:
        return sum(o.us for o in self.ops)

    def sharded_us(self, degree: int) -> float:
        """The step on each of `degree` logical cores when every op is split across them (tensor
        parallel): an op's compute and memory time divide, its fixed cost does not. Collectives
        between the shards are the caller's (report.py adds them)."""
        fixed = ROOFLINES[self.profile].fixed_us
        return sum((max(o.us - fixed, 0.0)) / degree + min(o.us, fixed) for o in self.ops)

    def by_op(self) -> list:
        """(name, calls, µs, share) per op name, the costliest first."""
        rows = {}
        for o in self.ops:
            calls, us = rows.get(o.name, (0, 0.0))
            rows[o.name] = (calls + 1, us + o.us)
        total = self.total_us or 1.0
        return sorted(((n, c, us, us / total) for n, (c, us) in rows.items()), key=lambda r: -r[2])

    def __str__(self):
        lines = [f"estimate of {self.profile} (one logical NeuronCore, LNC={self.lnc}; analytic rooflines, not a "
                 f"measurement): {self.total_us:,.1f} us over {len(self.ops)} ops",
                 f"{'op':<48}{'calls':>7}{'us':>12}{'share':>8}"]
        for name, calls, us, share in self.by_op()[:20]:
            lines.append(f"{name:<48}{calls:>7}{us:>12,.1f}{share:>7.1%}")
        return "\n".join(lines)


def _attention_flops(name, args) -> float:
    q, k = args[0], args[1]
    if "backward" in name:
        q, k = args[1], args[2]
    b, h, lq, d = q.shape
    lk = k.shape[-2]
    forward = 4.0 * b * h * lq * lk * d
    return forward * 2.5 if "backward" in name else forward


def _flops(func, args, kwargs, out) -> float:
    packet = func.overloadpacket
    if packet in flop_registry:
        return float(flop_registry[packet](*args, **kwargs, out_val=out))
    if packet.__name__ in _ATTENTION:
        return _attention_flops(packet.__name__, args)
    return 0.0


class _Recorder(TorchDispatchMode):
    def __init__(self, roof: Roofline, lnc: int):
        super().__init__()
        self.roof, self.lnc = roof, lnc
        self.ops: list[OpCost] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.namespace not in _PRICED:  # a custom op: its NKI kernels price themselves (record_nki)
            return out
        name = func.overloadpacket.__name__.rstrip("_")
        if name not in _ZERO_COST and func.overloadpacket.__name__ not in _ZERO_COST:
            self.ops.append(self._cost(func, name, args, kwargs, out))
        return out

    def _cost(self, func, name, args, kwargs, out) -> OpCost:
        roof, share = self.roof, self.lnc / PHYSICAL_CORES
        tensors_in = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        tensors_out = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        if func.namespace == "_c10d_functional":  # a ring moves ~2x the buffer over the core's NeuronLink share
            nbytes = sum(t.numel() * t.element_size() for t in tensors_in + tensors_out)
            dtype = (tensors_in or tensors_out or [torch.empty(0)])[0].dtype
            link = 2 * sum(t.numel() * t.element_size() for t in tensors_out) / (roof.link_bytes_per_s * share)
            fixed = roof.fixed_us * 1e-6
            return OpCost(str(func.overloadpacket).replace(".", "::", 1), [tuple(t.shape) for t in tensors_in],
                          str(dtype), 0.0, nbytes, "collective", "memory" if link > fixed else "overhead",
                          (link + fixed) * 1e6)
        if name == "embedding":  # a gather: it reads the rows it returns, not the whole table
            tensors_in = tensors_in[1:]
        flops = _flops(func, args, kwargs, out)
        return _priced(roof, self.lnc, str(func.overloadpacket).replace(".", "::", 1), tensors_in, tensors_out, flops,
                       "scalar" if name in _SCALAR else "vector")


def _priced(roof: Roofline, lnc: int, name: str, tensors_in: list, tensors_out: list, flops: float,
            engine: str) -> OpCost:
    """An op's roofline: compute (FLOPs on the Tensor Engine, or elements on `engine`) against
    its bytes at the core's share of HBM bandwidth, plus the fixed cost."""
    share = lnc / PHYSICAL_CORES
    nbytes = sum(t.numel() * t.element_size() for t in tensors_in + tensors_out)
    dtype = (tensors_in or tensors_out or [torch.empty(0)])[0].dtype
    if flops:
        engine = "tensor"
        peak = roof.tensor_flops.get(dtype, roof.tensor_flops[torch.float32]) * share
        compute = flops / peak
    else:
        elements = max([t.numel() for t in tensors_in + tensors_out] or [0])
        hz = roof.scalar_hz if engine == "scalar" else roof.vector_hz
        compute = elements / (LANES * hz * lnc)
    memory = nbytes / (roof.hbm_bytes_per_s * share)
    fixed = roof.fixed_us * 1e-6
    bound = max((compute, "compute"), (memory, "memory"), (fixed, "overhead"))[1]
    return OpCost(name, [tuple(t.shape) for t in tensors_in], str(dtype), flops, nbytes, engine, bound,
                  (max(compute, memory) + fixed) * 1e6)


def estimate(fn, *args, profile: str = "trn2", lnc: int | None = None, **kwargs) -> Estimate:
    """Runs `fn(*args, **kwargs)` and prices each ATen op it runs on one logical NeuronCore of
    `profile` ("trn2" or "trn3"); LNC defaults to the runtime's (NEURON_LOGICAL_NC_CONFIG)."""
    if profile not in ROOFLINES:
        raise ValueError(f"torch_neuronx.estimate: unknown profile {profile!r}; known: {', '.join(ROOFLINES)}")
    if lnc is None:
        lnc = int(_C._config_text("NEURON_LOGICAL_NC_CONFIG") or 2)
    if lnc not in (1, 2):
        raise ValueError(f"torch_neuronx.estimate: lnc must be 1 or 2, got {lnc}")
    recorder = _Recorder(ROOFLINES[profile], lnc)
    _active.recorder = recorder
    try:
        with recorder:
            fn(*args, **kwargs)
    finally:
        _active.recorder = None
    return Estimate(profile, lnc, recorder.ops)


def record_nki(kernel_name: str, instrs) -> None:
    """An NKI kernel called while `estimate` runs: priced by its own instruction-level model on one
    physical core of the estimate's profile (nki/_cost.py)."""
    recorder = getattr(_active, "recorder", None)
    if recorder is None:
        return
    from .nki import _cost

    est = _cost.estimate(instrs, _profile.current(recorder.roof.name))
    engine = max(est.busy_us, key=est.busy_us.get)
    recorder.ops.append(OpCost(f"nki::{kernel_name}", [], "", float(est.flops), est.dma_bytes, "nki",
                               f"{engine} engine", est.latency_us))


def _traced_call(name: str, dims: list, types: list, values: list):
    """The op and its (args, kwargs) on the meta device, from what the device tracer noted."""
    namespace, _, qualified = name.partition("::")
    op_name, _, overload = qualified.partition(".")
    op = getattr(getattr(getattr(torch.ops, namespace), op_name), overload or "default")
    args, kwargs = [], {}
    for arg, shape, kind, value in zip(op._schema.arguments, dims, types, values):
        if isinstance(kind, list):  # a tensor list (aten::cat's): its tensors' shapes and dtypes
            value = [torch.empty(d, dtype=_traced_dtype(k), device="meta") for d, k in zip(shape, kind)]
        elif kind:
            value = torch.empty(shape, dtype=_traced_dtype(kind), device="meta")
        if arg.kwarg_only:
            if value is not None:
                kwargs[arg.name] = value
        else:
            args.append(value)
    while args and args[-1] is None:  # trailing optionals keep their defaults
        args.pop()
    return op, args, kwargs


# c10's dtype names (what the device tracer writes) that are not torch's attribute in lower case.
_DTYPE_NAMES = {"Float": "float32", "Double": "float64", "Half": "float16", "Long": "int64", "Int": "int32",
                "Short": "int16", "Char": "int8", "Byte": "uint8", "Float8_e4m3fn": "float8_e4m3fn",
                "Float8_e5m2": "float8_e5m2", "ComplexFloat": "complex64", "ComplexDouble": "complex128"}


def _nki_prices(serial: int, profiles) -> tuple | None:
    from .nki import _cost, _trace

    trace = _trace.PROGRAMS.get(serial)
    if trace is None:
        return None
    return tuple(_cost.estimate(trace.instrs, _profile.current(p)).latency_us for p in profiles)


def _traced_dtype(name: str) -> torch.dtype:
    return getattr(torch, _DTYPE_NAMES.get(name, name.lower()))


def price_traced(ops: list, profiles=("trn2", "trn3")) -> list:
    """The Trn2 and Trn3 estimates (µs) of the host ops behind the device spans of a torch.profiler
    trace, each described by the device tracer as (name, shapes, dtypes, values) in JSON, one entry
    per input. None where an op cannot be rebuilt on the meta device."""
    prices = []
    for name, dims, types, values in ops:
        dims, types, values = json.loads(dims), json.loads(types), json.loads(values)
        try:
            if name.startswith("nki::"):  # an NKI kernel's launch: its own instruction-level estimate
                prices.append(_nki_prices(values[0], profiles))
                continue
            if "::" not in name:  # a kernel of a compiled graph: a fused loop over its buffers
                tensors = [torch.empty(d, dtype=_traced_dtype(k), device="meta") for d, k in zip(dims, types)
                           if isinstance(k, str) and k]
                lnc = int(_C._config_text("NEURON_LOGICAL_NC_CONFIG") or 2)
                prices.append(tuple(_priced(ROOFLINES[p], lnc, name, tensors, [], 0.0, "vector").us for p in profiles))
                continue
            op, args, kwargs = _traced_call(name, dims, types, values)
            prices.append(tuple(estimate(op, *args, profile=p, **kwargs).total_us for p in profiles))
        except Exception:
            prices.append(None)
    return prices
