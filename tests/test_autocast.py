"""torch.autocast("neuron") follows CUDA's whole policy. The op lists and arguments are PyTorch's own
(torch.testing._internal.autocast_test_lists, which test_cuda.py runs on CUDA), so the reference is
CUDA's behaviour, not a list of ours: each op's output dtype, and its result bit for bit against the
same op on inputs cast by hand."""
import pytest
import torch
import torch.nn.functional as F
from torch.testing._internal.autocast_test_lists import AutocastTestLists, TestAutocast

N = "neuron"


def _entries(name):
    """(op, index, extra) of each entry of a list: the neuron arguments are made when the test runs
    (collection makes no neuron tensors)."""
    out = []
    for i, entry in enumerate(getattr(AutocastTestLists("cpu"), name)):
        op, args, rest = entry[0], entry[1], entry[2:]
        if op.startswith("cudnn_"):
            continue  # CUDA's own kernels, not ops a neuron tensor has
        if isinstance(args, str):
            continue  # einsum's entry gives 4-letter subscripts to 2-dim operands (test_cuda skips it too)
        extra = rest[0] if rest and isinstance(rest[0], (dict, torch.dtype)) else {}
        out.append(pytest.param(op, (name, i), extra, id=f"{op}-{i}"))
    return out


def _neuron_args(where):
    name, i = where
    return getattr(AutocastTestLists(N), name)[i][1]


class _Case(TestAutocast):
    def runTest(self):  # unittest wants one; the cases call the helper directly
        pass


def _run(op, where, run_as_type, *, amp_dtype, module=torch, out_type=None, kwargs=None):
    _Case()._run_autocast_outofplace(op, _neuron_args(where), run_as_type, N, out_type=out_type, module=module,
                                     add_kwargs=kwargs or None, amp_dtype=amp_dtype)


@pytest.mark.parametrize("amp_dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("op,args,kwargs", _entries("torch_fp16"))
def test_lower_precision_list_runs_in_the_autocast_dtype(op, args, kwargs, amp_dtype):
    _run(op, args, amp_dtype, amp_dtype=amp_dtype, kwargs=kwargs)


@pytest.mark.parametrize("op,args,kwargs", _entries("torch_fp32"))
def test_fp32_lists_run_and_return_float32(op, args, kwargs):
    # softmax, log_softmax, sum, cumsum, prod and norm are here too: fp32 with an output dtype, as
    # on CUDA (a bfloat16 softmax would lose precision silently)
    _run(op, args, torch.float32, amp_dtype=torch.bfloat16, kwargs=kwargs)


@pytest.mark.parametrize("op,args,kwargs", _entries("torch_need_autocast_promote"))
def test_mixed_inputs_are_promoted_to_the_widest(op, args, kwargs):
    _run(op, args, torch.float32, amp_dtype=torch.float16, kwargs=kwargs)


@pytest.mark.parametrize("op,args,kwargs", _entries("nn_fp16"))
def test_nn_lower_precision_list(op, args, kwargs):
    _run(op, args, torch.bfloat16, amp_dtype=torch.bfloat16, module=torch._C._nn, kwargs=kwargs)


@pytest.mark.parametrize("op,args,kwargs", _entries("nn_fp32"))
def test_nn_fp32_list(op, args, kwargs):
    _run(op, args, torch.float32, amp_dtype=torch.bfloat16, module=torch._C._nn, kwargs=kwargs)


@pytest.mark.parametrize("op,args,kwargs", _entries("linalg_fp16"))
def test_linalg_lower_precision_list(op, args, kwargs):
    _run(op, args, torch.bfloat16, amp_dtype=torch.bfloat16, module=torch._C._linalg, kwargs=kwargs)


@pytest.mark.parametrize("op,args,kwargs", _entries("methods_fp16") + _entries("methods_fp32"))
def test_tensor_methods(op, args, kwargs):
    want = torch.bfloat16 if op == "__matmul__" else torch.float32
    _run(op, args, want, amp_dtype=torch.bfloat16, module=None, kwargs=kwargs)


@pytest.mark.parametrize("op,args,out_type", _entries("torch_expect_builtin_promote"))
def test_ops_that_promote_by_themselves_are_left_alone(op, args, out_type):
    _run(op, args, torch.float32, amp_dtype=torch.float16, out_type=out_type or torch.float32)


def test_binary_cross_entropy_is_refused_as_on_cuda():
    x = torch.rand(8, 8, device=N)
    with torch.autocast(N), pytest.raises(RuntimeError, match="unsafe to autocast"):
        F.binary_cross_entropy(x, x)
    # outside autocast it runs (the refusal belongs to autocast only)
    torch.testing.assert_close(F.binary_cross_entropy(x, x).cpu(), F.binary_cross_entropy(x.cpu(), x.cpu()))


def test_reductions_in_user_attention_code_return_float32():
    q = torch.randn(2, 4, 16, 8, device=N, dtype=torch.bfloat16)
    with torch.autocast(N, dtype=torch.bfloat16):
        scores = torch.matmul(q, q.transpose(-1, -2))
        assert scores.dtype == torch.bfloat16
        for out in (scores.softmax(-1), scores.log_softmax(-1), scores.sum(), scores.cumsum(-1), scores.prod(-1),
                    torch.linalg.vector_norm(scores), torch.norm(scores)):
            assert out.dtype == torch.float32
        probs = scores.softmax(-1)
    # computed in float32 from the bfloat16 scores, as CUDA computes it
    torch.testing.assert_close(probs.cpu(), scores.cpu().float().softmax(-1), rtol=0, atol=0)


def test_autocast_defaults_to_bfloat16():
    a = torch.randn(4, 4, device=N)
    assert torch.get_autocast_dtype(N) == torch.bfloat16
    with torch.autocast(N):
        assert torch.mm(a, a).dtype == torch.bfloat16
        assert torch.einsum("ij,jk->ik", a, a).dtype == torch.bfloat16
        assert torch.add(a, a).dtype == torch.float32  # on no list: left alone
