"""The four steps of the NKI matrix-multiplication tutorial, written here in NKI's style (same
algorithmic structure as AWS's tutorial, not its code): `result = lhsT.T @ rhs` with the
contraction dimension K on the partitions. Shared by tests/test_nki_cost.py and benchmarks/nki.py.

1. tiled: every output tile reloads both operand tiles for each K step;
2. hoisted: an lhsT column of tiles is loaded once per output row, an rhs column once per tile;
3. block_free: blocks of output tiles share loaded operand tiles along both free dimensions;
4. block_all: K blocked too, wide coalesced row loads, partial sums kept in SBUF.
"""
import torch_neuronx.nki as nki
import torch_neuronx.nki.isa as nisa
import torch_neuronx.nki.language as nl

TM, TK, TN = 128, 128, 512  # stationary free size, partitions, moving free size


@nki.jit
def tiled(lhsT, rhs):
    K, M = lhsT.shape
    N = rhs.shape[1]
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        for n in nl.affine_range(N // TN):
            acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TK):
                a = nl.ndarray((TK, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
                b = nl.ndarray((TK, TN), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
                nisa.dma_copy(dst=b, src=rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                nisa.nc_matmul(dst=acc, stationary=a, moving=b)
            res = nl.ndarray((TM, TN), dtype=out.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], src=res)
    return out


def _load_column(src, col, width, kt):
    """The K // TK tiles of `src`'s columns [col, col + width), one dma_copy each."""
    tiles = []
    for k in nl.affine_range(kt):
        t = nl.ndarray((TK, width), dtype=src.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=src[k * TK:(k + 1) * TK, col:col + width])
        tiles.append(t)
    return tiles


def _store_tile(out, acc, m0, n0):
    res = nl.ndarray(acc.shape, dtype=out.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out[m0:m0 + acc.shape[0], n0:n0 + acc.shape[1]], src=res)


@nki.jit
def hoisted(lhsT, rhs):
    K, M = lhsT.shape
    N = rhs.shape[1]
    kt = K // TK
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        a = _load_column(lhsT, m * TM, TM, kt)
        for n in nl.affine_range(N // TN):
            b = _load_column(rhs, n * TN, TN, kt)
            acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(kt):
                nisa.nc_matmul(dst=acc, stationary=a[k], moving=b[k])
            _store_tile(out, acc, m * TM, n * TN)
    return out


@nki.jit
def block_free(lhsT, rhs, bm=2, bn=2):
    K, M = lhsT.shape
    N = rhs.shape[1]
    kt = K // TK
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // (bm * TM)):
        a = [_load_column(lhsT, (m * bm + i) * TM, TM, kt) for i in range(bm)]
        for n in nl.affine_range(N // (bn * TN)):
            b = [_load_column(rhs, (n * bn + j) * TN, TN, kt) for j in range(bn)]
            for i in nl.affine_range(bm):
                for j in nl.affine_range(bn):
                    acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(kt):
                        nisa.nc_matmul(dst=acc, stationary=a[i][k], moving=b[j][k])
                    _store_tile(out, acc, (m * bm + i) * TM, (n * bn + j) * TN)
    return out


@nki.jit
def block_all(lhsT, rhs, bm=16, bn=2, bk=8):
    K, M = lhsT.shape
    N = rhs.shape[1]
    BM, BN, BK = bm * TM, bn * TN, bk * TK
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for n in nl.affine_range(N // BN):
        # partial sums of this column of output blocks, in SBUF across the K blocks
        part = [[nl.ndarray((TM, TN), dtype=lhsT.dtype, buffer=nl.sbuf) for _ in range(bn)]
                for _ in range(M // TM)]
        for row in part:
            for t in row:
                nisa.memset(dst=t, value=0)
        for kb in nl.sequential_range(K // BK):
            # one wide [TK, BN] row load per K tile: 2 KiB rows instead of 1 KiB
            b = [nl.ndarray((TK, BN), dtype=rhs.dtype, buffer=nl.sbuf) for _ in range(bk)]
            for k in range(bk):
                nisa.dma_copy(dst=b[k], src=rhs[(kb * bk + k) * TK:(kb * bk + k + 1) * TK, n * BN:(n + 1) * BN])
            for mb in nl.affine_range(M // BM):
                a = [nl.ndarray((TK, BM), dtype=lhsT.dtype, buffer=nl.sbuf) for _ in range(bk)]
                for k in range(bk):
                    nisa.dma_copy(dst=a[k], src=lhsT[(kb * bk + k) * TK:(kb * bk + k + 1) * TK,
                                                     mb * BM:(mb + 1) * BM])
                for j in nl.affine_range(bn):
                    for i in nl.affine_range(bm):
                        acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
                        for k in nl.affine_range(bk):
                            nisa.nc_matmul(dst=acc, stationary=a[k][:, i * TM:(i + 1) * TM],
                                           moving=b[k][:, j * TN:(j + 1) * TN])
                        t = part[mb * bm + i][j]
                        nisa.tensor_tensor(dst=t, data1=t, data2=acc, op=nl.add)
        for mt in nl.affine_range(M // TM):
            packed = nl.ndarray((TM, BN), dtype=lhsT.dtype, buffer=nl.sbuf)
            for j in nl.affine_range(bn):
                nisa.tensor_copy(dst=packed[:, j * TN:(j + 1) * TN], src=part[mt][j])
            nisa.dma_copy(dst=out[mt * TM:(mt + 1) * TM, n * BN:(n + 1) * BN], src=packed)
    return out


STEPS = {"tiled": tiled, "hoisted": hoisted, "block_free": block_free, "block_all": block_all}
# AWS's tutorial table: [4096, 8192] @ [8192, 8192] bf16 on one Trn1 NeuronCore, latency in ms.
PUBLISHED_MS = {"tiled": 51.80, "hoisted": 42.96, "block_free": 22.07, "block_all": 6.97}
