"""Flash-attention forward: softmax(q kᵀ · scale [+ causal mask]) v without materialising the
scores, one 128-query tile at a time against 512-key tiles, with the running max and sum of the
online softmax on the Vector and Scalar engines. A kv head's K (transposed) and V stay in SBUF for
all the query heads sharing them, so seq_k · (1 + d/128) elements must fit a partition.
Grouped-query attention reads kv head h // (q_heads // kv_heads). q: [batch, q_heads, seq_q, d],
k and v: [batch, kv_heads, seq_k, d], d ≤ 128; the causal mask aligns the first query with the
first key (PyTorch's is_causal). With return_lse it also returns each row's log-sum-exp
[batch, q_heads, seq_q] (fp32), what a flash backward needs."""
import math

from .. import isa as nisa
from .. import jit
from .. import language as nl

_NEG = -3.0e38  # the masked score: exp() of it minus any real max is 0


def _transposed(src, rows, cols, dtype):
    """src [rows ≤ 128, cols ≤ 128] (SBUF) transposed on the PE array, copied back to SBUF."""
    tp = nl.ndarray((128, 128), dtype=src.dtype, buffer=nl.psum)
    nisa.nc_transpose(dst=tp[0:cols, 0:rows], data=src)
    out = nl.ndarray((128, 128), dtype=dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=out[0:cols, 0:rows], src=tp[0:cols, 0:rows])
    return out


@jit
def flash_attention_fwd(q, k, v, causal=True, scale=None, return_lse=False):
    batch, q_heads, seq_q, d = q.shape
    _, kv_heads, seq_k, _ = k.shape
    assert d <= 128, f"flash_attention_fwd: head size {d} exceeds 128"
    assert q_heads % kv_heads == 0, f"flash_attention_fwd: {q_heads} query heads over {kv_heads} kv heads"
    group = q_heads // kv_heads
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    out = nl.ndarray(q.shape, dtype=q.dtype, buffer=nl.shared_hbm)
    lse = nl.ndarray((batch, q_heads, seq_q), dtype=nl.float32, buffer=nl.shared_hbm) if return_lse else None
    for b in range(batch):
        for kvh in range(kv_heads):
            # K (transposed: [d, seq_k], the moving operand of the scores) and V (128-key chunks,
            # the moving operand of P·V) stay in SBUF for every query tile of the heads sharing them.
            k_all = nl.ndarray((128, seq_k), dtype=k.dtype, buffer=nl.sbuf)
            v_all = []
            for c0 in range(0, seq_k, 128):
                pc = min(128, seq_k - c0)
                k_sb = nl.ndarray((128, d), dtype=k.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=k_sb[0:pc], src=k[b, kvh, c0:c0 + pc, :])
                tp = nl.ndarray((128, 128), dtype=k.dtype, buffer=nl.psum)
                nisa.nc_transpose(dst=tp[0:d, 0:pc], data=k_sb[0:pc])
                nisa.tensor_copy(dst=k_all[0:d, c0:c0 + pc], src=tp[0:d, 0:pc])
                vt = nl.ndarray((128, d), dtype=v.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=vt[0:pc], src=v[b, kvh, c0:c0 + pc, :])
                v_all.append(vt)
            for h in range(kvh * group, (kvh + 1) * group):
                _query_tiles(q, out, lse, b, h, k_all, v_all, seq_q, seq_k, d, causal, scale)
    return (out, lse) if return_lse else out


def _query_tiles(q, out, lse, b, h, k_all, v_all, seq_q, seq_k, d, causal, scale):
    """Every 128-query tile of head h against the resident K and V of its kv head."""
    v_dtype = v_all[0].dtype
    for q0 in range(0, seq_q, 128):
        pq = min(128, seq_q - q0)
        q_sb = nl.ndarray((128, d), dtype=q.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=q_sb[0:pq], src=q[b, h, q0:q0 + pq, :])
        q_t = _transposed(q_sb[0:pq], pq, d, q.dtype)  # [d, pq]: the stationary operand
        m = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=m[0:pq], value=_NEG)
        l_sum = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=l_sum[0:pq], value=0.0)
        acc = nl.ndarray((128, d), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=acc[0:pq], value=0.0)
        k_end = min(seq_k, q0 + pq) if causal else seq_k
        for k0 in range(0, k_end, 512):
            pk = min(512, k_end - k0)
            k_t = k_all[:, k0:k0 + pk]
            v_sb = [(c, min(128, pk - c), v_all[(k0 + c) // 128]) for c in range(0, pk, 128)]
            s_ps = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=s_ps[0:pq, 0:pk], stationary=q_t[0:d, 0:pq], moving=k_t[0:d])
            s = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=s[0:pq, 0:pk], data=s_ps[0:pq, 0:pk], op0=nl.multiply, operand0=scale)
            if causal and k0 + pk > q0:
                # Keys past a query are masked: keep (q0 + i) - (k0 + j) >= 0. Only the columns
                # from key q0 on can hold one, the diagonal block.
                c0 = max(0, q0 - k0)
                nisa.affine_select(dst=s[0:pq, c0:pk], pattern=[[-1, pk - c0]], channel_multiplier=1,
                                   on_true_tile=s[0:pq, c0:pk], on_false_value=_NEG,
                                   cmp_op=nl.greater_equal, offset=q0 - k0 - c0)
            m_new = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_reduce(dst=m_new[0:pq], op=nl.maximum, data=s[0:pq, 0:pk], axis=1)
            nisa.tensor_tensor(dst=m_new[0:pq], data1=m_new[0:pq], data2=m[0:pq], op=nl.maximum)
            neg_m = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=neg_m[0:pq], data=m_new[0:pq], op0=nl.multiply, operand0=-1.0)
            alpha = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=alpha[0:pq], op=nl.exp, data=m[0:pq], bias=neg_m[0:pq])
            p = nl.ndarray((128, 512), dtype=v_dtype, buffer=nl.sbuf)
            row_sum = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation_reduce(dst=p[0:pq, 0:pk], op=nl.exp, data=s[0:pq, 0:pk], reduce_op=nl.add,
                                   reduce_res=row_sum[0:pq], bias=neg_m[0:pq])
            nisa.scalar_tensor_tensor(dst=l_sum[0:pq], data=l_sum[0:pq], op0=nl.multiply,
                                      operand0=alpha[0:pq], op1=nl.add, operand1=row_sum[0:pq])
            pv = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
            p_ts = [_transposed(p[0:pq, c:c + pc], pq, pc, v_dtype) for c, pc, _ in v_sb]  # [pc, pq] each
            for i, ((c, pc, vt), p_t) in enumerate(zip(v_sb, p_ts)):
                nisa.nc_matmul(dst=pv[0:pq, 0:d], stationary=p_t[0:pc, 0:pq], moving=vt[0:pc],
                               accumulate=i > 0)
            nisa.scalar_tensor_tensor(dst=acc[0:pq], data=acc[0:pq], op0=nl.multiply, operand0=alpha[0:pq],
                                      op1=nl.add, operand1=pv[0:pq, 0:d])
            nisa.tensor_copy(dst=m[0:pq], src=m_new[0:pq])
        inv = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=inv[0:pq], data=l_sum[0:pq])
        o = nl.ndarray((128, d), dtype=q.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=o[0:pq], data=acc[0:pq], op0=nl.multiply, operand0=inv[0:pq])
        nisa.dma_copy(dst=out[b, h, q0:q0 + pq, :], src=o[0:pq])
        if lse is not None:  # log-sum-exp of each row's scaled scores: m + log(l)
            row = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=row[0:pq], op=nl.log, data=l_sum[0:pq])
            nisa.tensor_tensor(dst=row[0:pq], data1=row[0:pq], data2=m[0:pq], op=nl.add)
            nisa.dma_copy(dst=lse[b, h, q0:q0 + pq], src=row[0:pq])
