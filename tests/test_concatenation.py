"""Eager op concatenation (torch_neuronx.set_concatenation, TORCH_NEURONX_ENABLE_CONCATENATION):
concatenated execution gives what op-by-op execution gives (values, strides, aliasing, in-place
ops, views, random draws, errors), deterministic mode turns it off, and the counters say what ran.

A workload runs three times with concatenation on: the first call of each op signature waits for
its kernel (closing any segment), the second pass builds the segments (op by op), the third runs
each segment seen again as one queue task. The third pass is compared with concatenation off."""
import random
import threading

import pytest
import torch

import torch_neuronx
from conftest import run_python
from torch_neuronx import _C


def small_loop(x, w):
    y = x
    for _ in range(100):  # benchmarks/eager.py's 200-op loop
        y = torch.tanh(torch.addcmul(y, y, w))
    return y


@pytest.fixture
def concat():
    """Concatenation on, with fresh counters and no deterministic mode; restored after."""
    torch.neuron.synchronize()
    was = torch_neuronx.set_concatenation(True, buffer_limit=1024)
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(False)
    torch_neuronx.reset_compile_stats()
    torch_neuronx.reset_op_counts()
    yield
    torch_neuronx.set_concatenation(was, buffer_limit=1024)
    torch.use_deterministic_algorithms(deterministic)
    torch.neuron.synchronize()


def tasks_of(fn):
    """fn()'s result and the queue tasks its work became (the current stream of neuron:0)."""
    torch.neuron.synchronize()
    before = _C._tasks_submitted(0)
    out = fn()
    torch.neuron.synchronize()
    return out, _C._tasks_submitted(0) - before


def off(fn):
    torch_neuronx.set_concatenation(False)
    try:
        return tasks_of(fn)
    finally:
        torch_neuronx.set_concatenation(True)


def hot(fn):
    """fn() a third time with concatenation on (after a warm-up and the pass that builds segments)."""
    tasks_of(fn)
    tasks_of(fn)
    return tasks_of(fn)


def same(a, b):
    """Bitwise equal tensors (or nested lists/tuples of them), with equal strides."""
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            same(x, y)
        return
    assert a.shape == b.shape and a.dtype == b.dtype and a.stride() == b.stride(), (a.shape, b.shape, a.stride(),
                                                                                    b.stride())
    assert torch.equal(a.cpu(), b.cpu())


def stats():
    s = torch_neuronx.compile_stats()
    return s["concat_segments_built"], s["concat_segments_hit"], s["concat_ops"]


def test_small_loop_runs_as_one_task_and_equals_op_by_op(concat):
    torch.manual_seed(0)
    xc, wc = torch.randn(256), torch.randn(256) * 0.01
    x, w = xc.to("neuron"), wc.to("neuron")
    ref, ref_tasks = off(lambda: small_loop(x, w))
    out, n_tasks = hot(lambda: small_loop(x, w))
    same(out, ref)
    torch.testing.assert_close(out.cpu(), small_loop(xc, wc))
    assert ref_tasks >= 200
    assert n_tasks <= 2, n_tasks  # the segment, and the synchronize's own bookkeeping if any
    built, hit, ops = stats()
    assert built >= 1 and hit >= 1 and ops >= 200
    counts = torch_neuronx.op_counts()
    assert counts["aten::tanh"]["concatenated"] >= 100
    assert counts["aten::addcmul"]["concatenated"] >= 100


def test_buffer_limit_closes_segments(concat):
    torch_neuronx.set_concatenation(True, buffer_limit=8)
    x, w = torch.randn(256, device="neuron"), torch.randn(256, device="neuron") * 0.01
    ref, _ = off(lambda: small_loop(x, w))
    out, n_tasks = hot(lambda: small_loop(x, w))
    same(out, ref)
    assert n_tasks == 25, n_tasks  # 200 ops, 8 a segment


def mlp_steps(device, steps=3):
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = torch.randn(8, 16).to(device), torch.randn(8, 4).to(device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return [p.detach() for p in model.parameters()] + losses


def test_mlp_training_steps_equal_op_by_op(concat):
    ref, _ = off(lambda: mlp_steps("neuron"))
    out, _ = hot(lambda: mlp_steps("neuron"))
    same(out, ref)
    for a, b in zip(out, mlp_steps("cpu")):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-6)
    assert stats()[1] >= 1
    assert sum(c["concatenated"] for c in torch_neuronx.op_counts().values()) > 0


def views_and_aliasing(device):
    torch.manual_seed(2)
    base = torch.randn(6, 8).to(device)
    x = base.clone()
    v = x[1:4, 2:6]  # a view written in place: the base sees it
    v.add_(1.0)
    v.mul_(v)
    t = x.t()  # a transposed view, read after the writes
    s = t.sum(dim=0)
    x.sub_(s.unsqueeze(1) * 0.01)
    d = x.diagonal()
    d.clamp_(min=0.0)
    out = torch.empty(6, 8, device=device)
    torch.add(x, 2.0, out=out)
    torch.mul(out, out, out=out)  # out= aliasing an input
    e = out.expand(2, 6, 8)  # an expanded (internally overlapping) view, read
    r = e.sum(dim=0)
    nc = out[:, ::2].tanh()  # a non-contiguous input
    x.index_add_(0, torch.tensor([0, 2, 2], device=device), torch.ones(3, 8, device=device))
    return [x, v, t, s, d, out, r, nc, base]


def test_in_place_views_and_aliasing_equal_op_by_op(concat):
    ref, _ = off(lambda: views_and_aliasing("neuron"))
    out, _ = hot(lambda: views_and_aliasing("neuron"))
    same(out, ref)
    for a, b in zip(out, views_and_aliasing("cpu")):
        torch.testing.assert_close(a.cpu(), b)
    # The views still alias their bases.
    x, v, t = out[0], out[1], out[2]
    assert v.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert t.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert stats()[1] >= 1


def random_ops(device):
    torch.manual_seed(3)
    a = torch.randn(64, device=device)
    b = torch.nn.functional.dropout(a, 0.5, training=True)
    c = torch.rand_like(a)
    d = torch.bernoulli(c)
    e = a.new_empty(64).normal_(0, 2)
    return [a, b, c, d, e]


def test_random_ops_draw_what_op_by_op_draws(concat):
    ref, _ = off(lambda: random_ops("neuron"))
    out, _ = hot(lambda: random_ops("neuron"))
    same(out, ref)
    changed, _ = off(lambda: (torch.manual_seed(4), torch.randn(64, device="neuron"))[1])
    assert not torch.equal(changed.cpu(), out[0].cpu())  # the comparison can tell draws apart


# The property test: random sequences of ops over a few tensors, in place or not, through views.
UNARY = [torch.tanh, torch.sigmoid, torch.exp, torch.neg, torch.abs, torch.relu, lambda t: t * 0.5,
         lambda t: t.sum(dim=-1, keepdim=True).expand_as(t), lambda t: torch.softmax(t, dim=-1)]
BINARY = [torch.add, torch.mul, torch.sub, torch.maximum, lambda a, b: torch.addcmul(a, a, b, value=0.1),
          lambda a, b: torch.where(a > b, a, b)]
IN_PLACE = [lambda a, b: a.add_(b), lambda a, b: a.mul_(0.9), lambda a, b: a.clamp_(-1, 1),
            lambda a, b: a.copy_(b), lambda a, b: a.t().add_(b.t()), lambda a, b: a[:, 1:3].sub_(b[:, :2])]


def sequence(seed, length=40):
    rng = random.Random(seed)
    steps = []
    for _ in range(length):
        kind = rng.choice(("unary", "binary", "in_place", "sync"))
        n = {"unary": len(UNARY), "binary": len(BINARY), "in_place": len(IN_PLACE), "sync": 1}[kind]
        steps.append((kind, rng.randrange(n), rng.randrange(4), rng.randrange(4)))
    return steps


def run_sequence(steps, device):
    torch.manual_seed(5)
    ts = [torch.randn(4, 4).to(device) for _ in range(4)]
    seen = []
    for kind, op, i, j in steps:
        if kind == "unary":
            ts[i] = UNARY[op](ts[j])
        elif kind == "binary":
            ts[i] = BINARY[op](ts[i], ts[j])
        elif kind == "in_place":
            if i != j and 0 not in ts[i].stride():  # an expanded result cannot be written in place
                IN_PLACE[op](ts[i], ts[j])
        else:
            seen.append(ts[i].sum().item())  # a sync inside the sequence closes a segment
    return ts + [torch.tensor(seen)]


@pytest.mark.parametrize("seed", range(12))
def test_random_op_sequences_equal_op_by_op(concat, seed):
    steps = sequence(seed)
    ref, _ = off(lambda: run_sequence(steps, "neuron"))
    out, _ = hot(lambda: run_sequence(steps, "neuron"))
    same(out, ref)
    for a, b in zip(out, run_sequence(steps, "cpu")):
        torch.testing.assert_close(a.cpu(), b, equal_nan=True)


def test_deterministic_mode_runs_nothing_concatenated(concat):
    torch.use_deterministic_algorithms(True)
    x, w = torch.randn(256, device="neuron"), torch.randn(256, device="neuron") * 0.01
    out, n_tasks = hot(lambda: small_loop(x, w))
    assert n_tasks >= 200
    assert stats() == (0, 0, 0)
    assert all(c["concatenated"] == 0 for c in torch_neuronx.op_counts().values())
    torch.use_deterministic_algorithms(False)
    hot(lambda: small_loop(x, w))
    assert stats()[1] >= 1  # the same workload concatenates once deterministic mode is off


def test_off_is_off(concat):
    torch_neuronx.set_concatenation(False)
    x, w = torch.randn(256, device="neuron"), torch.randn(256, device="neuron") * 0.01
    _, n_tasks = hot(lambda: small_loop(x, w))
    assert n_tasks >= 200 and stats() == (0, 0, 0)


def failing_segment(idx):
    a = torch.arange(8.0, device="neuron")
    b = a + 1
    c = torch.index_select(b, 0, idx)  # the index is checked by the CPU kernel, inside the task
    d = b * 2
    return c, d


@pytest.mark.parametrize("concatenated", [False, True])
def test_errors_surface_at_the_sync_naming_the_op(concat, concatenated):
    torch_neuronx.set_concatenation(concatenated)
    good = torch.tensor([0, 1], device="neuron")
    bad = torch.tensor([0, 100], device="neuron")
    hot(lambda: failing_segment(good))
    c, d = failing_segment(bad)  # the same signatures: a segment seen before, when on
    with pytest.raises(Exception, match="index_select"):
        torch.neuron.synchronize()
    assert torch.equal(d.cpu(), (torch.arange(8.0) + 1) * 2)  # the ops after the failing one ran
    if concatenated:
        assert stats()[1] >= 1


def test_another_threads_work_runs_after_the_open_segment(concat):
    x = torch.randn(64, device="neuron")
    for _ in range(3):
        y = torch.tanh(x * 2)  # deferred in the stream's segment
        result = {}

        def other():
            result["z"] = (y + 1).cpu()

        t = threading.Thread(target=other)
        t.start()
        t.join()
        torch.testing.assert_close(result["z"], torch.tanh(x.cpu() * 2) + 1)


def test_explain_says_whether_an_op_is_concatenable():
    assert "; concatenable" in torch_neuronx.explain("aten::tanh")
    assert "not concatenable" in torch_neuronx.explain("aten::nonzero")
    assert "not concatenable" in torch_neuronx.explain("aten::copy_")


def test_the_setting_turns_it_on_and_a_bad_value_is_an_error():
    code = ("import torch, torch_neuronx\n"
            "x = torch.randn(256, device='neuron'); w = torch.randn(256, device='neuron')\n"
            "for _ in range(3):\n"
            "    y = x\n"
            "    for _ in range(10): y = torch.tanh(y * w)\n"
            "    torch.neuron.synchronize()\n"
            "print(torch_neuronx.concatenation_enabled(), torch_neuronx.compile_stats()['concat_segments_hit'])\n")
    r = run_python(code, env={"TORCH_NEURONX_ENABLE_CONCATENATION": "1"})
    assert r.returncode == 0, r.stderr
    on, hits = r.stdout.split()
    assert on == "True" and int(hits) >= 1
    r = run_python("import torch_neuronx", env={"TORCH_NEURONX_CONCATENATION_BUFFER_SIZE_LIMIT": "0"})
    assert r.returncode != 0 and "TORCH_NEURONX_CONCATENATION_BUFFER_SIZE_LIMIT" in r.stderr


def test_a_segment_longer_than_the_queue_ring(concat):
    """A new segment of more tasks than the queue has slots (512) is queued task by task while the
    worker frees slots (it once waited for a worker nobody had woken)."""
    x, w = torch.randn(256, device="neuron"), torch.randn(256, device="neuron") * 0.01

    def three_loops():
        return small_loop(small_loop(small_loop(x, w), w), w)  # 600 ops, no sync between

    ref, _ = off(three_loops)
    out, n_tasks = hot(three_loops)
    same(out, ref)
    assert n_tasks <= 2 and stats()[0] >= 1
