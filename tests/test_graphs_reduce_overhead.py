"""torch.compile(mode="reduce-overhead") on neuron, with the "neuron" backend and the default one
(compile/graphed.py): every call equals eager, whatever changed between the capture and the
replay — the value of a CPU scalar or float, an input's strides, a parameter's storage, inputs
that share memory, outputs that are views — and what a graph cannot replay runs without one,
counted with its reason."""
import pytest
import torch

import torch_neuronx
from torch_neuronx.compile import graphed

N = "neuron"
BACKENDS = ["neuron", "inductor"]


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def compiled(fn, backend):
    return torch.compile(fn, backend=backend, mode="reduce-overhead")


def fallbacks(reason):
    return torch_neuronx.compile_stats()["graph_fallbacks"].get(reason, 0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["cpu_tensor", "float"])
def test_a_cpu_scalar_or_float_argument_is_read_at_every_call(backend, kind):
    f = compiled(lambda x, s: x * s + 1, backend)
    xc = torch.arange(4.)
    x = xc.to(N)
    for v in [1., 2., 3., 4., 5., 6.]:
        s = torch.tensor(v) if kind == "cpu_tensor" else v
        torch.testing.assert_close(f(x, s).cpu(), xc * s + 1)
    assert fallbacks(graphed.CPU_ARGUMENT) >= 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_strided_input_view_is_copied_with_its_strides(backend):
    f = compiled(lambda a: a * 2, backend)
    for step in range(4):
        base_cpu = torch.arange(8.) + step
        base = base_cpu.to(N)
        torch.testing.assert_close(f(base[::2]).cpu(), base_cpu[::2] * 2)
        torch.testing.assert_close(f(base.view(2, 4).t()).cpu(), base_cpu.view(2, 4).t() * 2)
    assert torch_neuronx.compile_stats()["graph_fallbacks"] == {}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_mutated_strided_input_is_written_back_through_its_strides(backend):
    def scale(a):
        a.mul_(3)
        return a + 1

    f = compiled(scale, backend)
    for step in range(4):
        base_cpu = torch.arange(8.) + step
        base = base_cpu.to(N)
        out = f(base[1::2])
        want = scale(base_cpu[1::2])
        torch.testing.assert_close(out.cpu(), want)
        torch.testing.assert_close(base.cpu(), base_cpu)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_expanded_input_runs_without_a_graph(backend):
    f = compiled(lambda a: a * 2, backend)
    for step in range(4):
        v = torch.tensor([float(step + 1)])
        torch.testing.assert_close(f(v.to(N).expand(4)).cpu(), v.expand(4) * 2)
    assert fallbacks(graphed.OVERLAPPING_INPUT) >= 2


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("how", ["data", "set_"])
def test_a_parameter_given_new_storage_is_used_by_the_next_call(backend, how):
    torch.manual_seed(0)
    lin = torch.nn.Linear(2, 2).to(N)
    f = compiled(lin, backend)
    x = torch.randn(3, 2, device=N)
    with torch.no_grad():
        for _ in range(3):  # compile, warm-up, capture
            torch.testing.assert_close(f(x), lin(x))
        for value in (2., 3.):
            new = torch.full((2, 2), value, device=N)
            if how == "data":
                lin.weight.data = new
            else:
                lin.weight.set_(new)
            for _ in range(2):
                torch.testing.assert_close(f(x).cpu(), torch.nn.functional.linear(x.cpu(), new.cpu(), lin.bias.cpu()))
    assert torch_neuronx.compile_stats()["graph_recaptures"] >= 1


def test_a_capture_again_collects_no_garbage(monkeypatch):
    # A generate's new static cache is captured again at its first decode step; a full gc pass of
    # a process holding a model costs more than the steps the graph then serves.
    import gc

    lin = torch.nn.Linear(2, 2).to(N)
    f = compiled(lin, "neuron")
    x = torch.randn(3, 2, device=N)
    collections = []
    with torch.no_grad():
        for _ in range(3):
            f(x)
        monkeypatch.setattr(gc, "collect", lambda *a: collections.append(a) or 0)
        before = torch_neuronx.compile_stats()["graph_recaptures"]
        lin.weight.data = torch.full((2, 2), 2., device=N)
        torch.testing.assert_close(f(x).cpu(), torch.nn.functional.linear(x.cpu(), lin.weight.cpu(), lin.bias.cpu()))
        assert torch_neuronx.compile_stats()["graph_recaptures"] == before + 1
        assert collections == []
        with torch.neuron.graph(torch.neuron.NeuronGraph()):  # torch.cuda.graph's rule stays for users
            x + 1
    assert len(collections) == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_inputs_that_share_memory_run_without_a_graph(backend):
    def f(a, b):
        a.add_(1)
        return b * 2

    g = compiled(f, backend)
    for _ in range(4):
        base, base_cpu = torch.zeros(4, device=N), torch.zeros(4)
        out = g(base, base[:2])
        want = f(base_cpu, base_cpu[:2])
        torch.testing.assert_close(base.cpu(), base_cpu)
        torch.testing.assert_close(out.cpu(), want)
    assert fallbacks(graphed.ALIASED_INPUTS) >= 2
    for _ in range(3):  # the same signature without sharing still replays a graph, and right
        a, b = torch.zeros(4, device=N), torch.ones(2, device=N)
        out = g(a, b)
        torch.testing.assert_close(a.cpu(), torch.ones(4))
        torch.testing.assert_close(out.cpu(), torch.full((2,), 2.))


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_input_the_program_writes_but_does_not_return_is_written_back(backend):
    def f(a, b):  # Inductor writes `a` from a kernel: its version counter does not move
        a.add_(b[0])
        return b * 2

    g = compiled(f, backend)
    for step in range(5):
        a_cpu, b_cpu = torch.arange(4.), torch.full((2,), float(step))
        a, b = a_cpu.to(N), b_cpu.to(N)
        out = g(a, b)
        want = f(a_cpu, b_cpu)
        torch.testing.assert_close(a.cpu(), a_cpu)
        torch.testing.assert_close(out.cpu(), want)
    assert torch_neuronx.compile_stats()["graph_fallbacks"] == {}


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_inference_tensor_input_is_read_and_left_as_it_is(backend):
    g = compiled(lambda a: a * 2, backend)
    for step in range(4):
        with torch.inference_mode():
            a = torch.full((3,), float(step), device=N)
        torch.testing.assert_close(g(a).cpu(), torch.full((3,), 2. * step))
        torch.testing.assert_close(a.cpu(), torch.full((3,), float(step)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_output_that_is_a_view_of_an_input_stays_one(backend):
    f = compiled(lambda a: a.t(), backend)
    for step in range(4):
        a = torch.full((2, 3), float(step), device=N)
        out = f(a)
        a.add_(10)
        torch.testing.assert_close(out.cpu(), a.cpu().t())
    assert fallbacks(graphed.ALIASED_OUTPUTS) >= 2


def test_a_fallback_warns_once_per_reason(monkeypatch):
    import warnings

    from torch_neuronx.compile import stats

    monkeypatch.setattr(stats, "_warned_fallbacks", set())  # as in a fresh process
    f = compiled(lambda a: a.t(), "neuron")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(5):
            f(torch.ones(2, 2, device=N))
    said = [str(w.message) for w in caught if "runs a program without a graph" in str(w.message)]
    assert len(said) == 1 and graphed.ALIASED_OUTPUTS in said[0] and "graph_fallbacks" in said[0], said
    assert fallbacks(graphed.ALIASED_OUTPUTS) == 4  # every call after the first
