"""The op pipeline: how ops run (async, sync, copy), what they count, what explain() says, and the
corrections the overrides table makes where the CPU kernel and its meta kernel disagree."""
import warnings

import pytest
import torch
import torch.nn.functional as F

import torch_neuronx
from conftest import run_python

N = "neuron"


def counts(op):
    return torch_neuronx.op_counts().get(op, {"async": 0, "sync": 0, "copy": 0, "first_waits": 0, "concatenated": 0,
                                           "solo": 0})


def test_boxed_op_is_async_once_its_signature_has_run():
    x, idx = torch.randn(64, 8), torch.tensor([3, 0, 5])
    xn, idxn = x.to(N), idx.to(N)
    torch.index_select(torch.randn(5, 2, device=N), 0, torch.tensor([1], device=N))  # same dtypes and ranks
    torch.neuron.synchronize()
    torch_neuronx.reset_op_counts()
    torch.neuron._sleep(300)
    y = torch.index_select(xn, 0, idxn)  # other sizes and values: no new signature
    assert not torch.neuron.current_stream().query()  # returned while the stream is busy
    torch.testing.assert_close(y.cpu(), torch.index_select(x, 0, idx))
    assert counts("aten::index_select") == {"async": 1, "sync": 0, "copy": 0, "first_waits": 0,
                                           "concatenated": 0, "solo": 1}  # a small move of data


def test_the_first_call_of_a_signature_raises_the_cpu_kernels_errors_at_the_call():
    """Checks only the CPU kernel makes (here, the dtypes it implements) raise at the call, as on
    CUDA, not at a later sync blamed on another op; later calls of the signature are queued."""
    a, b = torch.randn(3), torch.randn(3)
    with pytest.raises(NotImplementedError) as on_cpu:
        a & b
    torch_neuronx.reset_op_counts()
    for _ in range(2):  # a failed signature is not remembered: every such call raises
        with pytest.raises(NotImplementedError) as on_neuron:
            a.to(N) & b.to(N)
        assert str(on_neuron.value) == str(on_cpu.value)
    torch.neuron.synchronize()  # nothing left pending
    x = torch.randint(0, 8, (5,), dtype=torch.int16)
    y = torch.randint(0, 8, (5,), dtype=torch.int16)
    xn, yn = x.to(N), y.to(N)
    torch_neuronx.reset_op_counts()
    torch.testing.assert_close((xn & yn).cpu(), x & y)
    y1 = yn + 1
    torch.neuron.synchronize()
    torch.neuron._sleep(300)
    z = xn & y1  # a known signature
    assert not torch.neuron.current_stream().query()
    torch.testing.assert_close(z.cpu(), x & (y + 1))
    c = counts("aten::bitwise_and.Tensor")
    assert c["async"] == 2 and c["first_waits"] == 1 and c["sync"] == 0
    assert "waited: the first of their signature" in torch_neuronx.explain("aten::bitwise_and.Tensor")


@pytest.mark.parametrize("target_dim", [0, 1])
def test_an_integer_argument_that_changes_the_shape_is_checked_at_its_first_call(target_dim):
    # multi_margin_loss's reduction (an int) decides whether a 1-dim input's loss is 0-dim or (1,):
    # after a clean call with reduction="mean", reduction="none" returned meta's shape, and the
    # CPU kernel's disagreement failed at the next, unrelated op.
    x = torch.randn(5)
    t = torch.tensor([2]) if target_dim else torch.tensor(2)
    xn, tn = x.to(N), t.to(N)
    F.multi_margin_loss(xn, tn, reduction="mean")
    torch.neuron.synchronize()
    for reduction in ("none", "sum", "mean"):
        got = F.multi_margin_loss(xn, tn, reduction=reduction)
        want = F.multi_margin_loss(x, t, reduction=reduction)
        assert got.shape == want.shape, (reduction, got.shape, want.shape)
        torch.neuron.synchronize()
        torch.testing.assert_close(got.cpu(), want)
    y = torch.randn(4, 3)
    target = torch.tensor([[2, 0, -1], [1, -1, 0], [0, 1, 2], [2, -1, 0]])
    if target_dim == 0:  # multilabel's 1-dim case: one sample's input and target
        y, target = y[0], target[0]
    for reduction in (1, 0, 2):  # multilabel_margin_loss's own op, its reduction an int
        got = torch.ops.aten.multilabel_margin_loss_forward(y.to(N), target.to(N), reduction)[0]
        want = torch.ops.aten.multilabel_margin_loss_forward(y, target, reduction)[0]
        assert got.shape == want.shape, (reduction, got.shape, want.shape)
        torch.testing.assert_close(got.cpu(), want)


@pytest.mark.parametrize("keepdim", [False, True])
def test_an_empty_dim_list_reduces_every_dimension_as_on_cpu(keepdim):
    # nansum's meta kernel reduces no dimension for dim=(), the CPU (and CUDA) kernel every one,
    # as sum does: the call raised that the kernel disagreed with its meta kernel.
    x = torch.rand(2, 3)
    x[0, 1] = float("nan")
    for f in (torch.nansum, torch.nanmean, torch.sum):
        got, want = f(x.to(N), dim=(), keepdim=keepdim), f(x, dim=(), keepdim=keepdim)
        assert got.shape == want.shape, (f.__name__, got.shape, want.shape)
        torch.testing.assert_close(got.cpu(), want, equal_nan=True)


def test_an_empty_call_that_ran_cleanly_does_not_queue_a_full_one():
    """CPU kernels return early for no elements, before their dtype checks: bool mm of an empty
    matrix runs, of a full one raises. The full call must still raise at the call (issue 12)."""
    def call(dev, rows):
        ones = torch.ones(rows, 3, dtype=torch.bool, device=dev)
        return torch.mm(ones, torch.ones(3, 2, dtype=torch.bool, device=dev))

    assert call(N, 0).cpu().shape == call("cpu", 0).shape == (0, 2)
    with pytest.raises(RuntimeError) as on_cpu:
        call("cpu", 2)
    with pytest.raises(RuntimeError) as on_neuron:
        call(N, 2)
    assert str(on_neuron.value) == str(on_cpu.value)
    torch.neuron.synchronize()  # nothing left to fail later
    # An empty result does the same: pdist of one row computes nothing, of four rows refuses half.
    assert F.pdist(torch.randn(1, 3, device=N).half()).cpu().shape == (0,)
    with pytest.raises(RuntimeError) as on_cpu:
        F.pdist(torch.randn(4, 3).half())
    with pytest.raises(RuntimeError) as on_neuron:
        F.pdist(torch.randn(4, 3, device=N).half())
    assert str(on_neuron.value) == str(on_cpu.value)
    torch.neuron.synchronize()


def test_a_contiguous_call_that_ran_cleanly_does_not_queue_a_strided_one():
    """native_group_norm's CPU kernel requires a contiguous input: after a contiguous call ran, a
    transposed input of the same shape must still raise at the call (issue 12, item 1)."""
    x = torch.randn(4, 6, 5)
    strided = x.transpose(1, 2).contiguous().transpose(1, 2)
    assert not strided.to(N).is_contiguous()
    for dev in ("cpu", N):
        torch.native_group_norm(x.to(dev), None, None, 4, 6, 5, 1, 1e-5)
    with pytest.raises(RuntimeError) as on_cpu:
        torch.native_group_norm(strided, None, None, 4, 6, 5, 1, 1e-5)
    with pytest.raises(RuntimeError) as on_neuron:
        torch.native_group_norm(strided.to(N), None, None, 4, 6, 5, 1, 1e-5)
    assert str(on_neuron.value) == str(on_cpu.value)
    torch.neuron.synchronize()


def test_an_out_tensor_overlapping_an_input_raises_like_cpu():
    """The kernel's views of one device storage share a storage, so the CPU kernel's overlap checks
    see what they see on the CPU (the results would otherwise be computed over memory being written)."""
    def call(dev):
        x = torch.arange(8.0, device=dev)
        torch.take(x, torch.tensor([7, 6, 5, 4], device=dev), out=x[2:6])
        return x.cpu()

    with pytest.raises(RuntimeError, match="single memory location") as on_cpu:
        call("cpu")
    with pytest.raises(RuntimeError) as on_neuron:
        call(N)
    assert str(on_neuron.value) == str(on_cpu.value)
    torch.neuron.synchronize()
    x, out = torch.arange(8.0, device=N), torch.zeros(8, device=N)  # the same op without overlap runs
    torch.take(x, torch.tensor([7, 6, 5, 4], device=N), out=out[2:6])
    torch.testing.assert_close(out.cpu()[2:6], torch.tensor([7.0, 6.0, 5.0, 4.0]))
    a = torch.rand(3, 0)  # empty outputs share no memory: the kernel must not see Q and R as aliases
    q, r = torch.linalg.qr(a.to(N))
    want = torch.linalg.qr(a)
    assert q.shape == want.Q.shape and r.shape == want.R.shape
    torch.neuron.synchronize()


def _partial_overlap(op):
    """op(dev, out_at): out= a window of the input's own storage; 4 clear of the input, 1 across it."""
    def call(dev, start):
        buf = torch.arange(16.0, device=dev)
        return op(buf[:4], buf[start:start + 2])
    return call


def _aliased_out(op):
    """op(dev, out): a transposed out= tensor, or an expanded one whose elements alias."""
    def call(dev, aliased):
        out = torch.empty(1, 3, device=dev).expand(4, 3) if aliased else torch.empty(3, 4, device=dev).t()
        return op(dev, out)
    return call


def _first_two(t):
    return torch.tensor([0, 1], device=t.device)


_OVERLAP_CASES = {
    "cat": _partial_overlap(lambda x, out: torch.cat([x[:1], x[1:2]], out=out)),
    "take": _partial_overlap(lambda x, out: torch.take(x, _first_two(x), out=out)),
    "index_select": _partial_overlap(lambda x, out: torch.index_select(x, 0, _first_two(x), out=out)),
    "kthvalue": _partial_overlap(lambda x, out: torch.kthvalue(
        x.view(2, 2), 1, 1, out=(out, torch.empty(2, dtype=torch.long, device=x.device)))),
    "take_aliased": _aliased_out(lambda dev, out: torch.take(
        torch.randn(12, device=dev), torch.zeros(4, 3, dtype=torch.long, device=dev), out=out)),
    "cat_aliased": _aliased_out(lambda dev, out: torch.cat([torch.randn(2, 3, device=dev)] * 2, out=out)),
    "bernoulli_aliased": _aliased_out(lambda dev, out: torch.bernoulli(torch.rand(4, 3, device=dev), out=out)),
}


@pytest.mark.parametrize("case", sorted(_OVERLAP_CASES))
def test_overlap_errors_raise_at_the_call_after_a_clean_call_of_the_same_shapes(case):
    """Whether out= overlaps an input of its own storage, or aliases its own elements, decides the
    CPU kernel's overlap errors: a call like that must raise at the call even after a clean call
    with the same dtypes, ranks and storage sharing has made the signature known (issue 12)."""
    call = _OVERLAP_CASES[case]
    clean, bad = (4, 1) if not case.endswith("_aliased") else (False, True)
    for _ in range(2):
        call(N, clean)
    torch.neuron.synchronize()
    with pytest.raises(RuntimeError, match="memory location") as on_cpu:
        call("cpu", bad)
    with pytest.raises(RuntimeError) as on_neuron:
        call(N, bad)
    assert str(on_neuron.value) == str(on_cpu.value)
    torch.neuron.synchronize()  # nothing left to fail later


def test_an_out_tensor_aliasing_its_own_elements_is_refused_before_it_is_written_past():
    """narrow_copy's and avg_pool3d's CPU out= kernels write an expanded out= tensor as if it were
    contiguous, past its storage: on the CPU a heap overflow, on neuron other tensors' device memory.
    neuron refuses such an out= tensor at the call, with PyTorch's overlap error, as CUDA does."""
    calls = {
        "narrow_copy": (lambda out: torch.narrow_copy(torch.randn(50, 50, 50, device=N), 1, 2, 20, out=out),
                        (50, 20, 50)),
        "avg_pool3d": (lambda out: torch._C._nn.avg_pool3d(torch.randn(1, 8, 32, 32, 32, device=N), 2, out=out),
                       (1, 8, 16, 16, 16)),
    }
    for name, (call, shape) in calls.items():
        neighbours = [torch.full((4096,), 7.0, device=N) for _ in range(16)]
        out = torch.empty(1, device=N).expand(shape)
        neighbours += [torch.full((4096,), 7.0, device=N) for _ in range(64)]
        with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
            call(out)
        torch.neuron.synchronize()
        assert all(bool((n == 7).all()) for n in neighbours), name
        call(torch.empty(shape, device=N).transpose(0, 1).contiguous().transpose(0, 1))  # strided, not aliased: runs
    torch.neuron.synchronize()


def test_value_dependent_shapes_run_sync_and_say_why():
    x = torch.randn(6, 5)
    torch_neuronx.reset_op_counts()
    torch.neuron._sleep(100)
    nz = torch.nonzero(x.to(N) > 0)
    assert torch.neuron.current_stream().query()  # nonzero had to wait for its input
    torch.testing.assert_close(nz.cpu(), torch.nonzero(x > 0))
    c = torch_neuronx.op_counts(reasons=True)["aten::nonzero"]
    assert c["sync"] == 1 and "depends on tensor values" in next(iter(c["reasons"]["sync"]))
    assert "sync (boxed): its output shape or value depends on tensor values" in torch_neuronx.explain("aten::nonzero")
    torch.testing.assert_close(x.to(N)[x.to(N) > 0].cpu(), x[x > 0])


def test_explain_names_the_path_of_every_kind_of_op():
    assert "typed kernel" in torch_neuronx.explain("aten::add.Tensor")
    assert "async (boxed)" in torch_neuronx.explain("aten::index_select") and "index_select.out" in \
        torch_neuronx.explain("aten::index_select")
    assert "composite" in torch_neuronx.explain("aten::linear")
    assert "transfer" in torch_neuronx.explain("aten::copy_")
    assert "taken at the device" not in torch_neuronx.explain("aten::relu")
    assert "mean/rstd are float for half and bfloat16 inputs" in torch_neuronx.explain("aten::native_layer_norm")
    with pytest.raises(ValueError, match="no operator named"):
        torch_neuronx.explain("aten::no_such_op")


def test_op_counts_shape_and_reset():
    torch_neuronx.reset_op_counts()
    a = torch.ones(3, device=N)
    (a + a).relu()
    c = torch_neuronx.op_counts()
    assert {k: c["aten::add.Tensor"][k] for k in ("async", "sync", "copy")} == {"async": 1, "sync": 0, "copy": 0}
    assert c["aten::relu"]["async"] == 1
    torch_neuronx.reset_op_counts()
    assert torch_neuronx.op_counts() == {}
    assert "total" in torch_neuronx.op_report()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_model_ops_match_cpu_and_are_async(dtype):
    torch_neuronx.reset_op_counts()
    a, b = torch.randn(4, 6, dtype=dtype), torch.randn(3, 6, dtype=dtype)
    an, bn = a.to(N), b.to(N)
    for _ in range(2):
        torch.testing.assert_close(torch.cat([an, bn]).cpu(), torch.cat([a, b]), rtol=0, atol=0)
        torch.testing.assert_close(torch.where(an > 0, an, bn[:1]).cpu(), torch.where(a > 0, a, b[:1]))
        torch.testing.assert_close(torch.arange(2, 11, 3, device=N).cpu(), torch.arange(2, 11, 3))
        for w in (torch.randn(6, dtype=dtype), torch.randn(6)):  # same dtype, and float weights
            got = torch.native_layer_norm(an, (6,), w.to(N), w.to(N), 1e-5)
            want = torch.native_layer_norm(a, (6,), w, w, 1e-5)
            assert got[0].dtype == want[0].dtype
            for g, e in zip(got, want):
                torch.testing.assert_close(g.cpu(), e.to(g.dtype), rtol=0, atol=0)
    assert all(c["sync"] == 0 and c["copy"] == 0 for c in torch_neuronx.op_counts().values())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("weights", ["same", "float", "none"])
def test_layer_norm_statistics_are_float_as_on_cuda_and_backward_matches_cpu(dtype, weights):
    # FakeTensor (meta) says float mean/rstd for half and bfloat16 inputs, as CUDA gives them;
    # the device gives what compiled graphs are traced with, holding the CPU kernel's values.
    torch.manual_seed(0)
    x = torch.randn(3, 4, 8, dtype=dtype, requires_grad=True)
    wdt = {"same": dtype, "float": torch.float32, "none": None}[weights]
    params = [] if wdt is None else [torch.randn(8, dtype=wdt, requires_grad=True) for _ in range(2)]
    dev = [t.detach().to(N).requires_grad_() for t in [x, *params]]
    for _ in range(2):  # the second call runs queued, after the first call's clean run
        want = torch.native_layer_norm(x, (8,), *(params or [None, None]), 1e-5)
        got = torch.native_layer_norm(dev[0], (8,), *(dev[1:] or [None, None]), 1e-5)
        with torch._subclasses.FakeTensorMode() as mode:
            fake = torch.native_layer_norm(mode.from_tensor(dev[0]), (8,), *[mode.from_tensor(t) for t in dev[1:]] or
                                           [None, None], 1e-5)
        assert [t.dtype for t in got] == [t.dtype for t in fake] == [dtype, torch.float32, torch.float32]
        for g, e in zip(got, want):
            torch.testing.assert_close(g.cpu(), e.to(g.dtype), rtol=0, atol=0)
        grad = torch.randn_like(want[0])
        ref = torch.autograd.grad(want[0], [x, *params], grad)
        out = torch.autograd.grad(got[0], dev, grad.to(N))
        # Weight grads sum over rows in an order that follows the kernel team's width
        # (exec/executor.cpp), rounding partial sums to the input's precision as the CPU kernel
        # does: they differ from the CPU's by as much as the CPU's differ from a float64 answer.
        for g, e in zip(out, ref):
            assert g.dtype == e.dtype
            torch.testing.assert_close(g.cpu(), e, rtol=2e-2, atol=5e-2)


@pytest.mark.parametrize("training", [False, True])
def test_batch_norm_statistics_follow_the_cpu(training):
    x = torch.randn(3, 2, 4, dtype=torch.bfloat16)
    rm, rv, w, b = (torch.zeros(2), torch.ones(2), torch.randn(2), torch.randn(2))
    for params in ((w, b, rm, rv), tuple(t.bfloat16() for t in (w, b, rm, rv))):
        dev = [t.to(N) for t in params]
        got = torch.native_batch_norm(x.to(N), *dev, training, 0.1, 1e-5)
        want = torch.native_batch_norm(x, *[t.clone() for t in params], training, 0.1, 1e-5)
        for g, e in zip(got, want):
            assert (g.shape, g.dtype) == (e.shape, e.dtype)
            torch.testing.assert_close(g.cpu(), e)


def test_out_kernels_that_use_their_output_as_scratch():
    x, t = torch.randn(5, 7), torch.randn(5, 7)
    for _ in range(2):
        torch.testing.assert_close(F.huber_loss(x.to(N), t.to(N)).cpu(), F.huber_loss(x, t))
        torch.testing.assert_close(F.binary_cross_entropy(x.sigmoid().to(N), t.sigmoid().to(N)).cpu(),
                                   F.binary_cross_entropy(x.sigmoid(), t.sigmoid()))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the CPU kernel's scratch resize must not leak a warning
            torch.testing.assert_close(F.mse_loss(x.to(N), t.to(N)).cpu(), F.mse_loss(x, t))
            torch.ones(1, device=N).add_(1)


def test_out_variants_resize_keep_the_cpu_layout_and_warn_every_time():
    x = torch.randn(2, 1, 2, 2).to(memory_format=torch.channels_last)
    for _ in range(2):
        o, oc = torch.empty(0, device=N), torch.empty(0)
        torch.cat([x.to(N), x.to(N)], dim=1, out=o)
        torch.cat([x, x], dim=1, out=oc)
        assert o.stride() == oc.stride()
        torch.testing.assert_close(o.cpu(), oc)
    for _ in range(3):  # a non-empty out= tensor of another shape warns on every call, as on CPU
        with pytest.warns(UserWarning, match="was resized"):
            torch.acos(torch.rand(4, device=N), out=torch.empty(2, device=N))
    v, i = torch.empty(0, device=N), torch.empty(0, dtype=torch.long, device=N)
    m = torch.randint(0, 3, (4, 6)).float()
    torch.mode(m.to(N), 1, out=(v, i))
    torch.testing.assert_close(v.cpu(), torch.mode(m, 1).values)


def test_kernel_errors_keep_their_kind_at_the_sync():
    x = torch.randn(4, 3, device=N)
    ok = torch.tensor([1], device=N)
    torch.index_select(x, 0, ok)  # the signature has run: later calls are queued
    torch.zeros(4, device=N).index_copy_(0, ok, torch.ones(1, device=N))
    torch.index_select(x, 0, torch.tensor([9], device=N))  # only the kernel sees the bad index
    with pytest.raises(IndexError, match="index_select.*index out of range"):
        torch.neuron.synchronize()
    torch.testing.assert_close(torch.index_select(x, 0, ok).cpu(), x.cpu()[1:2])
    torch.zeros(4, device=N).index_copy_(0, torch.tensor([7], device=N), torch.ones(1, device=N))
    with pytest.raises(IndexError, match="index_copy"):
        torch.neuron.synchronize()


def test_argument_errors_raise_at_the_call():
    a, b = torch.randn(2, 3, device=N), torch.randn(2, 4, device=N)
    with pytest.raises(RuntimeError, match="Sizes of tensors must match"):
        torch.cat([a, b])
    with pytest.raises(RuntimeError, match="same device"):
        torch.where(a > 0, a, torch.randn(2, 3))


def test_host_index_tensors_move_to_the_device():
    x = torch.randn(5, 4)
    idx = torch.tensor([4, 0, 2])
    torch.testing.assert_close(x.to(N)[idx].cpu(), x[idx])
    y = x.to(N)
    y[idx] = torch.zeros(3, 4, device=N)
    x[idx] = 0
    torch.testing.assert_close(y.cpu(), x)


def test_attention_is_async_and_exact():
    q, k, v = (torch.randn(2, 3, 5, 8, requires_grad=True) for _ in range(3))
    qn, kn, vn = (t.detach().to(N).requires_grad_() for t in (q, k, v))
    torch_neuronx.reset_op_counts()
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    outn = F.scaled_dot_product_attention(qn, kn, vn, is_causal=True)
    out.sum().backward()
    outn.sum().backward()
    torch.testing.assert_close(outn.cpu(), out, rtol=0, atol=0)
    for a, b in ((q, qn), (k, kn), (v, vn)):
        torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=0, atol=0)
    c = torch_neuronx.op_counts()
    # SDPA takes the device's fused entry (PrivateUse1's "overrideable" backend), which runs the
    # CPU's flash kernel as a task.
    assert torch._fused_sdp_choice(qn, kn, vn, is_causal=True) == torch.nn.attention.SDPBackend.OVERRIDEABLE.value
    assert c["aten::_scaled_dot_product_fused_attention_overrideable"]["async"] == 1
    assert c["aten::_scaled_dot_product_fused_attention_overrideable_backward"]["async"] == 1
    assert c["aten::_scaled_dot_product_flash_attention_for_cpu"]["async"] == 1
    assert c["aten::_scaled_dot_product_flash_attention_for_cpu"]["sync"] == 0
    assert c["aten::_scaled_dot_product_flash_attention_for_cpu_backward"]["async"] == 1


def test_attention_where_the_cpu_takes_the_math_path():
    """Dropout: the CPU takes the math decomposition; neuron too, not its fused entry."""
    q = torch.randn(1, 2, 4, 8, device=N)
    c = q.cpu()
    assert torch._fused_sdp_choice(q, q, q, dropout_p=0.5) == torch._fused_sdp_choice(c, c, c, dropout_p=0.5)
    torch_neuronx.reset_op_counts()
    out = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    assert out.shape == q.shape
    assert "aten::_scaled_dot_product_fused_attention_overrideable" not in torch_neuronx.op_counts()


def test_random_ops_are_async_and_follow_the_seed():
    torch.randn(3, device=N)  # their signatures have run
    torch.empty(5, device=N).uniform_(generator=torch.Generator(device=N))
    torch.neuron.manual_seed(7)
    torch.neuron.synchronize()
    torch_neuronx.reset_op_counts()
    torch.neuron._sleep(200)
    a = torch.randn(1000, device=N)
    g = torch.Generator(device=N).manual_seed(3)
    b = torch.empty(50, device=N).uniform_(generator=g)
    assert not torch.neuron.current_stream().query()
    torch.neuron.manual_seed(7)
    torch.testing.assert_close(torch.randn(1000, device=N).cpu(), a.cpu())
    seeded = torch.Generator(device=N).manual_seed(3)
    torch.testing.assert_close(torch.empty(50, device=N).uniform_(generator=seeded).cpu(), b.cpu())
    assert 0.9 < a.std().item() < 1.1
    c = torch_neuronx.op_counts()
    assert c["aten::normal_"]["sync"] == 0 and c["aten::uniform_"]["sync"] == 0


def test_products_large_enough_for_every_core_match_cpu():
    """Products of 2^24 multiply-adds or more size their kernel team themselves (executor.h); each
    variant's kernel gets its operands in its own order."""
    a, b, c = torch.randn(256, 256), torch.randn(256, 256), torch.randn(256, 256)
    ba, bb, bc = torch.randn(2, 256, 256), torch.randn(2, 256, 128), torch.randn(2, 256, 128)
    calls = {
        "mm": lambda a, b, c, ba, bb, bc: torch.mm(a, b),
        "bmm": lambda a, b, c, ba, bb, bc: torch.bmm(ba, bb),
        "addmm": lambda a, b, c, ba, bb, bc: torch.addmm(c, a, b, beta=0.5, alpha=2.0),
        "addmm_": lambda a, b, c, ba, bb, bc: c.clone().addmm_(a, b, alpha=-1.0),
        "baddbmm_": lambda a, b, c, ba, bb, bc: bc.clone().baddbmm_(ba, bb, beta=2.0),
        "mm out=": lambda a, b, c, ba, bb, bc: torch.mm(a, b, out=torch.empty_like(c)),
    }
    args = (a, b, c, ba, bb, bc)
    for name, call in calls.items():
        got = call(*(t.to(N) for t in args))
        torch.testing.assert_close(got.cpu(), call(*args), rtol=1e-4, atol=1e-3, msg=name)


def test_fused_adamw_and_convolution_are_async():
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 4, 3)
    model = torch.nn.Sequential(conv, torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 2))
    ref = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 2))
    ref.load_state_dict(model.state_dict())
    model.to(N)
    x = torch.randn(2, 3, 8, 8)
    losses = []
    for m, dev in ((ref, "cpu"), (model, N)):
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2, fused=True)
        torch_neuronx.reset_op_counts()
        for _ in range(3):
            loss = m(x.to(dev)).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
        losses.append(loss.item())
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-4, atol=1e-5)
    c = torch_neuronx.op_counts()
    for op in ("aten::_fused_adamw_", "aten::_convolution", "aten::convolution_backward"):
        assert c[op]["async"] >= 3 and c[op]["sync"] == 0, (op, c[op])


def test_integer_histc_counts_like_cuda():
    ids = torch.randint(0, 8, (64,), dtype=torch.int32)
    got = torch.histc(ids.to(N), bins=8, min=0, max=7)
    assert got.dtype == torch.int32
    torch.testing.assert_close(got.cpu(), torch.histc(ids.float(), bins=8, min=0, max=7).int())
    torch.testing.assert_close(torch.histc(ids.to(N).long(), bins=4).cpu(),
                               torch.histc(ids.float(), bins=4).long())
    x = torch.randn(100)
    torch.testing.assert_close(torch.histc(x.to(N), bins=5, min=-1, max=1).cpu(), torch.histc(x, bins=5, min=-1, max=1))
    with pytest.raises(RuntimeError, match="bins must be > 0"):
        torch.histc(ids.to(N), bins=0)


def test_kernel_warnings_reach_python():
    x = torch.randn(1, 3, device=N)
    with pytest.warns(UserWarning, match="degrees of freedom"):
        x.std(0)
        torch.neuron.synchronize()
        torch.ones(1, device=N).add_(1)  # the next call raises what the kernel warned


def test_policy_setting_forces_a_copy_and_fallback_setting_is_obeyed():
    code = ("import warnings, torch, torch_neuronx\n"
            "x = torch.rand(8) + 0.5\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    y = torch.lgamma(x.to('neuron'))\n"
            "torch.testing.assert_close(y.cpu(), torch.lgamma(x))\n"
            "print(any('falls back to the CPU' in str(m.message) for m in w), "
            "torch_neuronx.op_counts()['aten::lgamma.out']['copy'], 'TORCH_NEURONX_OP_POLICY' in "
            "torch_neuronx.explain('aten::lgamma'))\n")
    r = run_python(code, {"TORCH_NEURONX_OP_POLICY": "aten::lgamma=copy"})
    assert r.stdout.split() == ["True", "1", "True"], r.stderr
    r = run_python("import torch\ntorch.lgamma(torch.rand(3, device='neuron'))",
                   {"TORCH_NEURONX_FALLBACK": "error", "TORCH_NEURONX_OP_POLICY": "aten::lgamma=copy"})
    assert r.returncode != 0 and "TORCH_NEURONX_FALLBACK=error" in r.stderr
    r = run_python("import torch\ntorch.lgamma(torch.rand(3, device='neuron'))",
                   {"TORCH_NEURONX_OP_POLICY": "aten::lgamma=fast"})
    assert r.returncode != 0 and "TORCH_NEURONX_OP_POLICY" in r.stderr and "fast" in r.stderr


def test_a_kernel_that_disagrees_with_its_meta_fails_loudly():
    # A custom op whose CPU kernel returns another shape than its meta kernel says.
    lib = torch.library.Library("neuron_test", "DEF")
    lib.define("widen(Tensor x) -> Tensor")
    lib.impl("widen", lambda x: torch.cat([x, x]), "CPU")
    lib.impl("widen", lambda x: torch.empty_like(x), "Meta")
    try:
        with pytest.raises(RuntimeError, match="disagreed with its meta kernel.*op_policy.cpp"):
            torch.ops.neuron_test.widen(torch.ones(3, device=N))  # the first call of its signature waits
        torch.neuron.synchronize()
    finally:
        lib._destroy()
