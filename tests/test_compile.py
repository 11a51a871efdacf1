"""torch.compile on neuron: the "neuron" backend, Inductor on neuron, static shapes, the counters,
and the Hugging Face static-cache generate that compiles its decode step (the disk cache:
test_compile_cache.py)."""
import os
import warnings

import pytest
import torch

import torch_neuronx
from conftest import run_python

os.environ.setdefault("HF_HUB_OFFLINE", "1")
N = "neuron"


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    torch_neuronx.reset_compile_stats()
    yield
    torch._dynamo.reset()


def test_backend_exists_without_importing_the_package():
    r = run_python("import torch\nprint('neuron' in torch._dynamo.list_backends())\n"
                   "f = torch.compile(lambda x: x * 2 + 1, backend='neuron')\n"
                   "import torch_neuronx  # loaded by the entry point, not by autoload\n"
                   "x = torch.arange(4.0, device='neuron')\nprint(f(x).tolist())",
                   {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}, timeout=300)
    assert r.stdout.split("\n")[:2] == ["True", "[1.0, 3.0, 5.0, 7.0]"], r.stdout + r.stderr[-2000:]


def test_compiled_module_matches_eager_and_runs_async():
    m = mlp().to(N)
    compiled = torch.compile(m, backend="neuron")
    x = torch.randn(5, 8, device=N)
    torch.testing.assert_close(compiled(x), m(x))
    torch.neuron.synchronize()
    torch_neuronx.reset_op_counts()
    torch.neuron._sleep(300)
    y = compiled(x)
    assert not torch.neuron.current_stream().query()  # its kernels were queued behind the sleep
    torch.testing.assert_close(y, m(x))
    counts = torch_neuronx.op_counts()
    assert counts["neuron::compiled_kernel"]["async"] >= 1
    assert all(c["sync"] == 0 and c["copy"] == 0 for c in counts.values())


def test_each_compiled_call_is_one_task_on_the_stream():
    m = mlp().to(N)
    compiled = torch.compile(m, backend="neuron")
    x = torch.randn(5, 8, device=N)
    compiled(x)
    torch.neuron.synchronize()
    torch_neuronx.reset_op_counts()
    before = torch_neuronx._C._tasks_submitted(-1)
    for _ in range(4):
        y = compiled(x)
    assert torch_neuronx._C._tasks_submitted(-1) - before == 4
    counts = torch_neuronx.op_counts()  # the kernels and the matmuls still ran, inside the programs
    assert counts["neuron::compiled_kernel"]["async"] >= 4 and counts["aten::addmm.out"]["async"] == 8
    torch.testing.assert_close(y, m(x))


def test_a_failing_kernel_names_its_program_and_the_stream_goes_on():
    def gather(w, i):
        return (w[i] * 2).sum(1)

    w = torch.randn(16, 8)
    compiled = torch.compile(gather, backend="neuron")
    bad = torch.tensor([1, 2, 40], device=N)
    with pytest.raises(RuntimeError, match=r"'neuron::compiled_program' \(its task 'neuron::compiled_kernel'\).*"
                                           r"index out of bounds"):
        compiled(w.to(N), bad)
        torch.neuron.synchronize()
    good = torch.tensor([1, 2, 3])
    torch.testing.assert_close(compiled(w.to(N), good.to(N)).cpu(), gather(w, good))


def test_each_new_shape_is_a_new_program_and_says_why():
    m = mlp().to(N)
    compiled = torch.compile(m, backend="neuron")
    for n in (5, 5, 7, 7, 9):
        x = torch.randn(n, 8, device=N)
        torch.testing.assert_close(compiled(x), m(x))
    s = torch_neuronx.compile_stats()
    assert s["graphs_compiled"] == 3 and s["recompiles"] == 2
    assert all("size mismatch" in r for r in s["recompile_reasons"])
    assert s["compile_seconds"] > 0 and s["cache_hits"] + s["cache_misses"] == 3


@pytest.mark.parametrize("backend", ["neuron", "inductor"])
def test_counters_cover_both_backends_and_the_whole_compile_time(backend):
    import time

    m = mlp().to(N)
    compiled = torch.compile(m, backend=backend)
    x = torch.randn(5, 8, device=N)
    start = time.perf_counter()
    compiled(x)  # the first call is the compile: Dynamo's trace, AOTAutograd and Inductor
    first_call = time.perf_counter() - start
    s = torch_neuronx.compile_stats()
    assert s["graphs_compiled"] == 1 and s["cache_hits"] + s["cache_misses"] == 1
    assert 0.6 * first_call <= s["compile_seconds"] <= first_call


def test_the_recompile_limit_is_counted_and_said():
    m = mlp().to(N)
    compiled = torch.compile(m, backend="neuron")
    with torch._dynamo.config.patch(recompile_limit=2), pytest.warns(UserWarning, match="recompile limit"):
        for n in (3, 4, 5, 6):
            x = torch.randn(n, 8, device=N)
            torch.testing.assert_close(compiled(x), m(x))  # past the limit it runs eagerly
    s = torch_neuronx.compile_stats()
    assert s["recompile_limit_hits"] == 1 and s["graphs_compiled"] == 2


def test_dynamic_shapes_are_refused_with_what_to_do():
    compiled = torch.compile(mlp().to(N), backend="neuron", dynamic=True)
    with pytest.raises(Exception, match="static shapes.*dynamic=False"):
        compiled(torch.randn(3, 8, device=N))


def test_modes_other_than_default_warn_once_and_run():
    m = mlp().to(N)
    x = torch.randn(5, 8, device=N)
    with pytest.warns(UserWarning, match="mode='max-autotune'"):
        torch.testing.assert_close(torch.compile(m, backend="neuron", mode="max-autotune")(x), m(x))
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.compile(m, backend="neuron", mode="max-autotune")(x)


def test_graph_breaks_are_counted():
    def f(x):
        y = x * 2
        print("a graph break")  # noqa: T201
        return y + 1

    x = torch.ones(3, device=N)
    assert torch.compile(f, backend="neuron")(x).tolist() == [3.0, 3.0, 3.0]
    assert torch_neuronx.compile_stats()["graph_breaks"] >= 1


def test_inductor_on_neuron_matches_eager_in_every_mode():
    m = mlp().to(N)
    x = torch.randn(5, 8, device=N)
    for mode in (None, "reduce-overhead"):
        torch._dynamo.reset()
        compiled = torch.compile(m, mode=mode)  # the default backend
        for _ in range(3):
            y = compiled(x)
        torch.testing.assert_close(y, m(x))
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), m(x))


def test_compiled_training_step_matches_eager():
    import transformers

    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    ids = torch.randint(0, 96, (2, 12), generator=torch.Generator().manual_seed(1))

    def train(compiled):
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(cfg).to(N)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        step = torch.compile(model, backend="neuron") if compiled else model
        losses = []
        for _ in range(3):
            loss = step(input_ids=ids.to(N), labels=ids.to(N)).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        return losses

    torch.testing.assert_close(train(True), train(False), rtol=1e-4, atol=1e-4)
    assert torch_neuronx.compile_stats()["recompiles"] == 0


def _tiny_llama(dtype):
    import transformers

    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(cfg).eval().to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_static_cache_generate_compiles_the_decode_step_once(dtype):
    model = _tiny_llama(dtype)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 96, (1, 6), generator=g) for _ in range(3)]
    want = [model.generate(p, max_new_tokens=8, do_sample=False) for p in prompts]
    model.to(N)
    for p, w in zip(prompts, want):
        got = model.generate(p.to(N), max_new_tokens=8, do_sample=False, cache_implementation="static")
        assert got.shape == w.shape
        if dtype == torch.float32:  # bfloat16 kernels fuse in float32 and may pick other tokens
            assert torch.equal(got.cpu(), w)
    s = torch_neuronx.compile_stats()
    assert s["graphs_compiled"] == 1 and s["recompiles"] == 0, s  # 3 prompts x 7 decode steps, one program


def test_compiled_programs_keep_device_memory_closed_to_the_host():
    r = run_python("import torch\nm = torch.nn.Linear(8, 4).to('neuron')\nc = torch.compile(m, backend='neuron')\n"
                   "x = torch.randn(3, 8, device='neuron')\nprint(torch.allclose(c(x).cpu(), m(x).cpu(), atol=1e-6))",
                   {"TORCH_NEURONX_SANITIZE": "1"}, timeout=300)
    assert r.stdout.strip() == "True", r.stderr[-2000:]
