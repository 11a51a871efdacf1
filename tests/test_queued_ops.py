"""Ops without a dedicated kernel: queued through their meta and CPU kernels, checked against the
CPU on first use, synchronous where meta cannot tell the result."""
import pytest
import torch
import torch.nn.functional as F

import torch_neuronx

N = "neuron"


def test_queued_op_does_not_wait_for_the_stream():
    x, idx = torch.randn(64, 8), torch.tensor([3, 0, 5])
    xn, idxn = x.to(N), idx.to(N)
    torch.index_select(xn, 0, idxn)  # the first call of a signature runs at once, and is checked
    torch.neuron.synchronize()
    torch_neuronx.reset_fallback_ops()
    torch.neuron._sleep(300)
    y = torch.index_select(xn, 0, idxn)
    assert not torch.neuron.current_stream().query()  # returned while the stream is busy
    torch.testing.assert_close(y.cpu(), torch.index_select(x, 0, idx))
    assert torch_neuronx.get_queued_ops() == {"aten::index_select": 1}
    assert torch_neuronx.get_generic_ops() == {}


def test_value_dependent_shapes_run_at_once():
    x = torch.randn(6, 5)
    torch.neuron._sleep(100)
    nz = torch.nonzero(x.to(N) > 0)
    assert torch.neuron.current_stream().query()  # nonzero had to wait for its input
    torch.testing.assert_close(nz.cpu(), torch.nonzero(x > 0))
    torch.testing.assert_close(x.to(N)[x.to(N) > 0].cpu(), x[x > 0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_common_model_ops_match_cpu_and_are_queued(dtype):
    torch_neuronx.reset_fallback_ops()
    a, b = torch.randn(4, 6, dtype=dtype), torch.randn(3, 6, dtype=dtype)
    an, bn = a.to(N), b.to(N)
    for _ in range(3):  # first call checked, then queued
        torch.testing.assert_close(torch.cat([an, bn]).cpu(), torch.cat([a, b]), rtol=0, atol=0)
        torch.testing.assert_close(torch.where(an > 0, an, bn[:1]).cpu(), torch.where(a > 0, a, b[:1]))
        torch.testing.assert_close(torch.arange(2, 11, 3, device=N).cpu(), torch.arange(2, 11, 3))
        w, bias = torch.randn(6, dtype=dtype), torch.randn(6, dtype=dtype)
        out, mean, rstd = torch.native_layer_norm(an, (6,), w.to(N), bias.to(N), 1e-5)
        ref = torch.native_layer_norm(a, (6,), w, bias, 1e-5)
        for got, want in zip((out, mean, rstd), ref):
            assert got.dtype == want.dtype  # the CPU keeps bfloat16 statistics in float32
            torch.testing.assert_close(got.cpu(), want)
    queued = torch_neuronx.get_queued_ops()
    assert queued.get("aten::cat.out", 0) >= 2 and queued.get("aten::where.self", 0) >= 2
    assert queued.get("aten::native_layer_norm", 0) >= 2
    assert torch_neuronx.get_fallback_ops() == {}


def test_kernel_that_disagrees_with_meta_keeps_the_cpu_result():
    # Eval-mode batch norm returns empty saved statistics on the CPU; meta says (C,).
    x = torch.randn(3, 2, 4)
    rm, rv, w, b = torch.zeros(2), torch.ones(2), torch.randn(2), torch.randn(2)
    for _ in range(3):
        got = torch.native_batch_norm(x.to(N), w.to(N), b.to(N), rm.to(N), rv.to(N), False, 0.1, 1e-5)
        want = torch.native_batch_norm(x, w, b, rm, rv, False, 0.1, 1e-5)
        for g, e in zip(got, want):
            assert g.shape == e.shape
            torch.testing.assert_close(g.cpu(), e)


def test_out_kernel_using_its_output_as_scratch():
    # huber_loss's out= kernel fills the output at the input's size before reducing into it.
    x, t = torch.randn(5, 7), torch.randn(5, 7)
    for _ in range(3):
        torch.testing.assert_close(F.huber_loss(x.to(N), t.to(N)).cpu(), F.huber_loss(x, t))
        torch.testing.assert_close(F.binary_cross_entropy(x.sigmoid().to(N), t.sigmoid().to(N)).cpu(),
                                   F.binary_cross_entropy(x.sigmoid(), t.sigmoid()))
    torch.neuron.synchronize()


def test_out_variants_resize_and_keep_the_cpu_layout():
    x = torch.randn(2, 1, 2, 2).to(memory_format=torch.channels_last)
    for _ in range(3):
        o, oc = torch.empty(0, device=N), torch.empty(0)
        torch.cat([x.to(N), x.to(N)], dim=1, out=o)
        torch.cat([x, x], dim=1, out=oc)
        assert o.stride() == oc.stride()
        torch.testing.assert_close(o.cpu(), oc)
    v, i = torch.empty(0, device=N), torch.empty(0, dtype=torch.long, device=N)
    m = torch.randint(0, 3, (4, 6)).float()
    torch.mode(m.to(N), 1, out=(v, i))
    torch.testing.assert_close(v.cpu(), torch.mode(m, 1).values)


def test_queued_kernel_error_surfaces_at_synchronize():
    x = torch.randn(4, 3, device=N)
    ok = torch.tensor([1], device=N)
    torch.index_select(x, 0, ok)
    torch.neuron.synchronize()
    torch.index_select(x, 0, torch.tensor([9], device=N))  # only the kernel sees the bad index
    with pytest.raises(RuntimeError, match="index_select.*index out of range"):
        torch.neuron.synchronize()
    torch.testing.assert_close(torch.index_select(x, 0, ok).cpu(), x.cpu()[1:2])


def test_argument_errors_raise_at_the_call():
    a, b = torch.randn(2, 3, device=N), torch.randn(2, 4, device=N)
    with pytest.raises(RuntimeError, match="Sizes of tensors must match"):
        torch.cat([a, b])
    with pytest.raises(RuntimeError, match="same device"):
        torch.where(a > 0, a, torch.randn(2, 3))


def test_attention_picks_the_cpu_kernel():
    q, k, v = (torch.randn(2, 3, 5, 8, requires_grad=True) for _ in range(3))
    qn, kn, vn = (t.detach().to(N).requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    outn = F.scaled_dot_product_attention(qn, kn, vn, is_causal=True)
    torch.testing.assert_close(outn.cpu(), out, rtol=0, atol=0)
    out.sum().backward()
    outn.sum().backward()
    for a, b in ((q, qn), (k, kn), (v, vn)):
        torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=0, atol=0)
    ops = {**torch_neuronx.get_queued_ops(), **torch_neuronx.get_generic_ops()}
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in ops


def test_linear_cross_entropy_accumulates_in_float32():
    x, w, t = torch.randn(8, 6, dtype=torch.bfloat16), torch.randn(5, 6, dtype=torch.bfloat16), torch.randint(0, 5, (8,))
    opts = torch.nn.LinearCrossEntropyOptions(batch_chunk_size=2)
    got = F.linear_cross_entropy(x.to(N), w.to(N), t.to(N), reduction="none", options=opts)
    want = F.linear_cross_entropy(x, w, t, reduction="none", options=opts)
    torch.testing.assert_close(got.cpu(), want)
