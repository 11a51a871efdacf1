"""`nki.language`: dtypes, memories, tile sizes, loops, tensor creation, and the high-level
operations, each lowered to the `nki.isa` instructions the NKI compiler would pick (loads and
stores to dma_copy, elementwise math to tensor_tensor / tensor_scalar / activation, reductions to
tensor_reduce, matmul to nc_matmul into PSUM). An op object such as `nl.add` or `nl.exp` is also
what an instruction's `op=` takes."""
from __future__ import annotations

import builtins
import math

import torch

from .. import _C
from . import _trace as T
from . import isa as nisa
from ._errors import NkiTraceError, fail
from ._tensor import HBM, PSUM, SBUF, SHARED_HBM, Index, NkiTensor, no_masks

# --- dtypes (torch dtypes, so tensors' .dtype compares with them) ------------------------------
float32, bfloat16, float16 = torch.float32, torch.bfloat16, torch.float16
float8_e4m3fn, float8_e5m2 = torch.float8_e4m3fn, torch.float8_e5m2
int32, int16, int8, uint8, uint16, uint32 = torch.int32, torch.int16, torch.int8, torch.uint8, torch.uint16, \
    torch.uint32
bool_ = torch.bool
tfloat32 = torch.float32  # fp32 storage; the PE array's 10-bit-mantissa rounding is not modelled

# --- memories ----------------------------------------------------------------------------------
sbuf, psum, hbm, shared_hbm = SBUF, PSUM, HBM, SHARED_HBM
private_hbm = HBM


def is_hbm(buffer): return buffer in (HBM, SHARED_HBM)  # noqa: E704
def is_on_chip(buffer): return buffer in (SBUF, PSUM)  # noqa: E704
def is_sbuf(buffer): return buffer == SBUF  # noqa: E704
def is_psum(buffer): return buffer == PSUM  # noqa: E704


class _TileSize:
    pmax = 128
    psum_fmax = psum_bank_fmax = 512
    psum_bank_fmax_bytes = 2048
    psum_num_banks = 8
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    bn_stats_fmax = 512
    psum_min_align = 2048
    sbuf_min_align = 64

    @property
    def sbuf_size_bytes(self):
        return nisa._profile.current().sbuf_partition_bytes * 128

    @property
    def sbuf_fmax_bytes(self):
        return nisa._profile.current().sbuf_partition_bytes


tile_size = _TileSize()


# --- loops and SPMD ----------------------------------------------------------------------------
def affine_range(*args, **_):
    return range(*args)


sequential_range = static_range = affine_range


def program_id(axis=0):
    grid = T.active().program_id
    if not 0 <= axis < len(grid):
        raise NkiTraceError(f"program_id({axis}): the launch grid has {len(grid)} dimension(s)")
    return grid[axis]


def num_programs(axes=None):
    grid = T.active().grid
    if axes is None:
        return math.prod(grid)
    if isinstance(axes, int):
        return grid[axes]
    return tuple(grid[a] for a in axes)


def program_ndim():
    return len(T.active().grid)


def arange(*args):
    r = range(*args)
    return Index(r.start, len(r), r.step)


class _MGrid:
    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        return tuple(Index(k.start or 0, len(range(k.start or 0, k.stop, k.step or 1)), k.step or 1, d, len(key))
                     for d, k in enumerate(key))


mgrid = _MGrid()


def ds(start, size):
    return slice(start, start + size)


# --- creation ----------------------------------------------------------------------------------
def ndarray(shape, dtype, buffer=SBUF, name="", address=None):
    if buffer not in (SBUF, PSUM, HBM, SHARED_HBM):
        raise NkiTraceError(f"buffer must be nl.sbuf, nl.psum, nl.hbm or nl.shared_hbm, not {buffer!r}")
    if not isinstance(dtype, torch.dtype) or dtype in (torch.float64, torch.complex64, torch.complex128, torch.int64):
        raise NkiTraceError(f"{dtype} is not an NKI dtype (NeuronCores compute fp32, bf16, fp16, fp8 and "
                            f"integers up to 32 bits)")
    return T.active().allocate(buffer, shape, dtype, name)


def zeros(shape, dtype, buffer=SBUF, name=""):
    return full(shape, 0, dtype, buffer, name)


def ones(shape, dtype, buffer=SBUF, name=""):
    return full(shape, 1, dtype, buffer, name)


def full(shape, fill_value, dtype, buffer=SBUF, name=""):
    t = ndarray(shape, dtype, buffer, name)
    nisa.memset(t, fill_value)
    return t


def zeros_like(x, dtype=None, buffer=None, name=""):
    return zeros(x.shape, dtype or x.dtype, buffer or x.buffer, name)


def empty_like(x, dtype=None, buffer=None, name=""):
    return ndarray(x.shape, dtype or x.dtype, buffer or x.buffer, name)


# --- op objects: callable as nl functions, and what nisa's op= takes ---------------------------
_ACT = {n: i for i, n in enumerate(_C._nki_activations)}
_ALU = {n: i for i, n in enumerate(_C._nki_binaries)}
_RED = {n: i for i, n in enumerate(_C._nki_reductions)}
_BITVEC = ("bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift")


class _Op:
    def __init__(self, name, act=None, alu=None):
        self.__name__ = name
        self.act = _ACT[act] if act else None
        self.alu = _ALU[alu] if alu else None
        self.reduce = _RED.get(name)
        self.bitvec = name in _BITVEC

    def __repr__(self):
        return f"nl.{self.__name__}"

    def __call__(self, x, y=None, dtype=None, **kw):
        if kw.get("mask") is not None:
            no_masks()
        if self.alu is not None and (y is not None or self.act is None):
            return _binary(self, x, y, dtype)
        return _unary(self, x, dtype)


def _tile_for(shape, dtype):
    return ndarray(shape, dtype, SBUF)


def _binary(op, x, y, dtype):
    tx, ty = isinstance(x, NkiTensor), isinstance(y, NkiTensor)
    if not (tx or ty):
        fail("operand", f"nl.{op.__name__} needs at least one tile")
    if tx and ty:
        big, small = (x, y) if x.free_size >= y.free_size else (y, x)
        if small.free_size == 1 and big.free_size > 1:  # a [P, 1] column broadcasts along the free dims
            out = _tile_for(big.shape, dtype or big.dtype)
            nisa.tensor_scalar(out, big, op, small, reverse0=small is x)
            return out
        out = _tile_for(x.shape, dtype or x.dtype)
        nisa.tensor_tensor(out, x, y, op)
        return out
    tile, scalar = (x, y) if tx else (y, x)
    out = _tile_for(tile.shape, dtype or tile.dtype)
    nisa.tensor_scalar(out, tile, op, scalar, reverse0=not tx)
    return out


def _unary(op, x, dtype):
    out = _tile_for(x.shape, dtype or x.dtype)
    nisa.activation(out, op, x)
    return out


add = _Op("add", alu="add")
subtract = _Op("subtract", alu="subtract")
multiply = _Op("multiply", alu="multiply")
divide = _Op("divide", alu="divide")
maximum = _Op("maximum", alu="maximum")
minimum = _Op("minimum", alu="minimum")
power = _Op("power", alu="power")
equal = _Op("equal", alu="equal")
not_equal = _Op("not_equal", alu="not_equal")
greater = _Op("greater", alu="greater")
greater_equal = _Op("greater_equal", alu="greater_equal")
less = _Op("less", alu="less")
less_equal = _Op("less_equal", alu="less_equal")
logical_and = _Op("logical_and", alu="logical_and")
logical_or = _Op("logical_or", alu="logical_or")
logical_xor = _Op("logical_xor", alu="logical_xor")
bitwise_and = _Op("bitwise_and", alu="bitwise_and")
bitwise_or = _Op("bitwise_or", alu="bitwise_or")
bitwise_xor = _Op("bitwise_xor", alu="bitwise_xor")
left_shift = _Op("left_shift", alu="left_shift")
right_shift = _Op("right_shift", alu="right_shift")
abs_max = _Op("abs_max", alu="abs_max")
abs_min = _Op("abs_min", alu="abs_min")
fmod = _Op("fmod", alu="fmod")

_copy_op = _Op("copy", act="copy")
exp = _Op("exp", act="exp")
log = _Op("log", act="log")
tanh = _Op("tanh", act="tanh")
sigmoid = _Op("sigmoid", act="sigmoid")
relu = _Op("relu", act="relu")
gelu = _Op("gelu", act="gelu")
gelu_apprx_tanh = _Op("gelu_apprx_tanh", act="gelu_apprx_tanh")
gelu_dx = _Op("gelu_dx", act="gelu_dx")
silu = _Op("silu", act="silu")
silu_dx = _Op("silu_dx", act="silu_dx")
sqrt = _Op("sqrt", act="sqrt")
rsqrt = _Op("rsqrt", act="rsqrt")
reciprocal = _Op("reciprocal", act="reciprocal")
abs = _Op("abs", act="abs")  # noqa: A001  (NKI's name)
negative = _Op("negative", act="negative")
square = _Op("square", act="square")
sin = _Op("sin", act="sin")
cos = _Op("cos", act="cos")
sign = _Op("sign", act="sign")
softplus = _Op("softplus", act="softplus")
erf = _Op("erf", act="erf")
arctan = _Op("arctan", act="arctan")
mish = _Op("mish", act="mish")
ceil = _Op("ceil", act="ceil")
floor = _Op("floor", act="floor")


# --- data movement -----------------------------------------------------------------------------
def load(src, dtype=None, mask=None, **_):
    if mask is not None:
        no_masks()
    if not isinstance(src, NkiTensor) or src.buffer not in (HBM, SHARED_HBM):
        fail("memory", f"nl.load reads an HBM tensor, got {src!r}", "load")
    shape = src.shape if src.ndim >= 2 else (src.shape[0] if src.ndim else 1, 1)
    out = _tile_for(shape, dtype or src.dtype)
    nisa.dma_copy(out, src)
    return out


def store(dst, value, mask=None, **_):
    if mask is not None:
        no_masks()
    if not isinstance(dst, NkiTensor) or dst.buffer not in (HBM, SHARED_HBM):
        fail("memory", f"nl.store writes an HBM tensor, got {dst!r}", "store")
    if value.buffer == PSUM:  # DMA cannot read PSUM: the compiler stages it through SBUF
        value = copy(value)
    nisa.dma_copy(dst, value)


def copy(x, dtype=None, out=None):
    """A copy of tile `x` (in SBUF, or into `out`); a PSUM tile is copied out of PSUM."""
    if not isinstance(x, NkiTensor):  # out[...] = number
        nisa.memset(out, x)
        return out
    out = out if out is not None else _tile_for(x.shape, dtype or x.dtype)
    nisa.tensor_copy(out, x)
    return out


def transpose(x, dtype=None):
    """[P, F] → [F, P] on the Tensor Engine; the result is a PSUM tile."""
    out = ndarray((x.free_size, x.shape[0]), dtype or x.dtype, PSUM)
    nisa.nc_transpose(out, x)
    return out


def matmul(x, y, transpose_x=False):
    """x @ y with x [M, K] (or [K, M] if transpose_x), y [K, N]; the fp32 result is a PSUM tile."""
    if not transpose_x:
        xt = copy(transpose(x))
    else:
        xt = x
    if xt.buffer != SBUF:
        xt = copy(xt)
    if y.buffer != SBUF:
        y = copy(y)
    out = ndarray((xt.free_size, y.free_size), float32, PSUM)
    nisa.nc_matmul(out, xt, y)
    return out


# --- reductions over free axes ------------------------------------------------------------------
def _reduction(op, x, axis, dtype, keepdims, negate=False):
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(a % x.ndim for a in axes)
    first = builtins.min(axes) if axes else x.ndim
    shape = x.shape[:first] + ((1,) * (x.ndim - first) if keepdims else ())
    if len(shape) < 2:
        shape = shape + (1,)
    out = _tile_for(shape, dtype or x.dtype)
    nisa.tensor_reduce(out, op, x, axis, negate=negate, keepdims=keepdims)
    return out


def sum(x, axis, dtype=None, keepdims=False, mask=None):  # noqa: A001
    return _reduction(add, x, axis, dtype, keepdims)


def max(x, axis, dtype=None, keepdims=False, mask=None):  # noqa: A001
    return _reduction(maximum, x, axis, dtype, keepdims)


def min(x, axis, dtype=None, keepdims=False, mask=None):  # noqa: A001
    return _reduction(minimum, x, axis, dtype, keepdims)


def prod(x, axis, dtype=None, keepdims=False, mask=None):
    return _reduction(multiply, x, axis, dtype, keepdims)


def mean(x, axis, dtype=None, keepdims=False, mask=None):
    s = _reduction(add, x, axis, float32, keepdims)
    count = x.free_size // s.free_size
    return multiply(s, 1.0 / count, dtype=dtype or x.dtype)


def __getattr__(name):
    if name == "float8_e4m3":
        raise AttributeError("nl.float8_e4m3 (the IEEE-style e4m3, max 240) has no torch dtype here; use "
                             "nl.float8_e4m3fn")
    raise AttributeError(f"module 'nki.language' has no attribute {name!r}")


# nl.copy is the tile-copy function and, as in NKI, also the identity activation (`op=nl.copy`).
copy.act, copy.alu, copy.reduce, copy.bitvec = _copy_op.act, None, None, False
