"""Tracing an NKI kernel into a program, once per signature.

The kernel's Python runs once on `NkiTensor`s that hold shapes and dtypes only: loops unroll, and
each `nisa` call checks the hardware's rules at the call and appends one instruction. An
instruction records what it reads and writes (for the cost model's dependencies and the
allocator's lifetimes), its engine and cost, the kernel line, and the whole-tile steps that
execute it (csrc/nki/program.h). After the trace, a first-fit allocator places every SBUF tile
and PSUM tile in its partition rows by lifetime (so capacity is checked on what is live at once,
as the compiler's allocator does), and the steps become one native program.
"""
from __future__ import annotations

import math
import threading
import weakref

import torch

from .. import _C
from . import _fuse, _profile
from ._errors import NkiTraceError, NkiValidationError, kernel_line
from ._tensor import HBM, ON_CHIP, PSUM, SBUF, SHARED_HBM, NkiTensor, Storage

_state = threading.local()

# Step codes and operand spaces of csrc/nki/program.h.
COPY, FILL, ACTIVATE, BINARY, REDUCE, MATMUL, TRANSPOSE, WHERE, TOP8, PARTITION_REDUCE = range(10)
SCAN, FIND_INDEX8 = 11, 12  # (10 is _fuse's matmul group)
RNG, GATHER, MATCH_REPLACE8, OFFSET_COPY, NONZERO, PRINT, LOCAL_GATHER = 13, 14, 15, 16, 17, 18, 19
_HBM, _SBUF, _PSUM, _CONST, _REG = range(5)
ACCUMULATOR = 7  # the register activation's reduce_cmd accumulates into
REGISTERS = 8
_ALIGN = 64


def active() -> "Trace":
    trace = getattr(_state, "trace", None)
    if trace is None:
        raise NkiTraceError("nki.language and nki.isa calls run only inside a kernel traced by nki.jit")
    return trace


class Instr:
    __slots__ = ("name", "engine", "cycles", "dma_bytes", "dma_row_bytes", "reads", "writes", "whole", "steps",
                 "flops", "line", "program", "phase")

    def __repr__(self):
        return f"Instr({self.name} on {self.engine}, line {self.line})"


def span_elements(t: NkiTensor) -> tuple:
    """The first and last element (of the view's dtype) a view fixed at trace time reaches."""
    lo = hi = t.offset
    for n, s in zip(t.shape, t.strides):
        if n > 1:
            hi, lo = (hi + (n - 1) * s, lo) if s >= 0 else (hi, lo + (n - 1) * s)
    return lo, hi


def _covers(t: NkiTensor) -> bool:
    """Whether a view fixed at trace time is every byte of its tile once: dense, gapless, from the
    start (a span alone cannot tell a strided view, which skips elements, from the whole)."""
    expect = 1
    for s, n in sorted((s, n) for n, s in zip(t.shape, t.strides) if n > 1):
        if s != expect:
            return False
        expect *= n
    st = t.storage
    return (t.offset == 0 and t.dynamic is None and t.vector is None
            and expect * t.dtype.itemsize == st.partition_bytes * st.shape[0])


def _span(t: NkiTensor) -> tuple:
    """The bytes a view touches, as an interval of its storage's dense layout (bytes, as views of
    one storage may differ in dtype: `ap(dtype=)`, `view(dtype)`)."""
    lo, hi = span_elements(t)
    return lo * t.dtype.itemsize, (hi + 1) * t.dtype.itemsize


def _same_view(a: NkiTensor, b: NkiTensor) -> bool:
    return (a.storage is b.storage and a.dtype == b.dtype and a.offset == b.offset and a.shape == b.shape
            and a.strides == b.strides)


def _apart(dst, inputs, same_ok) -> int:
    """1 when a step may compute straight into its destination: every input view is elsewhere, or
    (where `same_ok`) the destination's very view, read element for element before it is written.
    Registers and constants are memory of their own; a view that moves at run time never qualifies."""
    if not isinstance(dst, NkiTensor) or dst.dynamic is not None or dst.vector is not None:
        return 0
    lo, hi = _span(dst)
    for i, t in enumerate(inputs):
        if not isinstance(t, NkiTensor) or t.storage is not dst.storage:
            continue
        if t.dynamic is not None or t.vector is not None:
            return 0
        if same_ok[i] and _same_view(t, dst):
            continue
        a, b = _span(t)
        if a < hi and lo < b:
            return 0
    return 1


# Steps that compute into their destination when it is apart from their inputs take the flag last.
_DIRECT = {ACTIVATE: lambda n: [True] + [False] * (n - 1), BINARY: lambda n: [True] * n,
           SCAN: lambda n: [False] * n}


def _with_direct_flag(op, operands, ints):
    if op not in _DIRECT:
        return list(ints)
    inputs = operands[1:]
    return [*ints, _apart(operands[0], inputs, _DIRECT[op](len(inputs)))]


# The trace of each live program, by its serial: a profiler's span of a launch is priced from it.
PROGRAMS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


_FP32_MAX = 3.4028234663852886e38
_FP32_ROUNDS_TO_INF = 3.4028235677973366e38  # the largest float plus half its ulp


def _immediate(value: float) -> float:
    """An instruction's float immediate is fp32: a literal just past its range (nki-library's
    `-3.4028235e38`) rounds to the largest float as the compiler rounds it, further out to inf."""
    if math.isfinite(value) and abs(value) > _FP32_MAX:
        return math.copysign(_FP32_MAX if abs(value) < _FP32_ROUNDS_TO_INF else math.inf, value)
    return value


class Trace:
    def __init__(self, profile: _profile.CoreProfile, strict: bool):
        self.profile, self.strict = profile, strict
        self.instrs: list[Instr] = []
        self.storages: list[Storage] = []
        self.hbm: list[Storage] = []
        self.constants: list[torch.Tensor] = []
        self.shared: list[Storage] = []  # shared_hbm allocations, by order (every SPMD instance shares them)
        self.shared_cursor = 0
        self.program_id, self.grid = (0,), (1,)
        # Cores meet at nisa.core_barrier and nisa.sendrecv: each starts a new phase of the program
        # tracing; the programs are traced one after another and build() runs every program's phase k
        # before any program's phase k + 1 (what the cores' waiting guarantees on the hardware).
        self.phase = 0
        self.mailboxes: dict = {}  # (sender, receiver, pipe, n) -> the HBM buffer of sendrecv's n-th message
        self.sent: dict = {}  # (sender, receiver, pipe) -> messages sent / received so far
        self.matmul_open: dict = {}  # PSUM storage id -> {view key: True} opened by a matmul
        self.psum_other: set = set()  # PSUM storages another instruction wrote
        self._reg = 0

    def __enter__(self):
        self._outer = getattr(_state, "trace", None)
        _state.trace = self
        return self

    def __exit__(self, *exc):
        _state.trace = self._outer

    # --- memory -------------------------------------------------------------------------------
    def allocate(self, buffer, shape, dtype, name="") -> NkiTensor:
        shape = tuple(int(n) for n in shape)
        line = kernel_line()
        if buffer == SHARED_HBM:
            if self.shared_cursor < len(self.shared):  # another SPMD instance: the same output
                st = self.shared[self.shared_cursor]
                if st.shape != shape or st.dtype != dtype:
                    raise NkiValidationError(f"nki: ndarray: SPMD instances allocate different shared_hbm tensors "
                                             f"({st.shape} {st.dtype} and {shape} {dtype})\n  at {line}")
                self.shared_cursor += 1
                return NkiTensor(st)
            st = Storage(buffer, shape, dtype, name, ("out", len(self.shared)), line)
            self.shared.append(st)
            self.shared_cursor += 1
        elif buffer == HBM:
            st = Storage(buffer, shape, dtype, name, ("scratch", 0), line)
        else:
            st = Storage(buffer, shape, dtype, name, None, line)
            self._check_tile(st)
        self.storages.append(st)
        return NkiTensor(st)

    def _check_tile(self, st: Storage):
        p = self.profile
        if len(st.shape) < 2:
            raise NkiValidationError(f"nki: ndarray: on-chip tensors are at least 2-D ([partition, free...]), got "
                                     f"shape {st.shape}\n  at {st.line}")
        if st.shape[0] > 128:
            raise NkiValidationError(f"nki: ndarray: partition dimension {st.shape[0]} exceeds the 128 partitions "
                                     f"(nl.tile_size.pmax) of {st.buffer}\n  at {st.line}")
        capacity = p.sbuf_partition_bytes if st.buffer == SBUF else p.psum_partition_bytes
        if st.partition_bytes > capacity:
            raise NkiValidationError(
                f"nki: ndarray: a {st.buffer} tile of {st.partition_bytes} bytes per partition exceeds the "
                f"{capacity} bytes each {st.buffer.upper()} partition has on {p.name}\n  at {st.line}")

    def argument(self, shape, dtype, index) -> NkiTensor:
        st = Storage(HBM, shape, dtype, f"arg{index}", ("arg", index), None)
        self.storages.append(st)
        return NkiTensor(st)

    def reg(self, shape) -> tuple:
        self._reg = (self._reg + 1) % ACCUMULATOR
        return ("reg", self._reg, tuple(shape))

    def const(self, value: torch.Tensor) -> tuple:
        self.constants.append(value.contiguous())
        return ("const", len(self.constants) - 1, tuple(value.shape), value.dtype)

    # --- instructions -------------------------------------------------------------------------
    def emit(self, name, engine, *, reads, writes, steps, cycles=0, dma=None, flops=0) -> Instr:
        for t in reads + writes:
            if isinstance(t, NkiTensor) and t.invalid:
                raise NkiValidationError(f"nki: nisa.{name}: {t.invalid}\n  at {kernel_line()}")
        if name != "dma_copy" and any(isinstance(t, NkiTensor) and (t.dynamic is not None or t.vector is not None)
                                      for t in reads + writes):
            raise NkiTraceError(f"nki: nisa.{name} on an access pattern with a run-time offset (scalar_offset=) is "
                                f"not supported yet; load it with nisa.dma_copy\n  at {kernel_line()}")
        ins = Instr()
        ins.name, ins.engine, ins.cycles, ins.steps, ins.flops = name, engine, cycles, steps, flops
        ins.program, ins.phase = self.program_id, self.phase
        ins.dma_bytes, ins.dma_row_bytes = dma if dma else (0, 0)
        ins.reads = [(t.storage, *_span(t)) for t in reads if isinstance(t, NkiTensor)]
        ins.writes = [(t.storage, *_span(t)) for t in writes if isinstance(t, NkiTensor)]
        # A transfer at a run-time offset may skip what it would write (oob_mode=skip).
        moving = any(isinstance(t, NkiTensor) and (t.dynamic is not None or t.vector is not None)
                     for t in reads + writes)
        ins.whole = [] if moving else [t.storage for t in writes if isinstance(t, NkiTensor) and _covers(t)]
        ins.line = kernel_line()
        index = len(self.instrs)
        for st, _, _ in ins.reads + ins.writes:
            if st.first is None:
                st.first = index
            st.last = index
        for st, _, _ in ins.writes:
            if st.buffer == PSUM and name != "nc_matmul":
                self.psum_other.add(st.id)
                self.matmul_open.pop(st.id, None)
        self.instrs.append(ins)
        return ins

    # --- the program --------------------------------------------------------------------------
    def _written_whole(self, st) -> bool:
        """Whether the first instruction using `st` writes every byte of it without reading it first."""
        ins = self.instrs[st.first]
        return any(w is st for w in ins.whole) and not any(r is st for r, _, _ in ins.reads)

    def _interleave_phases(self):
        """Phase by phase, each program's instructions in order (a stable sort), then each storage's
        lifetime again from the new order (the allocator places tiles by it)."""
        self.instrs.sort(key=lambda ins: ins.phase)
        for st in self.storages:
            st.first = st.last = None
        for index, ins in enumerate(self.instrs):
            for st, _, _ in ins.reads + ins.writes:
                if st.first is None:
                    st.first = index
                st.last = index

    def _place(self, buffer, capacity, unit) -> int:
        """First-fit by lifetime; returns the bytes of each partition row the program uses."""
        tiles = sorted((s for s in self.storages if s.buffer == buffer and s.first is not None),
                       key=lambda s: (s.first, s.id))
        live, used = [], 0
        for st in tiles:
            live = [t for t in live if t.last >= st.first]
            size = -(-st.partition_bytes // unit) * unit
            taken = sorted((t.address, t.address + -(-t.partition_bytes // unit) * unit) for t in live)
            start = 0
            for lo, hi in taken:
                if start + size <= lo:
                    break
                start = max(start, hi)
            if start + size > capacity:
                held = sum(-(-t.partition_bytes // unit) * unit for t in live)
                raise NkiValidationError(
                    f"nki: {buffer} capacity: a {buffer} tile of {st.partition_bytes} bytes per partition does not "
                    f"fit beside the {held} bytes per partition of {len(live)} live {buffer} tiles; "
                    f"{self.profile.name} has {capacity} bytes per partition"
                    + (f" ({capacity // unit} banks of {unit} bytes)" if buffer == PSUM else "")
                    + f"\n  at {st.line}")
            st.address = start
            live.append(st)
            used = max(used, start + size)
        return used

    def operand(self, o, rows) -> tuple:
        if isinstance(o, tuple):
            if o[0] == "reg":
                return (_REG, o[1], torch.float32, 0, o[2], ())
            _, index, shape, dtype = o
            strides = [1] * len(shape)
            for d in range(len(shape) - 2, -1, -1):
                strides[d] = strides[d + 1] * shape[d + 1]
            return (_CONST, index, dtype, 0, shape, tuple(strides))
        st, item = o.storage, o.dtype.itemsize
        if st.buffer not in ON_CHIP:
            return (_HBM, self.hbm.index(st), o.dtype, o.offset * item, o.shape, o.strides)
        row = rows[st.buffer]
        free = st.partition_bytes // item  # a partition's row in elements of the view's dtype
        p0, f0 = divmod(o.offset, free)
        # A view's stride counts elements of the tile laid out partition after partition; in the arena
        # a partition is a row. A DMA may step partitions along any dim (dma_transpose), so each
        # stride splits into whole partitions and elements within one.
        strides = [(s // free) * (row // item) + s % free for s in o.strides]
        if o.shape[0] == 1:
            strides[0] = row // item
        space = _SBUF if st.buffer == SBUF else _PSUM
        return (space, 0, o.dtype, st.address + p0 * row + f0 * item, o.shape, tuple(strides))

    def build(self, name: str):
        p = self.profile
        if any(ins.phase for ins in self.instrs):
            self._interleave_phases()
        rows = {SBUF: _arena_row(self._place(SBUF, p.sbuf_partition_bytes, _ALIGN)),
                PSUM: _arena_row(self._place(PSUM, p.psum_partition_bytes, _profile.PSUM_BANK_BYTES))}
        order = {"arg": 0, "out": 1, "scratch": 2}
        self.hbm = sorted((s for s in self.storages if s.buffer in (HBM, SHARED_HBM)),
                          key=lambda s: (order[s.role[0]], s.role[1], s.id))
        # A fresh tile reads as zeros (strict: NaN for floats, else its dtype's largest value) until
        # written. The arena is zeroed once per run, but the allocator gives a dead tile's bytes to
        # a later one: a tile its first instruction does not wholly write is filled there.
        poison = {}
        for st in self.storages:
            if st.buffer in ON_CHIP and st.first is not None and (self.strict or not self._written_whole(st)):
                poison.setdefault(st.first, []).append(st)
        steps = []
        fused = _fuse.groups(self.instrs)
        fused.update(_fuse.forwarded_copies(self.instrs, skip=fused))
        for i, ins in enumerate(self.instrs):
            for st in poison.get(i, ()):
                value = 0.0 if not self.strict else math.nan if st.dtype.is_floating_point else \
                    float(_largest(st.dtype))
                steps.append((FILL, [self.operand(NkiTensor(st), rows)], [], [value]))
            for op, operands, ints, floats in fused.get(i, ins.steps):
                steps.append((op, [self.operand(o, rows) for o in operands], _with_direct_flag(op, operands, ints),
                              [_immediate(f) for f in floats]))
        io = [(math.prod(st.shape), st.dtype) for st in self.hbm]
        program = _C._NkiProgram(name, steps, self.constants, rows[SBUF], rows[PSUM], REGISTERS, io)
        PROGRAMS[program.serial] = self
        return program


def _arena_row(used: int) -> int:
    """The host arena's bytes per partition row: what the tiles use (the capacity check is done),
    rounded up to an odd number of 64-byte cache lines. A row of a power of two (8 KiB is common)
    puts the same element of every partition in one cache set, and a step streaming several
    partitions at once (a scan, a transpose) then misses in L1 on every access."""
    lines = max(1, -(-used // 64))
    return (lines + 1 - lines % 2) * 64


def _largest(dtype):
    return True if dtype == torch.bool else torch.iinfo(dtype).max
