"""Small kernels that run on the queue worker alone (csrc/exec/solo_team.h): only kernels whose bits
do not depend on how their work is split (exact elementwise arithmetic, sums into several outputs,
moves of data, fills, fused Adam), so each result is still the CPU's, bit for bit, and the kernel
team is back for everything else."""
import pytest
import torch
import torch.nn.functional as F

import torch_neuronx

N = "neuron"
SOLO_ELEMENTS = 2 ** 18


def solo_calls(op):
    return torch_neuronx.op_counts().get(op, {}).get("solo", 0)


@pytest.fixture(autouse=True)
def fresh_counts():
    torch.neuron.synchronize()
    torch_neuronx.reset_op_counts()
    yield


# Sizes around the bound, odd ones included: the team splits an odd size off a vector boundary.
SIZES = [40_001, SOLO_ELEMENTS - 7, SOLO_ELEMENTS, SOLO_ELEMENTS + 9]


@pytest.mark.parametrize("numel", SIZES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_exact_elementwise_calls_are_the_cpus_bits_alone_or_not(numel, dtype):
    g = torch.Generator().manual_seed(numel)
    a = (torch.randn(numel, generator=g) * 100).to(dtype)
    b = (torch.randn(numel, generator=g) * 100).to(dtype)
    b = b.masked_fill(b == 0, 1)  # no zero divisors: 0 / 0 is a NaN, which equals nothing
    an, bn = a.to(N), b.to(N)
    results = {
        "aten::add.Tensor": (torch.add(an, bn), a + b),
        "aten::sub.Tensor": (torch.sub(an, bn), a - b),
        "aten::mul.Tensor": (torch.mul(an, bn), a * b),
        "aten::div.Tensor": (torch.div(an, bn), a / b),
    }
    inplace = an.clone()
    inplace.add_(bn)
    results["aten::add_.Tensor"] = (inplace, a + b)
    results["aten::sqrt"] = (torch.sqrt(an.abs()), torch.sqrt(a.abs()))
    results["aten::neg"] = (torch.neg(an), torch.neg(a))
    for op, (got, want) in results.items():
        assert torch.equal(got.cpu(), want), op
        assert solo_calls(op) == (1 if numel <= SOLO_ELEMENTS else 0), op
    for exponent in (2, 1, 0):  # x * x, a copy, a fill
        assert torch.equal(an.pow(exponent).cpu(), a.pow(exponent)), exponent
    assert solo_calls("aten::pow.Tensor_Scalar") == (3 if numel <= SOLO_ELEMENTS else 0)


@pytest.mark.parametrize("numel", [SOLO_ELEMENTS - 7, SOLO_ELEMENTS + 9])
def test_rsqrt_runs_alone_in_float_only(numel):
    """1 / sqrt(x) is two correctly rounded operations in float and double on both paths; the
    scalar tail of a bfloat16 kernel rounds the root first, so bfloat16 keeps the team."""
    x = torch.rand(numel, generator=torch.Generator().manual_seed(numel)) + 0.01
    assert torch.equal(torch.rsqrt(x.to(N)).cpu(), torch.rsqrt(x))
    assert solo_calls("aten::rsqrt") == (1 if numel <= SOLO_ELEMENTS else 0)
    xb = x.bfloat16()
    assert torch.equal(torch.rsqrt(xb.to(N)).cpu(), torch.rsqrt(xb))
    assert solo_calls("aten::rsqrt") == (1 if numel <= SOLO_ELEMENTS else 0)


def test_other_exponents_keep_the_team():
    x = torch.rand(50_001) + 0.5
    for exponent in (3, 0.5, -1.5):
        assert torch.equal(x.to(N).pow(exponent).cpu(), x.pow(exponent)), exponent
    assert solo_calls("aten::pow.Tensor_Scalar") == 0


# Each has more than 32,768 elements, so the CPU splits it between its threads; odd extents put the
# split off a vector boundary; (0, 2) reduces dimensions that cannot be merged into one.
REDUCTIONS = [((8, 64, 128), (-1,)), ((8, 64, 128), (0, 1)), ((301, 257), (0,)), ((301, 257), (1,)),
              ((257, 301), "t1"), ((3, 50_001), (1,)), ((40, 30, 50), (0, 2))]


@pytest.mark.parametrize("shape,dims", REDUCTIONS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sums_and_means_into_several_outputs_run_alone(shape, dims, dtype):
    """The CPU gives each thread whole outputs of such a reduction, so the split cannot show."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(len(shape))).to(dtype)
    xn = x.to(N)
    if dims == "t1":  # a transposed input
        x, xn, dims = x.t(), xn.t(), (1,)
    assert torch.equal(xn.sum(dims).cpu(), x.sum(dims))
    assert torch.equal(xn.sum(dims, keepdim=True).cpu(), x.sum(dims, keepdim=True))
    assert torch.equal(xn.mean(dims).cpu(), x.mean(dims))
    assert solo_calls("aten::sum.dim_IntList") == 2
    assert solo_calls("aten::mean.dim") == 1


def test_sums_into_one_element_and_large_sums_keep_the_team():
    """A sum into one element splits its elements between threads: other bits alone."""
    x = torch.randn(301, 257, generator=torch.Generator().manual_seed(5)).bfloat16()
    assert torch.equal(x.to(N).sum((0, 1)).cpu(), x.sum((0, 1)))
    big = torch.randn(SOLO_ELEMENTS + 1, 4)
    assert torch.equal(big.to(N).sum(1).cpu(), big.sum(1))
    assert solo_calls("aten::sum.dim_IntList") == 0


@pytest.mark.parametrize("numel", [SOLO_ELEMENTS - 7, SOLO_ELEMENTS + 9])
def test_fills_run_alone_up_to_the_bound(numel):
    t = torch.empty(numel, device=N)
    t.fill_(2.5)
    assert torch.equal(t.cpu(), torch.full((numel,), 2.5))
    t.fill_(torch.tensor(-1.0, device=N))
    assert torch.equal(t.cpu(), torch.full((numel,), -1.0))
    t.zero_()
    assert torch.equal(t.cpu(), torch.zeros(numel))
    alone = 1 if numel <= SOLO_ELEMENTS else 0
    counts = torch_neuronx.op_counts()
    assert [counts[op]["solo"] for op in ("aten::fill_.Scalar", "aten::fill_.Tensor", "aten::zero_")] == [alone] * 3


@pytest.mark.parametrize("rows", [1021, 2049])
def test_moves_of_data_run_alone_up_to_the_bound(rows):
    """cat and index_select (boxed ops) move elements without arithmetic: the split cannot show.
    A call runs alone when none of its tensors is larger than the bound (128 columns: 1021 rows
    are under 2^18 elements, 2049 over)."""
    g = torch.Generator().manual_seed(rows)
    a, b = torch.randn(rows, 128, generator=g), torch.randn(rows, 64, generator=g).bfloat16()
    index = torch.randint(0, rows, (rows,), generator=g)
    assert torch.equal(torch.cat([a.to(N), b.to(N)], dim=1).cpu(), torch.cat([a, b], dim=1))
    assert torch.equal(a.to(N).index_select(0, index.to(N)).cpu(), a.index_select(0, index))
    alone = 1 if rows * 192 <= SOLO_ELEMENTS else 0
    assert solo_calls("aten::cat.out") == alone
    assert solo_calls("aten::index_select") == alone


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("optimizer", [torch.optim.AdamW, torch.optim.Adam])
def test_fused_adam_runs_alone_when_every_tensor_is_small(optimizer, dtype):
    """The CPU's fused Adam splits its work in 64-byte units, so only a tensor's last elements take
    its scalar tail however many threads share it: alone, parameters and states are the CPU's bits.
    Odd sizes put a split off a vector boundary if the kernel split otherwise."""
    def run(device, sizes):
        g = torch.Generator().manual_seed(len(sizes))
        params = [torch.randn(n, generator=g).to(dtype).to(device).requires_grad_() for n in sizes]
        opt = optimizer(params, lr=1e-2, weight_decay=0.1, fused=True)
        for step in range(3):
            for p in params:
                p.grad = (torch.randn(p.shape, generator=g) * (step + 1)).to(dtype).to(device)
            opt.step()
        states = [opt.state[p][k] for p in params for k in ("exp_avg", "exp_avg_sq")]
        return [t.detach().cpu() for t in params + states]

    op = "aten::_fused_adamw_" if optimizer is torch.optim.AdamW else "aten::_fused_adam_"
    for sizes, alone in (([40_001, 129, 7], 3), ([SOLO_ELEMENTS + 9, 7], 0)):
        torch_neuronx.reset_op_counts()
        for got, want in zip(run(N, sizes), run("cpu", sizes)):
            assert torch.equal(got, want)
        assert solo_calls(op) == alone, sizes


def test_broadcast_and_strided_calls_are_the_cpus_bits():
    a = torch.randn(301, 257)
    b = torch.randn(257)
    an, bn = a.to(N), b.to(N)
    torch.testing.assert_close(torch.mul(an.t(), 1.5).cpu(), a.t() * 1.5, rtol=0, atol=0)
    assert torch.equal((an + bn).cpu(), a + b)
    assert torch.equal((an.t() / 3).cpu(), a.t() / 3)
    assert solo_calls("aten::mul.Tensor") == 1
    assert solo_calls("aten::add.Tensor") == 1
    assert solo_calls("aten::div.Tensor") == 1


def test_a_fused_multiply_add_and_complex_products_keep_the_team():
    """alpha != 1 is a multiply-add the vectorized body fuses and the scalar tail may not; complex
    products round differently in the two: neither may change its split."""
    a, b = torch.randn(50_001), torch.randn(50_001)
    got = a.to(N).add(b.to(N), alpha=0.3)
    assert torch.equal(got.cpu(), a.add(b, alpha=0.3))
    assert solo_calls("aten::add.Tensor") == 0
    c, d = torch.randn(20_001, dtype=torch.complex64), torch.randn(20_001, dtype=torch.complex64)
    assert torch.equal((c.to(N) * d.to(N)).cpu(), c * d)
    assert solo_calls("aten::mul.Tensor") == 0


def test_flash_attention_keeps_the_team():
    """The CPU's flash attention gives other bits for a decode step on one thread than on its team
    (it sizes its work by the thread count), so even a small call runs on the team."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 1, 32, generator=g)
    k, v = torch.randn(2, 4, 64, 32, generator=g), torch.randn(2, 4, 64, 32, generator=g)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
        want = F.scaled_dot_product_attention(q, k, v)
        got = F.scaled_dot_product_attention(q.to(N), k.to(N), v.to(N))
    assert torch.equal(got.cpu(), want)
    assert sum(c["solo"] for c in torch_neuronx.op_counts().values()) == 0


def test_the_team_is_back_after_a_solo_kernel():
    """A bfloat16 sum splits its partial sums by the team's size: after solo kernels it must still
    give the CPU's bits, which one thread would not."""
    x = torch.randn(2 ** 21, generator=torch.Generator().manual_seed(3)).bfloat16()
    want = x.sum()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        one_thread = x.sum()
    finally:
        torch.set_num_threads(threads)
    if torch.equal(want, one_thread):
        pytest.skip("this machine's CPU sums alike on one thread and on its team; nothing to tell apart")
    xn = x.to(N)
    small = torch.randn(1000, device=N)
    for _ in range(3):
        small = small * 1.0001  # solo
        got = xn.sum()
    assert solo_calls("aten::mul.Tensor") == 3
    assert torch.equal(got.cpu(), want)
