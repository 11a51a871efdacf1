"""Issue 36's instructions (tensor_tensor_scan, tensor_scalar_reduce, nc_find_index8) against torch
in float64, through nki.jit on neuron and nki.simulate (bit-identical: one program), and their rules."""
import math

import pytest
import torch

import torch_neuronx  # noqa: F401  (the neuron device)
import torch_neuronx.nki as nki
import torch_neuronx.nki.isa as nisa
import torch_neuronx.nki.language as nl
from torch_neuronx.nki import NkiValidationError
from nki_both import both

N = "neuron"


# --- tensor_tensor_scan: cumsum, as nki-library's cumsum computes it -------------------------------
@nki.jit
def cumsum_kernel(x, chunk):
    """Row-wise cumsum of x [rows, cols]: 128 rows per tile, the columns in chunks; each chunk's scan
    starts from the previous chunk's last column (the carry), the first from 0."""
    rows, cols = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    pmax = nl.tile_size.pmax
    ones = nl.ndarray((pmax, chunk), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(ones, 1.0)
    for r in nl.affine_range((rows + pmax - 1) // pmax):
        p = min(pmax, rows - r * pmax)
        carry = 0.0
        for c in nl.sequential_range(cols // chunk):
            t = nl.ndarray((pmax, chunk), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t[0:p], src=x[r * pmax:r * pmax + p, c * chunk:(c + 1) * chunk])
            acc = nl.ndarray((pmax, chunk), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor_scan(dst=acc[0:p], data0=ones[0:p], data1=t[0:p], initial=carry, op0=nl.multiply,
                                    op1=nl.add)
            res = nl.ndarray((pmax, chunk), dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res[0:p], src=acc[0:p])
            nisa.dma_copy(dst=out[r * pmax:r * pmax + p, c * chunk:(c + 1) * chunk], src=res[0:p])
            carry = acc[0:p, chunk - 1:chunk]
    return out


@pytest.mark.parametrize("rows,cols,chunk", [(128, 64, 64), (200, 512, 128), (16, 96, 32)])
def test_cumsum_kernel_by_tensor_tensor_scan_matches_torch(rows, cols, chunk):
    x = torch.randn(rows, cols)
    got = both(cumsum_kernel, x, chunk)
    # fp32 sums of up to 512 terms of magnitude ~1 against the float64 sum
    torch.testing.assert_close(got.double(), x.double().cumsum(1), atol=1e-4 * cols ** 0.5, rtol=1e-5)


def test_cumsum_of_bf16_scans_in_fp32_and_rounds_once():
    x = torch.randn(128, 256).bfloat16()
    got = both(cumsum_kernel, x, 256)
    # bf16 converts exactly to fp32: the bf16 result is the fp32 scan, rounded once at the end
    assert torch.equal(got, both(cumsum_kernel, x.float(), 256).bfloat16())
    torch.testing.assert_close(got.double(), x.double().cumsum(1), atol=0.1, rtol=2 ** -7)


# --- tensor_tensor_scan: a selective-scan (mamba) kernel -------------------------------------------
@nki.jit
def mamba_kernel(delta, u, a, b, c):
    """y[p, t] = Σ_s c[s, p, t] · h_s[p, t], h_s[p, t] = exp(delta·a[p, s]) · h_s[p, t-1] + delta·b[s, p, t]·u,
    channels on partitions, time along the free axis, one scan per state s."""
    channels, steps = delta.shape
    states = a.shape[1]
    out = nl.ndarray((channels, steps), dtype=nl.float32, buffer=nl.shared_hbm)
    d_t, u_t, a_t = (nl.load(v) for v in (delta, u, a))
    du = nl.ndarray((channels, steps), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=du, data1=d_t, data2=u_t, op=nl.multiply)
    y = nl.ndarray((channels, steps), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(y, 0.0)
    for s in nl.sequential_range(states):
        decay = nl.ndarray((channels, steps), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=decay, op=nl.exp, data=d_t, scale=a_t[:, s:s + 1])
        b_t, c_t = nl.load(b[s]), nl.load(c[s])
        dbu = nl.ndarray((channels, steps), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=dbu, data1=du, data2=b_t, op=nl.multiply)
        h = nl.ndarray((channels, steps), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor_scan(dst=h, data0=decay, data1=dbu, initial=0.0, op0=nl.multiply, op1=nl.add)
        nisa.scalar_tensor_tensor(dst=y, data=h, op0=nl.multiply, operand0=1.0, op1=nl.add, operand1=y)
        ch = nl.ndarray((channels, steps), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=ch, data1=h, data2=c_t, op=nl.multiply)
        nisa.tensor_tensor(dst=y, data1=y, data2=ch, op=nl.add)
        nisa.tensor_tensor(dst=y, data1=y, data2=h, op=nl.subtract)
    nl.store(out, y)
    return out


def test_mamba_selective_scan_matches_a_float64_loop():
    channels, steps, states = 96, 80, 4
    delta = torch.rand(channels, steps) * 0.5
    u = torch.randn(channels, steps)
    a = -torch.rand(channels, states) * 2
    b, c = torch.randn(states, channels, steps), torch.randn(states, channels, steps)
    got = both(mamba_kernel, delta, u, a, b, c)
    d64 = delta.double()
    want = torch.zeros(channels, steps, dtype=torch.float64)
    for s in range(states):
        h = torch.zeros(channels, dtype=torch.float64)
        for t in range(steps):
            h = torch.exp(d64[:, t] * a[:, s].double()) * h + d64[:, t] * b[s, :, t].double() * u[:, t].double()
            want[:, t] += c[s, :, t].double() * h
    torch.testing.assert_close(got.double(), want, atol=1e-4, rtol=1e-4)


@nki.jit
def scan_ops_kernel(x, y, init, op0, op1, reverse0, reverse1, tile_initial):
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    a, b = nl.load(x), nl.load(y)
    initial = init
    if tile_initial:
        initial = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.iota(initial, [[1, 1]], offset=init, channel_multiplier=0.5)
    r = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor_scan(dst=r, data0=a, data1=b, initial=initial, op0=op0, op1=op1, reverse0=reverse0,
                            reverse1=reverse1)
    nl.store(out, r)
    return out


OPS = {"add": lambda p, q: p + q, "subtract": lambda p, q: p - q, "multiply": lambda p, q: p * q,
       "maximum": torch.maximum, "minimum": torch.minimum}


@pytest.mark.parametrize("op0,op1", [("multiply", "add"), ("add", "maximum"), ("subtract", "minimum"),
                                     ("maximum", "subtract")])
@pytest.mark.parametrize("reverse0,reverse1", [(False, False), (True, True)])
@pytest.mark.parametrize("tile_initial", [False, True])
def test_scan_follows_the_documented_recurrence(op0, op1, reverse0, reverse1, tile_initial):
    x, y = torch.rand(32, 4, 6) * 0.5 + 0.5, torch.randn(32, 4, 6)  # free dims scan flattened
    got = both(scan_ops_kernel, x, y, 0.25, getattr(nl, op0), getattr(nl, op1), reverse0, reverse1, tile_initial)
    f0, f1 = OPS[op0], OPS[op1]
    xs, ys = x.double().reshape(32, -1), y.double().reshape(32, -1)
    prev = torch.full((32,), 0.25, dtype=torch.float64) + (0.5 * torch.arange(32.0) if tile_initial else 0)
    want = []
    for j in range(xs.shape[1]):
        t = f0(prev, xs[:, j]) if reverse0 else f0(xs[:, j], prev)
        prev = f1(ys[:, j], t) if reverse1 else f1(t, ys[:, j])
        want.append(prev)
    torch.testing.assert_close(got.double(), torch.stack(want, 1).reshape(x.shape), atol=1e-5, rtol=1e-5)


# --- tensor_scalar_reduce -------------------------------------------------------------------------
@nki.jit
def scalar_reduce_kernel(x, op0, reduce_op, negate):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    red = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    col = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.iota(col, [[1, 1]], offset=0.5, channel_multiplier=0.125)
    y = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    r = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_reduce(dst=y, data=t, op0=op0, operand0=col, reduce_op=reduce_op, reduce_res=r,
                              reduce_res_negate=negate)
    nl.store(out, y)
    nl.store(red, r)
    return out, red


@pytest.mark.parametrize("op0,reduce_op,negate", [("multiply", "add", False), ("add", "maximum", True),
                                                  ("subtract", "minimum", False), ("multiply", "multiply", False)])
def test_tensor_scalar_reduce_matches_torch(op0, reduce_op, negate):
    x = torch.rand(64, 3, 5) + 0.5  # reduced over both free axes
    host = nki.simulate(scalar_reduce_kernel)(x, getattr(nl, op0), getattr(nl, reduce_op), negate)
    dev = scalar_reduce_kernel(x.to(N), getattr(nl, op0), getattr(nl, reduce_op), negate)
    for h, d in zip(host, dev):
        assert torch.equal(h, d.cpu())
    col = (0.5 + 0.125 * torch.arange(64.0)).double().view(-1, 1, 1)
    y = OPS[op0](x.double(), col)
    flat = y.reshape(64, -1)
    r = {"add": flat.sum(1), "maximum": flat.amax(1), "minimum": flat.amin(1), "multiply": flat.prod(1)}[reduce_op]
    torch.testing.assert_close(host[0].double(), y, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(host[1].double().view(-1), -r if negate else r, atol=1e-5, rtol=1e-5)


# --- tensor_scalar_cumulative ---------------------------------------------------------------------
@nki.jit
def cumulative_kernel(x, op0, imm0, op1, load):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    y = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    cmd = nisa.reduce_cmd.load_reduce if load is not None else nisa.reduce_cmd.reset_reduce
    nisa.tensor_scalar_cumulative(dst=y, src=t, op0=op0, op1=op1, imm0=imm0, imm1=load, reduce_cmd=cmd)
    nl.store(out, y)
    return out


@pytest.mark.parametrize("op0,op1,load", [("multiply", "add", None), ("add", "maximum", None),
                                          ("subtract", "minimum", None), ("multiply", "multiply", None),
                                          ("add", "subtract", None), ("multiply", "add", 2.5)])
def test_tensor_scalar_cumulative_follows_the_documented_pseudocode(op0, op1, load):
    x = torch.rand(40, 2, 12) + 0.5
    got = both(cumulative_kernel, x, getattr(nl, op0), 1.25, getattr(nl, op1), load)
    start = {"add": 0.0, "subtract": 0.0, "multiply": 1.0, "maximum": -math.inf, "minimum": math.inf}[op1]
    reg = torch.full((40,), start if load is None else load, dtype=torch.float64)
    flat, want = x.double().reshape(40, -1), []
    for i in range(flat.shape[1]):
        reg = OPS[op1](OPS[op0](flat[:, i], 1.25), reg)
        want.append(reg)
    torch.testing.assert_close(got.double(), torch.stack(want, 1).reshape(x.shape), atol=1e-5, rtol=1e-5)


def test_rule_tensor_scalar_cumulative_takes_no_int32_and_only_reductions():
    def k(x):
        d, a = _tiles(2, dtype=nl.int32)
        nisa.tensor_scalar_cumulative(dst=d, src=a, op0=nl.add, op1=nl.add, imm0=1)
    expect_rule("no 32-bit integer tiles", k, (1, 1))

    def k2(x):
        d, a = _tiles(2)
        nisa.tensor_scalar_cumulative(dst=d, src=a, op0=nl.add, op1=nl.divide, imm0=1.0)
    expect_rule("op1 must be one of", k2, (1, 1))


# --- range_select, select_reduce ---------------------------------------------------------------
@nki.jit
def range_select_kernel(x, start, bound_tile, with_reduce):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    red = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    row = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.iota(row, [[1, 1]], offset=0, channel_multiplier=1)  # bound0[p] = p: a causal mask
    upper = row if bound_tile else 3.0
    y = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    r = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(r, 0.0)
    nisa.range_select(dst=y, on_true_tile=t, comp_op0=nl.less_equal, comp_op1=nl.greater_equal, bound0=upper,
                      bound1=1.0, range_start=start, reduce_res=r if with_reduce else None)
    nl.store(out, y)
    nl.store(red, r)
    return out, red


@pytest.mark.parametrize("start,bound_tile", [(0, True), (2, True), (0, False)])
def test_range_select_keeps_the_index_range_and_reduces_max(start, bound_tile):
    x = torch.randn(16, 24)
    host = nki.simulate(range_select_kernel)(x, start, bound_tile, True)
    dev = range_select_kernel(x.to(N), start, bound_tile, True)
    for h, d in zip(host, dev):
        assert torch.equal(h, d.cpu())
    j = torch.arange(24.0).view(1, -1) + start
    upper = torch.arange(16.0).view(-1, 1) if bound_tile else torch.full((16, 1), 3.0)
    keep = (j <= upper) & (j >= 1.0)
    fill = torch.tensor(torch.finfo(torch.float32).min)
    want = torch.where(keep, x, fill)
    assert torch.equal(host[0], want)
    assert torch.equal(host[1].view(-1), want.amax(1))


@nki.jit
def select_reduce_kernel(x, pred, on_false, reverse):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    red = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    t, m = nl.load(x), nl.load(pred)
    y = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    r = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.select_reduce(dst=y, predicate=m, on_true=t, on_false=on_false, reduce_res=r, reverse_pred=reverse)
    nl.store(out, y)
    nl.store(red, r)
    return out, red


@pytest.mark.parametrize("reverse", [False, True])
def test_select_reduce_is_where_then_max(reverse):
    x, pred = torch.randn(32, 40), torch.randint(0, 3, (32, 40), dtype=torch.uint8)
    host = nki.simulate(select_reduce_kernel)(x, pred, -5.0, reverse)
    dev = select_reduce_kernel(x.to(N), pred.to(N), -5.0, reverse)
    for h, d in zip(host, dev):
        assert torch.equal(h, d.cpu())
    keep = pred == 0 if reverse else pred != 0
    want = torch.where(keep, x, torch.tensor(-5.0))
    assert torch.equal(host[0], want)
    assert torch.equal(host[1].view(-1), want.amax(1))


def test_rule_select_reduce_predicate_is_a_small_integer_tile():
    def k(x):
        d, t, p = _tiles(3)
        nisa.select_reduce(dst=d, predicate=p, on_true=t, on_false=0.0)
    expect_rule("predicate is torch.float32; it must be int8", k, (1, 1))


def test_rule_range_select_compares():
    def k(x):
        d, t = _tiles(2)
        nisa.range_select(dst=d, on_true_tile=t, comp_op0=nl.add, comp_op1=nl.less, bound0=1.0, bound1=2.0)
    expect_rule("comp_op0 must be a comparison", k, (1, 1))


# --- nc_find_index8 -------------------------------------------------------------------------------
@nki.jit
def find_index8_kernel(x, missing, dtype):
    out = nl.ndarray((x.shape[0], 8), dtype=dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    top = nl.ndarray((x.shape[0], 8), dtype=x.dtype, buffer=nl.sbuf)
    nisa.max8(dst=top, src=t)
    if missing:  # a value no partition holds
        nisa.memset(top[:, 7:8], 1e9)
    idx = nl.ndarray((x.shape[0], 8), dtype=dtype, buffer=nl.sbuf)
    nisa.nc_find_index8(dst=idx, data=t, vals=top)
    nl.store(out, idx)
    return out


@pytest.mark.parametrize("dtype", [torch.uint32, torch.uint16])
def test_nc_find_index8_with_max8_is_topk_indices(dtype):
    x = torch.stack([torch.randperm(300).float() for _ in range(50)]).reshape(50, 3, 100)
    got = both(find_index8_kernel, x, False, dtype)
    assert torch.equal(got.to(torch.int64), x.reshape(50, -1).topk(8, 1).indices)
    got = both(find_index8_kernel, x, True, dtype)
    sentinel = 0xFFFFFFFF if dtype == torch.uint32 else 0xFFFF
    assert torch.equal(got.to(torch.int64)[:, 7], torch.full((50,), sentinel))
    assert torch.equal(got.to(torch.int64)[:, :7], x.reshape(50, -1).topk(7, 1).indices)


def test_nc_find_index8_returns_the_first_occurrence():
    x = torch.tensor([[3.0, 1.0, 3.0, 2.0, 1.0, 5.0, 5.0, 0.0, 7.0, 9.0]] * 4)
    got = both(find_index8_kernel, x, False, torch.uint32)
    assert got[0].to(torch.int64).tolist() == [9, 8, 5, 5, 0, 0, 3, 1]


# --- rules ----------------------------------------------------------------------------------------
def expect_rule(match, body, *shapes):
    with pytest.raises(NkiValidationError, match=match) as info:
        nki.simulate(nki.jit(body))(*(torch.zeros(s) for s in shapes))
    assert "test_nki_isa_more.py:" in str(info.value), "the message names the kernel's line"


def _tiles(n, shape=(8, 16), buffer=None, dtype=nl.float32):
    return [nl.ndarray(shape, dtype=dtype, buffer=buffer or nl.sbuf) for _ in range(n)]


def test_rule_scan_operands_not_both_in_psum():
    def k(x):
        d, = _tiles(1)
        a, b = _tiles(2, buffer=nl.psum)
        nisa.tensor_tensor_scan(dst=d, data0=a, data1=b, initial=0.0, op0=nl.multiply, op1=nl.add)
    expect_rule("data0 and data1 cannot both be in PSUM", k, (1, 1))


def test_rule_scan_ops_are_arithmetic():
    def k(x):
        d, a, b = _tiles(3)
        nisa.tensor_tensor_scan(dst=d, data0=a, data1=b, initial=0.0, op0=nl.greater, op1=nl.add)
    expect_rule("op0 must be an arithmetic ALU op", k, (1, 1))


def test_rule_scan_initial_is_one_element_per_partition():
    def k(x):
        d, a, b = _tiles(3)
        init, = _tiles(1, shape=(8, 2))
        nisa.tensor_tensor_scan(dst=d, data0=a, data1=b, initial=init, op0=nl.multiply, op1=nl.add)
    expect_rule(r"initial must be a number or a \[8, 1\] tile", k, (1, 1))


def test_rule_scan_tiles_match():
    def k(x):
        d, a = _tiles(2)
        b, = _tiles(1, shape=(8, 8))
        nisa.tensor_tensor_scan(dst=d, data0=a, data1=b, initial=0.0, op0=nl.multiply, op1=nl.add)
    expect_rule("same partitions and elements per partition", k, (1, 1))


def test_rule_tensor_scalar_reduce_result_is_a_column():
    def k(x):
        d, a = _tiles(2)
        r, = _tiles(1, shape=(8, 2))
        nisa.tensor_scalar_reduce(dst=d, data=a, op0=nl.add, operand0=1.0, reduce_op=nl.add, reduce_res=r)
    expect_rule(r"reduce_res must be \[8, 1\]", k, (1, 1))


def test_rule_tensor_scalar_reduce_accumulating_modes_not_supported_yet():
    def k(x):
        d, a = _tiles(2)
        r, = _tiles(1, shape=(8, 1))
        nisa.tensor_scalar_reduce(dst=d, data=a, op0=nl.add, operand0=1.0, reduce_op=nl.add, reduce_res=r,
                                  reduce_cmd=nisa.reduce_cmd.reduce)
    expect_rule("not supported yet", k, (1, 1))


def test_rule_find_index8_output_dtype_and_sizes():
    def k(x):
        a, = _tiles(1)
        v, d = _tiles(2, shape=(8, 8))
        nisa.nc_find_index8(dst=d, data=a, vals=v)
    expect_rule("dst must be uint16 or uint32", k, (1, 1))

    def k2(x):
        a, = _tiles(1, shape=(8, 4))
        v, = _tiles(1, shape=(8, 8))
        d, = _tiles(1, shape=(8, 8), dtype=nl.uint32)
        nisa.nc_find_index8(dst=d, data=a, vals=v)
    expect_rule("8 to 16384 elements per partition", k2, (1, 1))


def test_a_scan_is_priced_per_element_on_the_vector_engine():
    est = nki.estimate(cumsum_kernel, profile="trn2")(torch.zeros(128, 512), 512)
    half = nki.estimate(cumsum_kernel, profile="trn2")(torch.zeros(128, 256), 256)
    assert est.instructions["vector"] == half.instructions["vector"]
    assert est.cycles["vector"] > half.cycles["vector"] >= 256


# --- local_gather: each GpSimd core gathers by its own 16 partitions' indices ----------------------
@nki.jit
def local_gather_kernel(src, index, per_index, valid):
    p = src.shape[0]
    out = nl.ndarray((p, valid * per_index), dtype=src.dtype, buffer=nl.shared_hbm)
    s, i = nl.load(src), nl.load(index)
    d = nl.ndarray((p, valid * per_index), dtype=src.dtype, buffer=nl.sbuf)
    nisa.local_gather(d, s, i, num_elem_per_idx=per_index, num_valid_indices=valid)
    nl.store(out, d)
    return out


@pytest.mark.parametrize("per_index,valid,same", [(4, 64, True), (1, 50, False), (8, 24, False)])
def test_local_gather_matches_the_per_core_take(per_index, valid, same):
    # As AWS's NumPy statement of it: a core's indices are its partitions' columns flattened
    # partition first (order='F'), the first `valid`; each partition takes those runs of its row.
    groups = 512 // per_index
    src = torch.randn(128, groups, per_index) * 100
    per_core = torch.randint(0, groups, (16, 4), dtype=torch.int32)
    index = per_core.repeat(8, 1) if same else torch.randint(0, groups, (128, 4), dtype=torch.int32)
    want = torch.empty(128, valid, per_index)
    for core in range(8):
        rows = slice(core * 16, core * 16 + 16)
        order = index[rows].t().reshape(-1)[:valid].long()
        want[rows] = src[rows][:, order, :]
    hw = (index * per_index).to(torch.uint16)  # the instruction's indices count elements
    got = nki.simulate(local_gather_kernel)(src.reshape(128, -1), hw, per_index, valid)
    assert torch.equal(got, want.reshape(128, -1))
    dev = local_gather_kernel(src.reshape(128, -1).to("neuron"), hw.to("neuron"), per_index, valid)
    assert torch.equal(dev.cpu(), got)


def test_local_gather_checks_its_operands():
    src, index = torch.zeros(128, 64), torch.zeros(128, 4, dtype=torch.uint16)
    with pytest.raises(NkiValidationError, match="num_elem_per_idx is 3"):
        nki.simulate(local_gather_kernel)(src, index, 3, 4)
    with pytest.raises(NkiValidationError, match="each core has 64 indices"):
        nki.simulate(local_gather_kernel)(src, index, 1, 65)
    with pytest.raises(NkiValidationError, match="index is torch.int32; it must be uint16"):
        nki.simulate(local_gather_kernel)(src, index.to(torch.int32), 1, 4)
