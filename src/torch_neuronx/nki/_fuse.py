"""Steps the executor runs in place of an instruction's own, the instructions (their rules, their
costs) staying as traced: matmul groups and forwarded copies.

One host GEMM for a matmul accumulation group whose result is only rounded to its operands' 16-bit
dtype: a run of consecutive `nc_matmul`s into one PSUM tile (the first opening the group, the rest
accumulating), read next by a single `tensor_copy` into a bf16/fp16 tile and by nothing else before
the tile is written again. The PE array sums in fp32 and the copy rounds once; the host's 16-bit
GEMM over the concatenated K sums in fp32 and rounds once too, so the copy gives the same values up
to the order of fp32 additions — at the host's 16-bit GEMM speed instead of an fp32 GEMM per
instruction. Only the executed steps change: the instructions, their rules and costs stay."""
from __future__ import annotations

import torch

from ._tensor import NkiTensor

MATMUL_GROUP = 10  # csrc/nki/program.h kMatmulGroup
_HALF = (torch.bfloat16, torch.float16)


def _key(t: NkiTensor):
    return (t.storage.id, t.offset, t.shape, t.strides)


def _overlaps(entries, st, lo, hi):
    return any(s is st and a < hi and lo < b for s, a, b in entries)


def groups(instrs) -> dict:
    """{instruction index: the steps that replace its own} for every fusable group."""
    out, i, n = {}, 0, len(instrs)
    while i < n:
        ins = instrs[i]
        if ins.name != "nc_matmul" or ins.steps[0][2][0] != 0:
            i += 1
            continue
        dst, st, mv = ins.steps[0][1]
        dtype = st.dtype
        j = i + 1
        while (j < n and instrs[j].name == "nc_matmul" and instrs[j].steps[0][2][0] == 1
               and _key(instrs[j].steps[0][1][0]) == _key(dst)
               and all(t.dtype == dtype for t in instrs[j].steps[0][1][1:])):
            j += 1
        if j - i >= 2 and dtype in _HALF and mv.dtype == dtype and _consumed_once(instrs, j, dst, dtype):
            pairs = [t for k in range(i, j) for t in instrs[k].steps[0][1][1:]]
            for k in range(i, j - 1):
                out[k] = []
            out[j - 1] = [(MATMUL_GROUP, [dst, *pairs], [], [])]
        i = j
    return out


def _consumed_once(instrs, start, dst, dtype) -> bool:
    """The next access to dst's memory is one tensor_copy of exactly dst into a `dtype` tile, and
    nothing reads that memory after it before something writes it again."""
    (st, lo, hi), copied = instrs[start - 1].writes[0], False
    for ins in instrs[start:]:
        reads, writes = _overlaps(ins.reads, st, lo, hi), _overlaps(ins.writes, st, lo, hi)
        if not copied:
            if not (reads or writes):
                continue
            op, operands, _, _ = ins.steps[0] if len(ins.steps) == 1 else (None, [], [], [])
            if (ins.name != "tensor_copy" or writes or not isinstance(operands[1], NkiTensor)
                    or _key(operands[1]) != _key(dst) or operands[0].dtype != dtype):
                return False
            copied = True
        elif reads:
            return False
        elif writes:
            return True
    return copied


def forwarded_copies(instrs, skip) -> dict:
    """{instruction index: the steps that replace its own} for every DMA from HBM into an on-chip
    tile that one later instruction reads and nothing else uses: the reader takes the DMA's source view in
    place of the tile, and the DMA moves nothing. The same values arrive (one dtype, one shape, and
    nothing writes the source in between); a copy pass of the tile's size is saved. Instructions
    in `skip` (a fused group's) are left as they are."""
    from . import _trace as T

    out = {}
    for i, ins in enumerate(instrs):
        if i in skip or i in out or ins.name != "dma_copy" or len(ins.steps) != 1 or ins.steps[0][0] != T.COPY:
            continue
        dst, src = ins.steps[0][1]
        # From HBM only: an on-chip source's tile would have to live on to the reader, and the
        # allocator has already placed tiles by their traced lifetimes.
        if not (isinstance(dst, NkiTensor) and isinstance(src, NkiTensor)) or not dst.on_chip or src.on_chip:
            continue
        if (dst.dtype != src.dtype or dst.shape != src.shape
                or any(t.dynamic is not None or t.vector is not None for t in (dst, src))):
            continue
        st = dst.storage
        uses = (k for k in range(i + 1, len(instrs)) if any(s is st for s, _, _ in instrs[k].reads + instrs[k].writes))
        j = next(uses, None)
        if j is None or j in skip or j in out or st.last != j or any(s is st for s, _, _ in instrs[j].writes):
            continue
        views = [o for step in instrs[j].steps for o in step[1] if isinstance(o, NkiTensor) and o.storage is st]
        if not views or any(_key(o) != _key(dst) or o.dtype != dst.dtype for o in views):
            continue
        lo, hi = T._span(src)
        if any(_overlaps(instrs[k].writes, src.storage, lo, hi) for k in range(i + 1, j + 1)):
            continue
        out[i] = []
        out[j] = [(op, [src if isinstance(o, NkiTensor) and o.storage is st else o for o in operands], ints, floats)
                  for op, operands, ints, floats in instrs[j].steps]
    return out
