"""The instructions of NKI's first increment (issue 24): data movement, elementwise, reductions,
activation, the Tensor Engine, statistics. Shared checks and enums: _isa_base.py."""
from __future__ import annotations

import math

import torch

from . import _profile
from . import _trace as T
from ._errors import check, fail
from ._isa_base import (
    _FLOATS, _LOW, GPSIMD_START, MIN_II, _column, _engine, _is_int, _lower, _no_gpsimd_psum, _on_chip, _op,
    _RegView, _same_tile, _scalar_step, _tensor, _two_inputs, matmul_perf_mode, reduce_cmd,
)
from ._tensor import HBM, PSUM, SBUF, SHARED_HBM, NkiTensor


# --- data movement ----------------------------------------------------------------------------
def _row_bytes(t: NkiTensor) -> int:
    """Contiguous bytes per descriptor row: the run a DMA moves in one piece."""
    run = 1
    for n, s in zip(reversed(t.shape), reversed(t.strides)):
        if s != run and n != 1:
            break
        run *= n
    return max(1, run) * t.dtype.itemsize


def dma_copy(dst, src, priority=None, oob_mode=None, dge_mode=None, engine=None, name=None):
    ins = "dma_copy"
    _tensor(dst, "dst", ins), _tensor(src, "src", ins)
    check(src.buffer != PSUM, "memory", "DMA cannot read PSUM; copy the tile to SBUF (nisa.tensor_copy) first", ins)
    check(dst.buffer != PSUM, "memory", "DMA cannot write PSUM; load into SBUF", ins)
    check(dst.size == src.size, "shape", f"dst {tuple(dst.shape)} and src {tuple(src.shape)} hold different numbers "
                                         f"of elements", ins)
    if dge_mode is not None and getattr(dge_mode, "name", "") == "hwdge":
        check(dst.dtype == src.dtype, "dtype", "dge_mode=hwdge copies without casting: dtypes must match", ins)
    nbytes = max(dst.size * dst.dtype.itemsize, src.size * src.dtype.itemsize)
    hbm_side = src if src.buffer in (HBM, SHARED_HBM) else dst
    if all(t.dynamic is None and t.vector is None for t in (src, dst)):
        T.active().emit(ins, "dma", reads=[src], writes=[dst], steps=[(T.COPY, [dst, src], [], [])],
                        dma=(nbytes, _row_bytes(hbm_side)))
        return
    _offset_copy(dst, src, oob_mode, nbytes, _row_bytes(hbm_side), ins)


def _offset_copy(dst, src, oob_mode, nbytes, row_bytes, ins):
    """A DMA whose HBM side moves by integers read when the program runs: the whole view by one
    (ap(scalar_offset=)), or each entry of one dim by its own (ap(vector_offset=)). Each integer is
    checked when read against the range that keeps the access inside its tensor (oob_mode=error,
    the default; oob_mode=skip: an access reaching outside is not made, in whole, as
    indexed_flatten's padded rows expect)."""
    offsets = [t for t in (src, dst) for o in (t.dynamic, t.vector) if o is not None]
    check(len(offsets) == 1, "access pattern", "a DMA takes one run-time offset, on one side", ins)
    moved, other, side = (src, dst, 1) if offsets[0] is src else (dst, src, 0)
    if moved.vector is not None:
        index, step, dim = moved.vector
        if tuple(other.shape) != tuple(moved.shape):
            raise NotImplementedError(f"nki: {ins} between {tuple(src.shape)} and {tuple(dst.shape)} with "
                                      f"vector_offset is not supported yet: give both sides the same shape")
    else:
        (index, step), dim = moved.dynamic, -1
    total = math.prod(moved.storage.shape) * moved.storage.dtype.itemsize // moved.dtype.itemsize
    lo, hi = T.span_elements(moved)  # under vector_offset the indirect dim's step is 0: one entry's span
    lowest, largest = (-(lo // step), (total - 1 - hi) // step) if step > 0 else (-2 ** 62, 2 ** 62)
    whole = NkiTensor(moved.storage)  # where the access lands is known only at run time
    reads = [src, index] if side == 0 else [whole, index]
    writes = [whole] if side == 0 else [dst]
    T.active().emit(ins, "dma", reads=reads, writes=writes,
                    steps=[(T.OFFSET_COPY, [dst, src, index],
                            [side, step * moved.dtype.itemsize, dim, lowest, largest, int(_skips(oob_mode))], [])],
                    dma=(nbytes, row_bytes))


def _skips(oob_mode) -> bool:
    return oob_mode is not None and getattr(oob_mode, "name", oob_mode) == "skip"


_DMA_TRANSPOSE_AXES = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}


def dma_transpose(dst, src, axes=None, priority=None, dge_mode=None, oob_mode=None, name=None):
    """dst = src with its axes permuted by the DMA engine: [1, 0], [2, 1, 0] or [3, 1, 2, 0], the
    only permutations the hardware has. Unlike a view, a DMA may move the partition dimension."""
    ins = "dma_transpose"
    _tensor(dst, "dst", ins), _tensor(src, "src", ins)
    check(src.buffer != PSUM and dst.buffer != PSUM, "memory", "DMA cannot read or write PSUM", ins)
    want = _DMA_TRANSPOSE_AXES.get(src.ndim)
    check(want is not None, "shape", f"src has {src.ndim} dimensions; a DMA transpose takes 2, 3 or 4", ins)
    axes = want if axes is None else tuple(int(a) for a in axes)
    check(axes == want, "axes", f"axes {axes} for a {src.ndim}-d tile; the DMA engine transposes only {want}", ins)
    check(dst.dtype == src.dtype, "dtype", f"dst {dst.dtype} and src {src.dtype}: a DMA transpose does not cast", ins)
    view = NkiTensor(src.storage, [src.shape[a] for a in axes], [src.strides[a] for a in axes], src.offset,
                     src.dtype, invalid=src.invalid)
    check(tuple(dst.shape) == tuple(view.shape), "shape",
          f"dst {tuple(dst.shape)} is not src {tuple(src.shape)} transposed by {axes} ({tuple(view.shape)})", ins)
    if dge_mode is not None and getattr(dge_mode, "name", "") == "hwdge":
        check(src.shape[0] == 16 and src.shape[-1] % 128 == 0 and src.dtype.itemsize == 2, "dge_mode",
              "a hardware-DGE transpose needs src.shape[0] == 16, src.shape[-1] a multiple of 128 and a 2-byte "
              "dtype", ins)
    # One side is read or written an element at a time: each element is its own descriptor row.
    T.active().emit(ins, "dma", reads=[src], writes=[dst], steps=[(T.COPY, [dst, view], [], [])],
                    dma=(src.size * src.dtype.itemsize, src.dtype.itemsize))


def tensor_copy(dst, src, engine=None, dtype=None, name=None):
    ins = "tensor_copy"
    _on_chip(dst, "dst", ins), _on_chip(src, "src", ins)
    _same_tile(dst, src, "dst", "src", ins)
    eng = _engine(engine, "vector")
    _no_gpsimd_psum(eng, (dst, src), ins)
    T.active().emit(ins, eng, reads=[src], writes=[dst], steps=[(T.COPY, [dst, src], [], [])],
                    cycles=max(MIN_II, src.free_size))


def memset(dst, value, engine=None, name=None):
    ins = "memset"
    _on_chip(dst, "dst", ins)
    if _is_int(dst) and dst.dtype != torch.bool:
        check(float(value) == int(value), "dtype", f"memset of an integer tile needs an integer value, got {value}",
              ins)
    eng = _engine(engine, "vector")
    _no_gpsimd_psum(eng, (dst,), ins)
    n = dst.free_size
    cycles = max(MIN_II, n // 2 if value == 0 and dst.dtype in _LOW else n)
    T.active().emit(ins, eng, reads=[], writes=[dst], steps=[(T.FILL, [dst], [], [float(value)])], cycles=cycles)


def _affine_values(shape, pattern, offset, channel_multiplier, ins):
    counts = [int(num) for _, num in pattern]
    check(math.prod(counts) == math.prod(shape[1:]), "pattern",
          f"pattern {pattern} covers {math.prod(counts)} elements per partition; the tile has {math.prod(shape[1:])}",
          ins)
    value = torch.full((shape[0],) + tuple(counts), float(offset), dtype=torch.float64)
    p = torch.arange(shape[0], dtype=torch.float64).view(-1, *([1] * len(counts)))
    value += p * channel_multiplier
    for d, (step, num) in enumerate(pattern):
        idx = torch.arange(int(num), dtype=torch.float64) * step
        value += idx.view([1] * (d + 1) + [-1] + [1] * (len(counts) - d - 1))
    return value.reshape(shape)


def iota(dst, pattern, offset=0, channel_multiplier=0, name=None):
    ins = "iota"
    _on_chip(dst, "dst", ins, allowed=(SBUF,))
    value = _affine_values(dst.shape, pattern, offset, channel_multiplier, ins)
    trace = T.active()
    trace.emit(ins, "gpsimd", reads=[], writes=[dst], steps=[(T.COPY, [dst, trace.const(value.to(torch.float32))],
                                                               [], [])],
               cycles=GPSIMD_START + dst.free_size)


def affine_select(dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op=None, offset=0, name=None):
    from . import language as nl

    ins = "affine_select"
    _on_chip(dst, "dst", ins, allowed=(SBUF,))
    _on_chip(on_true_tile, "on_true_tile", ins, allowed=(SBUF,))
    _same_tile(dst, on_true_tile, "dst", "on_true_tile", ins)
    cmp_op = cmp_op or nl.equal
    compare = {"equal": torch.eq, "not_equal": torch.ne, "greater": torch.gt, "greater_equal": torch.ge,
               "less": torch.lt, "less_equal": torch.le}.get(getattr(cmp_op, "__name__", ""))
    if compare is None:
        fail("op", f"cmp_op must be a comparison (nl.equal, nl.greater_equal, ...), got {cmp_op}", ins)
    cond = compare(_affine_values(on_true_tile.shape, pattern, offset, channel_multiplier, ins), 0)
    trace = T.active()
    trace.emit(ins, "gpsimd", reads=[on_true_tile], writes=[dst],
               steps=[(T.WHERE, [dst, trace.const(cond), on_true_tile], [], [float(on_false_value)])],
               cycles=GPSIMD_START + dst.free_size)


# --- elementwise ------------------------------------------------------------------------------
def tensor_tensor(dst, data1, data2, op, engine=None, name=None):
    ins = "tensor_tensor"
    _two_inputs(dst, data1, data2, ("dst", "data1", "data2"), ins)
    # Same partitions and elements per partition (_two_inputs); the free dims may be shaped apart, as
    # attention_tkg's [P, 2, 56] against [P, 112]: the engine streams both in order.
    code = _op(op, "alu", ins)
    integral = _is_int(data1) and _is_int(data2) and _is_int(dst)
    if getattr(op, "bitvec", False):
        check(integral, "dtype", f"{op.__name__} is a bitwise op: its operands and dst must be integer tiles", ins)
    eng = _engine(engine, "gpsimd" if getattr(op, "__name__", "") == "power" or
                  (integral and PSUM not in (dst.buffer, data1.buffer, data2.buffer)) else "vector")
    _no_gpsimd_psum(eng, (dst, data1, data2), ins)
    n = data1.free_size
    fast = PSUM in (data1.buffer, data2.buffer) or (
        all(t.dtype == torch.bfloat16 for t in (dst, data1, data2)) and op.__name__ in ("add", "subtract", "multiply"))
    T.active().emit(ins, eng, reads=[data1, data2], writes=[dst],
                    steps=[(T.BINARY, [dst, data1, data2], [code, 0, 0, int(integral)], [0.0, 0.0])],
                    cycles=max(MIN_II, n if fast else 2 * n))


def tensor_scalar(dst, data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False, engine=None,
                  name=None):
    ins = "tensor_scalar"
    _on_chip(dst, "dst", ins), _on_chip(data, "data", ins)
    _same_tile(dst, data, "dst", "data", ins)
    if op1 is not None and getattr(op0, "bitvec", False) != getattr(op1, "bitvec", False):
        fail("op", "op0 and op1 must both be bitwise or both be arithmetic", ins)
    trace = T.active()
    eng = _engine(engine, "vector")
    _no_gpsimd_psum(eng, (dst, data), ins)
    if op1 is None:
        steps = [_scalar_step(dst, data, op0, operand0, reverse0, ins)]
    else:
        mid = trace.reg(data.shape)
        first = _scalar_step(mid, data, op0, operand0, reverse0, ins)
        second = _scalar_step(dst, _RegView(mid, data), op1, operand1, reverse1, ins)
        steps = _lower([first, second])
    reads = [data] + [o for o in (operand0, operand1) if isinstance(o, NkiTensor)]
    trace.emit(ins, eng, reads=reads, writes=[dst], steps=steps, cycles=max(MIN_II, data.free_size))



def scalar_tensor_tensor(dst, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, name=None):
    ins = "scalar_tensor_tensor"
    _two_inputs(dst, data, operand1, ("dst", "data", "operand1"), ins)
    trace = T.active()
    mid = _RegView(trace.reg(data.shape), data)
    first = _scalar_step(mid, data, op0, operand0, reverse0, ins)
    code = _op(op1, "alu", ins)
    pair = [operand1, mid] if reverse1 else [mid, operand1]
    second = (T.BINARY, [dst, *pair], [code, 0, 0, 0], [0.0, 0.0])
    n = data.free_size
    fast = data.dtype == operand1.dtype == torch.bfloat16 and op0.__name__ == "subtract" and \
        op1.__name__ == "multiply" and n % 2 == 0
    reads = [data, operand1] + ([operand0] if isinstance(operand0, NkiTensor) else [])
    trace.emit(ins, "vector", reads=reads, writes=[dst], steps=_lower([first, second]), cycles=n if fast else 2 * n)


def _reduce_axes(data, axis, ins):
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(a % data.ndim for a in axes)
    check(0 not in axes, "axis", "reductions run along free axes; axis 0 is the partition axis "
                                 "(use tensor_partition_reduce)", ins)
    check(sorted(axes) == list(range(data.ndim - len(axes), data.ndim)), "axis",
          f"axis {axis} must be the trailing free axes of a {data.ndim}-D tile", ins)
    return min(axes)


def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=None):
    ins = "tensor_reduce"
    _on_chip(dst, "dst", ins), _on_chip(data, "data", ins)
    first = _reduce_axes(data, axis, ins)
    kept = math.prod(data.shape[1:first])
    check(dst.shape[0] == data.shape[0] and dst.free_size == kept, "shape",
          f"dst {tuple(dst.shape)} must hold the {kept} unreduced elements of each of data's {data.shape[0]} "
          f"partitions", ins)
    code = _op(op, "reduce", ins)
    n = data.free_size
    half = data.dtype == dst.dtype == torch.bfloat16 and op.__name__ in ("add", "maximum")
    T.active().emit(ins, "vector", reads=[data], writes=[dst],
                    steps=[(T.REDUCE, [dst, data], [code, int(bool(negate)), first], [])],
                    cycles=max(MIN_II, n // 2 if half else n))


def tensor_partition_reduce(dst, op, data, name=None):
    ins = "tensor_partition_reduce"
    _on_chip(dst, "dst", ins, allowed=(SBUF,)), _on_chip(data, "data", ins, allowed=(SBUF,))
    check(dst.shape[0] == 1 and dst.free_size == data.free_size, "shape",
          f"dst must be [1, {data.free_size}] for data {tuple(data.shape)}", ins)
    code = _op(op, "reduce", ins)
    T.active().emit(ins, "gpsimd", reads=[data], writes=[dst], steps=[(T.PARTITION_REDUCE, [dst, data], [code], [])],
                    cycles=GPSIMD_START + data.free_size * max(1, data.shape[0] // 16))


def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=reduce_cmd.idle,
               name=None):
    from . import language as nl

    ins = "activation"
    _on_chip(dst, "dst", ins), _on_chip(data, "data", ins)
    _same_tile(dst, data, "dst", "data", ins)
    fn = _op(op, "act", ins)
    trace = T.active()
    operands, flags, values, reads = [data], [fn, 0, 0], [1.0, 0.0], [data]
    if isinstance(scale, NkiTensor):
        _on_chip(scale, "scale", ins)
        operands.append(_column(scale, data, "scale", ins))
        flags[1] = 1
        reads.append(scale)
    else:
        values[0] = float(scale)
    if isinstance(bias, NkiTensor):
        _on_chip(bias, "bias", ins)
        operands.append(_column(bias, data, "bias", ins))
        flags[2] = 1
        reads.append(bias)
    elif bias is not None:
        values[1] = float(bias)
    if reduce_res is None and reduce_op is None and reduce_cmd in (reduce_cmd.idle, None):
        trace.emit(ins, "scalar", reads=reads, writes=[dst], steps=[(T.ACTIVATE, [dst, *operands], flags, values)],
                   cycles=max(MIN_II, data.free_size))
        return
    check(reduce_op is None or reduce_op is nl.add, "op", "activation's reduce_op must be nl.add", ins)
    # The reduction reads the activation's fp32 values: an fp32 dst holds them as they are (unless
    # it steps 0 along a dim, keeping one of several), so it serves as the intermediate.
    in_dst = dst.dtype == torch.float32 and all(st != 0 or n == 1 for n, st in zip(dst.shape, dst.strides))
    y = dst if in_dst else trace.reg(data.shape)
    part = trace.reg((data.shape[0], 1))
    acc = ("reg", T.ACCUMULATOR, (data.shape[0], 1))
    steps = [(T.ACTIVATE, [y, *operands], flags, values)] + ([] if in_dst else [(T.COPY, [dst, y], [], [])]) + \
        [(T.REDUCE, [part, y], [0, 0, 1], [])]
    cmd = reduce_cmd if reduce_cmd not in (None, reduce_cmd.idle) else reduce_cmd.reset_reduce
    if cmd == reduce_cmd.reset:
        steps.append((T.BINARY, [acc, part], [2, 0, 1, 0], [0.0, 0.0]))
    elif cmd == reduce_cmd.reset_reduce:
        steps.append((T.COPY, [acc, part], [], []))
    elif cmd == reduce_cmd.reduce:
        steps.append((T.BINARY, [acc, acc, part], [0, 0, 0, 0], [0.0, 0.0]))
    else:
        fail("reduce_cmd", f"{cmd} is not supported here (idle, reset, reduce, reset_reduce)", ins)
    writes = [dst]
    if reduce_res is not None:
        _on_chip(reduce_res, "reduce_res", ins)
        check(reduce_res.shape[0] == data.shape[0] and reduce_res.free_size == 1, "shape",
              f"reduce_res must be [{data.shape[0]}, 1], got {tuple(reduce_res.shape)}", ins)
        steps.append((T.COPY, [reduce_res, acc], [], []))
        writes.append(reduce_res)
    trace.emit(ins, "scalar", reads=reads, writes=writes, steps=steps, cycles=max(MIN_II, data.free_size) + MIN_II)


def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None):
    activation(dst, op, data, bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=reduce_res,
               reduce_cmd=reduce_cmd.reset_reduce)


def reciprocal(dst, data, name=None):
    from . import language as nl

    ins = "reciprocal"
    _on_chip(dst, "dst", ins), _on_chip(data, "data", ins)
    _same_tile(dst, data, "dst", "data", ins)
    T.active().emit(ins, "vector", reads=[data], writes=[dst],
                    steps=[(T.ACTIVATE, [dst, data], [nl.reciprocal.act, 0, 0], [1.0, 0.0])],
                    cycles=max(MIN_II, 8 * data.free_size))


# --- the Tensor Engine ------------------------------------------------------------------------
def nc_matmul(dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False, is_transpose=False,
              accumulate=None, tile_position=(), tile_size=(), perf_mode=None, name=None):
    ins = "nc_matmul"
    trace = T.active()
    prof = trace.profile
    _on_chip(stationary, "stationary", ins, allowed=(SBUF,))
    _on_chip(moving, "moving", ins, allowed=(SBUF,))
    _on_chip(dst, "dst", ins, allowed=(PSUM,))
    k, m, n = stationary.shape[0], stationary.free_size, moving.free_size
    check(moving.shape[0] == k, "contraction", f"stationary contracts {k} partitions, moving {moving.shape[0]}", ins)
    check(m <= 128, "stationary size", f"stationary free size {m} exceeds 128 (nl.tile_size.gemm_stationary_fmax)",
          ins)
    check(n <= prof.moving_fmax, "moving size",
          f"moving free size {n} exceeds {prof.moving_fmax} (nl.tile_size.gemm_moving_fmax on {prof.name})", ins)
    check(dst.shape[0] == m and dst.free_size == n, "shape",
          f"dst {tuple(dst.shape)} must be [{m}, {n}] for stationary {tuple(stationary.shape)} and moving "
          f"{tuple(moving.shape)}", ins)
    allowed_dst = (torch.float32, torch.bfloat16) if prof.nc_version == "gen4" else (torch.float32,)
    check(dst.dtype in allowed_dst, "dtype",
          f"a matmul writes {' or '.join(str(d) for d in allowed_dst)} PSUM tiles on {prof.name}, not {dst.dtype}", ins)
    check(dst.free_size * dst.dtype.itemsize <= _profile.PSUM_BANK_BYTES or prof.nc_version == "gen4", "psum bank",
          f"a matmul output of {dst.free_size} {dst.dtype} per partition does not fit one 2 KiB PSUM bank", ins)
    for t, w in ((stationary, "stationary"), (moving, "moving")):
        check(t.dtype in _FLOATS, "dtype", f"{w} is {t.dtype}; the PE array takes {', '.join(map(str, _FLOATS))}",
              ins)
    check((stationary.dtype == torch.float32) == (moving.dtype == torch.float32), "dtype",
          "fp32 operands multiply only with fp32 operands", ins)
    # double_row packs two fp8 pairs per PE and cycle (NeuronCore-v3 and v4): twice the rate
    double = perf_mode in (matmul_perf_mode.double_row, "double_row")
    check(perf_mode in (None, matmul_perf_mode.none, "none") or double, "perf_mode",
          f"perf_mode is {perf_mode!r}; nki.isa.matmul_perf_mode has none and double_row", ins)
    if double:
        fp8 = (torch.float8_e4m3fn, torch.float8_e5m2)
        check(stationary.dtype in fp8 and moving.dtype in fp8, "perf_mode",
              f"double_row multiplies fp8 operands, not {stationary.dtype} and {moving.dtype}", ins)
        check(not tile_size or tile_size[1] == 128, "perf_mode",
              "double_row cannot be combined with column tiling (tile_size of fewer than 128 columns)", ins)
    key = (dst.offset, dst.shape, dst.strides)
    opened = trace.matmul_open.setdefault(dst.storage.id, {})
    if accumulate is None:
        acc = key in opened
    elif accumulate:
        if key not in opened:
            other = dst.storage.id in trace.psum_other
            fail("accumulate", "accumulate=True onto PSUM values " + (
                "another instruction wrote: the first matmul into a PSUM location must not accumulate onto them"
                if other else "no matmul has written (accumulate=False or None opens the group)"), ins)
        acc = True
    else:
        acc = False
    opened[key] = True
    cycles = max(min(64, m), n) * (4 if stationary.dtype == torch.float32 else 1)
    cycles = -(-cycles // 2) if double else cycles
    trace.emit(ins, "tensor", reads=[stationary, moving] + ([dst] if acc else []), writes=[dst],
               steps=[(T.MATMUL, [dst, stationary, moving], [int(acc)], [])], cycles=cycles, flops=2 * k * m * n)


def nc_transpose(dst, data, engine=None, name=None):
    ins = "nc_transpose"
    eng = _engine(engine, "tensor" if data.buffer == SBUF and dst.buffer == PSUM else "vector")
    p, f = data.shape[0], data.free_size
    if eng == "tensor":
        _on_chip(data, "data", ins, allowed=(SBUF,)), _on_chip(dst, "dst", ins, allowed=(PSUM,))
        check(p <= 128 and f <= 128, "shape", f"the Tensor Engine transposes at most [128, 128], got [{p}, {f}]", ins)
        cycles = max(p, min(64, f))
    else:
        _on_chip(data, "data", ins), _on_chip(dst, "dst", ins)
        check(p <= 32 and f <= 32, "shape", f"the Vector Engine transposes at most [32, 32], got [{p}, {f}]", ins)
        cycles = max(MIN_II, f)
    check(dst.dtype == data.dtype, "dtype", f"dst is {dst.dtype}, data {data.dtype}: a transpose keeps the dtype", ins)
    check(dst.shape[0] == f and dst.free_size == p, "shape", f"dst must be [{f}, {p}] for data [{p}, {f}]", ins)
    T.active().emit(ins, eng, reads=[data], writes=[dst], steps=[(T.TRANSPOSE, [dst, data], [], [])], cycles=cycles,
                    flops=2 * p * f * 128 if eng == "tensor" else 0)


# --- statistics -------------------------------------------------------------------------------
def bn_stats(dst, data, name=None):
    ins = "bn_stats"
    _on_chip(dst, "dst", ins), _on_chip(data, "data", ins)
    f = data.free_size
    check(data.ndim == 2, "shape", f"bn_stats takes a [P, F] tile, got {tuple(data.shape)}", ins)
    check(f <= 512, "size", f"bn_stats takes at most 512 elements per partition (nl.tile_size.bn_stats_fmax), got {f}",
          ins)
    check(dst.shape[0] == data.shape[0] and dst.free_size == 6 and dst.ndim == 2, "shape",
          f"dst must be [{data.shape[0]}, 6]", ins)
    trace = T.active()
    steps = []
    for half, start in ((0, 0), (1, 1)):
        count = len(range(start, f, 2))
        stats = dst[:, 3 * half:3 * half + 3]
        steps.append((T.FILL, [stats[:, 0:1]], [], [float(count)]))
        if count == 0:
            steps += [(T.FILL, [stats[:, 1:2]], [], [0.0]), (T.FILL, [stats[:, 2:3]], [], [0.0])]
            continue
        part = data[:, start::2]
        mean = trace.reg((data.shape[0], 1))
        dev = trace.reg(part.shape)
        steps += [(T.REDUCE, [mean, part], [0, 0, 1], []),
                  (T.BINARY, [mean, mean], [2, 0, 1, 0], [0.0, 1.0 / count]),
                  (T.COPY, [stats[:, 1:2], mean], [], []),
                  (T.BINARY, [dev, part, mean], [1, 0, 0, 0], [0.0, 0.0]),
                  (T.BINARY, [dev, dev, dev], [2, 0, 0, 0], [0.0, 0.0]),
                  (T.REDUCE, [stats[:, 2:3], dev], [0, 0, 1], [])]
    trace.emit(ins, "vector", reads=[data], writes=[dst], steps=steps, cycles=max(MIN_II, f))


def bn_aggr(dst, data, name=None):
    ins = "bn_aggr"
    _on_chip(dst, "dst", ins), _on_chip(data, "data", ins)
    check(data.ndim == 2 and data.free_size % 3 == 0, "shape",
          f"bn_aggr takes [P, 3k] bn_stats groups, got {tuple(data.shape)}", ins)
    check(dst.shape[0] == data.shape[0] and dst.free_size == 2 and dst.ndim == 2, "shape",
          f"dst must be [{data.shape[0]}, 2] (mean, variance)", ins)
    trace = T.active()
    p = data.shape[0]
    counts, means, m2 = data[:, 0::3], data[:, 1::3], data[:, 2::3]
    total, mean, tmp, acc = (trace.reg((p, 1)) for _ in range(4))
    weighted = trace.reg(counts.shape)
    steps = [(T.REDUCE, [total, counts], [0, 0, 1], []),
             (T.BINARY, [weighted, counts, means], [2, 0, 0, 0], [0.0, 0.0]),
             (T.REDUCE, [mean, weighted], [0, 0, 1], []),
             (T.BINARY, [mean, mean, total], [3, 0, 0, 0], [0.0, 0.0]),
             (T.COPY, [dst[:, 0:1], mean], [], []),
             (T.BINARY, [weighted, means, mean], [1, 0, 0, 0], [0.0, 0.0]),
             (T.BINARY, [weighted, weighted, weighted], [2, 0, 0, 0], [0.0, 0.0]),
             (T.BINARY, [weighted, weighted, counts], [2, 0, 0, 0], [0.0, 0.0]),
             (T.REDUCE, [acc, weighted], [0, 0, 1], []),
             (T.REDUCE, [tmp, m2], [0, 0, 1], []),
             (T.BINARY, [acc, acc, tmp], [0, 0, 0, 0], [0.0, 0.0]),
             (T.BINARY, [acc, acc, total], [3, 0, 0, 0], [0.0, 0.0]),
             (T.COPY, [dst[:, 1:2], acc], [], [])]
    trace.emit(ins, "vector", reads=[data], writes=[dst], steps=steps, cycles=max(MIN_II, 13 * data.free_size // 3))


def max8(dst, src, name=None):
    ins = "max8"
    _on_chip(dst, "dst", ins), _on_chip(src, "src", ins)
    n = src.free_size
    check(8 <= n <= 16384, "size", f"max8 takes 8 to 16384 elements per partition, got {n}", ins)
    check(dst.shape[0] == src.shape[0] and dst.free_size == 8, "shape", f"dst must be [{src.shape[0]}, 8]", ins)
    T.active().emit(ins, "vector", reads=[src], writes=[dst], steps=[(T.TOP8, [dst, src], [], [])], cycles=n)
