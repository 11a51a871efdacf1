"""Instructions of issue 36's second round: predicated copy, the DMA transpose, the quadrant
shuffle, segment bounds, and the engines' random number generators (rng, rand2, dropout and the
seed/state instructions). Semantics and rules from the NKI 2.33 API reference; the RNG steps are
csrc/nki/program.cpp's `Rng`."""
from __future__ import annotations

import builtins

import torch

from . import _trace as T
from ._errors import check, fail
from ._isa_base import GPSIMD_START, MIN_II, _column, _engine, _no_gpsimd_psum, _on_chip, _same_tile, _tensor
from ._tensor import HBM, PSUM, SBUF, SHARED_HBM, NkiTensor

RNG = 13  # the program's random-number step (csrc/nki/program.h kRng)
_NE, _EQ, _GE = 8, 7, 10  # ALU codes of not_equal, equal, greater_equal (program.cpp's binary)
_UNSIGNED = (torch.uint8, torch.uint16, torch.uint32)
_INTS = (torch.int8, torch.int16, torch.int32) + _UNSIGNED


def _generation(ins, allowed, what):
    prof = T.active().profile
    check(prof.nc_version in allowed, "generation", f"{ins} is available only on {what}, not on {prof.name} "
                                                    f"({prof.nc_version})", ins)
    return prof


def _start_partition(t):
    """The first partition a view of an on-chip tile reads."""
    return t.offset // (t.storage.partition_bytes // t.dtype.itemsize)


def _const_like(value, t):
    """A one-element constant of t's dtype that broadcasts over t."""
    return T.active().const(torch.full((1,) * t.ndim, value, dtype=t.dtype))


# --- predicated copy --------------------------------------------------------------------------
def tensor_copy_predicated(dst, src, predicate, reverse_pred=False, name=None):
    """dst = src where predicate is nonzero (zero with reverse_pred), dst unchanged elsewhere; src a
    tile of dst's dtype (copied bit for bit) or a number."""
    ins = "tensor_copy_predicated"
    _on_chip(dst, "dst", ins), _on_chip(predicate, "predicate", ins)
    check(predicate.dtype in _UNSIGNED, "dtype", f"predicate is {predicate.dtype}; it must be uint8, uint16 or "
                                                 f"uint32", ins)
    _same_tile(dst, predicate, "dst", "predicate", ins)
    for t, w in ((dst, "dst"), (predicate, "predicate")):
        check(t.ndim <= 4, "shape", f"{w} has {t.ndim - 1} free dims; the limit is 3", ins)
    trace = T.active()
    cond = trace.reg(dst.shape)
    if isinstance(src, NkiTensor):
        _on_chip(src, "src", ins)
        _same_tile(dst, src, "dst", "src", ins)
        check(src.dtype == dst.dtype, "dtype", f"src is {src.dtype} and dst {dst.dtype}; they must match", ins)
        check(not (src.buffer == PSUM and predicate.buffer == PSUM), "memory",
              "src and predicate cannot both be in PSUM", ins)
        check(not reverse_pred, "reverse_pred", "reverse_pred=True needs a scalar src", ins)
        steps = [(T.BINARY, [cond, predicate], [_NE, 0, 1, 0], [0.0, 0.0]),
                 (T.WHERE, [dst, cond, src, dst], [], [])]
        reads, n = [src, predicate, dst], src.free_size
    elif isinstance(src, (int, float)) and not isinstance(src, bool):
        check(isinstance(src, float) == dst.dtype.is_floating_point, "dtype",
              f"a Python {type(src).__name__} src needs a{' float' if isinstance(src, float) else 'n integer'} "
              f"dst, not {dst.dtype}", ins)
        steps = [(T.BINARY, [cond, predicate], [_EQ if reverse_pred else _NE, 0, 1, 0], [0.0, 0.0]),
                 (T.WHERE, [dst, cond, _const_like(src, dst), dst], [], [])]
        reads, n = [predicate, dst], dst.free_size
    else:
        fail("operand", f"src is a tile or a number, not {type(src).__name__}", ins)
    fast = PSUM in (predicate.buffer, getattr(src, "buffer", None))
    trace.emit(ins, "vector", reads=reads, writes=[dst], steps=steps, cycles=max(MIN_II, n if fast else 2 * n))


# --- data movement ----------------------------------------------------------------------------
_TRANSPOSES = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}


def dma_transpose(dst, src, axes=None, priority=None, dge_mode=None, oob_mode=None, name=None):
    """dst = src with its first and last dims swapped (axes (1, 0), (2, 1, 0) or (3, 1, 2, 0)), by DMA:
    one whole-tile transpose step per index of the middle dims."""
    ins = "dma_transpose"
    _tensor(dst, "dst", ins), _tensor(src, "src", ins)
    check(src.buffer in (HBM, SHARED_HBM, SBUF), "memory", f"src is in {src.buffer}; dma_transpose reads HBM or "
                                                           f"SBUF", ins)
    check(dst.buffer != PSUM, "memory", "DMA cannot write PSUM", ins)
    check(src.ndim in _TRANSPOSES, "shape", f"dma_transpose takes a 2-D to 4-D src, got {tuple(src.shape)}", ins)
    want = _TRANSPOSES[src.ndim]
    axes = want if axes is None else tuple(axes)
    check(axes == want, "axes", f"axes {axes} of a {src.ndim}-D src must be {want}", ins)
    shape = tuple(src.shape[a] for a in axes)
    check(tuple(dst.shape) == shape or (src.ndim == 2 and dst.shape[0] == shape[0] and dst.free_size == shape[1]),
          "shape", f"dst {tuple(dst.shape)} must be {shape}, src {tuple(src.shape)} transposed by {axes}", ins)
    if getattr(dge_mode, "name", "") == "hwdge":
        check(src.shape[0] == 16 and src.shape[-1] % 128 == 0 and src.dtype.itemsize == 2, "dge_mode",
              f"a hwdge transpose needs src.shape[0] == 16, src.shape[-1] a multiple of 128 and a 2-byte dtype, got "
              f"{tuple(src.shape)} {src.dtype}", ins)
    if src.ndim == 2:
        steps = [(T.TRANSPOSE, [dst, src], [], [])]
    else:
        middle = [range(n) for n in src.shape[1:-1]]
        steps = []
        for idx in _product(middle):
            key = (slice(None),) + idx + (slice(None),)
            steps.append((T.TRANSPOSE, [dst[key], src[key]], [], []))
    nbytes = max(dst.size * dst.dtype.itemsize, src.size * src.dtype.itemsize)
    # The docs give no cost; the source side streams its rows, each written out element by element.
    T.active().emit(ins, "dma", reads=[src], writes=[dst], steps=steps,
                    dma=(nbytes, src.shape[-1] * src.dtype.itemsize))


def _product(ranges):
    out = [()]
    for r in ranges:
        out = [o + (i,) for o in out for i in r]
    return out


_QUADRANT, _KEEP = 32, 255
_STARTS = {32: (0, 32, 64, 96), 64: (0, 64), 96: (0,), 128: (0,)}


def nc_stream_shuffle(dst, src, shuffle_mask, name=None):
    """In each quadrant q of 32 partitions, dst[32q + i] = src[32q + shuffle_mask[i]]; a mask entry of
    255 leaves dst's partition as it was. In place (dst is src) reads src before any write."""
    ins = "nc_stream_shuffle"
    _on_chip(dst, "dst", ins), _on_chip(src, "src", ins)
    check(dst.dtype == src.dtype, "dtype", f"dst is {dst.dtype} and src {src.dtype}; they must match", ins)
    check(dst.free_size == src.free_size, "shape", f"dst has {dst.free_size} elements per partition and src "
                                                   f"{src.free_size}; they must match", ins)
    mask = list(shuffle_mask)
    check(len(mask) == _QUADRANT and all(isinstance(m, int) and (0 <= m < _QUADRANT or m == _KEEP) for m in mask),
          "shuffle_mask", f"shuffle_mask must be 32 ints, each 0..31 or 255 (keep), got {shuffle_mask!r}", ins)
    ps, pd = src.shape[0], dst.shape[0]
    active = -(-max(ps, pd) // _QUADRANT) * _QUADRANT
    for t, w in ((src, "src"), (dst, "dst")):
        start = _start_partition(t)
        check(start in _STARTS[active], "start partition",
              f"{w} starts at partition {start}; with {active} active partitions it must start at "
              f"{' or '.join(map(str, _STARTS[active]))}", ins)
    trace = T.active()
    steps, source = [], src
    if dst.storage is src.storage:  # in place: a copy of src is read, as the engine streams it first
        source = trace.allocate(SBUF, (ps,) + tuple(src.shape[1:]), src.dtype, "shuffle")
        steps.append((T.COPY, [source, src], [], []))
    for q in range(active // _QUADRANT):
        for i, m in enumerate(mask):
            d, s = q * _QUADRANT + i, q * _QUADRANT + m
            if m == _KEEP or d >= pd:
                continue
            check(s < ps, "shuffle_mask", f"dst partition {d} reads src partition {s}; src spans {ps}", ins)
            steps.append((T.COPY, [dst[d:d + 1], source[s:s + 1]], [], []))
    reads = [src] + ([source] if source is not src else [])
    trace.emit(ins, "vector", reads=reads, writes=[dst] + reads[1:], steps=steps,
               cycles=max(MIN_II, src.free_size))


# --- segments ---------------------------------------------------------------------------------
def sequence_bounds(dst, segment_ids, name=None):
    """For each element of a [1, n] tile of segment ids, the first and last index of its run of equal
    ids: dst[0, 0, j] the start, dst[0, 1, j] the end; id 0 is padding (start n, end -1). Computed
    over [n, n] masks: start = the largest run start at or before j, end = the smallest run end at
    or after it."""
    ins = "sequence_bounds"
    seg = _on_chip(segment_ids, "segment_ids", ins)
    _on_chip(dst, "dst", ins)
    n = seg.free_size
    check(seg.shape[0] == 1 and seg.ndim == 2, "shape", f"segment_ids must be [1, n], got {tuple(seg.shape)}", ins)
    check(tuple(dst.shape) == (1, 2, n), "shape", f"dst must be (1, 2, {n}), got {tuple(dst.shape)}", ins)
    for t, w in ((seg, "segment_ids"), (dst, "dst")):
        check(t.dtype in (torch.float32, torch.int32), "dtype", f"{w} is {t.dtype}; it must be float32 or int32", ins)
    trace = T.active()
    j = torch.arange(n, dtype=torch.float32)
    steps = []
    start, end = trace.reg((1, n)), trace.reg((1, n))
    if n == 1:
        steps += [(T.FILL, [dst[:, 0, :]], [], [0.0]), (T.FILL, [dst[:, 1, :]], [], [0.0])]
        cur = [dst[:, 0, :], dst[:, 1, :]]
    else:
        change = trace.reg((1, n - 1))  # change[k]: ids k and k+1 differ (k+1 starts a run, k ends one)
        steps.append((T.BINARY, [change, seg[:, 1:n], seg[:, 0:n - 1]], [_NE, 0, 0, 0], [0.0, 0.0]))
        ii, jj = torch.meshgrid(torch.arange(n), torch.arange(n - 1), indexing="ij")
        starts, ends = trace.reg((n, n - 1)), trace.reg((n, n - 1))
        at_or_before = trace.const(jj + 1 <= ii)  # run start k+1 at or before i
        at_or_after = trace.const(jj >= ii)  # run end k at or after i
        steps += [(T.BINARY, [starts, at_or_before, change], [13, 0, 0, 0], [0.0, 0.0]),  # logical_and
                  (T.WHERE, [starts, starts, trace.const(j[1:].reshape(1, n - 1))], [], [0.0]),
                  (T.REDUCE, [start, starts], [1, 0, 1], []),  # max: the first run starts at 0
                  (T.BINARY, [ends, at_or_after, change], [13, 0, 0, 0], [0.0, 0.0]),
                  (T.WHERE, [ends, ends, trace.const(j[:-1].reshape(1, n - 1))], [], [float(n - 1)]),
                  (T.REDUCE, [end, ends], [2, 0, 1], [])]  # min: the last run ends at n - 1
        cur = [start, end]
    live = trace.reg((1, n))
    steps.append((T.BINARY, [live, seg], [_NE, 0, 1, 0], [0.0, 0.0]))
    steps += [(T.WHERE, [dst[:, 0, :], live, cur[0]], [], [float(n)]),
              (T.WHERE, [dst[:, 1, :], live, cur[1]], [], [-1.0])]
    trace.emit(ins, "gpsimd", reads=[seg], writes=[dst], steps=steps, cycles=GPSIMD_START + 2 * n)


# --- gathers and compaction ------------------------------------------------------------------
GATHER = 14  # the program's gather step (csrc/nki/program.h kGather)


def nc_n_gather(dst, data, indices, name=None):
    """dst[p, k...] = data[p, :].flatten()[indices[p, k...]] (uint32 indices, within each partition)."""
    ins = "nc_n_gather"
    for t, w in ((dst, "dst"), (data, "data"), (indices, "indices")):
        _on_chip(t, w, ins, allowed=(SBUF,))
    check(indices.dtype == torch.uint32, "dtype", f"indices is {indices.dtype}; it must be uint32", ins)
    check(dst.dtype == data.dtype, "dtype", f"dst is {dst.dtype} and data {data.dtype}; they must match", ins)
    check(dst.shape[0] == data.shape[0] == indices.shape[0], "shape",
          f"dst, data and indices span {dst.shape[0]}, {data.shape[0]} and {indices.shape[0]} partitions; they must "
          f"match", ins)
    check(dst.free_size == indices.free_size, "shape", f"dst has {dst.free_size} elements per partition and indices "
                                                       f"{indices.free_size}; they must match", ins)
    n = dst.free_size
    T.active().emit(ins, "gpsimd", reads=[data, indices], writes=[dst], steps=[(GATHER, [dst, data, indices], [], [])],
                    cycles=GPSIMD_START + n * -(-n // 512))


_NONZERO_LIMIT = 1024


def nonzero_with_count(dst, src, index_offset=0, padding_val=-1, name=None):
    """On partitions 0, 16, ..., 112 (one per GpSimd core): dst[p, :N] = the indices (+ index_offset)
    of src[p]'s N nonzero elements in order, dst[p, N:T] = padding_val, dst[p, T] = N. Other
    partitions of dst are left as they were. NeuronCore-v3 and newer. The compaction is a whole-tile
    [T, T] match of each output slot with the running count of nonzeros."""
    ins = "nonzero_with_count"
    _generation(ins, ("gen3", "gen4"), "NeuronCore-v3 (Trn2) and newer")
    _on_chip(dst, "dst", ins, allowed=(SBUF,)), _on_chip(src, "src", ins, allowed=(SBUF,))
    t = src.free_size
    check(src.ndim == 2 and dst.ndim == 2, "shape", f"src and dst are [P, T] and [P, T + 1] tiles, got "
                                                    f"{tuple(src.shape)} and {tuple(dst.shape)}", ins)
    check(dst.shape[0] == src.shape[0] and dst.free_size == t + 1, "shape",
          f"dst must be [{src.shape[0]}, {t + 1}] for src {tuple(src.shape)} (the indices, then the count)", ins)
    if t > _NONZERO_LIMIT:
        fail("size", f"nonzero_with_count over {t} elements per partition is not supported yet: the whole-tile "
                     f"compaction's [T, T] masks are kept to T <= {_NONZERO_LIMIT}", ins)
    trace = T.active()
    v, d = src[0:src.shape[0]:16], dst[0:dst.shape[0]:16]
    a = v.shape[0]
    nz, running, count = trace.reg((a, 1, t)), trace.reg((a, 1, t)), trace.reg((a, 1))
    hit, idx, keep = trace.reg((a, t, t)), trace.reg((a, t)), trace.reg((a, t))
    slot = torch.arange(t, dtype=torch.float32)
    steps = [(T.BINARY, [nz, v], [_NE, 0, 1, 0], [0.0, 0.0]),
             (T.SCAN, [running, trace.const(torch.ones(1, t)), nz], [2, 0, 0, 0, 0], [0.0]),  # running count
             (T.REDUCE, [count, nz], [0, 0, 1], []),
             # hit[k, j]: element j is nonzero and the (k+1)-th nonzero
             (T.BINARY, [hit, running, trace.const((slot + 1).reshape(1, t, 1))], [_EQ, 0, 0, 0], [0.0, 0.0]),
             (T.BINARY, [hit, hit, nz], [13, 0, 0, 0], [0.0, 0.0]),  # logical_and
             (T.WHERE, [hit, hit, trace.const(slot.reshape(1, 1, t))], [], [0.0]),
             (T.REDUCE, [idx, hit], [0, 0, 2], []),  # the one matching j (0 where no slot k is filled)
             (T.BINARY, [idx, idx], [0, 0, 1, 0], [0.0, float(index_offset)]),
             (T.BINARY, [keep, trace.const(slot.reshape(1, t)), count], [11, 0, 0, 0], [0.0, 0.0]),  # k < N
             (T.WHERE, [d[:, 0:t], keep, idx], [], [float(padding_val)]),
             (T.COPY, [d[:, t:t + 1], count], [], [])]
    trace.emit(ins, "gpsimd", reads=[src], writes=[dst], steps=steps, cycles=GPSIMD_START + 2 * t)


# --- Scalar / Vector engine functions of NeuronCore-v4 ------------------------------------------
def _accumulate(trace, ins, y, reduce_res, reduce_op, reduce_cmd, parts):
    """reduce_res = reduce_op of y over its free axes, for reduce_cmd idle/reset_reduce (the modes
    that carry the accumulator over from an earlier instruction are not supported yet)."""
    from ._isa_base import _op
    from ._isa_base import reduce_cmd as cmd

    if reduce_res is None:
        return [], []
    _on_chip(reduce_res, "reduce_res", ins)
    check(reduce_res.shape[0] == parts and reduce_res.free_size == 1, "shape",
          f"reduce_res must be [{parts}, 1], got {tuple(reduce_res.shape)}", ins)
    if reduce_cmd not in (None, cmd.idle, cmd.reset_reduce):
        fail("reduce_cmd", f"{ins} with {reduce_cmd} is not supported yet (idle, reset_reduce)", ins)
    return [(T.REDUCE, [reduce_res, y], [_op(reduce_op, "reduce", ins), 0, 1], [])], [reduce_res]


def exponential(dst, src, max_value=0.0, reduce_res=None, reduce_cmd=None, reduce_init=0.0, name=None):
    """dst = exp(src - max_value) (a number or a [P, 1] tile) in fp32, with reduce_res = the sum of
    the fp32 exponentials per partition. NeuronCore-v4 and newer."""
    from . import language as nl

    ins = "exponential"
    _generation(ins, ("gen4",), "NeuronCore-v4 (Trn3) and newer")
    _on_chip(dst, "dst", ins), _on_chip(src, "src", ins)
    _same_tile(dst, src, "dst", "src", ins)
    check(src.ndim <= 4, "shape", f"src has {src.ndim - 1} free dims; the limit is 3", ins)
    check(reduce_init in (None, 0, 0.0), "reduce_init", "reduce_init is for reduce_cmd=load_reduce, which is not "
                                                       "supported yet", ins)
    trace = T.active()
    y = trace.reg(src.shape)
    if isinstance(max_value, NkiTensor):
        _on_chip(max_value, "max_value", ins)
        neg = trace.reg((src.shape[0],) + (1,) * (src.ndim - 1))
        steps = [(T.BINARY, [neg, _column(max_value, src, "max_value", ins)], [2, 0, 1, 0], [0.0, -1.0]),
                 (T.ACTIVATE, [y, src, neg], [nl.exp.act, 0, 1], [1.0, 0.0])]
        reads = [src, max_value]
    else:
        steps = [(T.ACTIVATE, [y, src], [nl.exp.act, 0, 0], [1.0, -float(max_value)])]
        reads = [src]
    steps.append((T.COPY, [dst, y], [], []))
    tail, extra = _accumulate(trace, ins, y, reduce_res, nl.add, reduce_cmd, src.shape[0])
    trace.emit(ins, "vector", reads=reads, writes=[dst] + extra, steps=steps + tail,
               cycles=max(MIN_II, src.free_size))


_PAIRS = {("multiply", "add"), ("multiply", "subtract"), ("multiply", "bypass"), ("add", "bypass"),
          ("subtract", "bypass"), ("bypass", "bypass")}


def activate2(dst, op, data, imm0, imm1, op0, op1, relu_param=0.0, reverse0=False, reverse1=False, reduce_op=None,
              reduce_res=None, reduce_cmd=None, engine=None, name=None):
    """dst = op((data op0 imm0) op1 imm1) (imm a number or a [P, 1] tile; an op None or nl.bypass
    skips its stage), in fp32; with reduce_res, reduce_op (add, max, min) of the fp32 result per
    partition. NeuronCore-v4 and newer."""
    from . import language as nl
    from ._isa_base import _lower, _op, _RegView, _scalar_step

    ins = "activate2"
    _generation(ins, ("gen4",), "NeuronCore-v4 (Trn3) and newer")
    _on_chip(dst, "dst", ins), _on_chip(data, "data", ins)
    _same_tile(dst, data, "dst", "data", ins)
    names = tuple(getattr(o, "__name__", "bypass") if o is not None else "bypass" for o in (op0, op1))
    check(names in _PAIRS, "op", f"(op0, op1) = {names} is not one of the six documented pairs "
                                 f"({', '.join(f'({a}, {b})' for a, b in sorted(_PAIRS))})", ins)
    if relu_param not in (0, 0.0):
        fail("relu_param", "activate2 with a nonzero relu_param is not supported yet", ins)
    fn = _op(op, "act", ins)
    eng = _engine(engine, "scalar")
    check(eng in ("scalar", "gpsimd"), "engine", f"activate2 runs on the Scalar or GpSimd engine, not {eng}", ins)
    check(reduce_res is None or eng == "scalar", "engine", "only the Scalar engine reduces (reduce_res)", ins)
    _no_gpsimd_psum(eng, (dst, data), ins)
    trace = T.active()
    x, steps = data, []
    for o, imm, rev in ((op0, imm0, reverse0), (op1, imm1, reverse1)):
        if o is None or getattr(o, "__name__", "") == "bypass":
            continue
        mid = _RegView(trace.reg(data.shape), data)
        steps.append(_scalar_step(mid, x, o, imm, rev, ins))
        x = mid
    y = _RegView(trace.reg(data.shape), data)
    steps += [(T.ACTIVATE, [y, x], [fn, 0, 0], [1.0, 0.0]), (T.COPY, [dst, y], [], [])]
    tail, extra = _accumulate(trace, ins, y, reduce_res, reduce_op or nl.add, reduce_cmd, data.shape[0])
    reads = [data] + [i for i in (imm0, imm1) if isinstance(i, NkiTensor)]
    trace.emit(ins, eng, reads=reads, writes=[dst] + extra, steps=_lower(steps + tail),
               cycles=(GPSIMD_START if eng == "gpsimd" else 0) + max(MIN_II, data.free_size))


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
    T.active().emit(ins, eng, reads=[], writes=[dst], steps=[(RNG, [dst], [code, _BITS], [])],
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
            return [(RNG, [out], [_VECTOR, _UNIFORM], [])]
        return [(RNG, [u], [_VECTOR, _UNIFORM], []), (T.BINARY, [u, u], [2, 0, 1, 0], [0.0, hi_v - lo_v]),
                (T.BINARY, [out, u], [0, 0, 1, 0], [0.0, lo_v])]
    width = trace.reg((out.shape[0],) + (1,) * (out.ndim - 1))

    def pair(t, v):
        return ([t], 0) if t is not None else ([], 1)

    (a_ops, a_s), (b_ops, b_s) = pair(hi_t, hi_v), pair(lo_t, lo_v)
    return [(RNG, [u], [_VECTOR, _UNIFORM], []),
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
    T.active().emit(ins, "vector", reads=[], writes=[dst], steps=[(RNG, [dst], [_VECTOR, _UNIFORM], [])],
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
    steps = [(RNG, [u], [_VECTOR, _UNIFORM], []), compare, (T.WHERE, [dst, keep, data, _const_like(0, data)], [], [])]
    reads = [data] + ([prob] if isinstance(prob, NkiTensor) else [])
    trace.emit(ins, "vector", reads=reads, writes=[dst], steps=steps, cycles=max(MIN_II, data.free_size))


def set_rng_seed(src_seeds, name=None):
    """Seeds every lane of the Vector engine's generators from one 32-bit value ([1, 1] tile)."""
    ins = "set_rng_seed"
    _on_chip(src_seeds, "src_seeds", ins)
    check(src_seeds.shape[0] == 1 and src_seeds.free_size == 1, "shape",
          f"src_seeds must be a [1, 1] tile, got {tuple(src_seeds.shape)}", ins)
    check(src_seeds.dtype.itemsize == 4, "dtype", f"src_seeds must hold a 32-bit value, not {src_seeds.dtype}", ins)
    T.active().emit(ins, "vector", reads=[src_seeds], writes=[], steps=[(RNG, [src_seeds], [_VECTOR, _SEED], [])],
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
    T.active().emit(ins, eng, reads=[src_seeds], writes=[], steps=[(RNG, [src_seeds], [code, _SET], [])],
                    cycles=MIN_II)


def rand_get_state(dst, engine=None, name=None):
    """dst's rows = the engine's generator state of lanes 0..P-1 (what rand_set_state takes)."""
    ins = "rand_get_state"
    eng, code = _state_engine(engine, dst, "dst", ins)
    T.active().emit(ins, eng, reads=[], writes=[dst], steps=[(RNG, [dst], [code, _GET], [])], cycles=MIN_II)


# --- generation-only instructions not implemented here ----------------------------------------
def _mx_only(ins):
    _generation(ins, ("gen4",), "NeuronCore-v4 (Trn3) and newer")
    fail("not supported yet", f"{ins} (MX block-scaled formats) is not supported yet", ins)


def nc_matmul_mx(*args, **kwargs):
    _mx_only("nc_matmul_mx")


def quantize_mx(*args, **kwargs):
    _mx_only("quantize_mx")


# Counted as missing in the coverage table: on their generation they only raise.
nc_matmul_mx.not_supported_yet = quantize_mx.not_supported_yet = True


__all__ = ["tensor_copy_predicated", "dma_transpose", "nc_stream_shuffle", "sequence_bounds", "rng", "rand2",
           "dropout", "set_rng_seed", "rand_set_state", "rand_get_state", "nc_matmul_mx", "quantize_mx",
           "nc_n_gather", "nonzero_with_count", "exponential", "activate2"]
