"""Trainium's time for PyTorch code, op by op, from rooflines of the device profile.

`torch_neuronx.estimate(fn, *args, profile="trn2", **kwargs)` runs `fn` (on neuron, CPU, meta or
fake tensors: only shapes and dtypes are read, so a model far larger than this host can be
estimated on the meta device) and prices every ATen op it dispatches on one logical NeuronCore:

- matmuls, convolutions and attention (their FLOPs by PyTorch's flop counter, or the attention
  formula) on the Tensor Engine at its peak for the dtype;
- transcendental elementwise ops on the Scalar engine and all other elementwise ops, reductions
  and copies on the Vector engine, at one element per lane (128 lanes) per engine cycle;
- the bytes the op reads and writes at the logical core's share of HBM bandwidth;
- a fixed cost per kernel: its launch and its DMA descriptor's start-up (so the HBM bandwidth an
  op achieves grows with its transfer size: `achievable_hbm_bytes_per_s`). A run of consecutive
  pointwise ops is one kernel, as the device's compilers (neuronx-cc, Inductor) fuse it: one launch,
  each op's engine time and bytes;
- a collective (torch.distributed's functional collectives) by the collectives model of
  cost_constants.py: latency per algorithm step and bus bytes per link, by where its ranks sit.

An op takes max(compute, memory) + the fixed cost; what bounds it is the largest of the three.
Scaled dot-product attention is priced as the kernel the device picks (neuron's fused kernel when
it takes the inputs: no sequence x sequence score matrix in time or memory), even on the meta
device, where PyTorch would run its math path. Every constant beyond the rooflines is in
cost_constants.py with its source.
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
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from . import _C, cost_constants
from .nki import _profile


@dataclass(frozen=True)
class Roofline:
    """One chip's figures, AWS's. The engines' clocks are the NKI profile's (nki/_profile.py)
    unless given (`clocks`: the Vector and Scalar engines' Hz, for a profile NKI does not run)."""
    name: str
    tensor_flops: dict  # dtype -> dense FLOP/s per chip
    hbm_bytes_per_s: float
    clocks: tuple = ()

    @property
    def cores(self) -> int:
        """Physical cores per chip."""
        return cost_constants.PHYSICAL_CORES_PER_CHIP[self.name]

    @property
    def fixed_us(self) -> float:
        """An op's fixed cost: its kernel launch and its DMA descriptor (cost_constants.py)."""
        return cost_constants.value(self.name, "kernel_launch_us") + cost_constants.value(self.name, "dma_fixed_us")

    @property
    def vector_hz(self) -> float:
        return self.clocks[0] if self.clocks else _profile.PROFILES[self.name].vector_hz

    @property
    def scalar_hz(self) -> float:
        return self.clocks[1] if self.clocks else _profile.PROFILES[self.name].scalar_hz


PHYSICAL_CORES = 8  # per trn2 and trn3 chip
# AWS's dense FLOP/s per chip (shared/docs/trainium.md): what the PE array's rates below come to.
# Trn3's 2,517 TFLOPS are MXFP8/MXFP4 (microscaled formats), which no op here computes.
AWS_CHIP_FLOPS = {
    "trn2": {torch.bfloat16: 667e12, torch.float32: 181e12, torch.float8_e4m3fn: 1299e12},
    "trn3": {torch.bfloat16: 671e12, torch.float32: 183e12},
}


def _pe_array_flops(profile: str) -> dict:
    """Dense FLOP/s per chip by dtype, from the one Tensor Engine model NKI kernels are priced by
    (nki/_profile.py, nc_matmul's cycles): 128 x 128 MACs per cycle on every physical core for
    bf16/fp16, twice that for fp8 (the double_row mode AWS's FP8 figure assumes), a quarter for
    fp32 (four passes). They come to 94-97% of AWS's chip figures for bf16 and fp8 and 87% for fp32,
    so an aten matmul and an NKI kernel doing the same work are priced alike."""
    pe = _profile.PROFILES[profile].tensor_peak_flops * PHYSICAL_CORES
    return {torch.bfloat16: pe, torch.float16: pe, torch.float32: pe / 4,
            torch.float8_e4m3fn: 2 * pe, torch.float8_e5m2: 2 * pe}


ROOFLINES = {
    "trn2": Roofline("trn2", _pe_array_flops("trn2"), hbm_bytes_per_s=2.9e12),
    "trn3": Roofline("trn3", _pe_array_flops("trn3"), hbm_bytes_per_s=4.9e12),
}
# Trn1 checks the model against AWS's published Trn1 figures and is never a device: 2 NeuronCore-v2
# per chip, the Vector engine at 1.12 GHz and the Scalar at 1.4 GHz (cost_constants.TRN1_PAGE; NKI's
# Trainium/Inferentia2 architecture guide). A chip's two cores have no logical grouping: LNC=1.
VALIDATION_ROOFLINES = {
    "trn1": Roofline("trn1", {torch.bfloat16: 190e12, torch.float16: 190e12, torch.float32: 47.5e12},
                     hbm_bytes_per_s=820e9, clocks=(1.12e9, 1.4e9)),
}
LANES = 128


def roofline(profile: str) -> Roofline:
    return ROOFLINES.get(profile) or VALIDATION_ROOFLINES[profile]

_ZERO_COST = {"view", "_unsafe_view", "reshape", "t", "transpose", "permute", "expand", "as_strided", "slice", "select",
              "detach", "alias", "unsqueeze", "squeeze", "split", "split_with_sizes", "unbind", "chunk", "narrow",
              "_reshape_alias", "lift_fresh", "empty", "empty_like", "empty_strided", "new_empty", "set_",
              "resize_", "_to_copy_meta", "lift", "view_as", "expand_as", "flatten", "unflatten", "movedim",
              "diagonal", "real", "imag", "_fused_sdp_choice", "sym_size", "sym_stride", "sym_numel", "dim",
              "is_same_size", "_local_scalar_dense", "item", "_assert_async", "_assert_tensor_metadata"}
_SCALAR = {"exp", "exp2", "expm1", "log", "log1p", "log2", "tanh", "sigmoid", "gelu", "silu", "erf", "erfc", "sin",
           "cos", "rsqrt", "sqrt", "reciprocal", "pow", "softplus", "mish", "_softmax", "_safe_softmax", "_log_softmax",
           "softmax", "log_softmax", "gelu_backward", "silu_backward", "sigmoid_backward", "tanh_backward",
           "_softmax_backward_data", "_log_softmax_backward_data", "atan", "logit", "elu", "selu", "celu",
           "softplus_backward", "polar"}
_ATTENTION = {"_scaled_dot_product_fused_attention_overrideable", "_scaled_dot_product_flash_attention_for_cpu",
              "_scaled_dot_product_fused_attention_overrideable_backward",
              "_scaled_dot_product_flash_attention_for_cpu_backward"}


_ZERO_COST |= {"wait_tensor", "_unsafe_index_put_meta", "resolve_conj", "resolve_neg", "_conj", "_neg_view",
               "conj", "is_nonzero", "view_as_complex", "view_as_real", "_has_compatible_shallow_copy_type",
               "_nested_tensor_from_mask_left_aligned", "contiguous_meta", "_efficientzerotensor", "zero_meta"}
# Ops priced by their elements on the Vector engine that are neither pointwise nor reductions by
# their ATen tags: copies, gathers, scatters, fills, shape-changing copies. An op in none of the
# classes is listed in Estimate.unformulated: its price is a guess until it has a formula.
_DATA_MOVEMENT = {"copy", "_to_copy", "clone", "contiguous", "cat", "stack", "index", "index_select", "gather",
                  "scatter", "scatter_add", "scatter_reduce", "index_put", "_index_put_impl", "index_add", "index_copy",
                  "index_fill", "masked_fill", "masked_scatter", "masked_select", "embedding",
                  "embedding_dense_backward", "fill", "zero", "zeros", "zeros_like", "ones", "ones_like", "full",
                  "full_like", "new_zeros", "new_ones", "new_full", "arange", "linspace", "scalar_tensor", "tril",
                  "triu", "repeat", "repeat_interleave", "constant_pad_nd", "pad", "flip", "roll", "sort", "argsort",
                  "topk", "cumsum", "cumprod", "one_hot", "nonzero", "unique", "bincount", "histc", "_unsafe_index",
                  "_unsafe_index_put", "slice_scatter", "select_scatter", "diagonal_scatter", "as_strided_scatter",
                  "select_backward", "slice_backward", "index_select_backward", "expand_copy", "permute_copy",
                  "view_copy", "transpose_copy", "unsqueeze_copy", "squeeze_copy", "t_copy", "alias_copy",
                  "_unsafe_view_copy", "lift_fresh_copy", "bernoulli", "uniform", "normal", "rand", "randn",
                  "randint", "randperm", "empty_permuted", "new_empty_strided", "_pdist_forward", "tensor_split",
                  "split_copy", "unbind_copy", "masked_fill_", "where", "_masked_scale", "native_dropout",
                  "native_dropout_backward", "_local_scalar_dense", "searchsorted", "bucketize", "argmax", "argmin",
                  "max", "min", "all", "any", "unfold", "im2col", "col2im", "narrow_copy", "cross_entropy_loss",
                  "nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward", "nll_loss2d_backward",
                  "native_layer_norm", "native_layer_norm_backward", "native_group_norm",
                  "native_group_norm_backward", "native_batch_norm", "native_batch_norm_backward",
                  "_native_batch_norm_legit", "_native_batch_norm_legit_no_training", "_fused_rms_norm",
                  "_fused_rms_norm_backward", "rms_norm", "_weight_norm_interface", "std", "var", "var_mean",
                  "std_mean", "linalg_vector_norm", "norm", "cummax", "cummin", "logcumsumexp", "_cdist_forward",
                  "upsample_nearest1d", "upsample_nearest2d", "upsample_bilinear2d", "avg_pool2d", "max_pool2d",
                  "max_pool2d_with_indices", "adaptive_avg_pool2d", "adaptive_avg_pool1d", "_adaptive_avg_pool2d",
                  "glu", "glu_backward", "_prelu_kernel", "hardtanh_backward", "threshold_backward",
                  "leaky_relu_backward", "elu_backward", "gelu_backward", "mse_loss", "mse_loss_backward",
                  "floor_divide"}
# Contractions with no formula in PyTorch's flop counter: (a, b, out) -> FLOPs.
_GROUPED = {"_grouped_mm", "_scaled_grouped_mm", "linalg_solve_triangular"}

_IN_PLACE_WRITES = {"index_copy_", "index_put_", "_index_put_impl_", "scatter_", "index_fill_"}
_PRICED = ("aten", "_c10d_functional", "prims")
_COLLECTIVES = {"all_reduce": "all_reduce", "all_reduce_coalesced": "all_reduce",
                "all_gather_into_tensor": "all_gather", "all_gather_into_tensor_coalesced": "all_gather",
                "reduce_scatter_tensor": "reduce_scatter", "reduce_scatter_tensor_coalesced": "reduce_scatter",
                "all_to_all_single": "all_to_all", "broadcast": "all_gather",
                # c10d's ops (torch.distributed's eager API), as a profiler names their host op
                "allreduce": "all_reduce", "allreduce_coalesced": "all_reduce", "allgather": "all_gather",
                "_allgather_base": "all_gather", "allgather_into_tensor_coalesced": "all_gather",
                "reduce_scatter": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
                "alltoall_base": "all_to_all",
                "alltoall": "all_to_all", "reduce": "all_reduce", "gather": "all_gather", "scatter": "all_gather"}
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
    launches: int = 1  # 0: fused into the pointwise kernel the op before it opened


@dataclass
class Estimate:
    profile: str
    lnc: int
    ops: list = field(default_factory=list)
    unformulated: set = field(default_factory=set)  # ops priced by a guess (see _DATA_MOVEMENT)

    @property
    def total_us(self) -> float:
        return sum(o.us for o in self.ops)

    def parts(self) -> dict:
        """The step's µs by what bounds it: `compute` and `memory` (the work, which tensor
        parallelism divides), `attention` (the fused attention kernel bound by its FLOPs: tensor
        parallelism divides it only down to one query head per core), `kv` (attention bound by
        reading the KV cache: divided only down to one KV head per core, since beyond that the
        heads are replicated), `collective`, and `fixed` (each kernel's launch and DMA descriptor,
        which it does not divide), with `ops`, the number of kernels paying the fixed cost."""
        out = {"compute": 0.0, "memory": 0.0, "attention": 0.0, "kv": 0.0, "collective": 0.0, "fixed": 0.0,
               "ops": 0}
        launch = roofline(self.profile).fixed_us
        for o in self.ops:
            fixed = launch * o.launches
            out["ops"] += o.launches
            out["fixed"] += min(o.us, fixed)
            work = max(o.us - fixed, 0.0)
            attention = o.name.split("::")[-1] in _ATTENTION
            if o.engine == "collective":
                key = "collective"
            elif o.bound == "compute":
                key = "attention" if attention else "compute"
            else:
                key = "kv" if attention else "memory"
            out[key] += work
        return out

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


def _argument(func, args, kwargs, name, default=None):
    """An argument of `func`'s call by its schema name, positional or keyword."""
    for i, a in enumerate(func._schema.arguments):
        if a.name == name:
            return args[i] if i < len(args) else kwargs.get(name, default)
    return default


def _attention_flops(func, args, kwargs) -> float:
    """A fused kernel's work: QK^T and PV, half of it skipped under a causal mask of a square
    problem (the kernel never computes the masked blocks); the backward is 2.5x the forward."""
    q, k = _argument(func, args, kwargs, "query"), _argument(func, args, kwargs, "key")
    b, h, lq, d = q.shape
    lk = k.shape[-2]
    forward = 4.0 * b * h * lq * lk * d
    if _argument(func, args, kwargs, "is_causal", False) and lq == lk:
        forward /= 2
    return forward * 2.5 if "backward" in func.overloadpacket.__name__ else forward


def _grouped_mm_flops(a, b, out) -> float:
    """torch._grouped_mm (MoE experts): a 2-D x 2-D call splits the shared K among the groups, any
    other multiplies each output element over a's last dimension."""
    if a.dim() == 2 and b.dim() == 2:
        return 2.0 * a.shape[0] * a.shape[1] * b.shape[1]
    return 2.0 * out.numel() * a.shape[-1]


def _flops(func, args, kwargs, out) -> float:
    packet = func.overloadpacket
    if packet in flop_registry:
        return float(flop_registry[packet](*args, **kwargs, out_val=out))
    if packet.__name__ in _ATTENTION:
        return _attention_flops(func, args, kwargs)
    if packet.__name__ == "linalg_solve_triangular":  # substitution: n^2 multiply-adds per right-hand column
        a, b = args[0], args[1]
        return float(b.numel() * a.shape[-1])
    if packet.__name__ in _GROUPED:
        return _grouped_mm_flops(args[0], args[1], out)
    return 0.0


def has_formula(func) -> bool:
    """Whether the cost model prices `func` (an OpOverload) by a formula of its real work: FLOPs,
    elements of a pointwise op, reduction or copy, or nothing (a view)."""
    name = func.overloadpacket.__name__
    bare = name.rstrip("_")
    return (func.overloadpacket in flop_registry or name in _ATTENTION or bare in _GROUPED
            or bare in _ZERO_COST or name in _ZERO_COST or bare in _SCALAR or bare in _DATA_MOVEMENT
            or func.namespace in ("_c10d_functional", "c10d")
            or torch.Tag.pointwise in func.tags or torch.Tag.reduction in func.tags)


class _DeviceAttention(TorchFunctionMode):
    """SDPA on the meta device as neuron runs it: there the call takes the fused kernel (the "overrideable"
    backend) whenever its checks pass, while on the meta device PyTorch would take its math path and
    materialise the score matrix. The device's own choice (`_fused_sdp_choice` on zero-stride
    stand-ins of the inputs, no memory) decides; then the fused op runs on the inputs' device."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.scaled_dot_product_attention:
            fused = self._fused(*args, **kwargs)
            if fused is not None:
                return fused
        return func(*args, **kwargs)

    @staticmethod
    def _fused(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if query.device.type != "meta" or any(t.dim() != 4 for t in (query, key, value)):
            return None

        def stand_in(t):
            if t is None:
                return None
            one = torch.empty(t.shape[-1], dtype=t.dtype, device="neuron")
            return one.as_strided(t.shape, (0,) * (t.dim() - 1) + (1,))

        try:
            choice = torch.ops.aten._fused_sdp_choice(stand_in(query), stand_in(key), stand_in(value),
                                                      stand_in(attn_mask), dropout_p, is_causal, scale=scale,
                                                      enable_gqa=enable_gqa)
        except RuntimeError:
            return None
        if choice != int(torch.nn.attention.SDPBackend.OVERRIDEABLE):
            return None
        if attn_mask is not None and attn_mask.dtype == torch.bool:  # as SDPA converts it: a where
            attn_mask = torch.where(attn_mask, 0.0, float("-inf")).to(query.dtype)
        return torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
            query, key, value, attn_mask, dropout_p, is_causal, False, scale=scale)[0]


class _Recorder(TorchDispatchMode):
    def __init__(self, roof: Roofline, lnc: int, ranks: int):
        super().__init__()
        self.roof, self.lnc, self.ranks = roof, lnc, ranks
        self.ops: list[OpCost] = []
        self.unformulated: set = set()
        self.pointwise_run = False  # the last priced op was pointwise: the next pointwise one fuses into it

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.namespace not in _PRICED:  # a custom op: its NKI kernels price themselves (record_nki)
            return out
        name = func.overloadpacket.__name__.rstrip("_")
        if name not in _ZERO_COST and func.overloadpacket.__name__ not in _ZERO_COST:
            if not has_formula(func):
                self.unformulated.add(str(func.overloadpacket).replace(".", "::", 1))
            pointwise = torch.Tag.pointwise in func.tags or name == "_to_copy"
            self.ops.append(self._cost(func, name, args, kwargs, out, launch=not (pointwise and self.pointwise_run)))
            self.pointwise_run = pointwise
        return out

    def _cost(self, func, name, args, kwargs, out, launch: bool = True) -> OpCost:
        roof = self.roof
        tensors_in = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        tensors_out = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        if func.namespace == "_c10d_functional":
            return _collective(roof.name, self.lnc, str(func.overloadpacket).replace(".", "::", 1), name,
                               tensors_in, tensors_out, _group_size(args, self.ranks))
        if name == "embedding":  # a gather: it reads the rows it returns, not the whole table
            tensors_in = tensors_in[1:]
        if name in ("_grouped_mm", "_scaled_grouped_mm") and tensors_in[0].dim() == 2 and tensors_in[1].dim() == 3:
            # MoE experts: M routed rows reach at most M of the G stacked experts, and an expert no row
            # reaches is never read (a decode token reads its top-k experts, not all G)
            a, b = tensors_in[0], tensors_in[1]
            tensors_in = [a, b.narrow(0, 0, min(b.shape[0], a.shape[0])), *tensors_in[2:]]
        if func.overloadpacket.__name__ in _IN_PLACE_WRITES:  # a KV-cache write: the rows written, not the cache
            tensors_in, tensors_out = tensors_in[1:], tensors_in[-1:]
        flops = _flops(func, args, kwargs, out)
        return _priced(roof, self.lnc, str(func.overloadpacket).replace(".", "::", 1), tensors_in, tensors_out, flops,
                       "scalar" if name in _SCALAR else "vector", launch)


def _priced(roof: Roofline, lnc: int, name: str, tensors_in: list, tensors_out: list, flops: float,
            engine: str, launch: bool = True) -> OpCost:
    """An op's roofline: compute (FLOPs on the Tensor Engine, or elements on `engine`) against
    its bytes at the core's share of HBM bandwidth, plus the fixed cost unless it is fused into
    the kernel before it (`launch` False)."""
    share = lnc / roof.cores
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
    fixed = roof.fixed_us * 1e-6 if launch else 0.0
    bound = max((compute, "compute"), (memory, "memory"), (fixed, "overhead"))[1]
    return OpCost(name, [tuple(t.shape) for t in tensors_in], str(dtype), flops, nbytes, engine, bound,
                  (max(compute, memory) + fixed) * 1e6, int(launch))


def _group_size(args, default: int) -> int:
    """The ranks of a functional collective's group: by its name where torch.distributed knows it."""
    name = next((a for a in args if isinstance(a, str) and a not in ("sum", "avg", "max", "min", "product")), None)
    try:
        from torch.distributed.distributed_c10d import _resolve_process_group

        return _resolve_process_group(name).size()
    except Exception:  # not initialised, or a name only the trace knew: the caller's default
        return default


def _collective(profile: str, lnc: int, label: str, name: str, tensors_in: list, tensors_out: list,
                ranks: int) -> OpCost:
    """A collective by the collectives model (cost_constants.collective_seconds): its buffer is the
    largest tensor (list) it touches, all-reduce's input or all-gather's output."""
    kind = _COLLECTIVES.get(name.lstrip("_").rstrip("_"), _COLLECTIVES.get(name.rstrip("_"), "all_reduce"))
    sizes = [t.numel() * t.element_size() for t in tensors_in + tensors_out]
    nbytes = max([sum(t.numel() * t.element_size() for t in tensors_in), *sizes] if kind != "all_gather"
                 else [sum(t.numel() * t.element_size() for t in tensors_out), *sizes])
    dtype = (tensors_in or tensors_out or [torch.empty(0)])[0].dtype
    seconds, bound = cost_constants.collective_seconds(kind, nbytes, ranks, profile, lnc)
    fixed = roofline(profile).fixed_us  # a collective is a kernel too: its launch and descriptors
    return OpCost(label, [tuple(t.shape) for t in tensors_in], str(dtype), 0.0, nbytes, "collective",
                  bound if seconds * 1e6 > fixed else "overhead", seconds * 1e6 + fixed)


def estimate(fn, *args, profile: str = "trn2", lnc: int | None = None, ranks: int = 2, **kwargs) -> Estimate:
    """Runs `fn(*args, **kwargs)` and prices each ATen op it runs on one logical NeuronCore of
    `profile` ("trn2" or "trn3"); LNC defaults to the runtime's (NEURON_LOGICAL_NC_CONFIG). A
    collective whose group torch.distributed cannot resolve is priced among `ranks` logical cores."""
    if profile not in ROOFLINES and profile not in VALIDATION_ROOFLINES:
        raise ValueError(f"torch_neuronx.estimate: unknown profile {profile!r}; known: {', '.join(ROOFLINES)} "
                         f"(and {', '.join(VALIDATION_ROOFLINES)}, to validate the model against AWS's figures)")
    if profile in VALIDATION_ROOFLINES:
        if lnc not in (None, 1):
            raise ValueError(f"torch_neuronx.estimate: {profile} has no logical NeuronCores: lnc must be 1, got {lnc}")
        lnc = 1
    if lnc is None:
        lnc = int(_C._config_text("NEURON_LOGICAL_NC_CONFIG") or 2)
    if lnc not in (1, 2):
        raise ValueError(f"torch_neuronx.estimate: lnc must be 1 or 2, got {lnc}")
    if ranks < 1:
        raise ValueError(f"torch_neuronx.estimate: ranks must be >= 1, got {ranks}")
    recorder = _Recorder(roofline(profile), lnc, ranks)
    _active.recorder = recorder
    try:
        with _DeviceAttention(), recorder:
            fn(*args, **kwargs)
    finally:
        _active.recorder = None
    return Estimate(profile, lnc, recorder.ops, recorder.unformulated)


def record_nki(kernel_name: str, instrs) -> None:
    """An NKI kernel called while `estimate` runs: priced by its own instruction-level model on one
    physical core of the estimate's profile (nki/_cost.py)."""
    recorder = getattr(_active, "recorder", None)
    if recorder is None:
        return
    from .nki import _cost

    est = _cost.estimate(instrs, _profile.current(recorder.roof.name))
    recorder.pointwise_run = False
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


def _traced_collective(name: str, dims: list, types: list, profile: str) -> OpCost:
    """A c10d collective from its recorded inputs: the process group is not in the trace, so its
    ranks are torch.distributed's world (2 when it is not initialised)."""
    def tensors(shape, kind):
        if isinstance(kind, list):
            return [t for d, k in zip(shape, kind) for t in tensors(d, k)]
        return [torch.empty(shape, dtype=_traced_dtype(kind), device="meta")] if kind else []

    per_arg = [tensors(d, k) for d, k in zip(dims, types)]
    largest = max(per_arg, key=lambda ts: sum(t.numel() * t.element_size() for t in ts), default=[])
    import torch.distributed as dist

    ranks = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 2
    lnc = int(_C._config_text("NEURON_LOGICAL_NC_CONFIG") or 2)
    bare = name.split("::", 1)[1]
    return _collective(profile, lnc, name, bare, largest, [], ranks)


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
            if name.startswith("c10d::"):  # torch.distributed's eager collective: its buffer among the world
                prices.append(tuple(_traced_collective(name, dims, types, p).us for p in profiles))
                continue
            op, args, kwargs = _traced_call(name, dims, types, values)
            prices.append(tuple(estimate(op, *args, profile=p, **kwargs).total_us for p in profiles))
        except Exception:
            prices.append(None)
    return prices
