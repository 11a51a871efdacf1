"""The NKI kernel library (torch_neuronx.nki.kernels) against torch, on neuron and on NumPy, on
shapes that need several tiles and ragged edges; nki_op (custom op, opcheck, autograd,
torch.compile); the cost model's properties."""
import os
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import torch_neuronx
import torch_neuronx.nki as nki
import torch_neuronx.nki.isa as nisa
import torch_neuronx.nki.language as nl
from torch_neuronx.nki import kernels

N = "neuron"
# fp32: sums of up to 1,000 terms, added in another order than the CPU kernel adds them
TOL = {torch.float32: 1e-4, torch.bfloat16: 3e-2, torch.float16: 3e-3}


def close(got, want, dtype):
    torch.testing.assert_close(got.float().cpu(), want.float().cpu(), atol=TOL[dtype], rtol=TOL[dtype])


def rmsnorm_ref(x, w, eps=1e-6):
    xf = x.float()
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m,k,n", [(128, 128, 512), (300, 200, 700), (64, 1000, 96)])
def test_matmul_on_neuron_matches_torch(m, k, n, dtype):
    a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    got = kernels.matmul(a.to(N), b.to(N))
    want = a.to(N) @ b.to(N)
    close(got, want, dtype)
    scale = max(1.0, float(want.float().abs().max()))
    close(got / scale, (a.float() @ b.float()) / scale, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows,hidden", [(128, 64), (250, 96), (300, 1100)])
def test_norms_on_neuron_match_torch(rows, hidden, dtype):
    x = torch.randn(rows, hidden, dtype=dtype, device=N)
    w, b = torch.randn(hidden, dtype=dtype, device=N), torch.randn(hidden, dtype=dtype, device=N)
    close(kernels.rmsnorm(x, w, 1e-6), rmsnorm_ref(x, w), dtype)
    close(kernels.layernorm(x, w, b, 1e-5), F.layer_norm(x.float(), (hidden,), w.float(), b.float(), 1e-5), dtype)
    close(kernels.softmax(x), x.float().softmax(-1), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape", [(1, 4, 200, 64, 2), (2, 2, 640, 32, 2), (1, 2, 96, 128, 1)])
def test_flash_attention_forward_matches_sdpa(shape, causal, dtype):
    b, hq, s, d, hkv = shape
    q = torch.randn(b, hq, s, d, dtype=dtype, device=N)
    k, v = (torch.randn(b, hkv, s, d, dtype=dtype, device=N) for _ in range(2))
    got = kernels.flash_attention_fwd(q, k, v, causal)
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal, enable_gqa=True)
    close(got, want, dtype)


def test_library_kernels_on_numpy():
    a, b = np.random.rand(130, 260).astype(np.float32), np.random.rand(260, 530).astype(np.float32)
    np.testing.assert_allclose(kernels.matmul(a, b), a @ b, rtol=1e-5, atol=1e-4)
    x, w = np.random.rand(250, 96).astype(np.float16), np.random.rand(96).astype(np.float16)
    got = kernels.rmsnorm(x, w)
    assert isinstance(got, np.ndarray) and got.dtype == np.float16
    want = rmsnorm_ref(torch.from_numpy(x), torch.from_numpy(w)).numpy()
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=3e-3, atol=3e-3)
    e = np.exp(x.astype(np.float32) - x.astype(np.float32).max(1, keepdims=True))
    np.testing.assert_allclose(kernels.softmax(x).astype(np.float32), e / e.sum(1, keepdims=True), atol=2e-3)


# --- nki_op ---------------------------------------------------------------------------------
# The custom op of examples/nki_rmsnorm.py (a kernel and its backward), as a user writes one.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
from nki_rmsnorm import rmsnorm as nki_rmsnorm  # noqa: E402


@nki.jit
def scale_into(x, out, factor):
    for r0 in range(0, x.shape[0], 128):
        p = min(128, x.shape[0] - r0)
        t = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[0:p], src=x[r0:r0 + p])
        nisa.tensor_scalar(dst=t[0:p], data=t[0:p], op0=nl.multiply, operand0=factor)
        nisa.dma_copy(dst=out[r0:r0 + p], src=t[0:p])


@torch_neuronx.nki_op("nki_test::scale_into", mutates_args=("out",))
def nki_scale_into(x: torch.Tensor, out: torch.Tensor, factor: float) -> None:
    scale_into(x, out, factor)


# PyTorch's test_autograd_registration raises NotImplementedError for devices other than
# CPU/CUDA/XPU; the registration it looks for is checked directly below.
OPCHECKS = ("test_schema", "test_faketensor", "test_aot_dispatch_static", "test_aot_dispatch_dynamic")


def test_nki_op_passes_opcheck():
    x = torch.randn(3, 50, 64, device=N, requires_grad=True)
    w = torch.randn(64, device=N, requires_grad=True)
    torch.library.opcheck(nki_rmsnorm, (x, w, 1e-6), test_utils=OPCHECKS)
    torch.library.opcheck(nki_scale_into, (torch.randn(200, 32, device=N), torch.empty(200, 32, device=N), 2.5),
                          test_utils=OPCHECKS)
    assert torch._C._dispatch_has_computed_kernel_for_dispatch_key("examples::rmsnorm", "AutogradPrivateUse1")


def test_nki_op_mutates_its_declared_argument():
    x, out = torch.randn(200, 32, device=N), torch.zeros(200, 32, device=N)
    nki_scale_into(x, out, 2.5)
    close(out, x * 2.5, torch.float32)


def test_nki_op_gradients_match_torch():
    x = torch.randn(4, 30, 64, requires_grad=True)
    w = torch.randn(64, requires_grad=True)
    xn, wn = (t.detach().to(N).requires_grad_() for t in (x, w))
    g = torch.randn(4, 30, 64)
    nki_rmsnorm(xn, wn, 1e-6).backward(g.to(N))
    rmsnorm_ref(x, w).backward(g)
    close(xn.grad, x.grad, torch.float32)
    close(wn.grad, w.grad, torch.float32)


def test_nki_op_is_one_node_under_fullgraph_compile():
    torch._dynamo.reset()
    lin = torch.nn.Linear(64, 64).to(N)
    w = torch.randn(64, device=N)

    def block(x):
        return lin(nki_rmsnorm(x, w, 1e-6)).relu()

    x = torch.randn(2, 40, 64, device=N)
    compiled = torch.compile(block, backend="neuron", fullgraph=True)
    close(compiled(x), block(x), torch.float32)
    torch._dynamo.reset()


# --- cost model -----------------------------------------------------------------------------
def test_estimate_grows_with_work_and_never_beats_the_peak():
    def est(m, k, n, profile="trn2"):
        a, b = torch.zeros(m, k, dtype=torch.bfloat16), torch.zeros(k, n, dtype=torch.bfloat16)
        return nki.estimate(kernels.matmul, profile=profile)(a, b)

    small, wider, deeper = est(256, 256, 512), est(256, 256, 1024), est(256, 512, 1024)
    assert small.latency_us < wider.latency_us < deeper.latency_us
    assert small.instructions["tensor"] < wider.instructions["tensor"] < deeper.instructions["tensor"]
    big = est(2048, 2048, 2048)
    peak = 2 * 128 * 128 * 2.4e9 / 1e12
    assert big.tflops <= peak
    assert big.tflops > peak / 1.5, f"{big.tflops:.1f} TFLOP/s: the library matmul should near the PE array's peak"
    assert abs(est(2048, 2048, 2048, "trn3").latency_us / big.latency_us - 1) < 0.1  # the same PE array


def test_estimate_changes_with_the_profile_for_vector_bound_kernels():
    x = torch.zeros(1024, 2048)
    trn2 = nki.estimate(kernels.softmax, profile="trn2")(x)
    trn3 = nki.estimate(kernels.softmax, profile="trn3")(x)
    assert trn3.latency_us < trn2.latency_us
    assert trn2.instructions == trn3.instructions
    assert "estimate of trn2 hardware" in str(trn2)


def test_benchmark_reports_the_estimate_beside_the_measured_time(capsys):
    x = torch.randn(256, 512, device=N)
    result = nki.benchmark(kernels.softmax, warmup=1, iters=2)(x)
    printed = capsys.readouterr().out
    assert "estimate of trn2 hardware" in printed and "software NeuronCore" in printed
    assert result.estimate.latency_us > 0 and result.measured_ms > 0


def test_a_matmul_group_rounded_to_bf16_runs_as_one_host_gemm():
    from torch_neuronx.nki import _profile

    def steps(dtype):
        a, b = torch.empty(256, 512, dtype=dtype, device="meta"), torch.empty(512, 512, dtype=dtype, device="meta")
        traced, _ = kernels.matmul._traced((a, b), {}, _profile.current())
        return len(traced.program), len(traced.trace.instrs)

    bf16_steps, instrs = steps(torch.bfloat16)
    fp32_steps, same_instrs = steps(torch.float32)
    assert instrs == same_instrs  # the instructions (and their costs) are the kernel's either way
    # 2 output tiles x 4 K-tiles: each group of 4 matmuls runs as one GEMM in bf16, not in fp32
    assert fp32_steps - bf16_steps == 2 * (4 - 1)
