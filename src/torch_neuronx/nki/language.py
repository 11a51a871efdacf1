"""`nki.language`: dtypes, memories, tile sizes, loops, tensor creation, and the high-level
operations, each lowered to the `nki.isa` instructions the NKI compiler would pick (loads and
stores to dma_copy, elementwise math to tensor_tensor / tensor_scalar / activation, reductions to
tensor_reduce, matmul to nc_matmul into PSUM). An op object such as `nl.add` or `nl.exp` is also
what an instruction's `op=` takes."""
from __future__ import annotations

import builtins
import math

from .. import _C
from . import _trace as T
from . import isa as nisa
from . import _api, _dtypes
from ._errors import NkiTraceError, fail
from ._tensor import HBM, PSUM, SBUF, SHARED_HBM, Index, NkiTensor, no_masks

# --- dtypes: torch dtypes where torch has them, so tensors' .dtype compares with them (_dtypes.py) -----
from ._dtypes import (bfloat16, bool_, float4_e2m1fn_x4, float8_e4m3, float8_e4m3fn,  # noqa: E402,F401
                      float8_e4m3fn_x4, float8_e5m2, float8_e5m2_x4, float8_e8m0fnu, float16, float32, int8, int16,
                      int32, tfloat32, uint8, uint16, uint32)


class NKIObject:
    """The base of a kernel's dataclasses and configuration objects (nki-library's configs subclass it).
    The tracer runs a kernel as Python, so such an object needs nothing from it; nki.jit keys its trace
    cache on an NKIObject argument's fields."""

    def __init__(self, **kwargs):
        for k, v in kwargs.items():
            setattr(self, k, v)

    def __init_subclass__(cls, **kwargs):
        # NKI's compiler makes a subclass's plain class attributes fields: nki-library declares
        # `@dataclass class P(nl.NKIObject): x = None` and constructs `P(x=1)`. Annotating them
        # before @dataclass runs gives it the same fields.
        super().__init_subclass__(**kwargs)
        notes = cls.__dict__.get("__annotations__", {})
        plain = {name: object for name, value in cls.__dict__.items()
                 if not name.startswith("_") and name not in notes
                 and not callable(value) and not isinstance(value, (property, classmethod, staticmethod))}
        if plain:  # in the order of definition (fields without a default come first, as they must)
            ordered = {name: notes[name] for name in notes if name not in cls.__dict__}
            ordered.update((name, plain.get(name, notes.get(name))) for name in cls.__dict__
                           if name in plain or name in notes)
            cls.__annotations__ = ordered


# --- memories ----------------------------------------------------------------------------------
sbuf, psum, hbm, shared_hbm = SBUF, PSUM, HBM, SHARED_HBM
private_hbm = HBM


def is_hbm(buffer): return buffer in (HBM, SHARED_HBM)  # noqa: E704
def is_on_chip(buffer): return buffer in (SBUF, PSUM)  # noqa: E704
def is_sbuf(buffer): return buffer == SBUF  # noqa: E704
def is_psum(buffer): return buffer == PSUM  # noqa: E704


def _core():
    """The device profile of the kernel being traced (nki.estimate may name another), else the runtime's."""
    trace = getattr(T._state, "trace", None)
    return trace.profile if trace is not None else nisa._profile.current()


class _TileSize:
    """nl.tile_size: every field of NKI 2.33's tile_size; those that differ by generation come from the
    device profile (SBUF per partition: Trn2 224 KiB, Trn3 256 KiB; the moving operand's free size)."""
    pmax = 128
    psum_bank_fmax = 512  # fp32 elements in one 2 KiB PSUM bank of a partition
    psum_fmax = psum_bank_fmax  # NKI's older name (deprecated in 0.4: it is per bank, not per partition)
    psum_bank_fmax_bytes = psum_fmax_bytes = 2048
    psum_num_banks = 8
    gemm_stationary_fmax = 128
    bn_stats_fmax = 512
    psum_min_align = 2048
    sbuf_min_align = 64

    @property
    def gemm_moving_fmax(self):
        return _core().moving_fmax

    @property
    def sbuf_fmax_bytes(self):
        return _core().sbuf_partition_bytes

    @property
    def sbuf_fmax(self):
        return self.sbuf_fmax_bytes // 4  # in fp32 elements

    @property
    def sbuf_size_bytes(self):
        return self.sbuf_fmax_bytes * self.pmax

    @property
    def total_available_sbuf_size(self):
        """Usable SBUF bytes per partition (deprecated in NKI 0.4 for sbuf_fmax_bytes; despite the name,
        per partition)."""
        return self.sbuf_fmax_bytes


tile_size = _TileSize()


# --- loops and SPMD ----------------------------------------------------------------------------
def affine_range(*args, **_):
    return range(*args)


sequential_range = static_range = affine_range


def dynamic_range(*args, **_):
    """A loop the hardware runs with a register as its trip count. Over ints, or registers holding
    values known at trace time (nisa.register_alloc(n)), it is the same loop unrolled (same result)."""
    args = tuple(a.known("nl.dynamic_range") if isinstance(a, nisa.VirtualRegister) else a for a in args)
    if not builtins.all(isinstance(a, int) and not isinstance(a, bool) for a in args):
        raise NkiTraceError("nl.dynamic_range over a runtime register (a value read on the device) is not supported "
                            "yet; its bounds must be ints or registers known when the kernel is traced")
    return range(*args)


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


class nc:  # noqa: N801  (NKI's name)
    """`nl.nc(n)`: a launch-grid dimension of n programs, one per physical core of a logical NeuronCore
    (`kernel[nl.nc(2)]`, or a factor of `nl.spmd_dim`). Programs on the software core run one after
    another over the same shared HBM, so where they run changes no result."""

    def __init__(self, n):
        if n not in nisa._profile.LNC_DEGREES:
            raise ValueError(f"nl.nc({n}): a logical NeuronCore groups 1 or 2 physical cores (LNC=1 or LNC=2)")
        self.n = n

    def __repr__(self):
        return f"nl.nc({self.n})"


class spmd_dim:  # noqa: N801  (NKI's name)
    """`nl.spmd_dim(*factors)`: one launch-grid dimension of size prod(factors), tiled by its factors
    row-major — `kernel[nl.spmd_dim(nl.nc(2), 2), 2]` puts programs 0-1 of the first axis on core 0 and
    2-3 on core 1; `nl.spmd_dim(2, nl.nc(2))` interleaves them. `nl.program_id` sees the flat index."""

    def __init__(self, *factors):
        if not factors:
            raise ValueError("nl.spmd_dim() needs at least one factor")
        for f in factors:
            if not isinstance(f, nc) and not (isinstance(f, int) and not isinstance(f, bool) and f >= 1):
                raise ValueError(f"nl.spmd_dim: a factor is a positive int or nl.nc(n), got {f!r}")
        if builtins.sum(isinstance(f, nc) for f in factors) > 1:
            raise ValueError("nl.spmd_dim: at most one nl.nc factor (one logical core per grid)")
        self.factors = factors

    @property
    def size(self):
        return math.prod(f.n if isinstance(f, nc) else f for f in self.factors)

    def __repr__(self):
        return f"nl.spmd_dim({', '.join(map(repr, self.factors))})"


def grid_size(g):
    """A launch-grid entry (int, nl.nc, nl.spmd_dim) as its number of programs; nki.jit's `kernel[...]`."""
    if isinstance(g, nc):
        return g.n
    if isinstance(g, spmd_dim):
        return g.size
    if not isinstance(g, int) or isinstance(g, bool) or g < 1:
        raise ValueError(f"nki: a launch grid entry is a positive int, nl.nc(n) or nl.spmd_dim(...), got {g!r}")
    return g


def core_of(launch, pid, lnc=1) -> int:
    """The physical core (of a logical NeuronCore) program `pid` of launch grid `launch` runs on: the
    index along its `nl.nc` factor; without one, programs go round-robin over `lnc` cores (how a
    plain `kernel[2]` shares out under LNC=2, as nki-library's kernels are launched)."""
    for entry, i in zip(launch, pid):
        if isinstance(entry, nc):
            return i
        if isinstance(entry, spmd_dim):
            for f in reversed(entry.factors):  # row-major: the last factor varies fastest
                n = f.n if isinstance(f, nc) else f
                if isinstance(f, nc):
                    return i % n
                i //= n
    flat = 0
    for entry, i in zip(launch, pid):
        flat = flat * grid_size(entry) + i
    return flat % lnc


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
    return T.active().allocate(buffer, shape, _dtypes.resolve(dtype), name)


def zeros(shape, dtype, buffer=SBUF, name=""):
    return full(shape, 0, dtype, buffer, name)


def ones(shape, dtype, buffer=SBUF, name=""):
    return full(shape, 1, dtype, buffer, name)


def full(shape, fill_value, dtype, buffer=SBUF, name=""):
    t = ndarray(shape, dtype, buffer, name)
    nisa.memset(t, fill_value)
    return t


def shared_identity_matrix(n, dtype=uint8, dst=None):
    """An [n, n] identity in SBUF (uint8 by default, as documented): a tile of ones kept where the
    affine value partition - column equals 0, zero elsewhere (nisa.affine_select on GpSimd)."""
    out = dst if dst is not None else ndarray((n, n), dtype, SBUF)
    ones_ = full((n, n), 1, out.dtype)
    nisa.affine_select(out, [[-1, n]], 1, ones_, 0, cmp_op=equal)
    return out


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


def logical_not(x, dtype=None):
    """1 where x is 0 (false), else 0: `x == 0` on the Vector Engine."""
    return equal(x, 0, dtype=dtype)


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
# Also an ALU op of tensor_scalar and tensor_scalar_reduce, as nki-library's rmsnorm_quant uses it
# (op0=nl.abs, operand0=0.0: |data|); the docs do not say what a nonzero operand does, so
# _isa_base._scalar_step takes operand 0 only.
abs = _Op("abs", act="abs", alu="abs")  # noqa: A001  (NKI's name)
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
tan = _Op("tan", act="tan")
trunc = _Op("trunc", act="trunc")
gelu_apprx_sigmoid = _Op("gelu_apprx_sigmoid", act="gelu_apprx_sigmoid")
gelu_apprx_sigmoid_dx = _Op("gelu_apprx_sigmoid_dx", act="gelu_apprx_sigmoid_dx")
erf_dx = _Op("erf_dx", act="erf_dx")


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
    """x @ y with x [M, K] (or [K, M] if transpose_x), y [K, N]; the fp32 result is a PSUM tile.

    Mixed operands follow NKI's type promotion (the wider float wins, as nl.add's docs state): an fp32
    operand with a bf16/fp16/fp8 one multiplies as fp32 × fp32, the narrow operand widened exactly by a
    tensor_copy first — the PE array itself takes fp32 only with fp32 (nisa.nc_matmul keeps that rule),
    and NKI's NumPy simulator computes such a product in fp32."""
    if not transpose_x:
        xt = copy(transpose(x))
    else:
        xt = x
    if xt.buffer != SBUF:
        xt = copy(xt)
    if y.buffer != SBUF:
        y = copy(y)
    if (xt.dtype == float32) != (y.dtype == float32):
        xt, y = (xt if xt.dtype == float32 else copy(xt, dtype=float32),
                 y if y.dtype == float32 else copy(y, dtype=float32))
    out = ndarray((xt.free_size, y.free_size), float32, PSUM)
    nisa.nc_matmul(out, xt, y)
    return out


def broadcast_to(x, shape, dtype=None):
    """x broadcast to `shape` by NumPy's rules (same rank; each dim equal or broadcast from 1), as a new
    SBUF tile; x itself when nothing changes. Along free dims an engine copy reads x with stride 0;
    across partitions engines cannot reach other partitions, so a DMA replicates them (what the
    compiler does for a partition broadcast)."""
    shape = tuple(int(n) for n in shape)
    if not isinstance(x, NkiTensor):
        fail("operand", f"nl.broadcast_to takes a tile, got {type(x).__name__}", "broadcast_to")
    if len(shape) != x.ndim or any(n != m and m != 1 for n, m in zip(shape, x.shape)):
        fail("shape", f"cannot broadcast {tuple(x.shape)} to {shape}: same rank, and each dim equal or 1",
             "broadcast_to")
    if shape == tuple(x.shape) and (dtype is None or dtype == x.dtype):
        return x
    strides = tuple(0 if m == 1 and n != 1 else s for n, m, s in zip(shape, x.shape, x.strides))
    view = NkiTensor(x.storage, shape, strides, x.offset, x.dtype, invalid=x.invalid)
    out = _tile_for(shape, dtype or x.dtype)
    if shape[0] != x.shape[0] or x.buffer != SBUF:
        if x.buffer != SBUF:  # DMA cannot read PSUM
            return broadcast_to(copy(x), shape, dtype)
        nisa.dma_copy(out, view)
    else:
        nisa.tensor_copy(out, view)
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


# The second round's names, lowered to nki.isa in _nl_extra.py (imported last: it reads this module).
from ._nl_extra import (  # noqa: E402,F401  (re-exported: nl.softmax, ...)
    all, device_print, dropout, expand_dims, invert, load_transpose2d, rand, random_seed, rms_norm, shared_constant,
    softmax, where,
)

# A documented name not implemented yet imports fine and raises "not supported yet" when used (_api.py).
__getattr__ = _api.module_getattr("nki.language", "nl")


# nl.copy is the tile-copy function and, as in NKI, also the identity activation (`op=nl.copy`).
copy.act, copy.alu, copy.reduce, copy.bitvec = _copy_op.act, None, None, False

# nl.dtype, the type of nl.float32 and friends; bound last, as `dtype` is also every function's parameter.
dtype = _dtypes.dtype
