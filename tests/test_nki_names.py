"""Issue 36's second round of NKI names: each kernel runs through nki.simulate and through nki.jit on
neuron (bit-identical: one program) and is checked against torch in float64 (or an exact torch
reference); then the rules each instruction checks at trace time."""
import math

import pytest
import torch

import torch_neuronx  # noqa: F401  (the neuron device)
import torch_neuronx.nki as nki
import torch_neuronx.nki.isa as nisa
import torch_neuronx.nki.language as nl
from nki_both import both, expect_rule, _tiles

N = "neuron"


# --- activation functions: nl.tan, trunc, gelu_apprx_sigmoid(_dx), erf_dx -------------------------
@nki.jit
def act_kernel(x, op):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    out2 = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    y = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.activation(dst=y, op=op, data=t)  # as an instruction's op=
    nl.store(out, y)
    nl.store(out2, op(t))  # and as an nl function
    return out, out2


def _gelu_sigmoid(x):
    return x * torch.sigmoid(1.702 * x)


def _gelu_sigmoid_dx(x):
    s = torch.sigmoid(1.702 * x)
    return s + 1.702 * x * s * (1 - s)


@pytest.mark.parametrize("name,ref", [
    ("tan", torch.tan), ("trunc", torch.trunc), ("gelu_apprx_sigmoid", _gelu_sigmoid),
    ("gelu_apprx_sigmoid_dx", _gelu_sigmoid_dx),
    ("erf_dx", lambda x: 2 / math.sqrt(math.pi) * torch.exp(-x * x))])
def test_activation_functions_match_float64(name, ref):
    x = torch.rand(128, 64) * 6 - 3
    if name == "tan":
        x = x * 0.45  # |x| < 1.35: away from tan's poles, where fp32's input rounding dominates
    got, got2 = both(act_kernel, x, getattr(nl, name))
    assert torch.equal(got, got2)
    torch.testing.assert_close(got.double(), ref(x.double()), atol=1e-5, rtol=1e-5)


# --- nl.softmax, nl.rms_norm ---------------------------------------------------------------------
@nki.jit
def softmax_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.softmax(nl.load(x), axis=1))
    return out


def test_softmax_matches_torch():
    x = torch.randn(128, 96) * 4
    got = both(softmax_kernel, x)
    torch.testing.assert_close(got.double(), torch.softmax(x.double(), 1), atol=1e-6, rtol=1e-5)


@nki.jit
def rms_norm_kernel(x, w):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.rms_norm(nl.load(x), nl.load(w), axis=1, n=x.shape[1], epsilon=1e-5))
    return out


@pytest.mark.parametrize("w_rows", [1, 64])
def test_rms_norm_matches_torch(w_rows):
    x, w = torch.randn(64, 80), torch.randn(w_rows, 80)
    got = both(rms_norm_kernel, x, w)
    x64 = x.double()
    want = x64 * torch.rsqrt(x64.pow(2).mean(1, keepdim=True) + 1e-5) * w.double()
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)


# --- nl.all, nl.invert, nl.where, nl.expand_dims -------------------------------------------------
@nki.jit
def all_kernel(x):
    out = nl.ndarray((x.shape[0], 1), dtype=nl.uint8, buffer=nl.shared_hbm)
    nl.store(out, nl.all(nl.load(x), axis=1))
    return out


def test_all_is_every_element_nonzero():
    x = torch.randint(0, 2, (32, 6)).float()
    x[3] = 1.0
    got = both(all_kernel, x)
    assert torch.equal(got.view(-1).bool(), (x != 0).all(1))


@nki.jit
def invert_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.invert(nl.load(x)))
    return out


@pytest.mark.parametrize("dtype", [torch.int32, torch.uint8, torch.int16])
def test_invert_is_bitwise_not(dtype):
    info = torch.iinfo(dtype)
    x = torch.randint(info.min, info.max, (16, 40), dtype=torch.int64).to(dtype)
    assert torch.equal(both(invert_kernel, x), torch.bitwise_not(x))


@nki.jit
def where_kernel(c, x, y):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    out2 = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    cond = nl.greater(nl.load(c), 0.0)
    xt = nl.load(x)
    nl.store(out, nl.where(cond, xt, nl.load(y)))
    nl.store(out2, nl.where(cond, -2.5, xt))
    return out, out2


def test_where_selects_tiles_and_numbers():
    c, x, y = torch.randn(64, 48), torch.randn(64, 48), torch.randn(64, 48)
    x[0, 0] = float("nan")
    got, got2 = both(where_kernel, c, x, y)
    torch.testing.assert_close(got, torch.where(c > 0, x, y), equal_nan=True, rtol=0, atol=0)
    torch.testing.assert_close(got2, torch.where(c > 0, torch.tensor(-2.5), x), equal_nan=True, rtol=0, atol=0)


@nki.jit
def expand_dims_kernel(x):
    out = nl.ndarray((x.shape[0], x.shape[1], 1), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    e = nl.expand_dims(t, 2)
    y = nl.ndarray(e.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=y, src=e)
    nl.store(out, y)
    return out


def test_expand_dims_inserts_a_unit_dim():
    x = torch.randn(8, 12)
    assert torch.equal(both(expand_dims_kernel, x), x.unsqueeze(2))


# --- nl.load_transpose2d, nl.shared_constant ------------------------------------------------------
@nki.jit
def load_transpose_kernel(x):
    out = nl.ndarray((x.shape[1], x.shape[0]), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load_transpose2d(x))
    return out


def test_load_transpose2d_is_the_transpose():
    x = torch.randn(96, 128).bfloat16()
    assert torch.equal(both(load_transpose_kernel, x), x.t())


TABLE = torch.arange(24, dtype=torch.float64).reshape(4, 6) * 0.5 - 3


@nki.jit
def shared_constant_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    table = nl.shared_constant(TABLE.numpy(), dtype=nl.float32)
    nl.store(out, nl.add(nl.load(x), nl.load(table)))
    return out


def test_shared_constant_is_an_hbm_tensor_of_the_array():
    x = torch.randn(4, 6)
    torch.testing.assert_close(both(shared_constant_kernel, x).double(), x.double() + TABLE, atol=1e-6, rtol=0)


# --- random numbers: nl.rand, nl.random_seed, nl.dropout ------------------------------------------
@nki.jit
def rand_kernel(seed, shape):
    out = nl.ndarray(shape, dtype=nl.float32, buffer=nl.shared_hbm)
    again = nl.ndarray(shape, dtype=nl.float32, buffer=nl.shared_hbm)
    s = nl.load(seed)
    nl.random_seed(s)
    nl.store(out, nl.rand(shape, dtype=nl.float32))
    nl.random_seed(s)
    nl.store(again, nl.rand(shape, dtype=nl.float32))
    return out, again


def test_rand_is_uniform_and_deterministic_per_seed():
    seed = torch.tensor([[7]], dtype=torch.int32)
    a, again = both(rand_kernel, seed, (128, 512))
    assert torch.equal(a, again), "the same seed gives the same numbers"
    assert 0.0 <= a.min() and a.max() < 1.0
    # 65536 draws of U[0, 1): mean 1/2 within 5 sigma (sigma = 1/sqrt(12 n)), variance 1/12
    assert abs(a.double().mean() - 0.5) < 5 / math.sqrt(12 * a.numel())
    assert abs(a.double().var() - 1 / 12) < 2e-3
    b, _ = both(rand_kernel, torch.tensor([[8]], dtype=torch.int32), (128, 512))
    assert (a != b).float().mean() > 0.99, "another seed gives other numbers"


@nki.jit
def nl_dropout_kernel(x, rate):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.dropout(nl.load(x), rate))
    return out


def test_nl_dropout_zeroes_about_rate_of_the_elements():
    x = torch.rand(128, 256) + 1.0  # no zeros of its own
    got = both(nl_dropout_kernel, x, 0.25)
    dropped = got == 0
    assert torch.equal(got[~dropped], x[~dropped]), "kept values are not rescaled"
    n = x.numel()
    assert abs(dropped.double().mean() - 0.25) < 5 * math.sqrt(0.25 * 0.75 / n)


# --- nisa.tensor_copy_predicated ------------------------------------------------------------------
@nki.jit
def predicated_kernel(dst, src, pred, fill):
    out = nl.ndarray(dst.shape, dtype=dst.dtype, buffer=nl.shared_hbm)
    out2 = nl.ndarray(dst.shape, dtype=dst.dtype, buffer=nl.shared_hbm)
    d, s, p = nl.load(dst), nl.load(src), nl.load(pred)
    nisa.tensor_copy_predicated(dst=d, src=s, predicate=p)
    nl.store(out, d)
    d2 = nl.load(dst)
    nisa.tensor_copy_predicated(dst=d2, src=fill, predicate=p, reverse_pred=True)
    nl.store(out2, d2)
    return out, out2


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bfloat16])
def test_tensor_copy_predicated_copies_bit_exactly_where_the_predicate_holds(dtype):
    if dtype == torch.int32:  # beyond fp32's 24-bit mantissa: the copy must not pass through fp32
        dst, src = (torch.randint(2 ** 30, 2 ** 31 - 1, (32, 40), dtype=torch.int32) for _ in range(2))
    else:
        dst, src = torch.randn(32, 40).to(dtype), torch.randn(32, 40).to(dtype)
    pred = torch.randint(0, 3, (32, 40), dtype=torch.uint16)
    got, got2 = both(predicated_kernel, dst, src, pred, 7.0 if dtype.is_floating_point else 7)
    assert torch.equal(got, torch.where(pred != 0, src, dst))
    assert torch.equal(got2, torch.where(pred == 0, torch.tensor(7, dtype=dtype), dst))


def test_rule_tensor_copy_predicated_predicate_is_unsigned_and_dtypes_match():
    def k(x):
        d, s = _tiles(2)
        p, = _tiles(1, dtype=nl.int32)
        nisa.tensor_copy_predicated(dst=d, src=s, predicate=p)
    expect_rule("predicate is torch.int32; it must be uint8, uint16 or uint32", k, (1, 1))

    def k2(x):
        d, = _tiles(1)
        s, = _tiles(1, dtype=nl.bfloat16)
        p, = _tiles(1, dtype=nl.uint8)
        nisa.tensor_copy_predicated(dst=d, src=s, predicate=p)
    expect_rule("src is torch.bfloat16 and dst torch.float32; they must match", k2, (1, 1))

    def k3(x):
        d, s = _tiles(2)
        p, = _tiles(1, dtype=nl.uint8)
        nisa.tensor_copy_predicated(dst=d, src=s, predicate=p, reverse_pred=True)
    expect_rule("reverse_pred=True needs a scalar src", k3, (1, 1))


# --- nisa.dma_transpose ---------------------------------------------------------------------------
@nki.jit
def dma_transpose_kernel(x, via_sbuf):
    axes = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}[x.ndim]
    shape = tuple(x.shape[a] for a in axes)
    out = nl.ndarray(shape, dtype=x.dtype, buffer=nl.shared_hbm)
    src = x
    if via_sbuf:
        src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=src, src=x)
    t = nl.ndarray(shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=t, src=src, axes=axes)
    nisa.dma_copy(dst=out, src=t)
    return out


@pytest.mark.parametrize("shape,via_sbuf", [((64, 128), False), ((16, 4, 96), True), ((8, 3, 5, 32), False),
                                            ((32, 2, 3, 16), True)])
def test_dma_transpose_permutes_as_documented(shape, via_sbuf):
    x = torch.randn(shape).half()
    axes = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}[len(shape)]
    assert torch.equal(both(dma_transpose_kernel, x, via_sbuf), x.permute(axes))


def test_rule_dma_transpose_axes_and_memory():
    def k(x):
        d = nl.ndarray((4, 8, 2), dtype=nl.float32, buffer=nl.sbuf)
        s = nl.ndarray((2, 8, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_transpose(dst=d, src=s, axes=(0, 2, 1))
    expect_rule(r"axes \(0, 2, 1\) for a 3-d tile; the DMA engine transposes only \(2, 1, 0\)", k, (1, 1))

    def k2(x):
        d, = _tiles(1, shape=(16, 8))
        s, = _tiles(1, buffer=nl.psum)
        nisa.dma_transpose(dst=d, src=s)
    expect_rule("DMA cannot read or write PSUM", k2, (1, 1))


# --- nisa.nc_stream_shuffle -----------------------------------------------------------------------
@nki.jit
def broadcast_kernel(x, rows):
    """nki-library's stream_shuffle_broadcast: partition 0 of x onto `rows` partitions."""
    out = nl.ndarray((rows, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    src = nl.load(x)
    dst = nl.ndarray((rows, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    for i in range((rows + 31) // 32):
        n = min(32, rows - i * 32)
        nisa.nc_stream_shuffle(src=src[0:1, :], dst=dst[i * 32:i * 32 + n, :], shuffle_mask=[0] * 32)
    nl.store(out, dst)
    return out


def test_stream_shuffle_broadcasts_a_partition():
    x = torch.randn(4, 50)
    assert torch.equal(both(broadcast_kernel, x, 100), x[0:1].expand(100, 50))


@nki.jit
def shuffle_kernel(x, mask, in_place):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    src = nl.load(x)
    if in_place:
        nisa.nc_stream_shuffle(dst=src, src=src, shuffle_mask=mask)
        nl.store(out, src)
    else:
        dst = nl.load(x)
        nisa.nc_stream_shuffle(dst=dst, src=src, shuffle_mask=mask)
        nl.store(out, dst)
    return out


@pytest.mark.parametrize("in_place", [False, True])
def test_stream_shuffle_permutes_each_quadrant_and_keeps_255(in_place):
    x = torch.randint(-2 ** 31, 2 ** 31 - 1, (64, 24), dtype=torch.int32)
    mask = [(i * 7 + 3) % 32 for i in range(32)]
    mask[5] = 255
    got = both(shuffle_kernel, x, tuple(mask), in_place)
    want = x.clone()
    for q in range(2):
        for i, m in enumerate(mask):
            if m != 255:
                want[q * 32 + i] = x[q * 32 + m]
    assert torch.equal(got, want)


def test_rule_stream_shuffle_mask_and_start_partition():
    def k(x):
        d, s = _tiles(2, shape=(32, 4))
        nisa.nc_stream_shuffle(dst=d, src=s, shuffle_mask=[40] * 32)
    expect_rule("shuffle_mask must be 32 ints, each 0..31 or 255", k, (1, 1))

    def k2(x):
        d, s = _tiles(2, shape=(64, 4))
        nisa.nc_stream_shuffle(dst=d[16:48], src=s[0:32], shuffle_mask=list(range(32)))
    expect_rule("dst starts at partition 16; with 32 active partitions it must start at 0 or 32", k2, (1, 1))


# --- nisa.sequence_bounds -------------------------------------------------------------------------
@nki.jit
def bounds_kernel(seg):
    out = nl.ndarray((1, 2, seg.shape[1]), dtype=seg.dtype, buffer=nl.shared_hbm)
    s = nl.load(seg)
    b = nl.ndarray((1, 2, seg.shape[1]), dtype=seg.dtype, buffer=nl.sbuf)
    nisa.sequence_bounds(dst=b, segment_ids=s)
    nl.store(out, b)
    return out


def _bounds(seq):
    """The documented NumPy definition, on a Python list."""
    n = len(seq)
    lo, hi = [0] * n, [0] * n
    for i in range(n):
        lo[i] = n if seq[i] == 0 else (lo[i - 1] if i and seq[i] == seq[i - 1] else i)
    for i in reversed(range(n)):
        hi[i] = -1 if seq[i] == 0 else (hi[i + 1] if i + 1 < n and seq[i] == seq[i + 1] else i)
    return lo, hi


@pytest.mark.parametrize("dtype", [torch.int32, torch.float32])
def test_sequence_bounds_follows_the_documented_definition(dtype):
    seq = [1, 1, 1, 2, 2, 0, 0, 3, 1, 1] + [4] * 20 + [0] * 3 + [5]
    got = both(bounds_kernel, torch.tensor([seq], dtype=dtype))
    lo, hi = _bounds(seq)
    assert got[0, 0].tolist() == lo and got[0, 1].tolist() == hi


def test_rule_sequence_bounds_is_one_partition():
    def k(x):
        s, = _tiles(1, shape=(2, 8))
        d = nl.ndarray((1, 2, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.sequence_bounds(dst=d, segment_ids=s)
    expect_rule(r"segment_ids must be \[1, n\]", k, (1, 1))


