"""NKI's instructions (torch_neuronx.nki.isa) and language helpers against torch on the CPU, on the
host simulator and on neuron; the cost of a kernel per profile. The rules: test_nki_rules.py."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import torch_neuronx
import torch_neuronx.nki as nki
import torch_neuronx.nki.isa as nisa
import torch_neuronx.nki.language as nl

N = "neuron"


def close(got, want, dtype=torch.float32):
    tol = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}.get(dtype, 1e-1)
    torch.testing.assert_close(got.float(), want.float(), atol=tol, rtol=tol)


@nki.jit
def unary_kernel(x, op, scale, with_bias, out_dtype):
    out = nl.ndarray(x.shape, dtype=out_dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    y = nl.ndarray(x.shape, dtype=out_dtype, buffer=nl.sbuf)
    bias = None
    if with_bias:
        bias = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.iota(bias, [[1, 1]], offset=0.25, channel_multiplier=0.01)
    nisa.activation(dst=y, op=op, data=t, scale=scale, bias=bias)
    nl.store(out, y)
    return out


ACTIVATIONS = {
    "exp": torch.exp, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu": torch.relu, "gelu": F.gelu,
    "gelu_apprx_tanh": lambda t: F.gelu(t, approximate="tanh"), "silu": F.silu, "abs": torch.abs,
    "negative": torch.neg, "square": torch.square, "sin": torch.sin, "cos": torch.cos, "sign": torch.sign,
    "softplus": F.softplus, "erf": torch.erf, "arctan": torch.atan, "mish": F.mish, "copy": lambda t: t,
    "log": torch.log, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal,
}
POSITIVE = ("log", "sqrt", "rsqrt", "reciprocal")


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_matches_torch_with_scale_and_bias(name):
    x = torch.randn(128, 48)
    if name in POSITIVE:
        x = x.abs() + 0.5
    got = nki.simulate(unary_kernel)(x, getattr(nl, name), 0.75, True, torch.float32)
    bias = 0.25 + 0.01 * torch.arange(128.0).view(-1, 1)
    close(got, ACTIVATIONS[name](x * 0.75 + bias))


@pytest.mark.parametrize("name,fn", [("gelu_dx", lambda t: torch.func.grad(lambda u: F.gelu(u).sum())(t)),
                                     ("silu_dx", lambda t: torch.func.grad(lambda u: F.silu(u).sum())(t))])
def test_activation_derivatives_match_autograd(name, fn):
    x = torch.randn(64, 32)
    close(nki.simulate(unary_kernel)(x, getattr(nl, name), 1.0, False, torch.float32), fn(x))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float8_e4m3fn])
def test_an_engine_computes_in_fp32_and_rounds_once_to_the_destination(dtype):
    x = torch.randn(128, 64)
    got = nki.simulate(unary_kernel)(x, nl.exp, 0.5, False, dtype)
    assert got.dtype == dtype
    fp32 = nki.simulate(unary_kernel)(x, nl.exp, 0.5, False, torch.float32)
    close(fp32, (x * 0.5).exp())
    assert torch.equal(got, fp32.to(dtype))


@nki.jit
def binary_kernel(a, b, op):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ta, tb = nl.load(a), nl.load(b)
    tc = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=tc, data1=ta, data2=tb, op=op)
    nl.store(out, tc)
    return out


ALU = {"add": torch.add, "subtract": torch.sub, "multiply": torch.mul, "divide": torch.div,
       "maximum": torch.maximum, "minimum": torch.minimum, "power": torch.pow,
       "equal": lambda a, b: (a == b).to(a.dtype), "greater": lambda a, b: (a > b).to(a.dtype),
       "less_equal": lambda a, b: (a <= b).to(a.dtype), "abs_max": lambda a, b: torch.maximum(a.abs(), b.abs())}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(ALU))
def test_tensor_tensor_matches_torch(name, dtype):
    a, b = torch.randn(128, 40).abs().to(dtype) + 0.5, torch.randn(128, 40).to(dtype)
    want = ALU[name](a.float(), b.float()).to(dtype)
    close(nki.simulate(binary_kernel)(a, b, getattr(nl, name)), want, dtype)


def test_bitwise_ops_run_on_integer_tiles():
    a = torch.randint(0, 1 << 20, (64, 16), dtype=torch.int32)
    b = torch.randint(0, 1 << 20, (64, 16), dtype=torch.int32)
    assert torch.equal(nki.simulate(binary_kernel)(a, b, nl.bitwise_xor), a ^ b)
    assert torch.equal(nki.simulate(binary_kernel)(a, b, nl.add), a + b)


@nki.jit
def scalar_kernel(a, col, reverse):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t, c = nl.load(a), nl.load(col)
    y = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=y, data=t, op0=nl.subtract, operand0=c, reverse0=reverse, op1=nl.multiply, operand1=3.0)
    z = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.scalar_tensor_tensor(dst=z, data=y, op0=nl.divide, operand0=2.0, op1=nl.subtract, operand1=t)
    nl.store(out, z)
    return out


@pytest.mark.parametrize("reverse", [False, True])
def test_tensor_scalar_and_scalar_tensor_tensor(reverse):
    a, col = torch.randn(96, 3, 10), torch.randn(96, 1)
    c = col.view(96, 1, 1)
    y = ((c - a) if reverse else (a - c)) * 3.0
    close(nki.simulate(scalar_kernel)(a, col, reverse), y / 2.0 - a)


@nki.jit
def reduce_kernel(a, axis, negate, op):
    keep = a.shape[:min(axis) if isinstance(axis, tuple) else axis]
    out = nl.ndarray(keep if len(keep) > 1 else keep + (1,), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a)
    r = nl.ndarray(out.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=r, op=op, data=t, axis=axis, negate=negate)
    nl.store(out, r)
    return out


@pytest.mark.parametrize("axis", [2, (1, 2)])
@pytest.mark.parametrize("op,fn", [(nl.add, torch.sum), (nl.maximum, torch.amax), (nl.minimum, torch.amin)])
def test_tensor_reduce_over_trailing_free_axes(axis, op, fn):
    a = torch.randn(100, 6, 20)
    want = fn(a, dim=axis)
    want = want if want.dim() > 1 else want.view(-1, 1)
    close(nki.simulate(reduce_kernel)(a, axis, False, op), want)
    close(nki.simulate(reduce_kernel)(a, axis, True, op), -want)


@nki.jit
def partition_reduce_kernel(a, op):
    out = nl.ndarray((1, a.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a)
    r = nl.ndarray((1, a.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_partition_reduce(dst=r, op=op, data=t)
    nl.store(out, r)
    return out


def test_tensor_partition_reduce():
    a = torch.randn(77, 30)
    close(nki.simulate(partition_reduce_kernel)(a, nl.add), a.sum(0, keepdim=True))
    close(nki.simulate(partition_reduce_kernel)(a, nl.maximum), a.amax(0, keepdim=True))


@nki.jit
def accumulate_kernel(a, b, cmd2):
    out = nl.ndarray((a.shape[0], 2), dtype=nl.float32, buffer=nl.shared_hbm)
    ta, tb = nl.load(a), nl.load(b)
    ya = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    res = nl.ndarray((a.shape[0], 2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=ya, op=nl.exp, data=ta, reduce_op=nl.add, reduce_res=res[:, 0:1],
                    reduce_cmd=nisa.reduce_cmd.reset_reduce)
    nisa.activation(dst=ya, op=nl.square, data=tb, reduce_op=nl.add, reduce_res=res[:, 1:2], reduce_cmd=cmd2)
    nl.store(out, res)
    return out


def test_activation_reduce_commands_accumulate_across_instructions():
    a, b = torch.randn(64, 20), torch.randn(64, 20)
    first = a.exp().sum(1)
    got = nki.simulate(accumulate_kernel)(a, b, nisa.reduce_cmd.reduce)
    close(got, torch.stack([first, first + b.square().sum(1)], 1))
    got = nki.simulate(accumulate_kernel)(a, b, nisa.reduce_cmd.reset_reduce)
    close(got, torch.stack([first, b.square().sum(1)], 1))


@nki.jit
def matmul_kernel(st, mv, mode):
    m, n = st.shape[1], mv.shape[1]
    out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    s, v = nl.load(st), nl.load(mv)
    acc = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.psum)
    if mode == "twice":  # None: the first matmul opens the group, the second accumulates
        nisa.nc_matmul(dst=acc, stationary=s, moving=v)
        nisa.nc_matmul(dst=acc, stationary=s, moving=v)
    elif mode == "overwrite":
        nisa.nc_matmul(dst=acc, stationary=s, moving=v)
        nisa.nc_matmul(dst=acc, stationary=s, moving=v, accumulate=False)
    else:
        nisa.nc_matmul(dst=acc, stationary=s, moving=v)
    nl.store(out, acc)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn])
def test_nc_matmul_accumulates_in_fp32(dtype):
    st, mv = torch.randn(96, 80).to(dtype), torch.randn(96, 300).to(dtype)
    want = st.float().t() @ mv.float()
    tol = 1e-4 if dtype == torch.float32 else 1e-3
    torch.testing.assert_close(nki.simulate(matmul_kernel)(st, mv, "once"), want, atol=tol, rtol=tol)
    torch.testing.assert_close(nki.simulate(matmul_kernel)(st, mv, "twice"), 2 * want, atol=tol, rtol=tol)
    torch.testing.assert_close(nki.simulate(matmul_kernel)(st, mv, "overwrite"), want, atol=tol, rtol=tol)


@nki.jit
def transpose_kernel(x, engine):
    out = nl.ndarray((x.shape[1], x.shape[0]), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    buf = nl.psum if engine == "tensor" else nl.sbuf
    tp = nl.ndarray((x.shape[1], x.shape[0]), dtype=x.dtype, buffer=buf)
    nisa.nc_transpose(dst=tp, data=t, engine=getattr(nisa.engine, engine))
    nl.store(out, nl.copy(tp))
    return out


@pytest.mark.parametrize("engine,shape", [("tensor", (128, 100)), ("vector", (32, 20))])
def test_nc_transpose(engine, shape):
    x = torch.randn(shape).bfloat16()
    assert torch.equal(nki.simulate(transpose_kernel)(x, engine), x.t())


@nki.jit
def select_kernel(x, offset):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nisa.affine_select(dst=t, pattern=[[-1, x.shape[1]]], channel_multiplier=1, on_true_tile=t,
                       on_false_value=-9.0, cmp_op=nl.greater_equal, offset=offset)
    nl.store(out, t)
    return out


def test_affine_select_makes_a_causal_mask():
    x = torch.randn(64, 64)
    want = x.masked_fill(~torch.ones(64, 64, dtype=torch.bool).tril(3), -9.0)
    assert torch.equal(nki.simulate(select_kernel)(x, 3), want)


@nki.jit
def stats_kernel(x):
    out = nl.ndarray((x.shape[0], 2), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    f = x.shape[1]
    chunks = (f + 511) // 512
    st = nl.ndarray((x.shape[0], 6 * chunks), dtype=nl.float32, buffer=nl.sbuf)
    for c in range(chunks):
        nisa.bn_stats(dst=st[:, 6 * c:6 * c + 6], data=t[:, c * 512:min(f, (c + 1) * 512)])
    mv = nl.ndarray((x.shape[0], 2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.bn_aggr(dst=mv, data=st)
    nl.store(out, mv)
    return out


@pytest.mark.parametrize("free", [7, 512, 1001])
def test_bn_stats_and_bn_aggr_give_mean_and_variance(free):
    x = torch.randn(50, free) * 3 + 1
    close(nki.simulate(stats_kernel)(x), torch.stack([x.mean(1), x.var(1, unbiased=False)], 1))


@nki.jit
def max8_kernel(x):
    out = nl.ndarray((x.shape[0], 8), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    r = nl.ndarray((x.shape[0], 8), dtype=x.dtype, buffer=nl.sbuf)
    nisa.max8(dst=r, src=t)
    nl.store(out, r)
    return out


def test_max8_is_the_eight_largest_descending():
    x = torch.randn(40, 100)
    assert torch.equal(nki.simulate(max8_kernel)(x), x.topk(8, 1).values)


@nki.jit
def iota_memset_kernel(shape):
    out = nl.ndarray((shape[0], 2 * shape[1]), dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.ndarray(shape, dtype=nl.int32, buffer=nl.sbuf)
    nisa.iota(t, [[3, shape[1]]], offset=5, channel_multiplier=100)
    z = nl.full(shape, 7, dtype=nl.int32)
    nl.store(out[:, 0:shape[1]], t)
    nl.store(out[:, shape[1]:], z)
    return out


def test_iota_and_memset():
    got = nki.simulate(iota_memset_kernel)((16, 10))
    want = 5 + 100 * torch.arange(16).view(-1, 1) + 3 * torch.arange(10)
    assert torch.equal(got[:, :10], want.int())
    assert torch.equal(got[:, 10:], torch.full((16, 10), 7, dtype=torch.int32))


# --- nl helpers ------------------------------------------------------------------------------
@nki.jit
def language_kernel(x, y):
    out = nl.ndarray((x.shape[0], 4), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.load(x)
    b = nl.load(y)
    c = (a * 2.0 + b) / (nl.abs(b) + 1.0) - nl.maximum(a, b)
    e = nl.exp(nl.negative(nl.square(c)))
    nl.store(out[:, 0:1], nl.sum(e, axis=1, keepdims=True))
    nl.store(out[:, 1:2], nl.max(c, axis=1, keepdims=True))
    nl.store(out[:, 2:3], nl.mean(a, axis=1, keepdims=True))
    nl.store(out[:, 3:4], nl.min(b.reshape((x.shape[0], 2, x.shape[1] // 2)), axis=(1, 2), keepdims=True))
    return out


def test_language_ops_and_operators_on_tiles():
    x, y = torch.randn(100, 64), torch.randn(100, 64)
    c = (x * 2 + y) / (y.abs() + 1) - torch.maximum(x, y)
    want = torch.stack([(-c.square()).exp().sum(1), c.amax(1), x.mean(1), y.amin(1)], 1)
    close(nki.simulate(language_kernel)(x, y), want)


@nki.jit
def nl_matmul_kernel(x, y):
    out = nl.ndarray((x.shape[0], y.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nl.matmul(nl.load(x), nl.load(y)))
    return out


def test_nl_matmul_and_transpose():
    x, y = torch.randn(64, 96), torch.randn(96, 200)
    close(nki.simulate(nl_matmul_kernel)(x, y), x @ y)


@nki.jit
def legacy_index_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.program_id(0) * 64 + nl.arange(64)[:, None]
    i_f = nl.arange(x.shape[1])[None, :]
    nl.store(out[i_p, i_f], nl.load(x[i_p, i_f]) * float(nl.num_programs(0)))
    return out


def test_spmd_grid_with_program_id_and_arange_indices():
    x = np.random.rand(256, 32).astype(np.float32)
    got = legacy_index_kernel[4](x)
    assert isinstance(got, np.ndarray)
    np.testing.assert_allclose(got, x * 4, rtol=1e-6)


@nki.jit
def grid2_kernel(a):
    b = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i, j = nl.program_id(0), nl.program_id(1)
    nl.store(b[i, j], nl.load(a[i, j]) + float(i * 10 + j))
    return b


def test_two_dimensional_grid():
    a = torch.zeros(4, 2, 1, 1)
    got = nki.simulate(grid2_kernel[4, 2])(a)
    assert torch.equal(got.view(4, 2), (torch.arange(4).view(-1, 1) * 10 + torch.arange(2)).float())


# --- on neuron ------------------------------------------------------------------------------
def test_a_kernel_on_neuron_is_one_async_task_ordered_with_eager_ops():
    xc, yc = torch.randn(128, 64), torch.randn(128, 64)
    x, y = xc.to(N), yc.to(N)
    torch_neuronx.reset_op_counts()
    x.add_(1)
    out = binary_kernel(x, y, nl.multiply)  # must see x + 1
    x.mul_(0)  # queued after the kernel: the kernel must not see it
    assert out.device.type == "neuron"
    counts = torch_neuronx.op_counts()["neuron::nki_kernel"]
    assert (counts["async"], counts["sync"], counts["copy"]) == (1, 0, 0)
    close(out.cpu(), (xc + 1) * yc)
    assert torch.equal(x.cpu(), torch.zeros_like(xc))


def test_device_and_host_runs_agree_and_the_trace_is_cached():
    x, y = torch.randn(128, 43), torch.randn(128, 43)  # a signature no other test traces
    torch_neuronx.reset_compile_stats()
    host = nki.simulate(binary_kernel)(x, y, nl.subtract)
    dev = binary_kernel(x.to(N), y.to(N), nl.subtract)
    again = binary_kernel(x.to(N), y.to(N), nl.subtract)
    stats = torch_neuronx.compile_stats()
    assert stats["nki_traces"] == 1 and stats["nki_cache_hits"] == 2
    assert torch.equal(dev.cpu(), host) and torch.equal(again.cpu(), x - y)


@nki.jit
def mulc_kernel(x, c):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    y = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=y, data=t, op0=nl.multiply, operand0=c[0] if isinstance(c, tuple) else c)
    nl.store(out, y)
    return out


def test_a_constant_argument_is_cached_by_its_bits_not_its_value():
    # 0.0 == -0.0 and 1 == 1.0 == True as Python values; each must trace its own kernel.
    x = torch.ones(4, 8)
    for c in [0.0, -0.0, (0.0,), (-0.0,)]:
        got = mulc_kernel(x.to(N), c).cpu()
        want = x * (c if isinstance(c, float) else c[0])
        assert torch.equal(torch.signbit(got), torch.signbit(want)), c
    torch_neuronx.reset_compile_stats()
    for c in [float("nan"), float("nan")]:
        got = mulc_kernel(x.to(N), c).cpu()
        assert torch.isnan(got).all()
    stats = torch_neuronx.compile_stats()
    assert stats["nki_traces"] == 1 and stats["nki_cache_hits"] == 1  # a NaN constant is found again


def test_nc_version_follows_the_device_profile():
    assert nisa.get_nc_version() == nisa.nc_version.gen3  # trn2, the default profile


def test_cost_of_an_elementwise_kernel_follows_the_profile():
    x = torch.zeros(128, 2048)
    trn2 = nki.estimate(binary_kernel, profile="trn2")(x, x, nl.add)
    trn3 = nki.estimate(binary_kernel, profile="trn3")(x, x, nl.add)
    assert trn2.instructions["vector"] == 1 and trn2.instructions["dma"] == 3
    assert trn2.cycles["vector"] == 2 * 2048  # fp32 tensor_tensor: max(64, 2N) cycles
    assert trn3.latency_us < trn2.latency_us  # faster Vector clock and DMA queues
    assert math.isclose(trn2.busy_us["vector"], 4096 / 0.96e9 * 1e6, rel_tol=1e-9)


@nki.jit
def helpers_kernel(x):
    out = nl.ndarray((x.shape[0], 4 * x.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:x.shape[0], 0:x.shape[1]]
    t = nl.load(x[i_p, i_f])
    r = nl.empty_like(t)
    nisa.reciprocal(dst=r, data=t)
    z = nl.zeros_like(t, dtype=nl.float32)
    f = nl.full(t.shape, 2.5, dtype=nl.float32)
    cube = t.reshape((x.shape[0], 2, x.shape[1] // 2)).permute((0, 2, 1))  # a strided view
    c = nl.copy(cube, dtype=nl.float32)
    w = x.shape[1]
    nl.store(out[:, 0:w], r)
    nl.store(out[:, w:2 * w], nl.add(z, f))
    nl.store(out[:, 2 * w:3 * w], c.reshape((x.shape[0], w)))
    nl.store(out[:, 3 * w:4 * w], nl.full(t.shape, float(nl.program_ndim()), dtype=nl.float32))
    return out


def test_mgrid_views_reciprocal_and_creation_helpers():
    x = torch.rand(64, 10) + 0.5
    got = nki.simulate(helpers_kernel)(x)
    close(got[:, :10], 1 / x)
    close(got[:, 10:20], torch.full((64, 10), 2.5))
    close(got[:, 20:30], x.reshape(64, 2, 5).permute(0, 2, 1).reshape(64, 10))
    close(got[:, 30:], torch.ones(64, 10))

