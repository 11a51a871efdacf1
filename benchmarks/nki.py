"""NKI on the software NeuronCore: the library kernels (torch_neuronx.nki.kernels) against the
equivalent torch op on neuron, measured in the same run, and the cost model's Trainium estimate of
each kernel with its TFLOP/s. Issue #24's targets: matmul 1024² bf16 ≤ 2× torch.mm, rmsnorm
[4096, 1024] ≤ 3× F.rms_norm, flash-attention forward [1, 8, 1024, 64] ≤ 3× SDPA; the Trn2
estimate of the library matmul on 4096² bf16 within 1.5× of the Tensor Engine's roofline.
Issue #36's: a cumsum through nisa.tensor_tensor_scan [4096, 1024] ≤ 3× torch.cumsum, and an
RMSNorm written as nki-library writes it (access patterns) ≤ 3× F.rms_norm.
Run on a quiet machine: `make bench-nki`. Last, the cost model against AWS's matmul tutorial: the
estimate of each of its four steps (tests/nki_matmul_steps.py) at the tutorial's shape beside the
latency AWS published (Trn1; the table's order is what the model must reproduce); alone with
`--tutorial-only` (about two minutes of tracing).
"""
import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import torch_neuronx  # noqa: F401
import torch_neuronx.nki as nki
import torch_neuronx.nki.isa as nisa
import torch_neuronx.nki.language as nl
from torch_neuronx.nki import _profile, kernels

N = "neuron"


def timed(fn, iters):
    fn()
    torch.neuron.synchronize()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        torch.neuron.synchronize()
        best = min(best, (time.perf_counter() - start) / iters)
    return best


@nki.jit
def cumsum_kernel(x):
    """Row-wise cumsum, 128 rows per tile and 512 columns per scan, each scan carrying on from the
    previous one's last column (as nki-library's cumsum does; rows a multiple of 128)."""
    rows, cols = x.shape
    chunk = min(cols, 512)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ones = nl.ndarray((128, chunk), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(ones, 1.0)
    for r in nl.affine_range(rows // 128):
        carry = 0.0
        for c in nl.sequential_range(cols // chunk):
            t = nl.ndarray((128, chunk), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x[r * 128:(r + 1) * 128, c * chunk:(c + 1) * chunk])
            acc = nl.ndarray((128, chunk), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor_scan(dst=acc, data0=ones, data1=t, initial=carry, op0=nl.multiply, op1=nl.add)
            nisa.dma_copy(dst=out[r * 128:(r + 1) * 128, c * chunk:(c + 1) * chunk], src=acc)
            carry = acc[:, chunk - 1:chunk]
    return out


def tutorial_table():
    """The four steps of AWS's matmul tutorial, [4096, 8192] @ [8192, 8192] bf16: the trn2
    estimate of each, its speedup over the tiled step, and AWS's published figures (one Trn1
    NeuronCore, whose PE array and DMA engines are close to a Trn2 core's)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from nki_matmul_steps import PUBLISHED_MS, STEPS

    k, m, n = 8192, 4096, 8192
    print(f"\nAWS's matmul tutorial, [{m},{k}] @ [{k},{n}] bf16: trn2 estimate vs published (Trn1)")
    print(f"{'step':<12}{'estimate ms':>12}{'published ms':>14}{'error':>8}{'speedup':>9}{'published':>11}"
          f"{'MB by DMA':>11}")
    base = None
    for name, kernel in STEPS.items():
        est = nki.estimate(kernel, profile="trn2")(nki.Spec((k, m), torch.bfloat16), nki.Spec((k, n), torch.bfloat16))
        ms, pub = est.latency_us / 1e3, PUBLISHED_MS[name]
        base = base or (ms, pub)
        print(f"{name:<12}{ms:>12.2f}{pub:>14.2f}{(ms / pub - 1) * 100:>+7.0f}%{base[0] / ms:>8.2f}x"
              f"{base[1] / pub:>10.2f}x{est.dma_bytes / 1e6:>11.0f}", flush=True)


@nki.jit
def rmsnorm_ap(x, gamma, eps):
    """RMSNorm written as nki-library's rmsnorm_tkg writes it: the hidden dim spread over the 128
    partitions by access patterns ([N, H] read as [128, N, H/128]), squares reduced along the free
    dim, summed across partitions by one matmul against a 1/H matrix (every partition gets every
    row's mean), and the result written back through the same pattern (H a multiple of 128)."""
    n, h = x.shape
    h1 = h // 128
    out = nl.ndarray((n, h), dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.ndarray((128, 1, h1), dtype=gamma.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=g, src=gamma.ap([[h1, 128], [0, 1], [1, h1]]))
    mean = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(mean, 1.0 / h)
    eps_sb = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(eps_sb, eps)
    for r0 in range(0, n, 512):
        rows = min(512, n - r0)
        t = nl.ndarray((128, rows, h1), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x.ap([[h1, 128], [h, rows], [1, h1]], offset=r0 * h))
        sq = nl.ndarray((128, rows, h1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=sq, op=nl.square, data=t)
        part = nl.ndarray((128, rows), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=part, op=nl.add, data=sq, axis=2)
        ms = nl.ndarray((128, rows), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ms, stationary=mean, moving=part)
        rs = nl.ndarray((128, rows), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=rs, op=nl.rsqrt, data=ms, bias=eps_sb)
        y = nl.ndarray((128, rows, h1), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=y, data1=t, data2=rs.expand_dim(2).broadcast(2, h1), op=nl.multiply)
        nisa.tensor_tensor(dst=y, data1=y, data2=g.broadcast(1, rows), op=nl.multiply)
        nisa.dma_copy(dst=out.ap([[h1, 128], [h, rows], [1, h1]], offset=r0 * h), src=y)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--tutorial-only", action="store_true", help="only the cost model against AWS's matmul tutorial")
    args = p.parse_args()
    if args.tutorial_only:
        return tutorial_table()
    bf16 = torch.bfloat16
    a, b = torch.randn(1024, 1024, dtype=bf16, device=N), torch.randn(1024, 1024, dtype=bf16, device=N)
    x, w = torch.randn(4096, 1024, dtype=bf16, device=N), torch.randn(1024, dtype=bf16, device=N)
    q, k, v = (torch.randn(1, 8, 1024, 64, dtype=bf16, device=N) for _ in range(3))
    c = torch.randn(4096, 1024, device=N)
    cases = [
        ("matmul 1024x1024 bf16", kernels.matmul, (a, b), lambda: a @ b, 2.0, 2 * 1024 ** 3),
        ("rmsnorm [4096, 1024] bf16", kernels.rmsnorm, (x, w, 1e-6), lambda: F.rms_norm(x, (1024,), w, 1e-6), 3.0,
         4 * 4096 * 1024),
        ("rmsnorm, nki-library style (ap) [4096, 1024] bf16", rmsnorm_ap, (x, w, 1e-6),
         lambda: F.rms_norm(x, (1024,), w, 1e-6), 3.0, 4 * 4096 * 1024),
        ("flash-attn fwd [1,8,1024,64] causal", kernels.flash_attention_fwd, (q, k, v, True),
         lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), 3.0, 2 * 2 * 8 * 1024 * 1024 * 64 // 2),
        ("cumsum (tensor_tensor_scan) [4096, 1024] fp32", cumsum_kernel, (c,), lambda: torch.cumsum(c, 1), 3.0,
         4096 * 1024),
    ]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; neuron = {torch.neuron.get_device_name()}\n")
    print(f"{'kernel':<46}{'nki ms':>9}{'torch ms':>10}{'ratio':>8}{'target':>8}   trn2 estimate")
    for name, kernel, kargs, torch_fn, target, flops in cases:
        torch.testing.assert_close(kernel(*kargs).float(), torch_fn().float(), atol=0.1, rtol=0.05)
        nki_s = timed(lambda: kernel(*kargs), args.iters)
        torch_s = timed(torch_fn, args.iters)
        est = nki.estimate(kernel, profile="trn2")(*kargs)
        print(f"{name:<46}{nki_s * 1e3:>9.2f}{torch_s * 1e3:>10.2f}{nki_s / torch_s:>7.2f}x{'<= ' + str(target):>8}   "
              f"{est.latency_us:9.1f} us, {flops / est.latency_us / 1e6:6.2f} TFLOP/s")
    big = torch.zeros(4096, 4096, dtype=bf16)
    for profile in ("trn2", "trn3"):
        est = nki.estimate(kernels.matmul, profile=profile)(big, big)
        core = _profile.current(profile)
        roofline_us = 2 * 4096 ** 3 / core.tensor_peak_flops * 1e6
        print(f"\nmatmul 4096x4096 bf16 on {profile}: estimate {est.latency_us:.0f} us, Tensor Engine roofline "
              f"{roofline_us:.0f} us -> {est.latency_us / roofline_us:.2f}x roofline (target <= 1.5x on trn2), "
              f"{est.tflops:.1f} of {core.tensor_peak_flops / 1e12:.1f} peak TFLOP/s")
        print("  " + str(est).replace("\n", "\n  "))
    tutorial_table()


if __name__ == "__main__":
    main()
