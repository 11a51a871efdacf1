"""The engines' random number generators (issue 36, round two): rng, rand2, dropout, set_rng_seed,
rand_get_state, rand_set_state, and nl.rand's lowering. One program step, csrc/nki/program.cpp's
`Rng`: per-lane XORWOW generators for the Vector and GpSimd engines."""
from __future__ import annotations

import builtins

import torch

from . import _trace as T
from ._errors import check, fail
from ._isa_base import GPSIMD_START, MIN_II, _column, _engine, _no_gpsimd_psum, _on_chip, _same_tile
from ._isa_extra import _GE, _INTS, _const_like, _generation
from ._tensor import NkiTensor



# --- random numbers ---------------------------------------------------------------------------
_VECTOR, _GPSIMD = 0, 1
_BITS, _UNIFORM, _SEED, _GET, _SET = range(5)
_STATE_WORDS = {_VECTOR: 24, _GPSIMD: 6}


def _rng_engine(engine, ins, default="vector"):
    eng = _engine(engine, default)
    check(eng in ("vector", "gpsimd"), "engine", f"{ins} runs on the Vector or GpSimd engine, not {eng}", ins)
    return eng


def rng(dst, engine=None, name=None):
    """32 random bits per element of dst, truncated to dst's integer dtype (its low bits)."""
    ins = "rng"
    _on_chip(dst, "dst", ins)
    check(dst.dtype in _INTS, "dtype", f"dst is {dst.dtype}; rng writes integer tiles (int8..uint32)", ins)
    prof = T.active().profile
    eng = _rng_engine(engine, ins)
    check(eng == "vector" or prof.nc_version != "gen2", "engine", "rng runs on GpSimd from NeuronCore-v3 on", ins)
    _no_gpsimd_psum(eng, (dst,), ins)
    code = _VECTOR if eng == "vector" else _GPSIMD
    T.active().emit(ins, eng, reads=[], writes=[dst], steps=[(T.RNG, [dst], [code, _BITS], [])],
                    cycles=(GPSIMD_START if eng == "gpsimd" else 0) + max(MIN_II, dst.free_size))


def _bound(x, like, what, ins):
    """A [P, 1] tile as a column over like, or a number: (operand or None, value)."""
    if isinstance(x, NkiTensor):
        _on_chip(x, what, ins)
        return _column(x, like, what, ins), 0.0
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return None, float(x)
    fail("operand", f"{what} is a number or a [P, 1] tile, not {type(x).__name__}", ins)


def _uniform_steps(trace, out, lo, hi, ins):
    """Steps writing uniform values in [lo, hi) to `out` from the Vector engine's generators."""
    u = trace.reg(out.shape)
    (lo_t, lo_v), (hi_t, hi_v) = _bound(lo, out, "min", ins), _bound(hi, out, "max", ins)
    if lo_t is None and hi_t is None:
        check(lo_v < hi_v, "range", f"min {lo_v} must be below max {hi_v}", ins)
        if (lo_v, hi_v) == (0.0, 1.0):
            return [(T.RNG, [out], [_VECTOR, _UNIFORM], [])]
        return [(T.RNG, [u], [_VECTOR, _UNIFORM], []), (T.BINARY, [u, u], [2, 0, 1, 0], [0.0, hi_v - lo_v]),
                (T.BINARY, [out, u], [0, 0, 1, 0], [0.0, lo_v])]
    width = trace.reg((out.shape[0],) + (1,) * (out.ndim - 1))

    def pair(t, v):
        return ([t], 0) if t is not None else ([], 1)

    (a_ops, a_s), (b_ops, b_s) = pair(hi_t, hi_v), pair(lo_t, lo_v)
    return [(T.RNG, [u], [_VECTOR, _UNIFORM], []),
            (T.BINARY, [width] + a_ops + b_ops, [1, a_s, b_s, 0], [hi_v, lo_v]),
            (T.BINARY, [u, u, width], [2, 0, 0, 0], [0.0, 0.0]),
            (T.BINARY, [out, u] + b_ops, [0, 0, b_s, 0], [0.0, lo_v])]


def rand2(dst, min, max, name=None):  # noqa: A002  (NKI's parameter names)
    """Uniform random values in [min, max) (numbers or [P, 1] tiles), rounded to dst's dtype.
    NeuronCore-v4 and newer."""
    ins = "rand2"
    _generation(ins, ("gen4",), "NeuronCore-v4 (Trn3) and newer")
    _on_chip(dst, "dst", ins)
    trace = T.active()
    steps = _uniform_steps(trace, dst, min, max, ins)
    reads = [b for b in (min, max) if isinstance(b, NkiTensor)]
    trace.emit(ins, "vector", reads=reads, writes=[dst], steps=steps, cycles=builtins.max(MIN_II, dst.free_size))


def uniform(dst, ins):
    """nl.rand's lowering: uniform [0, 1) values from the Vector engine's generators (any generation)."""
    _on_chip(dst, "dst", ins)
    T.active().emit(ins, "vector", reads=[], writes=[dst], steps=[(T.RNG, [dst], [_VECTOR, _UNIFORM], [])],
                    cycles=max(MIN_II, dst.free_size))


def dropout(dst, data, prob, name=None):
    """dst = data with each element replaced by 0 with probability prob (a number or a [P, 1] tile of
    per-partition probabilities): an element is kept where its uniform draw u in [0, 1) is >= prob.
    Kept values are not rescaled."""
    ins = "dropout"
    _on_chip(dst, "dst", ins), _on_chip(data, "data", ins)
    _same_tile(dst, data, "dst", "data", ins)
    check(dst.dtype == data.dtype, "dtype", f"dst is {dst.dtype} and data {data.dtype}; they must match", ins)
    trace = T.active()
    u, keep = trace.reg(data.shape), trace.reg(data.shape)
    if isinstance(prob, NkiTensor):
        _on_chip(prob, "prob", ins)
        check(prob.dtype.is_floating_point, "dtype", f"prob is {prob.dtype}; it must be a float tile", ins)
        check(data.dtype.is_floating_point or prob.dtype == torch.float32, "dtype",
              f"with {data.dtype} data, prob must be float32, not {prob.dtype}", ins)
        compare = (T.BINARY, [keep, u, _column(prob, data, "prob", ins)], [_GE, 0, 0, 0], [0.0, 0.0])
    elif isinstance(prob, (int, float)) and not isinstance(prob, bool):
        check(0.0 <= prob <= 1.0, "prob", f"prob {prob} is not a probability (0..1)", ins)
        compare = (T.BINARY, [keep, u], [_GE, 0, 1, 0], [0.0, float(prob)])
    else:
        fail("operand", f"prob is a number or a [P, 1] tile, not {type(prob).__name__}", ins)
    steps = [(T.RNG, [u], [_VECTOR, _UNIFORM], []), compare, (T.WHERE, [dst, keep, data, _const_like(0, data)], [], [])]
    reads = [data] + ([prob] if isinstance(prob, NkiTensor) else [])
    trace.emit(ins, "vector", reads=reads, writes=[dst], steps=steps, cycles=max(MIN_II, data.free_size))


def set_rng_seed(src_seeds, name=None):
    """Seeds every lane of the Vector engine's generators from one 32-bit value ([1, 1] tile)."""
    ins = "set_rng_seed"
    _on_chip(src_seeds, "src_seeds", ins)
    check(src_seeds.shape[0] == 1 and src_seeds.free_size == 1, "shape",
          f"src_seeds must be a [1, 1] tile, got {tuple(src_seeds.shape)}", ins)
    check(src_seeds.dtype.itemsize == 4, "dtype", f"src_seeds must hold a 32-bit value, not {src_seeds.dtype}", ins)
    T.active().emit(ins, "vector", reads=[src_seeds], writes=[], steps=[(T.RNG, [src_seeds], [_VECTOR, _SEED], [])],
                    cycles=MIN_II)


def _state_engine(engine, t, what, ins):
    prof = _generation(ins, ("gen3", "gen4"), "NeuronCore-v3 (Trn2) and newer")
    eng = _rng_engine(engine, ins, default="gpsimd" if prof.nc_version == "gen3" else "vector")
    check(eng == "gpsimd" or prof.nc_version != "gen3", "engine",
          f"on NeuronCore-v3 {ins} runs on GpSimd only, not {eng}", ins)
    _on_chip(t, what, ins)
    _no_gpsimd_psum(eng, (t,), ins)
    code = _VECTOR if eng == "vector" else _GPSIMD
    words = _STATE_WORDS[code]
    check(t.dtype == torch.uint32, "dtype", f"{what} is {t.dtype}; it must be uint32", ins)
    check(t.ndim == 2 and t.free_size == words, "shape",
          f"{what} must be [P, {words}] ({eng}'s XORWOW state per lane), got {tuple(t.shape)}", ins)
    return eng, code


def rand_set_state(src_seeds, engine=None, name=None):
    """The engine's generator state of lanes 0..P-1 = the rows of src_seeds (uint32, [P, 24] on Vector,
    [P, 6] on GpSimd)."""
    ins = "rand_set_state"
    eng, code = _state_engine(engine, src_seeds, "src_seeds", ins)
    T.active().emit(ins, eng, reads=[src_seeds], writes=[], steps=[(T.RNG, [src_seeds], [code, _SET], [])],
                    cycles=MIN_II)


def rand_get_state(dst, engine=None, name=None):
    """dst's rows = the engine's generator state of lanes 0..P-1 (what rand_set_state takes)."""
    ins = "rand_get_state"
    eng, code = _state_engine(engine, dst, "dst", ins)
    T.active().emit(ins, eng, reads=[], writes=[dst], steps=[(T.RNG, [dst], [code, _GET], [])], cycles=MIN_II)
