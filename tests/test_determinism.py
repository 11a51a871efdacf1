"""The same op on the same inputs gives the same bits within a process, whatever the host thread
does while it runs (as on CUDA, where a kernel's launch shape follows only its inputs): not only
under torch.use_deterministic_algorithms."""
import time

import pytest
import torch
import torch.nn.functional as F

N = "neuron"


def _host_waits(fn):
    out = fn()
    torch.neuron.synchronize()  # the host thread waits while the kernels run
    return out.cpu()


def _host_busy(fn):
    out = fn()
    until = time.perf_counter() + 0.05
    while time.perf_counter() < until:  # the host thread runs Python while the kernels run
        pass
    return out.cpu()


def _grad_of(op, x):
    x = x.detach().requires_grad_()
    return lambda: torch.autograd.grad(op(x).square().sum(), x)[0]


# Large enough for ATen to split the work between threads, and odd-sized: a split at a power of two
# can fall on the cascade sum's own block boundaries and hide a different split.
BIG = 3_000_017


def _cases():
    g = torch.Generator().manual_seed(0)
    flat = torch.randn(BIG, generator=g)
    rows = torch.randn(301, BIG // 301, generator=g)
    batch = torch.randn(BIG // 61, 61, generator=g)
    return {
        "sum": (flat, lambda x: lambda: x.sum()),
        "mean over rows": (rows, lambda x: lambda: x.mean(0)),
        "var": (flat, lambda x: lambda: x.var()),
        "norm": (flat, lambda x: lambda: torch.linalg.vector_norm(x)),
        "layer_norm backward": (rows, lambda x: _grad_of(lambda t: F.layer_norm(t, t.shape[-1:]), x)),
        "batch_norm training": (batch, lambda x: lambda: F.batch_norm(x, None, None, training=True)),
        "batch_norm backward": (batch, lambda x: _grad_of(lambda t: F.batch_norm(t, None, None, training=True), x)),
    }


@pytest.mark.parametrize("name", list(_cases()))
def test_same_inputs_give_the_same_bits_whatever_the_host_does(name):
    cpu, make = _cases()[name]
    fn = make(cpu.to(N))
    runs = [_host_waits(fn), _host_busy(fn), _host_waits(fn), _host_busy(fn)]
    for r in runs[1:]:
        assert torch.equal(r, runs[0]), f"{name}: results differ in the last bits between runs"
    torch.testing.assert_close(runs[0], make(cpu)())


@pytest.mark.parametrize("module", [torch.nn.BatchNorm1d(4), torch.nn.LayerNorm(4)], ids=["BatchNorm1d", "LayerNorm"])
def test_gradcheck_of_norm_layers_is_reentrant(module):
    # gradcheck calls backward twice on the same inputs and requires identical results
    m = module.to(N, torch.float64)
    x = torch.randn(20, 4, dtype=torch.float64, device=N, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: m(t), (x,), nondet_tol=0.0)
