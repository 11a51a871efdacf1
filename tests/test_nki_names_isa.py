"""Issue 36's second round of NKI names, the instructions' part (random numbers, gathers,
match-replace, NeuronCore-v4 activations, registers, pricing, and what still raises): each kernel
through nki.simulate and on neuron, bit-identical, checked against torch; then each rule."""
import math

import pytest
import torch

import torch_neuronx  # noqa: F401  (the neuron device)
import torch_neuronx.nki as nki
import torch_neuronx.nki.isa as nisa
import torch_neuronx.nki.language as nl
from torch_neuronx.nki import NkiValidationError
from nki_both import both, expect_rule, on_profile, _tiles

N = "neuron"


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


def test_register_load_says_why_it_is_not_supported():
    with pytest.raises(NkiValidationError, match="register_load .*no scalar registers or branches"):
        nisa.register_load(nisa.register_alloc(), None)
