"""Eager ops on neuron against the same ops on CPU."""
import pytest
import torch
import torch.nn.functional as F

import torch_neuronx
from conftest import assert_same, to_neuron

torch.manual_seed(0)
A = torch.randn(4, 5)
B = torch.randn(4, 5)
ROW = torch.randn(5)
POS = torch.rand(4, 5) + 0.1
INTS = torch.randint(-5, 5, (4, 5))
BOOL = torch.rand(4, 5) > 0.5
M1, M2 = torch.randn(3, 4), torch.randn(4, 6)
BM1, BM2 = torch.randn(2, 3, 4), torch.randn(2, 4, 6)

def on(x, t):
    """A constant of a case, on the device the case runs on."""
    return t.to(x.device)


CASES = {
    "add": (lambda a, b: a + b, (A, B)),
    "add_alpha": (lambda a, b: torch.add(a, b, alpha=2.5), (A, B)),
    "sub_broadcast": (lambda a, r: a - r, (A, ROW)),
    "mul_scalar": (lambda a: a * 3, (A,)),
    "mul_cpu_scalar_tensor": (lambda a: a * torch.tensor(2.0), (A,)),
    "div": (lambda a, b: a / b, (A, POS)),
    "div_floor": (lambda a, b: torch.div(a, b, rounding_mode="floor"), (A, POS)),
    "int_float_promotion": (lambda i, a: i + a, (INTS, A)),
    "int_true_div": (lambda i: i / 2, (INTS,)),
    "pow": (lambda p: p ** 2.5, (POS,)),
    "pow_tensor": (lambda p, b: torch.pow(p, b), (POS, B)),
    "remainder": (lambda i: i % 3, (INTS,)),
    "compare": (lambda a, b: (a < b, a >= b, a == a, a != b), (A, B)),
    "logical": (lambda m: (m & ~m, m | m, m ^ m), (BOOL,)),
    "bitwise": (lambda i: (i & 3, i | 1, i ^ 2), (INTS,)),
    "maximum": (lambda a, b: (torch.maximum(a, b), torch.minimum(a, b)), (A, B)),
    "unary": (lambda a: (a.exp(), a.abs(), a.neg(), a.sin(), a.cos(), a.tanh(), a.sigmoid(), a.erf(),
                        a.floor(), a.ceil(), a.round(), a.sign()), (A,)),
    "unary_pos": (lambda p: (p.log(), p.sqrt(), p.rsqrt(), p.reciprocal(), p.log1p()), (POS,)),
    "clamp": (lambda a: (a.clamp(-0.5, 0.5), a.clamp(min=0), a.clamp_max(0.1)), (A,)),
    "activations": (lambda a: (F.relu(a), F.gelu(a), F.gelu(a, approximate="tanh"), F.silu(a),
                               F.leaky_relu(a, 0.1), F.elu(a), F.softplus(a), F.mish(a)), (A,)),
    "sum_mean": (lambda a: (a.sum(), a.sum(1), a.mean(0, keepdim=True), a.sum(dtype=torch.float64)), (A,)),
    "prod_amax": (lambda a: (a.prod(1), a.amax(1), a.amin(0), a.argmax(), a.argmin(1)), (A,)),
    "max_min_dim": (lambda a: (*a.max(1), *a.min(0), a.max(), a.min()), (A,)),
    "var_std": (lambda a: (a.var(1), a.std(), a.var(0, unbiased=False)), (A,)),
    "norm": (lambda a: (a.norm(), torch.linalg.vector_norm(a, 3, dim=1), a.norm(dim=0)), (A,)),
    "any_all": (lambda m: (m.any(), m.all(1), m.any(0)), (BOOL,)),
    "cumsum": (lambda a: (a.cumsum(1), a.cumprod(0), torch.logsumexp(a, 1)), (A,)),
    "mm": (lambda x, y: (x @ y, torch.mm(x, y)), (M1, M2)),
    "bmm": (lambda x, y: (torch.bmm(x, y), torch.matmul(x, y), torch.baddbmm(on(x, torch.ones(2, 3, 6)), x, y)),
            (BM1, BM2)),
    "addmm_linear": (lambda x, y: (torch.addmm(on(x, torch.ones(6)), x, y, beta=0.5),
                                   F.linear(x, y.t(), on(x, torch.ones(6)))), (M1, M2)),
    "softmax": (lambda a: (a.softmax(1), a.log_softmax(0), F.softmax(a, -1, dtype=torch.bfloat16)), (A,)),
    "layer_norm": (lambda a: F.layer_norm(a, (5,), on(a, torch.ones(5) * 2), on(a, torch.zeros(5) + 1)), (A,)),
    "rms_norm": (lambda a: F.rms_norm(a, (5,), on(a, torch.ones(5) * 0.5)), (A,)),
    "embedding": (lambda w: F.embedding(on(w, torch.tensor([[0, 2], [3, 3]])), w), (A,)),
    "cat_stack": (lambda a, b: (torch.cat([a, b], 0), torch.cat([a, b], 1), torch.stack([a, b], 2)), (A, B)),
    "where_masked_fill": (lambda a, b, m: (torch.where(m, a, b), a.masked_fill(m, -1.0), torch.where(a > 0, a, 0.0)),
                          (A, B, BOOL)),
    "index": (lambda a: (a[on(a, torch.tensor([0, 2]))], a[:, on(a, torch.tensor([1, 1, 4]))], a[a > 0]), (A,)),
    "index_select_gather": (lambda a: (a.index_select(1, on(a, torch.tensor([4, 0]))),
                                       a.gather(1, on(a, torch.tensor([[0, 1]] * 4)))), (A,)),
    "scatter": (lambda a, b: (a.scatter(1, on(a, torch.tensor([[0, 1]] * 4)), b[:, :2]),
                              a.scatter_add(0, on(a, torch.zeros(4, 5, dtype=torch.long)), b)), (A, B)),
    "index_copy_put": (lambda a, b: (a.index_copy(0, on(a, torch.tensor([3, 0])), b[:2]),
                                     a.index_put((on(a, torch.tensor([0, 1])),), torch.tensor(9.0))), (A, B)),
    "topk_sort": (lambda a: (*a.topk(2, 1), *a.sort(0), a.argsort(1, descending=True)), (A,)),
    "unique_nonzero": (lambda i: (torch.unique(i), i.nonzero()), (INTS,)),
    "tril_triu": (lambda a: (a.tril(), a.triu(1)), (A,)),
    "sdpa": (lambda q: (F.scaled_dot_product_attention(q, q * 2, q + 1, is_causal=True),
                        F.scaled_dot_product_attention(q, q, q,
                                                       attn_mask=on(q, torch.ones(3, 3, dtype=torch.bool).tril()))),
             (torch.randn(2, 2, 3, 4),)),
    "losses": (lambda logits: (F.cross_entropy(logits, on(logits, torch.tensor([1, 0, 4, 2]))),
                               F.nll_loss(logits.log_softmax(1), on(logits, torch.tensor([1, 0, 4, 2])),
                                          reduction="sum"),
                               F.mse_loss(logits, logits * 0.5)), (A,)),
    "dtypes": (lambda a: (a.to(torch.bfloat16) * 2, a.half() + 1, a.to(torch.int32), a.bool()), (A,)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_matches_cpu(name):
    fn, args = CASES[name]
    expected = fn(*args)
    got = fn(*to_neuron(args))
    assert_same(got, expected)


GRAD_CASES = {
    "pointwise": lambda a, b: (a * b + a.exp() / (b.abs() + 1)).tanh().sum(),
    "activations": lambda a, b: (F.gelu(a) + F.silu(b) + F.relu(a) * a.sigmoid()).sum(),
    "reduce": lambda a, b: a.mean(1).sum() + a.amax(1).sum() + a.norm() + b.var(),
    "matmul": lambda a, b: (a @ b.t()).softmax(-1).sum(),
    "layer_norm": lambda a, b: F.layer_norm(a, (5,), b[0], b[1]).pow(2).sum(),
    "rms_norm": lambda a, b: F.rms_norm(a, (5,), b[0]).sum(),
    "cross_entropy": lambda a, b: F.cross_entropy(a, torch.tensor([1, 0, 4, 2], device=a.device)),
    "indexing": lambda a, b: a[torch.tensor([0, 0, 3], device=a.device)].sum() + a.gather(
        1, torch.tensor([[0, 1]] * 4, device=a.device)).sum() + torch.cat([a, b]).cumsum(0).sum(),
    "embedding": lambda a, b: F.embedding(torch.tensor([0, 3, 3], device=a.device), a).pow(2).sum(),
    "sdpa": lambda a, b: F.scaled_dot_product_attention(a.view(1, 1, 4, 5), b.view(1, 1, 4, 5),
                                                        a.view(1, 1, 4, 5), is_causal=True).sum(),
}


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_backward_matches_cpu(name):
    fn = GRAD_CASES[name]
    a, b = A.clone().requires_grad_(), B.clone().requires_grad_()
    fn(a, b).backward()
    na, nb = A.to("neuron").requires_grad_(), B.to("neuron").requires_grad_()
    fn(na, nb).backward()
    for n, c in ((na, a), (nb, b)):
        if c.grad is None:
            assert n.grad is None
        else:
            torch.testing.assert_close(n.grad.cpu(), c.grad)


def test_factories():
    d = "neuron"
    assert_same(torch.zeros(2, 3, device=d), torch.zeros(2, 3))
    assert_same(torch.ones(4, dtype=torch.int64, device=d), torch.ones(4, dtype=torch.int64))
    assert_same(torch.full((2, 2), 7.5, device=d), torch.full((2, 2), 7.5))
    assert_same(torch.arange(10, device=d), torch.arange(10))
    assert_same(torch.arange(0, 1, 0.25, device=d), torch.arange(0, 1, 0.25))
    assert_same(torch.linspace(-1, 1, 7, device=d), torch.linspace(-1, 1, 7))
    assert_same(torch.eye(3, device=d), torch.eye(3))
    x = torch.randn(3, 4, device=d)
    assert_same(torch.zeros_like(x), torch.zeros(3, 4))
    assert torch.empty_like(x).shape == (3, 4) and torch.empty_strided((2, 3), (1, 2), device=d).stride() == (1, 2)


def test_views_alias_device_memory():
    x = torch.zeros(4, 6, device="neuron")
    views = [x.view(24), x.t(), x[1], x[:, 2:4], x.narrow(0, 1, 2), x.unsqueeze(0), x.reshape(2, 12),
             x.expand(2, 4, 6), x.permute(1, 0), x.unfold(1, 2, 2), x.as_strided((2, 2), (6, 1)),
             x.split(2)[1], x.chunk(3, 1)[0], x[None].squeeze(0)]
    for v in views:
        assert v.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    x[1].fill_(1.0)
    x[:, 5] += 2
    x.view(24)[0] = 5
    cpu = torch.zeros(4, 6)
    cpu[1].fill_(1.0)
    cpu[:, 5] += 2
    cpu.view(24)[0] = 5
    assert_same(x, cpu)
    assert_same(views[1], cpu.t())


def test_inplace_out_and_resize():
    a, b = A.to("neuron"), B.to("neuron")
    ca = A.clone()
    a.mul_(b).add_(1).exp_()
    ca.mul_(B).add_(1).exp_()
    assert_same(a, ca)
    out = torch.empty(0, device="neuron")
    torch.add(b, 1, out=out)
    assert_same(out, B + 1)
    out2 = torch.empty(7, device="neuron")
    torch.mm(M1.to("neuron"), M2.to("neuron"), out=out2)
    assert_same(out2, M1 @ M2)
    r = torch.arange(4.0, device="neuron")
    r.resize_(2, 3)
    assert r.shape == (2, 3)
    assert_same(r.flatten()[:4], torch.arange(4.0))
    s = torch.empty(0, device="neuron")
    s.set_(r.untyped_storage(), 0, (2,), (1,))
    assert_same(s, torch.arange(2.0))
    st = r.untyped_storage()
    st.resize_(0)  # the FSDP2 pattern: free, then regrow
    assert st.nbytes() == 0
    st.resize_(24)
    assert st.nbytes() == 24


@pytest.mark.parametrize("name,call,differs", [
    ("mean out= of an integer dtype",
     lambda x: torch.mean(x, 1, out=torch.empty(3, dtype=torch.long, device=x.device)), None),
    # CPU's amax says "Expected the dtype for input and out to match"; neuron raises PyTorch's
    # general out= cast error: both at the call.
    ("amax out= of an integer dtype",
     lambda x: torch.amax(x, 1, out=torch.empty(3, dtype=torch.long, device=x.device)), "Long"),
    ("gelu approximate", lambda x: F.gelu(x, approximate="bad"), None),
    ("gelu_backward approximate", lambda x: torch.ops.aten.gelu_backward(x, x, approximate="bad"), None),
    # Checks the CPU kernels make inside and meta kernels lack (op_overrides.cpp's ArgCheck rows).
    ("uniform_ from > to", lambda x: x.clone().uniform_(3, -1), None),
    # A valid range first, so the signature has run cleanly: the range is checked on every call.
    ("randint out of bool's range", lambda x: (torch.randint(0, 2, (3,), dtype=torch.bool, device=x.device),
                                               torch.randint(2, 10, (3,), dtype=torch.bool, device=x.device)), None),
    ("random_ past uint8", lambda x: (x.to(torch.uint8).random_(5), x.to(torch.uint8).random_(300)), None),
    ("complex of two dtypes", lambda x: torch.complex(x, x.double()), None),
    ("masked_fill_ overflow", lambda x: x.clone().masked_fill_(x > 0, 1e300), None),
    ("masked_scatter_ mask wider than self",
     lambda x: x[0].clone().masked_scatter_(torch.ones(3, 4, dtype=torch.bool, device=x.device), x), "sizes provided"),
    ("aminmax out= dtype", lambda x: torch.aminmax(
        x, out=tuple(torch.empty(0, dtype=torch.float64, device=x.device) for _ in range(2))), None),
    ("conv2d dilation 0", lambda x: F.conv2d(x[None, None], x[None, None, :2, :2], dilation=0), None),
    ("conv2d negative padding", lambda x: F.conv2d(x[None, None], x[None, None, :2, :2], padding=-1), None),
    ("bucketize 2-D boundaries", lambda x: torch.bucketize(x, x), None),
    ("logit_ of integers", lambda x: x.long().logit_(), None),
])
def test_argument_errors_raise_at_the_call(name, call, differs):
    """An error the arguments alone decide raises at the call, not at a later synchronize blamed
    on whatever ran next. `differs`: what neuron's message says where its wording is not CPU's."""
    x = torch.randn(3, 4)
    with pytest.raises(RuntimeError) as on_cpu:
        call(x)
    with pytest.raises(RuntimeError) as on_neuron:
        call(x.to("neuron"))
    if differs is None:
        assert str(on_cpu.value).splitlines()[0] in str(on_neuron.value)
    else:
        assert differs in str(on_neuron.value) and "task" not in str(on_neuron.value)
    torch.neuron.synchronize()  # nothing was queued that could fail later


@pytest.mark.parametrize("op", ["sum", "prod", "cumsum", "cumprod"])
@pytest.mark.parametrize("dtype", [torch.int64, torch.float16, torch.bool])
def test_out_dtype_chooses_the_computation(op, dtype):
    """sum/prod/cumsum/cumprod compute in the out= tensor's dtype when none is given: a float input
    with an integer out= is no cast error (the rule of ops whose dtype comes from the inputs)."""
    x = torch.randn(3, 4) * 4
    f = getattr(torch, op)
    want = torch.empty(0, dtype=dtype)
    try:
        f(x, 0, out=want)
    except RuntimeError:  # CPU has no such kernel (cumsum of bool): neuron refuses too
        with pytest.raises(RuntimeError):
            f(x.to("neuron"), 0, out=torch.empty(0, dtype=dtype, device="neuron"))
            torch.neuron.synchronize()
        return
    got = torch.empty(0, dtype=dtype, device="neuron")
    f(x.to("neuron"), 0, out=got)
    assert_same(got, want)


def test_out_tensor_that_is_an_input_and_must_grow_raises_at_the_call():
    """Growing it would reallocate an input under the kernel: neuron refuses at the call, with the
    CPU's overlap error, instead of failing at a later synchronize."""
    x = torch.randn(3, 4, device="neuron")
    with pytest.raises(RuntimeError, match="single memory location.*out= tensor is also its input"):
        torch.cat([x, x], dim=0, out=x)
    torch.neuron.synchronize()
    assert x.shape == (3, 4)
    out = torch.empty(0, device="neuron")  # a separate out= tensor still grows
    torch.cat([x, x], dim=0, out=out)
    assert_same(out, torch.cat([x.cpu(), x.cpu()], 0))


def test_item_and_printing():
    x = torch.tensor([1.5, -2.0], device="neuron")
    assert x[0].item() == 1.5
    assert torch.tensor(3, device="neuron").item() == 3
    assert "device='neuron:0'" in repr(x) and "1.5000" in repr(x)
    assert x.tolist() == [1.5, -2.0]


def test_foreach_and_adamw_step():
    params = [torch.randn(3, 4), torch.randn(5)]
    grads = [torch.randn(3, 4), torch.randn(5)]
    results = []
    for device in ("cpu", "neuron"):
        ps = [p.clone().to(device).requires_grad_() for p in params]
        opt = torch.optim.AdamW(ps, lr=0.1, foreach=True)
        for _ in range(3):
            for p, g in zip(ps, grads):
                p.grad = g.to(device)
            opt.step()
        results.append([p.detach().cpu() for p in ps])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b)
    xs = [torch.ones(3, device="neuron"), torch.ones(2, device="neuron")]
    torch._foreach_mul_(xs, 3.0)
    torch._foreach_add_(xs, [torch.ones(3, device="neuron"), torch.ones(2, device="neuron")])
    assert all((x.cpu() == 4).all() for x in xs)


def test_native_kernels_do_not_use_generic_path():
    torch_neuronx.reset_op_counts()
    a, b = A.to("neuron"), B.to("neuron")
    (a + b * 2).exp().sum(1).softmax(0)
    torch.mm(a, b.t())
    torch.neuron.synchronize()
    assert not {op: c for op, c in torch_neuronx.op_counts().items() if c["sync"] or c["copy"]}


def test_autocast_bf16():
    a, b = M1.to("neuron"), M2.to("neuron")
    with torch.autocast("neuron", dtype=torch.bfloat16):
        y = a @ b
        s = y.float().softmax(-1)
    assert y.dtype == torch.bfloat16 and s.dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y_cpu = M1 @ M2
    torch.testing.assert_close(y.cpu(), y_cpu)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_weight_norm_keeps_the_cpus_norm_dtype(dtype):
    # the CPU (and CUDA) keep a half g's norms in float where meta says half; wav2vec2's positional
    # convolution is weight-normed, so every fp16 wav2vec2 forward met this
    g = torch.Generator().manual_seed(0)
    v, w = torch.randn(16, 16, 4, generator=g).to(dtype), torch.randn(1, 1, 4, generator=g).to(dtype)
    assert_same(torch._weight_norm_interface(v.to("neuron"), w.to("neuron"), 2),
                torch._weight_norm_interface(v, w, 2), atol=0, rtol=0)
    conv = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(8, 8, 3, padding=1), dim=2).to(dtype)
    x = torch.randn(2, 8, 10, generator=g).to(dtype)
    want = conv(x)
    want.float().square().sum().backward()
    want_grads = [p.grad.clone() for p in conv.parameters()]
    conv.zero_grad()
    conv.to("neuron")
    got = conv(x.to("neuron"))
    got.float().square().sum().backward()
    assert_same(got, want, atol=0, rtol=0)
    assert_same([p.grad for p in conv.parameters()], want_grads, atol=0, rtol=0)
