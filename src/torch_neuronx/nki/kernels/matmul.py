"""C = A @ B (and a batch of them), tiled for the PE array.

B stays resident in SBUF a column block at a time (as many 512-wide moving tiles as fit a budget),
so each B element crosses the DMA once; each 128-row block of A is loaded whole (long DMA rows),
transposed on the PE array into 128×128 stationary tiles, and multiplied against every moving tile
of the block, accumulating over K in one PSUM bank per output tile."""
from .. import isa as nisa
from .. import jit
from .. import language as nl

_B_BUDGET = 128 * 1024  # SBUF bytes per partition the resident B block may take


@jit
def matmul(a, b):
    assert a.shape[1] == b.shape[0], f"matmul: a is {a.shape}, b is {b.shape}"
    out = nl.ndarray((a.shape[0], b.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    _matmul_into(out, a, b)
    return out


@jit
def bmm(a, b):
    assert a.shape[0] == b.shape[0] and a.shape[2] == b.shape[1], f"bmm: a is {a.shape}, b is {b.shape}"
    out = nl.ndarray((a.shape[0], a.shape[1], b.shape[2]), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in range(a.shape[0]):
        _matmul_into(out[i], a[i], b[i])
    return out


def _matmul_into(out, a, b):
    m_size, k_size = a.shape
    n_size = b.shape[1]
    k_tiles = (k_size + 127) // 128
    per_column = k_tiles * b.dtype.itemsize
    block = max(512, min(2048, (_B_BUDGET // per_column) // 512 * 512))
    for n0 in range(0, n_size, block):
        nb = min(block, n_size - n0)
        b_blk = []
        for k in range(k_tiles):
            kk = min(128, k_size - k * 128)
            t = nl.ndarray((128, block), dtype=b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t[0:kk, 0:nb], src=b[k * 128:k * 128 + kk, n0:n0 + nb])
            b_blk.append(t)
        for m0 in range(0, m_size, 128):
            pm = min(128, m_size - m0)
            a_rows = nl.ndarray((128, k_size), dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=a_rows[0:pm], src=a[m0:m0 + pm, :])
            a_t = []
            for k in range(k_tiles):
                kk = min(128, k_size - k * 128)
                tp = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.psum)
                nisa.nc_transpose(dst=tp[0:kk, 0:pm], data=a_rows[0:pm, k * 128:k * 128 + kk])
                ts = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)
                nisa.tensor_copy(dst=ts[0:kk, 0:pm], src=tp[0:kk, 0:pm])
                a_t.append(ts)
            for j in range(0, nb, 512):
                nn = min(512, nb - j)
                acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
                for k in range(k_tiles):
                    kk = min(128, k_size - k * 128)
                    nisa.nc_matmul(dst=acc[0:pm, 0:nn], stationary=a_t[k][0:kk, 0:pm],
                                   moving=b_blk[k][0:kk, j:j + nn], accumulate=k > 0)
                res = nl.ndarray((128, 512), dtype=out.dtype, buffer=nl.sbuf)
                nisa.tensor_copy(dst=res[0:pm, 0:nn], src=acc[0:pm, 0:nn])
                nisa.dma_copy(dst=out[m0:m0 + pm, n0 + j:n0 + j + nn], src=res[0:pm, 0:nn])
