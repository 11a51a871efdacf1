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


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


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
    with pytest.raises(RuntimeError, match=r"'neuron::compiled_program' \(its task 'cpp_fused_\w+'\).*"
                                           r"index out of bounds"):
        compiled(w.to(N), bad)
        torch.neuron.synchronize()
    good = torch.tensor([1, 2, 3])
    torch.testing.assert_close(compiled(w.to(N), good.to(N)).cpu(), gather(w, good))


def test_a_changing_length_recompiles_once_then_specializes_per_shape():
    """Automatic dynamic shapes: the first length compiles a static graph; the second one recompiles
    the frame once with symbolic lengths, and from then on each length is a static program of that
    graph, without a new Dynamo trace."""
    m = mlp().to(N)
    compiled = torch.compile(m, backend="neuron")
    for n in (5, 5, 7, 7, 9, 11, 9):
        x = torch.randn(n, 8, device=N)
        torch.testing.assert_close(compiled(x), m(x))
    s = torch_neuronx.compile_stats()
    assert s["graphs_compiled"] == 2 and s["recompiles"] == 1, s
    assert "size mismatch" in s["recompile_reasons"][0]
    assert s["programs"] == 4 and s["cache_hits"] + s["cache_misses"] == 4, s  # lengths 5, 7, 9, 11
    assert s["compile_seconds"] > 0


def test_an_integer_that_sizes_no_tensor_stays_an_argument_of_its_program():
    def shifted(x, k: int):
        return x * 2 + torch.arange(k, k + x.shape[0], device=x.device)  # k moves values, not shapes

    compiled = torch.compile(shifted, backend="neuron", dynamic=True)
    for n, k in [(4, 1), (4, 2), (4, 9), (6, 3), (4, 5)]:
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x.to(N), k).cpu(), shifted(x, k))
    assert torch_neuronx.compile_stats()["programs"] == 2  # one per length, whatever k is


@pytest.mark.parametrize("how", ["dynamic=True", "mark_dynamic"])
def test_symbolic_graphs_train_as_a_static_program_per_shape(how):
    eager = mlp().to(N)
    model = mlp().to(N)
    compiled = torch.compile(model, backend="neuron", dynamic=True if how == "dynamic=True" else None)
    for n in (3, 6, 3, 4):
        x = torch.randn(n, 8, device=N)
        if how == "mark_dynamic":
            torch._dynamo.mark_dynamic(x, 0)
        compiled(x).square().sum().backward()
        eager(x).square().sum().backward()
    for p, q in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    s = torch_neuronx.compile_stats()
    assert s["graphs_compiled"] == 1 and s["recompiles"] == 0 and s["programs"] == 3, s


_THREADS_COMPILING = """
import threading, traceback, torch

for scale in (2, 3, 4):  # each round compiles new graphs: no round is served by the cache
    torch._dynamo.reset()
    fns = [lambda x: (x * scale + 1).sin(), lambda x: x.cumsum(0) - x.mean() * scale,
           lambda x: torch.nn.functional.gelu(x) * x.shape[0] + scale]
    errors, start = [], threading.Barrier(len(fns))

    def work(f):
        try:
            start.wait()
            compiled = torch.compile(f, backend="neuron", dynamic=True)
            for n in (3, 5, 3):
                x = torch.randn(n, 4)
                torch.testing.assert_close(compiled(x.to("neuron")).cpu(), f(x))
        except Exception:
            errors.append(traceback.format_exc())

    threads = [threading.Thread(target=work, args=(f,)) for f in fns]
    [t.start() for t in threads]
    [t.join() for t in threads]
    print("ok" if not errors else "".join(errors))
"""


def test_threads_compiling_symbolic_graphs_at_once_match_eager(tmp_path):
    """Three threads each compile a dynamic=True function at once, three rounds: one thread's
    per-shape programs compile while the others trace and run theirs, and in the first round (a
    fresh process) all three look up the backend "neuron" for the first time."""
    r = run_python(_THREADS_COMPILING, {"TORCH_NEURONX_CACHE_DIR": str(tmp_path)}, timeout=600)
    assert r.returncode == 0 and r.stdout.split("\n")[:3] == ["ok"] * 3, r.stdout[-3000:] + r.stderr[-3000:]
    assert "compile cache" not in r.stderr, r.stderr[-3000:]  # each compile kept to its own work folder


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
    limit = torch._dynamo.config.patch(recompile_limit=2, automatic_dynamic_shapes=False)  # a shape per trace
    with limit, pytest.warns(UserWarning, match="recompile limit"):
        for n in (3, 4, 5, 6):
            x = torch.randn(n, 8, device=N)
            torch.testing.assert_close(compiled(x), m(x))  # past the limit it runs eagerly
    s = torch_neuronx.compile_stats()
    assert s["recompile_limit_hits"] == 1 and s["graphs_compiled"] == 2


def _tiny_llama(dtype=torch.float32, layers=2):
    import transformers

    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(cfg).eval().to(dtype)


LENGTHS = (5, 9, 12, 17, 3, 21, 8, 30, 14, 25, 6, 11)


def test_a_hf_model_over_twelve_lengths_never_reaches_the_recompile_limit():
    model = _tiny_llama(layers=1)
    compiled = torch.compile(copy_to_neuron(model), backend="neuron")
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for n in LENGTHS:
            ids = torch.randint(0, 96, (1, n), generator=g)
            torch.testing.assert_close(compiled(ids.to(N)).logits.cpu(), model(ids).logits, atol=1e-4, rtol=1e-4)
    s = torch_neuronx.compile_stats()
    assert s["recompiles"] <= 1 and s["recompile_limit_hits"] == 0, s
    assert s["programs"] == len(LENGTHS) and s["graphs_compiled"] == 2, s


def test_the_default_backend_compiles_a_hf_model_with_dynamic_true():
    model = _tiny_llama()
    compiled = torch.compile(copy_to_neuron(model), dynamic=True)  # Inductor's dynamic kernels on neuron
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for n in (5, 9, 12):
            ids = torch.randint(0, 96, (2, n), generator=g)
            torch.testing.assert_close(compiled(ids.to(N)).logits.cpu(), model(ids).logits, atol=1e-4, rtol=1e-4)
    assert torch_neuronx.compile_stats()["recompile_limit_hits"] == 0


def copy_to_neuron(model):
    import copy

    return copy.deepcopy(model).to(N)


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


def _generate_over_prompt_lengths(model, lengths, max_new_tokens=12, **kwargs):
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 96, (1, n), generator=g) for n in lengths]
    want = [model.generate(p, max_new_tokens=max_new_tokens, do_sample=False) for p in prompts]
    model.to(N)
    for p, w in zip(prompts, want):
        got = model.generate(p.to(N), max_new_tokens=max_new_tokens, do_sample=False, cache_implementation="static",
                             **kwargs)
        assert torch.equal(got.cpu(), w), (p.shape, got, w)
    return torch_neuronx.compile_stats()


def test_static_cache_generate_shares_one_decode_program_across_prompt_lengths():
    """The cache length is rounded up on neuron (to 64 here: prompt + 12 new tokens is 14 to 52):
    prompts of 2 to 40 tokens use one cache length, so one decode program (without the rounding: a
    program per length)."""
    s = _generate_over_prompt_lengths(_tiny_llama(torch.float32),
                                      (2, 9, 17, 40, 5))
    assert s["programs"] == 1 and s["recompiles"] == 0, s


def test_static_cache_lengths_are_few():
    from torch_neuronx._patches_hf import static_cache_bucket

    assert [static_cache_bucket(n) for n in (1, 64, 65, 129, 256, 257, 700)] == [64, 64, 128, 256, 256, 512, 768]


def test_static_cache_generate_keeps_the_users_max_cache_len():
    model = _tiny_llama(torch.float32)
    s = _generate_over_prompt_lengths(model, (3,), max_new_tokens=4, max_cache_len=24)
    assert s["programs"] == 1
    assert model._previous_max_cache_length == 24  # not rounded: the user chose it


def _static_cache_outputs(model, prompt, max_new_tokens):
    out = model.generate(prompt, max_new_tokens=max_new_tokens, do_sample=False, cache_implementation="static",
                         return_dict_in_generate=True)
    cache = getattr(out.past_key_values, "self_attention_cache", out.past_key_values)  # an encoder-decoder's
    return out.sequences, [(layer.max_cache_len, layer.keys, layer.values) for layer in cache.layers]


@pytest.mark.parametrize("family", ["llama", "mistral_window_8", "mistral_window_64", "bart"])
def test_static_cache_generate_returns_the_cpus_cache_length(family):
    """The rounded cache length is internal: past_key_values has the CPU's length (prompt + new
    tokens; a sliding layer at most its window), values and all, and the next call sizes its cache
    as the CPU does."""
    import transformers

    if family == "llama":
        model = _tiny_llama(torch.float32)
    elif family == "bart":
        cfg = transformers.BartConfig(vocab_size=96, d_model=32, encoder_layers=2, decoder_layers=2,
                                      encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=37,
                                      decoder_ffn_dim=37, max_position_embeddings=100)
        torch.manual_seed(0)
        model = transformers.BartForConditionalGeneration(cfg).eval()
    else:
        window = int(family.rsplit("_", 1)[1])
        cfg = transformers.MistralConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                         sliding_window=window)
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    prompt = torch.randint(0, 96, (2, 5), generator=torch.Generator().manual_seed(0))
    want_seq, want_layers = _static_cache_outputs(model, prompt, 4)
    want_previous = model._previous_max_cache_length
    want_next = model.generate(prompt[:, :3], max_new_tokens=2, do_sample=False, cache_implementation="static")
    del model._previous_max_cache_length
    model.to(N)
    got_seq, got_layers = _static_cache_outputs(model, prompt.to(N), 4)
    assert torch.equal(got_seq.cpu(), want_seq)
    for (got_len, got_k, got_v), (want_len, want_k, want_v) in zip(got_layers, want_layers, strict=True):
        assert got_len == want_len and got_k.shape == want_k.shape, (got_k.shape, want_k.shape)
        assert got_k.is_contiguous() and got_v.is_contiguous()
        torch.testing.assert_close(got_k.cpu(), want_k, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got_v.cpu(), want_v, atol=1e-5, rtol=1e-5)
    assert model._previous_max_cache_length == want_previous
    assert torch.equal(model.generate(prompt[:, :3].to(N), max_new_tokens=2, do_sample=False,
                                      cache_implementation="static").cpu(), want_next)


def test_sliding_window_generate_compiles_two_decode_programs():
    """A sliding-window static cache (Mistral here; Gemma 2/3 and Qwen2 share the layer) counts its
    tokens in a Python int on which Dynamo guarded value by value: a program per decode step until
    the window filled. On neuron the count is a symbolic integer: one program while the window fills,
    one after."""
    import transformers

    cfg = transformers.MistralConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                     sliding_window=8)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    s = _generate_over_prompt_lengths(model, (2, 9, 5))  # 12 new tokens each: the window fills in every one
    assert s["programs"] == 2 and s["recompiles"] <= 1 and s["recompile_limit_hits"] == 0, s


def test_compiled_programs_keep_device_memory_closed_to_the_host():
    r = run_python("import torch\nm = torch.nn.Linear(8, 4).to('neuron')\nc = torch.compile(m, backend='neuron')\n"
                   "x = torch.randn(3, 8, device='neuron')\nprint(torch.allclose(c(x).cpu(), m(x).cpu(), atol=1e-6))",
                   {"TORCH_NEURONX_SANITIZE": "1"}, timeout=300)
    assert r.stdout.strip() == "True", r.stderr[-2000:]
