"""Instructions of issue 36 (round two): the Vector Engine's scans (tensor_tensor_scan,
tensor_scalar_cumulative), tensor_scalar with a free-axis reduction, range_select, select_reduce
and nc_find_index8. Semantics and cost estimates from the NKI 2.33 API reference."""
from __future__ import annotations

import torch

from . import _trace as T
from ._errors import check, fail
from ._isa_base import MIN_II, _column, _on_chip, _op, _same_tile, _scalar_step, _start_value, _two_inputs
from ._isa_base import reduce_cmd as _cmd
from ._tensor import NkiTensor

# The ALU ops a scan's recurrence may use: the arithmetic ones (program.cpp's `alu`), not
# comparisons or bitwise ops.
_ARITHMETIC = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "abs_max", "abs_min", "fmod")


def _arithmetic(op, what, ins, unary_ok=False):
    code = _op(op, "alu", ins, unary_ok)
    name = getattr(op, "__name__", repr(op))
    check(name in _ARITHMETIC or (unary_ok and name == "abs"), "op",
          f"{what} must be an arithmetic ALU op ({', '.join(_ARITHMETIC)}), got {name}", ins)
    return code


def tensor_tensor_scan(dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False, name=None):
    """Per partition, along the (flattened) free elements j:
    dst[:, j] = op1(op0(data0[:, j], dst[:, j-1]), data1[:, j]), with dst[:, -1] = initial (a number
    or a [P, 1] tile); reverse0/reverse1 swap op0's/op1's operands. Computed in fp32."""
    ins = "tensor_tensor_scan"
    _two_inputs(dst, data0, data1, ("dst", "data0", "data1"), ins)
    codes = [_arithmetic(op0, "op0", ins), _arithmetic(op1, "op1", ins)]
    value, tile = _start_value(initial, "initial", data0.shape[0], ins)
    starts = [tile] if tile is not None else []
    operands, reads = [dst, data0, data1] + starts, [data0, data1] + starts
    flags = codes + [int(bool(reverse0)), int(bool(reverse1)), int(tile is not None)]
    # The docs give no separate estimate; a scan streams each partition's row once, as tensor_tensor.
    T.active().emit(ins, "vector", reads=reads, writes=[dst], steps=[(T.SCAN, operands, flags, [value])],
                    cycles=max(MIN_II, data0.free_size))


def tensor_scalar_reduce(dst, data, op0, operand0, reduce_op, reduce_res, reverse0=False,
                         reduce_cmd=_cmd.reset_reduce, reduce_init=None, reduce_res_negate=False, name=None):
    """dst = data op0 operand0 (as tensor_scalar, one op), and reduce_res[:, 0] = reduce_op of that
    result over all free axes (of the fp32 result, before dst's rounding, as activation's reduce)."""
    ins = "tensor_scalar_reduce"
    _on_chip(dst, "dst", ins), _on_chip(data, "data", ins), _on_chip(reduce_res, "reduce_res", ins)
    _same_tile(dst, data, "dst", "data", ins)
    check(data.ndim <= 4, "shape", f"data has {data.ndim - 1} free dims; the limit is 3", ins)
    check(reduce_res.shape[0] == data.shape[0] and reduce_res.free_size == 1, "shape",
          f"reduce_res must be [{data.shape[0]}, 1], got {tuple(reduce_res.shape)}", ins)
    _arithmetic(op0, "op0", ins, unary_ok=True)
    code = _op(reduce_op, "reduce", ins)
    if reduce_cmd not in (None, _cmd.reset_reduce) or reduce_init is not None:
        # The accumulator's other modes (reduce, load_reduce) carry state between instructions.
        fail("reduce_cmd", "tensor_scalar_reduce supports reduce_cmd=reset_reduce without reduce_init only "
                           "(not supported yet: the accumulating modes)", ins)
    trace = T.active()
    mid = trace.reg(data.shape)
    steps = [_scalar_step(mid, data, op0, operand0, reverse0, ins), (T.COPY, [dst, mid], [], []),
             (T.REDUCE, [reduce_res, mid], [code, int(bool(reduce_res_negate)), 1], [])]
    reads = [data] + ([operand0] if isinstance(operand0, NkiTensor) else [])
    trace.emit(ins, "vector", reads=reads, writes=[dst, reduce_res], steps=steps,
               cycles=max(MIN_II, data.free_size) + MIN_II)


def nc_find_index8(dst, data, vals, name=None):
    """dst[p, k] = the index of the first element of data's partition p (free dims flattened) equal
    to vals[p, k]; a value absent from the partition gives the all-ones sentinel of dst's dtype."""
    ins = "nc_find_index8"
    _on_chip(dst, "dst", ins), _on_chip(data, "data", ins), _on_chip(vals, "vals", ins)
    n = data.free_size
    check(data.ndim <= 4, "shape", f"data has {data.ndim - 1} free dims; the limit is 3", ins)
    check(8 <= n <= 16384, "size", f"nc_find_index8 takes 8 to 16384 elements per partition, got {n}", ins)
    check(vals.shape[0] == data.shape[0] and vals.free_size == 8, "shape",
          f"vals must hold 8 values for each of data's {data.shape[0]} partitions, got {tuple(vals.shape)}", ins)
    check(dst.shape[0] == data.shape[0] and dst.free_size == 8, "shape", f"dst must be [{data.shape[0]}, 8]", ins)
    check(dst.dtype in (torch.uint16, torch.uint32), "dtype", f"dst must be uint16 or uint32, not {dst.dtype}", ins)
    T.active().emit(ins, "vector", reads=[data, vals], writes=[dst],
                    steps=[(T.FIND_INDEX8, [dst, data, vals], [], [])], cycles=max(MIN_II, n))


_CUMULATIVE = {"add": 0.0, "subtract": 0.0, "multiply": 1.0, "maximum": float("-inf"), "minimum": float("inf")}


def tensor_scalar_cumulative(dst, src, op0, op1, imm0, imm1=None, reduce_cmd=_cmd.reset_reduce, reverse0=False,
                             name=None):
    """Per partition, along the (flattened) free elements i: reg = op1(op0(src[i], imm0), reg) (op0's
    operands swapped by reverse0), dst[i] = reg; reg starts at op1's identity (reset_reduce) or at
    imm1 (load_reduce). Lowered to tensor_scalar's step and a scan whose second op multiplies by one."""
    ins = "tensor_scalar_cumulative"
    _on_chip(dst, "dst", ins), _on_chip(src, "src", ins)
    _same_tile(dst, src, "dst", "src", ins)
    for t, w in ((dst, "dst"), (src, "src")):
        check(t.dtype not in (torch.int32, torch.uint32), "dtype", f"{w} is {t.dtype}: the Vector Engine's "
              f"cumulative reduction takes no 32-bit integer tiles", ins)
    _arithmetic(op0, "op0", ins)
    name1 = getattr(op1, "__name__", repr(op1))
    check(name1 in _CUMULATIVE, "op", f"op1 must be one of nl.{', nl.'.join(_CUMULATIVE)}, got {name1}", ins)
    code1 = _op(op1, "alu", ins)
    trace = T.active()
    mid = trace.reg(src.shape)
    ones = trace.const(torch.ones(1, src.free_size))  # one row: the scan gives it to every partition
    value, tile = _CUMULATIVE[name1], None  # a fresh accumulator: op1's identity
    if reduce_cmd == _cmd.load_reduce:
        value, tile = _start_value(imm1, "imm1 (reduce_cmd=load_reduce starts from it)", src.shape[0], ins)
    elif reduce_cmd not in (None, _cmd.idle, _cmd.reset_reduce):
        # reduce carries the accumulator over from an earlier instruction.
        fail("reduce_cmd", f"tensor_scalar_cumulative with {reduce_cmd} is not supported yet (reset_reduce, "
                           f"load_reduce)", ins)
    starts = [tile] if tile is not None else []
    reads = [src] + starts + ([imm0] if isinstance(imm0, NkiTensor) else [])
    steps = [_scalar_step(mid, src, op0, imm0, reverse0, ins),
             (T.SCAN, [dst, mid, ones] + starts, [code1, 2, 0, 0, int(tile is not None)], [value])]
    trace.emit(ins, "vector", reads=reads, writes=[dst], steps=steps, cycles=max(MIN_II, src.free_size))


_COMPARISONS = ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal")
FP32_LOWEST = -3.4028234663852886e38  # range_select's default fill (the docs' FP32_MIN)


def _compare(out, index, op, bound, like, ins, what):
    """`out = op(index, bound)`: index a one-row constant, bound a number or a [P, 1] tile (broadcast
    along `like`'s free dims). Returns the step and its result's shape."""
    code = _op(op, "alu", ins)
    name = getattr(op, "__name__", repr(op))
    check(name in _COMPARISONS, "op", f"{what} must be a comparison (nl.{', nl.'.join(_COMPARISONS)}), got {name}",
          ins)
    if isinstance(bound, NkiTensor):
        _on_chip(bound, "bound", ins)
        reg = out(like.shape)
        return (T.BINARY, [reg, index, _column(bound, like, "bound", ins)], [code, 0, 0, 0], [0.0, 0.0]), reg
    if not isinstance(bound, (int, float)):
        fail("operand", f"a bound is a number or a [P, 1] tile, not {type(bound).__name__}", ins)
    reg = out(index[2])
    return (T.BINARY, [reg, index], [code, 0, 1, 0], [0.0, float(bound)]), reg


def _select_tail(trace, ins, y, dst, reduce_res, reduce_op, reduce_cmd, data):
    """dst = y and, if asked, reduce_res = reduce_op(y) over the free axes (of the fp32 values)."""
    steps = [(T.COPY, [dst, y], [], [])]
    if reduce_res is None:
        return steps, [dst]
    _on_chip(reduce_res, "reduce_res", ins)
    check(reduce_res.shape[0] == data.shape[0] and reduce_res.free_size == 1, "shape",
          f"reduce_res must be [{data.shape[0]}, 1], got {tuple(reduce_res.shape)}", ins)
    check(reduce_res.dtype.is_floating_point, "dtype", f"reduce_res must be a float tile, not {reduce_res.dtype}", ins)
    if reduce_cmd not in (None, _cmd.idle, _cmd.reset_reduce):
        # reduce / load_reduce carry the accumulator over from an earlier instruction.
        fail("reduce_cmd", f"{ins} with {reduce_cmd} is not supported yet (idle, reset_reduce)", ins)
    steps.append((T.REDUCE, [reduce_res, y], [_op(reduce_op, "reduce", ins), 0, 1], []))
    return steps, [dst, reduce_res]


def range_select(dst, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=_cmd.reset_reduce,
                 reduce_res=None, reduce_op=None, range_start=0, on_false_value=..., name=None):
    """dst[p, j] = on_true_tile[p, j] where comp_op0(j + range_start, bound0[p]) and
    comp_op1(j + range_start, bound1[p]), else on_false_value (j: the flattened free index); with
    reduce_res, reduce_op (default max) of the result per partition. NeuronCore-v3 and newer."""
    from . import language as nl

    ins = "range_select"
    trace = T.active()
    check(trace.profile.nc_version != "gen2", "generation",
          f"range_select is available only on NeuronCore-v3 and newer, not on {trace.profile.name}", ins)
    data = on_true_tile
    _on_chip(dst, "dst", ins), _on_chip(data, "on_true_tile", ins)
    _same_tile(dst, data, "dst", "on_true_tile", ins)
    fill = FP32_LOWEST if on_false_value is ... or on_false_value is None else float(on_false_value)
    f = data.free_size
    # The free index, one row for every partition (the compares broadcast it).
    index = (torch.arange(f, dtype=torch.float64) + float(range_start)).to(torch.float32)
    idx = trace.const(index.reshape((1,) + tuple(data.shape[1:])))
    first, c0 = _compare(trace.reg, idx, comp_op0, bound0, data, ins, "comp_op0")
    second, c1 = _compare(trace.reg, idx, comp_op1, bound1, data, ins, "comp_op1")
    cond = trace.reg(data.shape if tuple(data.shape) in (c0[2], c1[2]) else c0[2])
    y = trace.reg(data.shape)
    steps = [first, second, (T.BINARY, [cond, c0, c1], [13, 0, 0, 0], [0.0, 0.0]),  # logical_and
             (T.WHERE, [y, cond, data], [], [fill])]
    tail, writes = _select_tail(trace, ins, y, dst, reduce_res, reduce_op or nl.maximum, reduce_cmd, data)
    reads = [data] + [b for b in (bound0, bound1) if isinstance(b, NkiTensor)]
    trace.emit(ins, "vector", reads=reads, writes=writes, steps=steps + tail, cycles=max(MIN_II, f))


_PREDICATES = (torch.int8, torch.uint8, torch.int16, torch.uint16)


def select_reduce(dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd=_cmd.idle, reduce_op=None,
                  reverse_pred=False, name=None):
    """dst = where(predicate (negated by reverse_pred), on_true, on_false); with reduce_res, the max
    of the result per partition."""
    from . import language as nl

    ins = "select_reduce"
    _two_inputs(dst, on_true, predicate, ("dst", "on_true", "predicate"), ins)
    check(predicate.dtype in _PREDICATES, "dtype",
          f"predicate is {predicate.dtype}; it must be int8, uint8, int16 or uint16", ins)
    check(on_true.dtype not in (torch.int32, torch.uint32), "dtype", f"on_true cannot be {on_true.dtype}", ins)
    reduce_op = reduce_op or nl.maximum
    check(getattr(reduce_op, "__name__", "") == "maximum", "op", "select_reduce's reduce_op supports only max", ins)
    if isinstance(on_false, NkiTensor):
        fail("on_false", "select_reduce with a [P, 1] on_false tile is not supported yet (give a number)", ins)
    if not isinstance(on_false, (int, float)):
        fail("operand", f"on_false is a number or a [P, 1] tile, not {type(on_false).__name__}", ins)
    trace = T.active()
    cond, y = trace.reg(on_true.shape), trace.reg(on_true.shape)
    steps = [(T.BINARY, [cond, predicate], [7 if reverse_pred else 8, 0, 1, 0], [0.0, 0.0]),  # == 0 / != 0
             (T.WHERE, [y, cond, on_true], [], [float(on_false)])]
    tail, writes = _select_tail(trace, ins, y, dst, reduce_res, reduce_op, reduce_cmd, on_true)
    trace.emit(ins, "vector", reads=[predicate, on_true], writes=writes, steps=steps + tail,
               cycles=max(MIN_II, on_true.free_size))
