"""nki.language's names of issue 36's second round, each lowered to nki.isa instructions: softmax,
rms_norm, all, invert, where, expand_dims, load_transpose2d, shared_constant, the random ones
(rand, random_seed, dropout), and device_print. language.py re-exports them."""
from __future__ import annotations

import os

import numpy as np
import torch

from . import _dtypes, _isa_rng
from . import _trace as T
from . import isa as nisa
from ._errors import fail
from ._tensor import HBM, SBUF, NkiTensor


def _nl():
    from . import language

    return language


def _whole_rows(x, axis, what):
    """The free axes `axis` names must be all of x's: the result is then one [P, 1] column."""
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = sorted(a % x.ndim for a in axes)
    if axes != list(range(1, x.ndim)):
        fail("axis", f"nl.{what} over axis {axis} of a {x.ndim}-D tile is not supported yet: it reduces all free "
                     f"axes (1..{x.ndim - 1}) of a tile", what)


def softmax(x, axis, dtype=None, compute_dtype=None, mask=None):
    """exp(x - max(x)) / sum(exp(x - max(x))) along the free axes: the max on the Vector engine, the
    exponential and its sum in one activation, then a multiply by the sum's reciprocal."""
    nl = _nl()
    _whole_rows(x, axis, "softmax")
    p = x.shape[0]
    neg_max = nl.max(x, axis, dtype=nl.float32, keepdims=True)
    nisa.tensor_scalar(neg_max, neg_max, nl.multiply, -1.0)
    e = nl.ndarray(x.shape, nl.float32, SBUF)
    total = nl.ndarray((p, 1), nl.float32, SBUF)
    nisa.activation(e, nl.exp, x, bias=neg_max, reduce_res=total)
    nisa.reciprocal(total, total)
    out = nl.ndarray(x.shape, dtype or x.dtype, SBUF)
    nisa.tensor_scalar(out, e, nl.multiply, total)
    return out


def rms_norm(x, w, axis, n, epsilon=1e-06, dtype=None, compute_dtype=None, mask=None):
    """x / sqrt(sum(x^2) / n + epsilon) * w along the free axes; w of x's shape or one row ([1, F])
    broadcast to every partition."""
    nl = _nl()
    _whole_rows(x, axis, "rms_norm")
    p = x.shape[0]
    sq = nl.ndarray(x.shape, nl.float32, SBUF)
    inv = nl.ndarray((p, 1), nl.float32, SBUF)
    nisa.activation(sq, nl.square, x, reduce_res=inv)
    nisa.activation(inv, nl.rsqrt, inv, scale=1.0 / n, bias=float(epsilon))
    y = nl.ndarray(x.shape, nl.float32, SBUF)
    nisa.tensor_scalar(y, x, nl.multiply, inv)
    if not isinstance(w, NkiTensor):
        fail("operand", f"w must be a tile, not {type(w).__name__}", "rms_norm")
    if tuple(w.shape) != tuple(x.shape):
        w = nl.broadcast_to(w, x.shape)
    out = nl.ndarray(x.shape, dtype or x.dtype, SBUF)
    nisa.tensor_tensor(out, y, w, nl.multiply)
    return out


def all(x, axis, dtype=None, mask=None):  # noqa: A001  (NKI's name)
    """1 where every element along `axis` is nonzero: the minimum of `x != 0`."""
    nl = _nl()
    nonzero = nl.not_equal(x, 0, dtype=nl.uint8)
    return nl.min(nonzero, axis, dtype=dtype or nl.uint8)


def invert(x, dtype=None, mask=None):
    """Bitwise NOT of an integer tile: x XOR all-ones, on the Vector engine."""
    nl = _nl()
    if not isinstance(x, NkiTensor) or x.dtype.is_floating_point or x.dtype == torch.bool:
        fail("dtype", f"nl.invert takes an integer tile, got {getattr(x, 'dtype', type(x).__name__)}", "invert")
    out = nl.ndarray(x.shape, dtype or x.dtype, SBUF)
    nisa.tensor_scalar(out, x, nl.bitwise_xor, -1)
    return out


def where(condition, x, y, dtype=None, mask=None):
    """x where condition is nonzero, else y (tiles of one shape, or numbers): y copied, then x copied
    over it under the condition (nisa.tensor_copy_predicated)."""
    nl = _nl()
    if not isinstance(condition, NkiTensor):
        fail("operand", f"condition must be a tile, not {type(condition).__name__}", "where")
    like = x if isinstance(x, NkiTensor) else y if isinstance(y, NkiTensor) else condition
    out = nl.ndarray(condition.shape, dtype or like.dtype, SBUF)
    if isinstance(y, NkiTensor):
        nisa.tensor_copy(out, y)
    else:
        nisa.memset(out, y)
    pred = condition if condition.dtype in (nl.uint8, nl.uint16, nl.uint32) else \
        nl.not_equal(condition, 0, dtype=nl.uint8)
    if isinstance(x, NkiTensor):
        src = x if x.dtype == out.dtype else nl.copy(x, dtype=out.dtype)
    else:
        src = float(x) if out.dtype.is_floating_point else int(x)
    nisa.tensor_copy_predicated(out, src, pred)
    return out


def expand_dims(data, axis):
    """A view of `data` with a size-1 dim inserted at each position of `axis`."""
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = data
    ndim = data.ndim + len(axes)
    for a in sorted(a % ndim for a in axes):
        out = out.expand_dim(a)
    return out


def load_transpose2d(src, dtype=None, mask=None):
    """[F, P] in HBM into an SBUF tile [P, F] (nisa.dma_transpose)."""
    nl = _nl()
    if not isinstance(src, NkiTensor) or src.buffer not in (nl.hbm, nl.shared_hbm) or src.ndim != 2:
        fail("operand", f"nl.load_transpose2d reads a 2-D HBM tensor, got {src!r}", "load_transpose2d")
    out = nl.ndarray((src.shape[1], src.shape[0]), dtype or src.dtype, SBUF)
    nisa.dma_transpose(out, src)
    return out


def shared_constant(constant, dtype=None):
    """An HBM tensor holding `constant` (an array known when the kernel is traced, or the path of a
    .npy file holding one, as rotational_topk passes its rotation matrices), written by one DMA from
    the program's constants."""
    nl = _nl()
    if isinstance(constant, (str, os.PathLike)):
        try:
            constant = np.load(constant, allow_pickle=False)
        except (OSError, ValueError) as e:
            fail("constant", f"nl.shared_constant({constant!r}): not a readable .npy file ({e})", "shared_constant")
    value = torch.as_tensor(constant)
    dt = _dtypes.resolve(dtype) if dtype is not None else value.dtype
    t = nl.ndarray(tuple(value.shape) or (1,), dt, HBM)
    trace = T.active()
    nbytes = t.size * dt.itemsize
    trace.emit("shared_constant", "dma", reads=[], writes=[t],
               steps=[(T.COPY, [t, trace.const(value.to(dt).reshape(t.shape))], [], [])], dma=(nbytes, nbytes))
    return t


def rand(shape, dtype=None, **kwargs):
    """A new SBUF tile of uniform random values in [0, 1) from the Vector engine's generators."""
    nl = _nl()
    out = nl.ndarray(shape, dtype or nl.float32, SBUF)
    _isa_rng.uniform(out, "rand")
    return out


def random_seed(seed, mask=None):
    """Seeds the Vector engine's generators: a [1, 1] 32-bit tile, or an int."""
    nl = _nl()
    if isinstance(seed, int) and not isinstance(seed, bool):
        seed = nl.full((1, 1), seed, nl.int32)
    nisa.set_rng_seed(seed)


def dropout(x, rate, dtype=None, mask=None):
    """x with each element zeroed with probability `rate` (nisa.dropout; kept values not rescaled)."""
    nl = _nl()
    out = nl.ndarray(x.shape, x.dtype, SBUF)
    nisa.dropout(out, x, rate)
    return out if dtype is None or dtype == x.dtype else nl.copy(out, dtype=dtype)


def device_print(prefix, x, mask=None):
    """Prints `prefix` and the tile's values when the program reaches this point: on the host
    simulator as AWS's simulator does, and on the software NeuronCore (from its queue, so in
    stream order with the rest of the kernel). It takes no engine time."""
    if mask is not None:
        fail("mask", "nl.device_print takes no mask= (masks are not supported; slice the tile)", "device_print")
    if not isinstance(prefix, str):
        fail("prefix", f"nl.device_print's prefix is a str, not {type(prefix).__name__}", "device_print")
    if not isinstance(x, NkiTensor):
        fail("x", f"nl.device_print prints a tile or tensor, not {type(x).__name__}", "device_print")
    trace = T.active()
    text = trace.const(torch.frombuffer(bytearray(prefix.encode() or b" "), dtype=torch.uint8))
    trace.emit("device_print", "gpsimd", reads=[x], writes=[], steps=[(T.PRINT, [x, text], [len(prefix.encode())], [])])
