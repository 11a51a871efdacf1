"""The Trainium cost model of a traced kernel: each instruction's cost on its engine (the NKI docs'
per-instruction estimates, in engine cycles at the profile's clocks; a dma_copy's bytes over a DMA
queue's rate, with a fixed start-up and short rows paying for their descriptors, split in packets
over the queues), scheduled as the hardware runs them: each engine executes its instructions in
program order, the engines and the 16 DMA queues run concurrently, and an instruction starts only
after the instructions it depends on finished (read after write, write after read and write after
write on overlapping memory, which the compiler's semaphores enforce). The latency is when the
last one finishes."""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from . import _profile
from ._tensor import PSUM, SBUF

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma")


def _dma_efficiency(row_bytes: int) -> float:
    """Share of a queue's rate a transfer reaches with rows of `row_bytes` contiguous bytes. The DMA
    guide: a transfer needs 2 KiB per partition at least and 4 KiB to saturate the engines, so the
    rate grows linearly up to 4 KiB rows. Below 1 KiB it stays at a quarter of the peak: AWS's
    matmul tutorial measures the same ~100 GB/s per core for its 256-byte-row and 1 KiB-row loads
    (tiled, hoisted and block-free versions, tests/test_nki_cost.py), not a rate proportional to the
    row. Rows of a few elements pay a descriptor element each (the 64-byte term)."""
    return min(1.0, max(row_bytes / 4096.0, 0.25 * row_bytes / (row_bytes + 64.0)))


@dataclass
class Estimate:
    """An estimate of a kernel on one profile's hardware: instructions and busy cycles per engine
    (DMA's in nanoseconds of queue time: it has no clock), the end-to-end latency, and FLOPs."""

    profile: str
    instructions: dict = field(default_factory=dict)
    cycles: dict = field(default_factory=dict)
    busy_us: dict = field(default_factory=dict)
    latency_us: float = 0.0
    flops: int = 0
    dma_bytes: int = 0
    cores: int = 1  # physical cores the launch grid's programs ran on

    @property
    def tflops(self) -> float:
        return self.flops / (self.latency_us * 1e-6) / 1e12 if self.latency_us else 0.0

    def __str__(self):
        where = "one NeuronCore" if self.cores == 1 else f"{self.cores} physical NeuronCores"
        lines = [f"estimate of {self.profile} hardware (cost model, {where}): {self.latency_us:.2f} us, "
                 f"{self.tflops:.2f} TFLOP/s, {self.dma_bytes / 1e6:.2f} MB moved by DMA"]
        for e in ENGINES:
            if self.instructions.get(e):
                unit = "ns" if e == "dma" else "cycles"
                lines.append(f"  {e:<7}{self.instructions[e]:>7} instructions {self.cycles[e]:>12,.0f} {unit:<6} "
                             f"busy {self.busy_us[e]:9.2f} us")
        return "\n".join(lines)


def _partitions(ins) -> int:
    """Partitions the on-chip side of a transfer spans (1 for HBM to HBM): a storage's partition p
    holds bytes [p * row, (p + 1) * row) of its dense layout, and the spans are in those bytes."""
    for st, lo, hi in ins.reads + ins.writes:
        if st.buffer in (SBUF, PSUM) and st.shape:
            row = max(1, st.free_elements * st.dtype.itemsize)
            return (hi - 1) // row - lo // row + 1
    return 1


def _overlaps(entries, lo, hi):
    return [e for e in entries if e[0] < hi and lo < e[1]]


def estimate(instrs, profile: _profile.CoreProfile, core_of=None) -> Estimate:
    """`core_of(program_id)`: the physical core a program of the launch grid runs on (all on one by
    default). Each core has its own engines and DMA queues; programs meet only in shared HBM."""
    hz = {"tensor": profile.tensor_hz, "vector": profile.vector_hz, "scalar": profile.scalar_hz,
          "gpsimd": profile.gpsimd_hz}
    out = Estimate(profile.name, {e: 0 for e in ENGINES}, {e: 0.0 for e in ENGINES}, {e: 0.0 for e in ENGINES})
    cores: dict = {}  # core -> (engines' free times, its DMA queues)
    writes: dict = {}  # storage id -> [(lo, hi, finish)]
    reads: dict = {}
    end = 0.0
    for ins in instrs:
        core = core_of(ins.program) if core_of is not None else 0
        free, queues = cores.setdefault(core, ({e: 0.0 for e in hz}, [0.0] * profile.dma_queues))
        ready = 0.0
        for st, lo, hi in ins.reads:
            for e in _overlaps(writes.get(st.id, ()), lo, hi):
                ready = max(ready, e[2])
        for st, lo, hi in ins.writes:
            for e in _overlaps(writes.get(st.id, ()), lo, hi) + _overlaps(reads.get(st.id, ()), lo, hi):
                ready = max(ready, e[2])
        engine = ins.engine if ins.engine in ENGINES else "vector"
        if engine == "dma":
            ns = profile.dma_fixed_ns + ins.dma_bytes / (profile.dma_queue_bytes_per_ns *
                                                         _dma_efficiency(ins.dma_row_bytes))
            # The hardware splits a transfer into packets, one per DMA engine per group of
            # partitions, and the engines move them in parallel (AWS's DMA overview): a 128-row
            # tile spreads over all 16 queues, a 4-row one over 4. Each packet takes its share of
            # the queue time, fixed cost included, on the queue that frees first; the transfer
            # ends with its last packet.
            packets = min(len(queues), _partitions(ins))
            finish = 0.0
            for _ in range(packets):
                done = max(heapq.heappop(queues), ready) + ns / packets
                heapq.heappush(queues, done)
                finish = max(finish, done)
            out.cycles["dma"] += ns
            out.dma_bytes += ins.dma_bytes
        else:
            ns = ins.cycles / hz[engine] * 1e9
            start = max(free[engine], ready)
            finish = free[engine] = start + ns
            out.cycles[engine] += ins.cycles
        out.instructions[engine] += 1
        out.busy_us[engine] += ns / 1e3
        out.flops += ins.flops
        end = max(end, finish)
        for st, lo, hi in ins.reads:
            reads.setdefault(st.id, []).append((lo, hi, finish))
        for st, lo, hi in ins.writes:
            writes[st.id] = [e for e in writes.get(st.id, ()) if not (e[0] >= lo and e[1] <= hi)] + [(lo, hi, finish)]
            if st.id in reads:
                reads[st.id] = [e for e in reads[st.id] if not (e[0] >= lo and e[1] <= hi and e[2] <= finish)]
    out.latency_us = end / 1e3
    out.cores = max(1, len(cores))
    return out
