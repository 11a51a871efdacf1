"""nki.isa's shared parts: the config enums, the operand checks every instruction makes, and the
lowering helpers of instructions built from several steps (see isa.py)."""
from __future__ import annotations

import enum
import functools

import torch

from . import _profile
from . import _trace as T
from ._errors import check, fail
from ._tensor import PSUM, SBUF, NkiTensor

MIN_II = 64  # an instruction's minimum initiation interval, in engine cycles
GPSIMD_START = 150


class engine(enum.Enum):  # noqa: N801  (NKI's spelling)
    tensor = "tensor"
    vector = "vector"
    scalar = "scalar"
    gpsimd = "gpsimd"
    dma = "dma"
    sync = "sync"
    unknown = "unknown"


class reduce_cmd(enum.Enum):  # noqa: N801
    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3
    load_reduce = 4


@functools.total_ordering
class nc_version(enum.Enum):  # noqa: N801
    """The NeuronCore generations, ordered (kernels test `get_nc_version() <= nc_version.gen2`)."""
    gen2 = 2
    gen3 = 3
    gen4 = 4

    def __lt__(self, other):
        if not isinstance(other, nc_version):
            return NotImplemented
        return self.value < other.value


class dge_mode(enum.Enum):  # noqa: N801
    unknown = 0
    swdge = 1
    hwdge = 2
    none = 3


class oob_mode(enum.Enum):  # noqa: N801
    error = 0
    skip = 1


class matmul_perf_mode(enum.Enum):  # noqa: N801
    none = 0
    double_row = 1


def get_nc_version() -> nc_version:
    trace = getattr(T._state, "trace", None)
    profile = trace.profile if trace is not None else _profile.current()
    return nc_version[profile.nc_version]


_FLOATS = (torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2)
_LOW = (torch.bfloat16, torch.float16)


def _tensor(x, what, ins):
    if not isinstance(x, NkiTensor):
        fail("operand", f"{what} must be an NKI tensor, got {type(x).__name__}", ins)
    return x


def _on_chip(x, what, ins, allowed=(SBUF, PSUM)):
    _tensor(x, what, ins)
    check(x.buffer in allowed, "memory", f"{what} is in {x.buffer}; {ins} takes it from {' or '.join(allowed)}", ins)
    check(x.shape[0] <= 128, "partitions", f"{what} spans {x.shape[0]} partitions; the limit is 128", ins)
    return x


def _same_tile(a, b, what_a, what_b, ins):
    check(a.shape[0] == b.shape[0] and a.free_size == b.free_size, "shape",
          f"{what_a} {tuple(a.shape)} and {what_b} {tuple(b.shape)} must have the same partitions and elements per "
          f"partition", ins)


def _two_inputs(dst, a, b, names, ins):
    """The checks of an instruction reading two on-chip tiles a and b into dst (names: theirs, dst's
    first): all on chip, one tile shape, and not both read from PSUM (one PSUM port per engine)."""
    for t, w in zip((dst, a, b), names):
        _on_chip(t, w, ins)
    _same_tile(a, b, names[1], names[2], ins)
    _same_tile(dst, a, names[0], names[1], ins)
    check(not (a.buffer == PSUM and b.buffer == PSUM), "memory", f"{names[1]} and {names[2]} cannot both be in PSUM",
          ins)


def _start_value(x, what, parts, ins):
    """A recurrence's start, a number or a [parts, 1] tile: (the number, or 0.0, and the tile or None)."""
    if isinstance(x, NkiTensor):
        _on_chip(x, what, ins)
        check(x.shape[0] == parts and x.free_size == 1, "shape",
              f"{what} must be a number or a [{parts}, 1] tile, got {tuple(x.shape)}", ins)
        return 0.0, x
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return float(x), None
    fail("operand", f"{what} is a number or a [{parts}, 1] tile, not {type(x).__name__}", ins)


def _op(op, kind, ins, unary_ok=False):
    """op's code in the executor's table of `kind`; nl.abs as an ALU op only where unary_ok (an
    instruction applying it to data with a zero scalar operand: |data|)."""
    code = getattr(op, kind, None)
    if kind == "alu" and code is not None and getattr(op, "__name__", "") == "abs" and not unary_ok:
        fail("op", "nl.abs is an ALU op of tensor_scalar/tensor_scalar_reduce only (|data|, with operand 0.0); "
                   "use nisa.activation(op=nl.abs) elsewhere", ins)
    if code is None:
        name = getattr(op, "__name__", repr(op))
        legal = "an ALU op (nl.add, nl.multiply, nl.maximum, ...)" if kind == "alu" else \
            "an activation function (nl.exp, nl.tanh, nl.silu, ...)" if kind == "act" else \
            "a reduction op (nl.add, nl.maximum, nl.minimum, nl.multiply)"
        fail("op", f"{name} is not {legal}", ins)
    return code


def _engine(engine_arg, default):
    if engine_arg is None or engine_arg == engine.unknown:
        return default
    return engine_arg.value if isinstance(engine_arg, engine) else str(engine_arg)


def _no_gpsimd_psum(eng, tensors, ins):
    if eng == "gpsimd":
        for t in tensors:
            check(not isinstance(t, NkiTensor) or t.buffer != PSUM, "engine memory",
                  "the GpSimd engine cannot access PSUM", ins)


def _column(x, like, what, ins):
    """A [P, 1] per-partition operand, viewed to broadcast along every free dim of `like`."""
    check(x.shape[0] == like.shape[0] and x.free_size == 1, "shape",
          f"{what} must be a scalar or a [{like.shape[0]}, 1] tile, got {tuple(x.shape)}", ins)
    n = like.ndim
    return NkiTensor(x.storage, (x.shape[0],) + (1,) * (n - 1), (x.strides[0],) + (1,) * (n - 1), x.offset, x.dtype,
                     invalid=x.invalid)


def _is_int(t):
    return not t.dtype.is_floating_point


def _scalar_step(out, data, op, operand, reverse, ins):
    """`out = data op operand` (or `operand op data`), operand a number or a [P, 1] tile."""
    code = _op(op, "alu", ins, unary_ok=True)
    if getattr(op, "__name__", "") == "abs" and (isinstance(operand, NkiTensor) or operand != 0):
        raise NotImplementedError(f"nki: {ins} with op nl.abs and operand {operand!r} is not supported yet: the "
                                  f"docs do not say what the operand does; with 0.0 it is |data|")
    integral = _is_int(data) and not isinstance(operand, float)
    if isinstance(operand, NkiTensor):
        _on_chip(operand, "operand", ins)
        col = _column(operand, data, "operand", ins)
        pair = [col, data] if reverse else [data, col]
        return (T.BINARY, [out, *pair], [code, 0, 0, int(integral and _is_int(operand))], [0.0, 0.0])
    if not isinstance(operand, (int, float)):
        fail("operand", f"a tensor_scalar operand is a number or a [P, 1] tile, not {type(operand).__name__}", ins)
    flags, values = ([code, 1, 0, int(integral)], [float(operand), 0.0]) if reverse else \
        ([code, 0, 1, int(integral)], [0.0, float(operand)])
    return (T.BINARY, [out, data], flags, values)



class _RegView(NkiTensor):
    """A register standing in for a tile in a lowering (shape and dtype only)."""

    def __init__(self, reg, like):
        super().__init__(like.storage, like.shape, like.strides, like.offset, torch.float32)
        self.reg = reg


def _lower(steps):
    """Registers in place of their stand-ins."""
    return [(op, [o.reg if isinstance(o, _RegView) else o for o in operands], i, f) for op, operands, i, f in steps]
