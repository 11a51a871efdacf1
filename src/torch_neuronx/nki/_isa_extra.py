"""Instructions of issue 36's second round: predicated copy, the DMA transpose and DMA compute,
the quadrant shuffle, segment bounds, gathers and compaction, match-and-replace, and NeuronCore-v4's
exponential and activate2. Semantics and rules from the NKI 2.33 API reference. The random number
instructions are in _isa_rng.py."""
from __future__ import annotations

import torch

from . import _trace as T
from ._errors import check, fail
from ._isa_base import GPSIMD_START, MIN_II, _column, _engine, _no_gpsimd_psum, _on_chip, _same_tile, _tensor
from ._tensor import PSUM, SBUF, NkiTensor

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
    T.active().emit(ins, "gpsimd", reads=[data, indices], writes=[dst],
                    steps=[(T.GATHER, [dst, data, indices], [], [])], cycles=GPSIMD_START + n * -(-n // 512))




def local_gather(dst, src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, name=None):
    """Each GpSimd core (16 partitions) flattens its partitions' uint16 `index` values partition
    first and keeps the first `num_valid_indices`; each of its partitions then reads, for every
    index i, the `num_elem_per_idx` elements from i on of its own row of `src_buffer` (free dims
    flattened). dst holds them in that order: num_valid_indices x num_elem_per_idx per partition."""
    ins = "local_gather"
    for t, w in ((dst, "dst"), (src_buffer, "src_buffer"), (index, "index")):
        _on_chip(t, w, ins, allowed=(SBUF,))
    check(index.dtype == torch.uint16, "dtype", f"index is {index.dtype}; it must be uint16", ins)
    check(dst.dtype == src_buffer.dtype, "dtype",
          f"dst is {dst.dtype} and src_buffer {src_buffer.dtype}; a gather casts nothing", ins)
    parts = src_buffer.shape[0]
    check(index.shape[0] == parts and dst.shape[0] == parts and parts % 16 == 0, "shape",
          f"src_buffer, index and dst span {parts}, {index.shape[0]} and {dst.shape[0]} partitions; they must "
          f"match and be a multiple of 16 (one GpSimd core's)", ins)
    check(num_elem_per_idx in (1, 2, 4, 8, 16, 32), "num_elem_per_idx",
          f"num_elem_per_idx is {num_elem_per_idx}; it must be 1, 2, 4, 8, 16 or 32", ins)
    per_core = index.size // (parts // 16)
    valid = per_core if num_valid_indices is None else num_valid_indices
    check(isinstance(valid, int) and 1 <= valid <= min(per_core, 4096), "num_valid_indices",
          f"num_valid_indices is {valid}; each core has {per_core} indices and takes at most 4096", ins)
    n = valid * num_elem_per_idx
    check(dst.free_size == n, "shape", f"dst holds {dst.free_size} elements per partition; the gather gives "
                                       f"{valid} x {num_elem_per_idx} = {n}", ins)
    T.active().emit(ins, "gpsimd", reads=[src_buffer, index], writes=[dst],
                    steps=[(T.LOCAL_GATHER, [dst, src_buffer, index], [num_elem_per_idx, valid], [])],
                    cycles=GPSIMD_START + n)


def nonzero_with_count(dst, src, index_offset=0, padding_val=-1, name=None):
    """On partitions 0, 16, ..., 112 (one per GpSimd core): dst[p, :N] = the indices (+ index_offset)
    of src[p]'s N nonzero elements in order (free dims flattened, T elements), dst[p, N:T] =
    padding_val, dst[p, T] = N. Other partitions of dst are left as they were. NeuronCore-v3 and
    newer. One kNonzero step compacts each row in one pass."""
    ins = "nonzero_with_count"
    _generation(ins, ("gen3", "gen4"), "NeuronCore-v3 (Trn2) and newer")
    _on_chip(dst, "dst", ins, allowed=(SBUF,)), _on_chip(src, "src", ins, allowed=(SBUF,))
    t = src.free_size
    check(dst.shape[0] == src.shape[0] and dst.free_size == t + 1, "shape",
          f"dst must hold [{src.shape[0]}, {t + 1}] elements for src {tuple(src.shape)} (the indices, then the "
          f"count), got {tuple(dst.shape)}", ins)
    v, d = src[0:src.shape[0]:16], dst[0:dst.shape[0]:16]
    T.active().emit(ins, "gpsimd", reads=[src], writes=[dst],
                    steps=[(T.NONZERO, [d, v], [], [float(index_offset), float(padding_val)])],
                    cycles=GPSIMD_START + 2 * t)


def nc_match_replace8(dst, data, vals, imm, dst_idx=None, name=None):
    """dst = data with the first occurrence of each of vals' 8 values per partition replaced by imm,
    value after value (a repeated value replaces successive occurrences); dst_idx = their indices
    (the free dims flattened). In fp32, on the Vector engine."""
    ins = "nc_match_replace8"
    _on_chip(dst, "dst", ins), _on_chip(data, "data", ins), _on_chip(vals, "vals", ins)
    _same_tile(dst, data, "dst", "data", ins)
    n = data.free_size
    check(data.ndim <= 5 and vals.ndim <= 3, "shape", f"data has {data.ndim} dims and vals {vals.ndim}; the limits "
                                                      f"are 5 and 3", ins)
    check(n <= 16384, "size", f"data has {n} elements per partition; the limit is 16384", ins)
    check(vals.shape[0] == data.shape[0] and vals.free_size == 8, "shape",
          f"vals must hold 8 values for each of data's {data.shape[0]} partitions, got {tuple(vals.shape)}", ins)
    if not isinstance(imm, (int, float)) or isinstance(imm, bool):
        fail("operand", f"imm is a number, not {type(imm).__name__}", ins)
    operands, writes = [dst, data, vals], [dst]
    if dst_idx is not None:
        _on_chip(dst_idx, "dst_idx", ins)
        check(dst_idx.shape[0] == data.shape[0] and dst_idx.free_size == 8, "shape",
              f"dst_idx must be [{data.shape[0]}, 8], got {tuple(dst_idx.shape)}", ins)
        check(dst_idx.dtype in (torch.uint16, torch.uint32), "dtype",
              f"dst_idx must be uint16 or uint32, not {dst_idx.dtype}", ins)
        operands.append(dst_idx)
        writes.append(dst_idx)
    T.active().emit(ins, "vector", reads=[data, vals], writes=writes,
                    steps=[(T.MATCH_REPLACE8, operands, [], [float(imm)])], cycles=max(MIN_II, n))


def dma_compute(dst, srcs, reduce_op=None, scales=None, unique_indices=True, name=None):
    """dst = srcs[0] + srcs[1] + ... (up to 16 tensors of dst's element count, HBM or SBUF), in fp32
    by the DMA engines' compute logic; scales must be 1.0 and reduce_op nl.add, as documented."""
    ins = "dma_compute"
    _tensor(dst, "dst", ins)
    srcs = list(srcs)
    check(1 <= len(srcs) <= 16, "srcs", f"dma_compute takes 1 to 16 srcs, got {len(srcs)}", ins)
    check(reduce_op is None or getattr(reduce_op, "__name__", "") == "add", "op",
          f"reduce_op must be nl.add, got {getattr(reduce_op, '__name__', reduce_op)}", ins)
    check(scales is None or (len(scales) == len(srcs) and all(float(x) == 1.0 for x in scales)), "scales",
          f"scales must be one 1.0 per src (or None), got {scales}", ins)
    views = []
    for i, t in enumerate(srcs):
        _tensor(t, f"srcs[{i}]", ins)
        for x, w in ((t, f"srcs[{i}]"), (dst, "dst")):
            check(x.buffer != PSUM, "memory", f"{w} is in PSUM; DMA reads and writes HBM or SBUF", ins)
        check(t.size == dst.size, "shape", f"srcs[{i}] {tuple(t.shape)} and dst {tuple(dst.shape)} hold different "
                                           f"numbers of elements", ins)
        if tuple(t.shape) != tuple(dst.shape):
            if not t.is_contiguous() or t.on_chip or dst.on_chip:
                fail("shape", f"srcs[{i}] {tuple(t.shape)} differs in shape from dst {tuple(dst.shape)}; a reshape is "
                              f"supported for contiguous HBM tensors only (not supported yet otherwise)", ins)
            t = t.reshape(dst.shape)
        views.append(t)
    trace = T.active()
    acc = trace.reg(dst.shape)
    steps = [(T.COPY, [acc, views[0]], [], [])] if len(views) == 1 else \
        [(T.BINARY, [acc, views[0], views[1]], [0, 0, 0, 0], [0.0, 0.0])]
    steps += [(T.BINARY, [acc, acc, v], [0, 0, 0, 0], [0.0, 0.0]) for v in views[2:]]
    steps.append((T.COPY, [dst, acc], [], []))
    nbytes = sum(t.size * t.dtype.itemsize for t in srcs) + dst.size * dst.dtype.itemsize
    trace.emit(ins, "dma", reads=srcs, writes=[dst], steps=steps, dma=(nbytes, dst.shape[-1] * dst.dtype.itemsize))


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


# --- registers --------------------------------------------------------------------------------
class VirtualRegister:
    """An engine sequencer's scalar register (nisa.register_alloc). The program has no scalar
    registers or branches, so a register holds a value known when the kernel is traced: a loop
    over it (nl.dynamic_range) unrolls, as over an int. A value read from device memory while the
    program runs (nisa.register_load) is not supported yet."""

    __slots__ = ("value",)

    def __init__(self, value=None):
        self.value = value

    def __repr__(self):
        return f"VirtualRegister({self.value})"

    def known(self, what):
        if self.value is None:
            fail("register", f"{what} reads a register that holds no value (register_alloc() without one)")
        return self.value


def _immediate(x, what, ins):
    if isinstance(x, VirtualRegister):
        return x.known(ins)
    if isinstance(x, bool) or not isinstance(x, int):
        fail("operand", f"{what} is an int or a register, not {type(x).__name__}", ins)
    check(-2 ** 31 <= x < 2 ** 32, "range", f"{what} {x} does not fit a 32-bit register", ins)
    return x


def register_alloc(x=None):
    """A new register, holding the int x (or nothing yet)."""
    return VirtualRegister(None if x is None else _immediate(x, "x", "register_alloc"))


def register_move(dst, src, name=None):
    """dst = src (an int or another register)."""
    ins = "register_move"
    if not isinstance(dst, VirtualRegister):
        fail("operand", f"dst is a register (nisa.register_alloc), not {type(dst).__name__}", ins)
    dst.value = _immediate(src, "src", ins)


def register_load(dst, src, name=None):
    fail("not supported yet", "register_load reads its value from device memory while the program runs; the "
                              "program has no scalar registers or branches, so registers hold values known when "
                              "the kernel is traced (register_alloc(n), register_move) only", "register_load")


def register_store(dst, src, name=None):
    """dst (a [1, 1] 32-bit integer tile or HBM tensor) = the register's value."""
    ins = "register_store"
    _tensor(dst, "dst", ins)
    if not isinstance(src, VirtualRegister):
        fail("operand", f"src is a register (nisa.register_alloc), not {type(src).__name__}", ins)
    check(dst.size == 1 and dst.dtype in (torch.int32, torch.uint32), "shape",
          f"dst must be one 32-bit integer element, got {tuple(dst.shape)} {dst.dtype}", ins)
    trace = T.active()
    value = trace.const(torch.full(tuple(dst.shape), src.known(ins), dtype=torch.int64).to(dst.dtype))
    trace.emit(ins, "dma" if not dst.on_chip else "gpsimd", reads=[], writes=[dst],
               steps=[(T.COPY, [dst, value], [], [])], cycles=MIN_II, dma=(4, 4) if not dst.on_chip else None)


# --- generation-only instructions not implemented here ----------------------------------------
def _mx_only(ins):
    _generation(ins, ("gen4",), "NeuronCore-v4 (Trn3) and newer")
    fail("not supported yet", f"{ins} (MX block-scaled formats) is not supported yet", ins)


def nc_matmul_mx(*args, **kwargs):
    _mx_only("nc_matmul_mx")


def quantize_mx(*args, **kwargs):
    _mx_only("quantize_mx")


# Counted as missing in the coverage table: they only raise (the MX ones on their own generation).
nc_matmul_mx.not_supported_yet = quantize_mx.not_supported_yet = register_load.not_supported_yet = True


__all__ = ["tensor_copy_predicated", "nc_stream_shuffle", "sequence_bounds", "nc_matmul_mx", "local_gather",
           "quantize_mx", "nc_n_gather", "nonzero_with_count", "exponential", "activate2", "nc_match_replace8",
           "dma_compute", "VirtualRegister", "register_alloc", "register_move", "register_load", "register_store"]
