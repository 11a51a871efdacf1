"""Device behaviours users rely on, each against CPU/CUDA semantics: parameters keep their identity
across .to(), errors keep their kind, CUDA's dtype support where models depend on it."""
import copy
import os

import pytest
import torch

import torch_neuronx
from conftest import run_python

os.environ.setdefault("HF_HUB_OFFLINE", "1")
N = "neuron"


def test_module_to_keeps_parameter_objects():
    m = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    params = list(m.parameters())
    opt = torch.optim.SGD(m.parameters(), lr=0.1)  # made before the move, as accelerate does
    m.to(N)
    assert all(a is b for a, b in zip(m.parameters(), params))
    assert all(p.device.type == "neuron" for p in params) and m[1].running_mean.device.type == "neuron"
    # weighted: a plain sum of BatchNorm's outputs is constant, so its gradient would be (nearly) zero
    (m(torch.randn(5, 3, device=N)) * torch.randn(5, 4, device=N)).sum().backward()
    before = params[0].detach().cpu().clone()
    opt.step()
    assert not torch.equal(params[0].detach().cpu(), before)  # the optimizer trains the moved parameters
    m.to("cpu")
    assert all(a is b for a, b in zip(m.parameters(), params)) and params[0].device.type == "cpu"


def _accelerate_losses(device_placement):
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState
    from accelerate.utils import set_seed

    AcceleratorState._reset_state(reset_partial_state=True)
    set_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-2)  # the usual order: optimizer, then prepare
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(4, 8, generator=g) for _ in range(4)]
    data = [(x, x.sum(1, keepdim=True) * 0.5) for x in xs]
    loader = torch.utils.data.DataLoader(data, batch_size=None)
    acc = Accelerator(cpu=device_placement == "cpu")
    model, opt, loader = acc.prepare(model, opt, loader)
    losses = []
    for _ in range(3):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            acc.backward(loss)
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
    device = acc.device
    AcceleratorState._reset_state(reset_partial_state=True)
    return device, losses


def test_accelerate_prepare_loop_trains_like_cpu():
    device, losses = _accelerate_losses("neuron")
    assert device.type == "neuron"
    _, cpu_losses = _accelerate_losses("cpu")
    torch.testing.assert_close(losses, cpu_losses, rtol=1e-4, atol=1e-5)
    assert sum(losses[-4:]) < sum(losses[:4]) * 0.75  # it learns: the optimizer holds the moved parameters


def test_errors_keep_their_kind():
    x = torch.randn(4, 3, device=N)
    torch.gather(x, 0, torch.tensor([[1, 0, 0]], device=N))  # the signatures run once, cleanly
    torch.index_select(x, 0, torch.tensor([1], device=N))
    torch.gather(x, 0, torch.tensor([[5, 0, 0]], device=N))  # an index only the kernel sees
    with pytest.raises(RuntimeError, match="gather"):
        torch.neuron.synchronize()
    torch.index_select(x, 0, torch.tensor([9], device=N))
    with pytest.raises(IndexError):
        torch.neuron.synchronize()
    # NotImplementedError stays one: a kernel without the dtype, at the call (its signature's first).
    with pytest.raises(NotImplementedError, match="BFloat16"):
        torch.linalg.svd(torch.randn(3, 3, device=N, dtype=torch.bfloat16))
    torch.neuron.synchronize()
    assert (x + 1).shape == (4, 3)  # the device is still usable


def test_moe_token_counting_with_integer_histc():
    ids = torch.tensor([[0, 3], [3, 1], [2, 3]], dtype=torch.int64).flatten()
    counts = torch.histc(ids.to(N).int(), bins=4, min=0, max=3)
    assert counts.tolist() == [1, 1, 1, 3]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_grouped_mm_runs_on_the_device_in_the_cpus_dtypes(dtype, fresh_dynamo):
    """MoE experts (torch._grouped_mm, 2-D rows by 3-D stacked weights, as transformers and vLLM
    call it): its composite kernel copies the group offsets to the host and waits for them; on
    neuron the whole op is one task, in every dtype the CPU kernel takes (torch's meta kernel
    says bfloat16 only), eager, backward and compiled."""
    torch.manual_seed(0)
    a, w = torch.randn(20, 16).to(dtype), torch.randn(6, 24, 16).to(dtype)
    offs = torch.tensor([3, 3, 8, 10, 14, 20], dtype=torch.int32)
    expected = torch._grouped_mm(a, w.transpose(1, 2), offs=offs)
    an, wn, offs_n = a.to(N).requires_grad_(), w.to(N).requires_grad_(), offs.to(N)
    torch.neuron.synchronize()
    before = torch.neuron.transfer_stats()["device_to_host_bytes"]
    torch_neuronx.reset_op_counts()
    out = torch._grouped_mm(an, wn.transpose(1, 2), offs=offs_n)
    counts = torch_neuronx.op_counts()["aten::_grouped_mm"]
    assert counts["async"] == 1 and counts["sync"] == 0 and counts["copy"] == 0
    assert torch.neuron.transfer_stats()["device_to_host_bytes"] == before
    assert out.dtype == dtype
    assert torch.equal(out.detach().cpu(), expected)
    if dtype == torch.float32:
        ac, wc = a.clone().requires_grad_(), w.clone().requires_grad_()
        grad = torch.randn_like(expected)
        torch._grouped_mm(ac, wc.transpose(1, 2), offs=offs).backward(grad)
        out.backward(grad.to(N))
        torch.testing.assert_close(an.grad.cpu(), ac.grad)
        torch.testing.assert_close(wn.grad.cpu(), wc.grad)
    compiled = torch.compile(lambda a, w, o: torch._grouped_mm(a, w.transpose(1, 2), offs=o), backend="neuron")
    assert torch.equal(compiled(an.detach(), wn.detach(), offs_n).cpu(), expected)


@pytest.mark.filterwarnings("ignore:neuron. dtype")
def test_lazy_conjugate_and_negative_views_read_like_cpu():
    # Llama 4 and DeepSeek-V2 apply rotary embeddings in complex numbers; their backward multiplies
    # by lazily conjugated views, which copies and matmuls read through the conj / neg bits.
    torch.manual_seed(0)
    a, b = torch.randn(4, 3, dtype=torch.cfloat), torch.randn(3, 5, dtype=torch.cfloat)
    an, bn = a.to(N), b.to(N)
    assert torch.equal(an.conj().cpu(), a.conj()) and torch.equal(an._neg_view().cpu(), a._neg_view())
    torch.testing.assert_close((an.conj() @ bn.conj()).cpu(), a.conj() @ b.conj())
    torch.testing.assert_close((an * bn[:, :1].T.conj()).cpu(), a * b[:, :1].T.conj())
    out = torch.empty(4, 3, dtype=torch.cfloat, device=N)
    out.copy_(an.conj())
    assert torch.equal(out.cpu(), a.conj())
    inplace = an.clone()
    assert inplace.conj_physical_() is inplace and torch.equal(inplace.cpu(), a.clone().conj_physical_())

    x = a.clone().requires_grad_()
    torch.view_as_real(x * b[:, 0].conj()).pow(2).sum().backward()
    torch_neuronx.reset_op_counts()
    xn = an.clone().requires_grad_()
    torch.view_as_real(xn * bn[:, 0].conj()).pow(2).sum().backward()
    torch.testing.assert_close(xn.grad.cpu(), x.grad)
    # view_as_real / view_as_complex are views: metadata on the host, the stream never waits
    assert torch.view_as_complex(torch.view_as_real(an)).data_ptr() == an.data_ptr()
    assert all(c["sync"] == 0 and c["copy"] == 0 for c in torch_neuronx.op_counts().values())


@pytest.mark.filterwarnings("ignore:neuron. dtype")
@pytest.mark.parametrize("op", [torch.dot, torch.vdot])
@pytest.mark.parametrize("conj_a,conj_b", [(False, False), (False, True), (True, False), (True, True)])
def test_dot_products_of_conjugate_views_match_cpu_values_and_conj_bit(op, conj_a, conj_b):
    """The CPU returns dot(conj, conj) and vdot(x, conj) as conjugate views of a plain dot."""
    a, b = torch.randn(5, dtype=torch.cfloat), torch.randn(5, dtype=torch.cfloat)
    an, bn = a.to(N), b.to(N)
    want = op(a.conj() if conj_a else a, b.conj() if conj_b else b)
    got = op(an.conj() if conj_a else an, bn.conj() if conj_b else bn)
    assert got.is_conj() == want.is_conj()
    torch.testing.assert_close(got.cpu(), want)


@pytest.mark.parametrize("cls,kw", [(torch.nn.LSTM, dict(num_layers=2)), (torch.nn.GRU, dict(bidirectional=True)),
                                    (torch.nn.LSTM, dict(bias=False, batch_first=True)), (torch.nn.LSTMCell, {}),
                                    (torch.nn.GRUCell, {})])
def test_recurrent_layers_train_like_cpu(cls, kw):
    # ATen's RNN code calls the fused cell kernels on every accelerator; neuron has its own.
    torch.manual_seed(0)
    cpu = cls(4, 8, **kw)
    dev = copy.deepcopy(cpu).to(N)
    x = torch.randn(5, 3, 4) if "Cell" not in cls.__name__ else torch.randn(3, 4)
    torch_neuronx.reset_op_counts()
    outs = [cpu(x), dev(x.to(N))]
    for out in outs:
        y = out[0] if isinstance(out, tuple) else out
        y.pow(2).sum().backward()
    y_cpu, y_dev = (o[0] if isinstance(o, tuple) else o for o in outs)
    torch.testing.assert_close(y_dev.cpu(), y_cpu)
    for p, q in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad)
    assert all(c["sync"] == 0 and c["copy"] == 0 for c in torch_neuronx.op_counts().values())


def test_outputs_and_inplace_selves_are_checked_at_the_call_as_on_cpu():
    x = torch.randn(4, device=N)
    for write in (lambda: torch.std(x, out=torch.empty(())), lambda: torch.acos(x, out=torch.empty(4)),
                  lambda: torch.add(x, 1, out=torch.empty(()))):
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            write()
    m = torch.randn(2, 2, device=N)
    for name, args in (("addmm_", (m, m)), ("addmv_", (m, m[0])),
                       ("baddbmm_", (m.expand(2, 2, 2), m.expand(2, 2, 2)))):
        for dev in ("cpu", N):
            self = torch.zeros(1, device=dev)
            with pytest.raises(RuntimeError, match="Bad in-place call"):
                getattr(self, name)(*(a.to(dev) for a in args))
            assert self.shape == (1,)
    s = torch.zeros(1, device=N)
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        s.add_(m)
    assert s.shape == (1,) and s.cpu().item() == 0


def test_device_capability_lists_the_dtypes_a_neuron_tensor_can_have():
    dtypes = torch.accelerator.get_device_capability(N)["supported_dtypes"]
    assert {torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool} <= dtypes
    assert torch.qint8 not in dtypes and torch.float64 in dtypes  # the software device runs float64
    r = run_python("import torch, torch_neuronx\nd = torch.accelerator.get_device_capability('neuron')"
                   "['supported_dtypes']\nprint(torch.float64 in d, torch.complex64 in d, torch.bfloat16 in d)",
                   {"TORCH_NEURONX_STRICT": "1"})
    assert r.stdout.split() == ["False", "False", "True"], r.stderr[-2000:]


def test_copy_on_write_clones_are_refused_by_name():
    x = torch.arange(4.0, device=N)
    with pytest.raises(NotImplementedError, match="copy-on-write"):
        torch._lazy_clone(x)
    x.add_(1)  # the tensor is left as it was, and usable
    torch.testing.assert_close(x.cpu(), torch.arange(4.0) + 1)
    assert "refused" in torch_neuronx.explain("aten::_lazy_clone")


def test_out_resize_warns_once_on_every_call_as_on_cpu():
    import warnings

    x = torch.randn(4)
    for op in (torch.acos, torch.exp, torch.tanh):
        for dev in ("cpu", N) * 3:  # the first neuron call asks meta, the later ones reuse its answer
            out = torch.empty(3, device=dev)
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                op(x.to(dev), out=out)
            assert [str(m.message).startswith("An output with one or more elements was resized") for m in w] == [True]
            assert out.shape == (4,)


@pytest.mark.parametrize("layout", ["to_sparse", "to_sparse_csr", "to_sparse_csc"])
def test_sparse_tensors_live_on_neuron_and_compute_like_cpu(layout):
    """A sparse neuron tensor keeps its indices and values on the device; sparse kernels run on
    the host, counted as CPU fallbacks with their reason."""
    g = torch.Generator().manual_seed(0)
    d = torch.randn(5, 4, generator=g)
    d[d < 0.3] = 0
    m, b = torch.randn(4, 3, generator=g), torch.randn(5, 3, generator=g)
    torch_neuronx.reset_op_counts()
    s = getattr(d.to(N), layout)()
    want = getattr(d, layout)()
    assert s.device.type == N and s.layout == want.layout and s._nnz() == want._nnz()
    parts = (s._indices(), s._values()) if s.layout == torch.sparse_coo else (s.values(),)
    assert all(p.device.type == N for p in parts)
    torch.testing.assert_close(s.to_dense().cpu(), d)
    torch.testing.assert_close(s.cpu().to_dense(), d)
    torch.testing.assert_close((s @ m.to(N)).cpu(), want @ m)
    torch.testing.assert_close(torch.addmm(b.to(N), s, m.to(N)).cpu(), torch.addmm(b, want, m))
    torch.testing.assert_close(want.to(N).to_dense().cpu(), d)  # a CPU sparse tensor moved over
    with pytest.raises(RuntimeError, match="same device"):  # CUDA's device rule, as for dense ops
        s @ m

    def outcome(f):
        try:
            return f()
        except RuntimeError as e:
            return str(e)

    on_cpu, on_neuron = outcome(lambda: (want * want).to_dense()), outcome(lambda: (s * s).to_dense().cpu())
    if isinstance(on_cpu, str):  # the CPU's own error, not a layout refusal of a kernel for every device
        assert on_neuron == on_cpu
    else:
        torch.testing.assert_close(on_neuron, on_cpu)
    copies = {op: c for op, c in torch_neuronx.op_counts(reasons=True).items() if c["copy"]}
    assert copies and all("sparse" in why for c in copies.values() for why in c["reasons"]["copy"]), copies
    torch_neuronx.reset_op_counts()  # later tests count copies from here


def test_sparse_coo_arithmetic_inplace_and_gradients_match_cpu():
    i = torch.tensor([[0, 1, 1, 3], [2, 0, 2, 1]])
    v = torch.tensor([1.0, -2.0, 3.0, 0.5])
    cpu = torch.sparse_coo_tensor(i, v, (4, 3))
    s = torch.sparse_coo_tensor(i.to(N), v.to(N), (4, 3))
    torch.testing.assert_close((s + s).coalesce().cpu().to_dense(), (cpu + cpu).coalesce().to_dense())
    s.mul_(3)  # written in place on the device
    torch.testing.assert_close(s.cpu().to_dense(), (cpu * 3).to_dense())
    m = torch.randn(3, 2)
    vn = v.to(N).requires_grad_()
    torch.sparse.mm(torch.sparse_coo_tensor(i.to(N), vn, (4, 3)), m.to(N)).sum().backward()
    vc = v.clone().requires_grad_()
    torch.sparse.mm(torch.sparse_coo_tensor(i, vc, (4, 3)), m).sum().backward()
    assert vn.grad.device.type == N
    torch.testing.assert_close(vn.grad.cpu(), vc.grad)
    torch_neuronx.reset_op_counts()  # later tests count copies from here
    e = torch.sparse_coo_tensor(size=(2, 3), device=N)  # a factory makes an empty one on the device
    assert e.device.type == N and e._nnz() == 0 and e._indices().device.type == N
    r = run_python("import torch, torch_neuronx\ns = torch.eye(3).to_sparse().to('neuron')\ns + s\n",
                   {"TORCH_NEURONX_FALLBACK": "error"})
    assert r.returncode != 0 and "aten::add.Tensor would fall back to the CPU (a sparse tensor" in r.stderr, r.stderr
