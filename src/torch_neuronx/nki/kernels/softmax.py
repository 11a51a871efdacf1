"""Softmax over the last dimension of a [rows, n] tensor: a row per partition, the max subtracted
inside the exponential's bias, the sum accumulated by the same Scalar-engine instruction."""
from .. import isa as nisa
from .. import jit
from .. import language as nl


@jit
def softmax(x):
    rows, n = x.shape
    out = nl.ndarray((rows, n), dtype=x.dtype, buffer=nl.shared_hbm)
    for r0 in range(0, rows, 128):
        p = min(128, rows - r0)
        xt = nl.ndarray((128, n), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt[0:p], src=x[r0:r0 + p, :])
        neg_max = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=neg_max[0:p], op=nl.maximum, data=xt[0:p], axis=1, negate=True)
        e = nl.ndarray((128, n), dtype=nl.float32, buffer=nl.sbuf)
        total = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation_reduce(dst=e[0:p], op=nl.exp, data=xt[0:p], reduce_op=nl.add, reduce_res=total[0:p],
                               bias=neg_max[0:p])
        nisa.reciprocal(dst=total[0:p], data=total[0:p])
        yt = nl.ndarray((128, n), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=yt[0:p], data=e[0:p], op0=nl.multiply, operand0=total[0:p])
        nisa.dma_copy(dst=out[r0:r0 + p, :], src=yt[0:p])
    return out
