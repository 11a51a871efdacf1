"""The instructions by which the programs of an SPMD launch (the logical cores of nki-library's
kernel[2]) meet: nisa.core_barrier and nisa.sendrecv. The software core traces the programs one
after another; each of these instructions ends a phase of its program, and the built program runs
every program's phase k before any program's phase k + 1 (_trace.Trace._interleave_phases), which is
what the cores' waiting for one another guarantees on the hardware."""
from __future__ import annotations

import numpy as np

from . import _trace as T
from ._errors import check, fail
from ._isa_base import _on_chip
from ._tensor import HBM, NkiTensor, SBUF


def _rank(trace) -> int:
    return int(np.ravel_multi_index(trace.program_id, trace.grid))


def _programs(trace) -> int:
    return int(np.prod(trace.grid))


def core_barrier(data, cores, engine=None, name=None):
    """Every core in `cores` waits here until all of them arrive; what each wrote before (to `data`
    in shared HBM) is then visible to all."""
    ins = "core_barrier"
    trace = T.active()
    check(isinstance(data, NkiTensor), "operand", f"data must be an NKI tensor, got {type(data).__name__}", ins)
    cores = list(cores) if isinstance(cores, (list, tuple)) else fail(
        "operand", f"cores must be a list of program ranks, got {type(cores).__name__}", ins)
    n = _programs(trace)
    if n == 1:  # a kernel written for LNC 2 run as one program (nki-library's kernels name cores [0, 1])
        return
    check(all(isinstance(c, int) and 0 <= c < n for c in cores), "cores",
          f"cores {cores} must be ranks of the launch's {n} programs", ins)
    check(_rank(trace) in cores, "cores", f"program {_rank(trace)} waits at a barrier of cores {cores} it is "
                                          f"not one of", ins)
    trace.phase += 1


def sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id=0, dma_engine=None, engine=None, name=None):
    """Send the on-chip tile `src` to program `send_to_rank` and receive program `recv_from_rank`'s
    tile into `dst` (the n-th message on a pipe meets the n-th on it). The message goes through an
    HBM buffer: written before the exchange, read after it."""
    ins = "sendrecv"
    trace = T.active()
    _on_chip(src, "src", ins, allowed=(SBUF,)), _on_chip(dst, "dst", ins, allowed=(SBUF,))
    n, me = _programs(trace), _rank(trace)
    for rank, what in ((send_to_rank, "send_to_rank"), (recv_from_rank, "recv_from_rank")):
        check(isinstance(rank, int) and 0 <= rank < n and rank != me, "rank",
              f"{what} {rank!r} must be another of the launch's {n} programs (this is program {me})", ins)
    check(src.dtype == dst.dtype and tuple(src.shape) == tuple(dst.shape), "shape",
          f"src {tuple(src.shape)} {src.dtype} and dst {tuple(dst.shape)} {dst.dtype} differ: a message arrives "
          f"as it was sent", ins)
    from . import isa as nisa

    out_key, in_key = (me, send_to_rank, pipe_id), (recv_from_rank, me, pipe_id)
    out_n, in_n = trace.sent.get(("out",) + out_key, 0), trace.sent.get(("in",) + in_key, 0)
    trace.sent[("out",) + out_key], trace.sent[("in",) + in_key] = out_n + 1, in_n + 1
    nisa.dma_copy(dst=_mailbox(trace, out_key + (out_n,), src), src=src)
    trace.phase += 1
    nisa.dma_copy(dst=dst, src=_mailbox(trace, in_key + (in_n,), dst))


def _mailbox(trace, key, like) -> NkiTensor:
    box = trace.mailboxes.get(key)
    if box is None:
        box = trace.mailboxes[key] = trace.allocate(HBM, tuple(like.shape), like.dtype, f"sendrecv{key}")
    if tuple(box.shape) != tuple(like.shape) or box.dtype != like.dtype:
        fail("shape", f"program {key[0]} sends a {tuple(box.shape)} {box.dtype} message on pipe {key[2]} and "
                      f"program {key[1]} receives it as {tuple(like.shape)} {like.dtype}", "sendrecv")
    return box
