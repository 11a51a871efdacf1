"""Graph capture on neuron (torch.neuron.NeuronGraph, torch.neuron.graph, make_graphed_callables,
torch.compile mode="reduce-overhead"): replays equal eager on CPU-checked results, a replay is one
task, capture errors are CUDA's and leave the stream usable, and a graph's memory is its own."""
import pytest
import torch

import torch_neuronx
from conftest import run_python

N = "neuron"


def chain(x, w, steps=50):
    y = x
    for _ in range(steps):
        y = torch.tanh(y * w + 0.5)
    return y


def captured(fn, *args):
    fn(*args)  # warm-up: each op's first call runs and checks before a capture
    torch.neuron.synchronize()
    g = torch.neuron.NeuronGraph()
    with torch.neuron.graph(g):
        out = fn(*args)
    return g, out


def test_replay_runs_the_captured_work_on_new_inputs_copied_into_the_static_ones():
    xc, wc = torch.randn(64), torch.randn(64)
    x, w = xc.to(N), wc.to(N)
    g, out = captured(chain, x, w)
    assert g.num_tasks == 150  # mul, add and tanh, 50 times: recorded, not run
    for _ in range(3):
        g.replay()
        torch.testing.assert_close(out.cpu(), chain(xc, wc))
        xc = torch.randn(64)
        x.copy_(xc)


def test_a_replay_is_one_asynchronous_task_and_dispatches_no_op():
    x, w = torch.randn(64, device=N), torch.randn(64, device=N)
    g, out = captured(chain, x, w)
    torch.neuron.synchronize()
    torch_neuronx.reset_op_counts()
    torch.neuron._sleep(200)
    g.replay()
    assert not torch.neuron.current_stream().query()  # queued behind the sleep
    torch.neuron.synchronize()
    assert torch_neuronx.op_counts() == {} or all(
        c["async"] + c["sync"] + c["copy"] == 0 for op, c in torch_neuronx.op_counts().items() if op != "neuron::sleep")
    torch.testing.assert_close(out, chain(x, w))


@pytest.mark.parametrize("what", ["item", "print", "cpu", "synchronize"])
def test_waiting_inside_a_capture_raises_cudas_error_and_the_stream_stays_usable(what):
    x = torch.randn(8, device=N)
    (x * 2).sum().item()  # warm-up
    g = torch.neuron.NeuronGraph()
    with pytest.raises(RuntimeError, match="operation not permitted when stream is capturing"):
        with torch.neuron.graph(g):
            y = (x * 2).sum()
            {"item": lambda: y.item(), "print": lambda: str(y), "cpu": lambda: y.cpu(),
             "synchronize": torch.neuron.synchronize}[what]()
    assert not torch.neuron.is_current_stream_capturing()
    with pytest.raises(RuntimeError, match="no capture"):
        g.replay()
    with torch.neuron.stream(torch.neuron.graph.default_capture_stream):  # the capture's stream works on
        assert (x * 2).sum().item() == pytest.approx((x.cpu() * 2).sum().item(), rel=1e-6)
    g2, out = captured(lambda t: t + 1, x)  # and captures again
    g2.replay()
    torch.testing.assert_close(out.cpu(), x.cpu() + 1)


def test_capture_on_the_default_stream_and_replay_without_capture_are_refused():
    g = torch.neuron.NeuronGraph()
    with pytest.raises(RuntimeError, match="default stream"):
        g.capture_begin()
    with pytest.raises(RuntimeError, match="no capture"):
        g.replay()


def test_memory_a_capture_freed_is_not_handed_out_while_the_graph_lives():
    x = torch.randn(1024, device=N)

    def f(t):
        tmp = t * 3  # freed inside the capture: the replay still writes it
        return tmp + 1

    g, out = captured(f, x)
    others = [torch.full((1024,), 7.0, device=N) for _ in range(20)]  # may not land on `tmp`
    for _ in range(2):
        g.replay()
        torch.testing.assert_close(out.cpu(), x.cpu() * 3 + 1)
        assert all(bool((o == 7.0).all()) for o in others)
    reserved = torch.neuron.memory_reserved()
    g.reset()
    del out
    assert torch.neuron.memory_reserved() == reserved  # cached again, for later allocations
    with pytest.raises(RuntimeError, match="no capture"):
        g.replay()


def test_each_replay_draws_fresh_random_numbers_continuing_the_capture():
    torch.rand(4, device=N)  # warm-up
    torch.neuron.synchronize()

    def capture_and_replay(seed, replays=3):
        torch.manual_seed(seed)
        g = torch.neuron.NeuronGraph()
        with torch.neuron.graph(g):
            out = torch.rand(4, device=N)
        state = torch.neuron.get_rng_state()
        draws = []
        for _ in range(replays):
            g.replay()
            draws.append(out.cpu())
        assert torch.equal(torch.neuron.get_rng_state(), state)  # replays neither read nor advance it
        return torch.stack(draws)

    draws = capture_and_replay(3)
    assert len({tuple(d.tolist()) for d in draws}) == len(draws)  # fresh at each replay
    torch.manual_seed(3)
    torch.testing.assert_close(draws[0], torch.rand(4, device=N).cpu())  # the first: the capture's draw
    torch.testing.assert_close(capture_and_replay(3), draws)  # the same seed, the same replays

    torch._dynamo.reset()
    f = torch.compile(lambda x: x + torch.rand_like(x), backend="neuron", mode="reduce-overhead")
    x = torch.zeros(4, device=N)
    with torch.no_grad():
        results = [f(x).cpu() for _ in range(5)]  # compile, warm-up, capture, replays
    torch._dynamo.reset()
    assert len({tuple(r.tolist()) for r in results}) == len(results)
    assert all(bool(((r >= 0) & (r < 1)).all()) for r in results)


def test_make_graphed_callables_trains_like_eager():
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    model.load_state_dict(eager.state_dict())
    model.to(N)
    graphed = torch.neuron.make_graphed_callables(model, (torch.randn(8, 16, device=N, requires_grad=True),))
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_g = torch.optim.SGD(graphed.parameters(), lr=0.1)
    for step in range(3):
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(step))
        xe, xg = x.clone().requires_grad_(), x.to(N).requires_grad_()
        le, lg = eager(xe).square().mean(), graphed(xg).square().mean()
        le.backward()
        lg.backward()
        torch.testing.assert_close(lg.cpu(), le, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(xg.grad.cpu(), xe.grad, rtol=1e-5, atol=1e-6)
        opt_e.step(), opt_g.step()
        opt_e.zero_grad(), opt_g.zero_grad()
    for p, q in zip(graphed.parameters(), eager.parameters()):
        torch.testing.assert_close(p.cpu(), q, rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match="shapes and dtypes it was captured with"):
        graphed(torch.randn(3, 16, device=N))


@pytest.mark.parametrize("backend", ["neuron", "inductor"])
def test_reduce_overhead_replays_the_compiled_program_without_warning(backend):
    import warnings

    torch._dynamo.reset()
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).to(N)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        compiled = torch.compile(m, backend=backend, mode="reduce-overhead")
        with torch.no_grad():
            xs = [torch.randn(5, 8, device=N) for _ in range(5)]
            results = [compiled(x) for x in xs[:3]]  # compile, warm-up, capture
            torch_neuronx.reset_op_counts()
            results += [compiled(x) for x in xs[3:]]
    launches = torch_neuronx.op_counts().get("neuron::compiled_kernel", {"async": 0})["async"]
    assert launches == 0, "the program's kernels were launched again instead of replayed"
    for x, y in zip(xs, results):  # every result stays what its call returned
        torch.testing.assert_close(y, m(x))
    x = torch.randn(5, 8, device=N, requires_grad=True)  # autograd: the program runs as it is
    compiled(x).sum().backward()
    torch.testing.assert_close(x.grad, torch.autograd.grad(m(x).sum(), x)[0])
    torch._dynamo.reset()


def test_reduce_overhead_writes_an_input_the_program_mutates_back():
    torch._dynamo.reset()

    def accumulate(buf, x):
        buf.add_(x)
        return buf * 2

    compiled = torch.compile(accumulate, backend="neuron", mode="reduce-overhead")
    for step in range(4):
        buf, want = torch.zeros(6, device=N), torch.zeros(6)
        x = torch.full((6,), float(step + 1))
        out = compiled(buf, x.to(N))
        want.add_(x)
        torch.testing.assert_close(buf.cpu(), want)
        torch.testing.assert_close(out.cpu(), want * 2)
    torch._dynamo.reset()


def test_a_graph_alive_at_interpreter_exit_goes_quietly():
    # Globals are torn down at exit before the graph's __del__ runs.
    code = ("import torch, torch_neuronx\n"
            "x = torch.ones(4, device='neuron')\n"
            "g = torch.neuron.NeuronGraph()\n"
            "with torch.neuron.graph(g):\n"
            "    y = x * 2\n"
            "g.replay()\n"
            "print(y.sum().item())\n")
    r = run_python(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "8.0"
    assert "Exception ignored" not in r.stderr and "Traceback" not in r.stderr, r.stderr
