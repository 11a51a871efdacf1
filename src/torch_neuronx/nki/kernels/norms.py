"""RMSNorm and LayerNorm over the last dimension of a [rows, hidden] tensor, 128 rows per tile
(one row per partition), statistics in fp32 on the Scalar and Vector engines."""
from .. import isa as nisa
from .. import jit
from .. import language as nl


def _broadcast_rows(vector, hidden):
    """A [hidden] HBM vector loaded into every partition (a stride-0 DMA source)."""
    tile = nl.ndarray((128, hidden), dtype=vector.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=vector.reshape((1, hidden)).broadcast(0, 128))
    return tile


@jit
def rmsnorm(x, weight, eps=1e-6):
    rows, hidden = x.shape
    out = nl.ndarray((rows, hidden), dtype=x.dtype, buffer=nl.shared_hbm)
    w = _broadcast_rows(weight, hidden)
    for r0 in range(0, rows, 128):
        p = min(128, rows - r0)
        xt = nl.ndarray((128, hidden), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt[0:p], src=x[r0:r0 + p, :])
        sq = nl.ndarray((128, hidden), dtype=nl.float32, buffer=nl.sbuf)
        ss = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation_reduce(dst=sq[0:p], op=nl.square, data=xt[0:p], reduce_op=nl.add, reduce_res=ss[0:p])
        inv = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=inv[0:p], op=nl.rsqrt, data=ss[0:p], scale=1.0 / hidden, bias=eps)
        yt = nl.ndarray((128, hidden), dtype=x.dtype, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=yt[0:p], data=xt[0:p], op0=nl.multiply, operand0=inv[0:p],
                                  op1=nl.multiply, operand1=w[0:p])
        nisa.dma_copy(dst=out[r0:r0 + p, :], src=yt[0:p])
    return out


@jit
def layernorm(x, weight, bias, eps=1e-5, stats=False):
    """LayerNorm of [rows, hidden] rows; weight or bias may be None. With stats it also returns
    each row's mean and 1/sqrt(var + eps) as [rows, 1] fp32 tensors (aten::native_layer_norm's
    statistics on neuron, as on CUDA)."""
    rows, hidden = x.shape[0], x.size // x.shape[0]
    x = x.reshape((rows, hidden))
    out = nl.ndarray((rows, hidden), dtype=x.dtype, buffer=nl.shared_hbm)
    mean_out = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.shared_hbm) if stats else None
    rstd_out = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.shared_hbm) if stats else None
    w = _broadcast_rows(weight, hidden) if weight is not None else None
    b = _broadcast_rows(bias, hidden) if bias is not None else None
    chunks = (hidden + 511) // 512
    for r0 in range(0, rows, 128):
        p = min(128, rows - r0)
        xt = nl.ndarray((128, hidden), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt[0:p], src=x[r0:r0 + p, :])
        st = nl.ndarray((128, 6 * chunks), dtype=nl.float32, buffer=nl.sbuf)
        for c in range(chunks):
            c0, c1 = c * 512, min(hidden, (c + 1) * 512)
            nisa.bn_stats(dst=st[0:p, 6 * c:6 * c + 6], data=xt[0:p, c0:c1])
        mv = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.bn_aggr(dst=mv[0:p], data=st[0:p])
        rstd = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=rstd[0:p], op=nl.rsqrt, data=mv[0:p, 1:2], bias=eps)
        norm = nl.ndarray((128, hidden), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=norm[0:p], data=xt[0:p], op0=nl.subtract, operand0=mv[0:p, 0:1],
                           op1=nl.multiply, operand1=rstd[0:p])
        if w is not None:
            nisa.tensor_tensor(dst=norm[0:p], data1=norm[0:p], data2=w[0:p], op=nl.multiply)
        if b is not None:
            nisa.tensor_tensor(dst=norm[0:p], data1=norm[0:p], data2=b[0:p], op=nl.add)
        yt = nl.ndarray((128, hidden), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=yt[0:p], src=norm[0:p])
        nisa.dma_copy(dst=out[r0:r0 + p, :], src=yt[0:p])
        if stats:
            nisa.dma_copy(dst=mean_out[r0:r0 + p, :], src=mv[0:p, 0:1])
            nisa.dma_copy(dst=rstd_out[r0:r0 + p, :], src=rstd[0:p])
    return (out, mean_out, rstd_out) if stats else out
