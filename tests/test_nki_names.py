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
from torch_neuronx.nki import NkiTraceError, NkiValidationError, _profile
from nki_both import both

N = "neuron"


def on_profile(profile, kernel, *args):
    """The kernel traced for `profile` (trn3's instructions on a trn2 runtime) and run on the host."""
    traced, tensors = nki.jit(kernel)._traced(args, {}, _profile.current(profile))
    outs = [torch.empty(s, dtype=d) for s, d in traced.outputs]
    scratch = [torch.empty(s, dtype=d) for s, d in traced.scratch]
    traced.program.run([t.contiguous() for t in tensors] + outs + scratch)
    return outs if len(outs) > 1 else outs[0]


def expect_rule(match, body, *shapes, profile=None):
    with pytest.raises(NkiValidationError, match=match) as info:
        if profile:
            nki.estimate(nki.jit(body), profile=profile)(*(torch.zeros(s) for s in shapes))
        else:
            nki.simulate(nki.jit(body))(*(torch.zeros(s) for s in shapes))
    assert "test_nki_names.py:" in str(info.value), "the message names the kernel's line"


def _tiles(n, shape=(8, 16), buffer=None, dtype=nl.float32):
    return [nl.ndarray(shape, dtype=dtype, buffer=buffer or nl.sbuf) for _ in range(n)]


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


# --- nisa.rng, set_rng_seed, rand_get_state / rand_set_state, dropout, rand2 -----------------------
@nki.jit
def rng_kernel(seed, shape, engine):
    wide = nl.ndarray(shape, dtype=nl.uint32, buffer=nl.shared_hbm)
    narrow = nl.ndarray(shape, dtype=nl.uint8, buffer=nl.shared_hbm)
    s = nl.load(seed)
    for dst in (wide, narrow):
        if engine == "vector":
            nisa.set_rng_seed(s)
        else:
            state = nl.load(seed)  # GpSimd's lanes: each lane's 6-word state, one row each
            nisa.rand_set_state(src_seeds=state, engine=nisa.engine.gpsimd)
        t = nl.ndarray(shape, dtype=dst.dtype, buffer=nl.sbuf)
        nisa.rng(dst=t, engine=getattr(nisa.engine, engine))
        nl.store(dst, t)
    return wide, narrow


@pytest.mark.parametrize("engine", ["vector", "gpsimd"])
def test_rng_writes_the_low_bits_and_is_deterministic(engine):
    seed = torch.tensor([[11]], dtype=torch.int32) if engine == "vector" else \
        torch.randint(1, 2 ** 31, (128, 6), dtype=torch.int64).to(torch.uint32)
    wide, narrow = both(rng_kernel, seed, (128, 256), engine)
    assert torch.equal(narrow, (wide.to(torch.int64) & 0xFF).to(torch.uint8)), "narrow dtypes take the low bits"
    bits = wide.to(torch.int64)
    # each of the 32 bits is set in about half the draws (5 sigma of 32768 draws)
    for b in range(32):
        share = ((bits >> b) & 1).double().mean()
        assert abs(share - 0.5) < 5 * math.sqrt(0.25 / bits.numel())
    again, _ = both(rng_kernel, seed, (128, 256), engine)
    assert torch.equal(wide, again)


@nki.jit
def state_kernel(x):
    """rand_get_state, a draw, rand_set_state of the saved state, the same draw again."""
    out = nl.ndarray((2,) + x.shape, dtype=nl.uint32, buffer=nl.shared_hbm)
    state = nl.ndarray((128, 6), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.rand_get_state(dst=state, engine=nisa.engine.gpsimd)
    for i in range(2):
        t = nl.ndarray(x.shape, dtype=nl.uint32, buffer=nl.sbuf)
        nisa.rng(dst=t, engine=nisa.engine.gpsimd)
        nl.store(out[i], t)
        nisa.rand_set_state(src_seeds=state, engine=nisa.engine.gpsimd)
    return out


def test_rand_get_state_then_set_state_replays_the_draws():
    got = both(state_kernel, torch.zeros(128, 64))
    assert torch.equal(got[0], got[1])
    assert got[0].to(torch.int64).unique().numel() > 8000


@nki.jit
def isa_dropout_kernel(x, prob, per_partition):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    p = prob
    if per_partition:
        p = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.iota(p, [[0, 1]], offset=0, channel_multiplier=1.0 / (x.shape[0] - 1))  # 0 .. 1 down the partitions
    y = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dropout(dst=y, data=t, prob=p)
    nl.store(out, y)
    return out


def test_isa_dropout_probabilities_scalar_and_per_partition():
    x = torch.randint(1, 2 ** 30, (64, 2048), dtype=torch.int32)
    assert torch.equal(both(isa_dropout_kernel, x, 0.0, False), x)
    assert torch.equal(both(isa_dropout_kernel, x, 1.0, False), torch.zeros_like(x))
    got = both(isa_dropout_kernel, x, 0.0, True)
    kept = got != 0
    assert torch.equal(got[kept], x[kept]), "kept integers are copied exactly"
    share = 1 - kept.double().mean(1)
    want = torch.arange(64, dtype=torch.float64) / 63
    assert (share - want).abs().max() < 5 * math.sqrt(0.25 / 2048)


@nki.jit
def rand2_kernel(lo, hi):
    out = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.sbuf)
    a, b = nl.load(lo), nl.load(hi)
    nisa.rand2(dst=t, min=a, max=b)
    nl.store(out, t)
    return out


def test_rand2_is_uniform_in_each_partitions_range_on_trn3():
    lo = torch.randn(128, 1)
    hi = lo + torch.rand(128, 1) * 4 + 0.5
    got = on_profile("trn3", rand2_kernel, lo, hi)
    assert bool((got >= lo).all()) and bool((got <= hi).all())
    u = (got.double() - lo.double()) / (hi - lo).double()
    assert abs(u.mean() - 0.5) < 5 / math.sqrt(12 * u.numel())
    with pytest.raises(NkiValidationError, match="rand2 is available only on NeuronCore-v4"):
        nki.simulate(rand2_kernel)(lo, hi)  # the runtime's trn2


def test_rule_rng_operands():
    def k(x):
        d, = _tiles(1)
        nisa.rng(dst=d)
    expect_rule("rng writes integer tiles", k, (1, 1))

    def k2(x):
        s, = _tiles(1, shape=(2, 1), dtype=nl.int32)
        nisa.set_rng_seed(src_seeds=s)
    expect_rule(r"src_seeds must be a \[1, 1\] tile", k2, (1, 1))

    def k3(x):
        s, = _tiles(1, shape=(128, 24), dtype=nl.uint32)
        nisa.rand_set_state(src_seeds=s, engine=nisa.engine.vector)
    expect_rule("on NeuronCore-v3 rand_set_state runs on GpSimd only", k3, (1, 1))

    def k4(x):
        d, t = _tiles(2)
        nisa.dropout(dst=d, data=t, prob=1.5)
    expect_rule("prob 1.5 is not a probability", k4, (1, 1))


# --- nisa.nc_n_gather, nonzero_with_count -----------------------------------------------------------
@nki.jit
def gather_kernel(x, idx):
    out = nl.ndarray((x.shape[0],) + tuple(idx.shape[1:]), dtype=x.dtype, buffer=nl.shared_hbm)
    t, i = nl.load(x), nl.load(idx)
    g = nl.ndarray((x.shape[0],) + tuple(idx.shape[1:]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.nc_n_gather(dst=g, data=t, indices=i)
    nl.store(out, g)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_nc_n_gather_takes_along_each_partitions_flattened_row(dtype):
    x = (torch.randn(96, 4, 50) * 1000).to(dtype)
    idx = torch.randint(0, 200, (96, 3, 7), dtype=torch.int64)
    got = both(gather_kernel, x, idx.to(torch.uint32))
    want = x.reshape(96, -1).gather(1, idx.reshape(96, -1)).reshape(96, 3, 7)
    assert torch.equal(got, want)


@nki.jit
def nonzero_kernel(x, offset):
    out = nl.ndarray((x.shape[0], x.shape[1] + 1), dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.load(x)
    d = nl.ndarray((x.shape[0], x.shape[1] + 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(d, 7)
    nisa.nonzero_with_count(dst=d, src=t, index_offset=offset, padding_val=-1)
    nl.store(out, d)
    return out


def test_nonzero_with_count_compacts_the_first_partition_of_each_core():
    x = (torch.rand(128, 40) < 0.3).float() * torch.randn(128, 40)
    x[16] = 0.0  # a row with no nonzeros
    x[32] = 1.0  # and one with no zeros
    got = both(nonzero_kernel, x, 100)
    want = torch.full((128, 41), 7, dtype=torch.int32)
    for p in range(0, 128, 16):
        hits = (x[p] != 0).nonzero().view(-1)
        want[p, :40] = -1
        want[p, :hits.numel()] = hits.to(torch.int32) + 100
        want[p, 40] = hits.numel()
    assert torch.equal(got, want)


def test_rule_gathers():
    def k(x):
        d, t = _tiles(2)
        i, = _tiles(1, dtype=nl.int32)
        nisa.nc_n_gather(dst=d, data=t, indices=i)
    expect_rule("indices is torch.int32; it must be uint32", k, (1, 1))

    def k2(x):
        s = nl.ndarray((16, 2048), dtype=nl.float32, buffer=nl.sbuf)
        d = nl.ndarray((16, 2048), dtype=nl.int32, buffer=nl.sbuf)
        nisa.nonzero_with_count(dst=d, src=s)
    expect_rule(r"dst must hold \[16, 2049\] elements", k2, (1, 1))


# --- nisa.nc_match_replace8 (nki-library's top-k loop), dma_compute --------------------------------
@nki.jit
def topk_kernel(x, rounds):
    """max8, then nc_match_replace8 knocks those 8 out with -inf: `rounds` x 8 largest values and
    their indices per row, as nki-library's rotational top-k does."""
    vals = nl.ndarray((x.shape[0], 8 * rounds), dtype=nl.float32, buffer=nl.shared_hbm)
    idx = nl.ndarray((x.shape[0], 8 * rounds), dtype=nl.uint32, buffer=nl.shared_hbm)
    data = nl.load(x)
    v = nl.ndarray((x.shape[0], 8 * rounds), dtype=nl.float32, buffer=nl.sbuf)
    i = nl.ndarray((x.shape[0], 8 * rounds), dtype=nl.uint32, buffer=nl.sbuf)
    for r in range(rounds):
        nisa.max8(dst=v[:, 8 * r:8 * r + 8], src=data)
        nisa.nc_match_replace8(dst=data, data=data, vals=v[:, 8 * r:8 * r + 8], imm=float("-inf"),
                               dst_idx=i[:, 8 * r:8 * r + 8])
    nl.store(vals, v)
    nl.store(idx, i)
    return vals, idx


def test_match_replace8_drives_a_top_k_with_repeated_values():
    x = torch.randn(32, 300)
    x[0, 10:20] = 9.0  # ten equal maxima: each round must take the next occurrence
    vals, idx = both(topk_kernel, x, 3)
    want_vals, _ = x.topk(24, dim=1)
    assert torch.equal(vals, want_vals)
    assert torch.equal(x.gather(1, idx.to(torch.int64)), vals), "each index points at its value"
    assert idx[0, :10].to(torch.int64).tolist() == list(range(10, 20)), "repeats match successive occurrences"
    assert all(len(set(row)) == 24 for row in idx.to(torch.int64).tolist())


@nki.jit
def dma_compute_kernel(a, b, c):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    out2 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nisa.dma_compute(dst=out, srcs=[a, b, c], reduce_op=nl.add, scales=[1.0, 1.0, 1.0])
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_compute(dst=t, srcs=[a, b], reduce_op=nl.add)  # HBM into SBUF
    nl.store(out2, t)
    return out, out2


def test_dma_compute_sums_in_fp32_and_rounds_once():
    a, b, c = (torch.randn(64, 96).bfloat16() for _ in range(3))
    total, pair = both(dma_compute_kernel, a, b, c)
    assert torch.equal(total, a.float() + b.float() + c.float())  # fp32 sums, in order, stored as fp32
    assert torch.equal(pair, (a.float() + b.float()).bfloat16())


def test_rule_dma_compute_scales_and_sizes():
    def k(x):
        nisa.dma_compute(dst=x, srcs=[x, x], reduce_op=nl.add, scales=[1.0, 2.0])
    expect_rule(r"scales must be one 1.0 per src", k, (4, 4))

    def k2(x):
        d = nl.ndarray((4, 5), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_compute(dst=d, srcs=[x], reduce_op=nl.add)
    expect_rule(r"srcs\[0\] \(4, 4\) and dst \(4, 5\) hold different numbers of elements", k2, (4, 4))


# --- nisa.exponential, activate2 (NeuronCore-v4) ---------------------------------------------------
@nki.jit
def exponential_kernel(x, m, tile_max):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    total = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    mx = nl.load(m) if tile_max else 0.5
    y = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    s = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.exponential(dst=y, src=t, max_value=mx, reduce_res=s, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    nl.store(out, y)
    nl.store(total, s)
    return out, total


@pytest.mark.parametrize("tile_max", [False, True])
def test_exponential_subtracts_the_max_and_sums_on_trn3(tile_max):
    x = torch.randn(64, 100) * 3
    m = x.amax(1, keepdim=True)
    got, total = on_profile("trn3", exponential_kernel, x, m, tile_max)
    ref = torch.exp(x.double() - (m.double() if tile_max else 0.5))
    torch.testing.assert_close(got.double(), ref, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(total.double(), ref.sum(1, keepdim=True), atol=1e-5, rtol=1e-5)
    with pytest.raises(NkiValidationError, match="exponential is available only on NeuronCore-v4"):
        nki.simulate(exponential_kernel)(x, m, tile_max)


@nki.jit
def activate2_kernel(x, scale, op0, op1, reverse1, reduce_op):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    red = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    t, sc = nl.load(x), nl.load(scale)
    y = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    r = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activate2(dst=y, op=nl.tanh, data=t, imm0=sc, imm1=0.25, op0=op0, op1=op1, reverse1=reverse1,
                   reduce_op=reduce_op, reduce_res=r, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    nl.store(out, y)
    nl.store(red, r)
    return out, red


@pytest.mark.parametrize("op0,op1,reverse1,reduce_op", [
    ("multiply", "add", False, "add"), ("multiply", "subtract", True, "maximum"), ("add", None, False, "minimum")])
def test_activate2_scales_biases_activates_and_reduces_on_trn3(op0, op1, reverse1, reduce_op):
    x, scale = torch.randn(32, 64), torch.rand(32, 1) + 0.5
    got, red = on_profile("trn3", activate2_kernel, x, scale, getattr(nl, op0), op1 and getattr(nl, op1), reverse1,
                          getattr(nl, reduce_op))
    x64, s64 = x.double(), scale.double()
    first = x64 * s64 if op0 == "multiply" else x64 + s64
    second = {None: first, "add": first + 0.25, "subtract": (0.25 - first) if reverse1 else first - 0.25}[op1]
    want = torch.tanh(second)
    torch.testing.assert_close(got.double(), want, atol=1e-6, rtol=1e-6)
    fold = {"add": want.sum(1, keepdim=True), "maximum": want.amax(1, keepdim=True),
            "minimum": want.amin(1, keepdim=True)}[reduce_op]
    torch.testing.assert_close(red.double(), fold, atol=1e-5, rtol=1e-5)


def test_rule_activate2_pairs_and_generation():
    def k(x):
        d, t = _tiles(2)
        nisa.activate2(dst=d, op=nl.exp, data=t, imm0=1.0, imm1=1.0, op0=nl.add, op1=nl.add)
    expect_rule(r"\(op0, op1\) = \('add', 'add'\) is not one of the six documented pairs", k, (1, 1), profile="trn3")
    expect_rule("activate2 is available only on NeuronCore-v4", k, (1, 1))


def test_dma_engine_names_the_two_dma_queues():
    assert [m.name for m in nisa.dma_engine] == ["dma", "gpsimd_dma"]


# --- registers known at trace time --------------------------------------------------------------
@nki.jit
def register_kernel(x, n):
    """Sums the first n column blocks of x with a register as the loop's trip count, and stores it."""
    out = nl.ndarray((x.shape[0], 16), dtype=x.dtype, buffer=nl.shared_hbm)
    count = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
    reg = nisa.register_alloc(0)
    nisa.register_move(reg, n)
    acc = nl.zeros((x.shape[0], 16), dtype=nl.float32)
    for i in nl.dynamic_range(reg):
        nisa.tensor_tensor(dst=acc, data1=acc, data2=nl.load(x[:, i * 16:(i + 1) * 16]), op=nl.add)
    nl.store(out, acc)
    nisa.register_store(count, reg)
    return out, count


def test_registers_known_at_trace_time_drive_a_dynamic_range():
    x = torch.randn(32, 96)
    out, count = both(register_kernel, x, 4)
    want = x.double().reshape(32, 6, 16)[:, :4].sum(1)
    torch.testing.assert_close(out.double(), want, atol=1e-5, rtol=1e-6)
    assert count.item() == 4


def test_register_load_is_not_supported_yet_and_says_why():
    def k(x):
        reg = nisa.register_alloc()
        nisa.register_load(reg, nl.zeros((1, 1), dtype=nl.int32))
    expect_rule("register_load reads its value from device memory while the program runs", k, (1, 1))

    def k2(x):
        for _ in nl.dynamic_range(nisa.register_alloc()):
            pass
    expect_rule("nl.dynamic_range reads a register that holds no value", k2, (1, 1))


# --- the cost model sees each new instruction on its engine ---------------------------------------
@nki.jit
def engines_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=t, src=x)  # dma
    bits = nl.ndarray(x.shape, dtype=nl.uint32, buffer=nl.sbuf)
    nisa.rng(dst=bits, engine=nisa.engine.gpsimd)  # gpsimd
    s = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.nc_stream_shuffle(dst=s, src=t, shuffle_mask=tuple(range(32)))  # vector
    y = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.activate2(dst=y, op=nl.exp, data=s, imm0=2.0, imm1=None, op0=nl.multiply, op1=None)  # scalar
    nisa.dma_copy(dst=out, src=y)
    return out


def test_new_instructions_are_priced_on_their_engines():
    est = nki.estimate(engines_kernel, profile="trn3")(torch.zeros(128, 128))
    assert est.instructions == {"tensor": 0, "vector": 1, "scalar": 1, "gpsimd": 1, "dma": 2}
    assert est.cycles["scalar"] == 128 and est.cycles["vector"] == 128  # max(64, N) per N elements
    assert est.cycles["gpsimd"] == 150 + 128  # GpSimd's start-up, then N


# --- generation-only and unsupported names --------------------------------------------------------
def test_mx_instructions_name_their_generation():
    def k(x):
        d, = _tiles(1)
        nisa.quantize_mx(d, d, d)
    expect_rule("quantize_mx is available only on NeuronCore-v4", k, (1, 1))
    with pytest.raises(NkiValidationError, match="nc_matmul_mx .*not supported yet"):
        def k2(x):
            d, = _tiles(1)
            nisa.nc_matmul_mx(d, d, d)
        nki.estimate(nki.jit(k2), profile="trn3")(torch.zeros(1, 1))


@pytest.mark.parametrize("name,why", [("local_gather", "16 partitions")])
def test_unsupported_instructions_say_why(name, why):
    with pytest.raises(NkiTraceError, match=f"nisa.{name} is documented .* not support yet: .*{why}"):
        getattr(nisa, name)(None)
    with pytest.raises(NkiTraceError, match="no channel back to the host"):
        nl.device_print("x", None)
