"""vLLM on neuron (torch_neuronx.vllm): vLLM's own model implementations, scheduler and sampler on
the device, compared with Hugging Face `generate` on the CPU. Every engine runs in a fresh
interpreter (an engine owns its process's distributed state); models and the tokenizer are built
here from configs."""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time

import httpx
import psutil
import pytest
import torch
import transformers
import vllm_models
from conftest import run_python

from torch_neuronx import demo

PROMPTS = [
    "the",
    "To be, or not to be,",
    "It is a truth universally acknowledged, that a single man",
    "whether 'tis nobler in the mind to suffer the slings and arrows of outrageous fortune",
]
NEW_TOKENS = 12


@pytest.fixture(scope="module")
def models(vllm_models_saved):
    return vllm_models_saved


def hf_greedy(path, prompts, new_tokens=NEW_TOKENS, logprobs=False):
    """HF's greedy tokens per prompt; with logprobs=True also each token's log-probability."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    out, logps = [], []
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        gen = model.generate(ids, max_new_tokens=new_tokens, do_sample=False, min_new_tokens=new_tokens,
                             output_logits=True, return_dict_in_generate=True)
        tokens = gen.sequences[0, ids.shape[1]:]
        out.append(tokens.tolist())
        logps.append([torch.log_softmax(step[0].float(), -1)[t].item() for step, t in zip(gen.logits, tokens)])
    return (out, logps) if logprobs else out


PRELUDE = """
import json, os
import torch_neuronx
from vllm import LLM, SamplingParams

def engine(path, **kwargs):
    args = dict(model=path, dtype="float32", max_model_len=128, max_num_seqs=8, max_num_batched_tokens=256,
                kv_cache_memory_bytes=32 << 20, enforce_eager=True, seed=0)
    args.update(kwargs)
    return LLM(**args)

def greedy(n):
    return SamplingParams(max_tokens=n, min_tokens=n, temperature=0.0)

def tokens(outputs):
    return [list(o.outputs[0].token_ids) for o in outputs]

def logprobs(outputs):
    return [[step[t].logprob for step, t in zip(o.outputs[0].logprobs, o.outputs[0].token_ids)] for o in outputs]

def result(value):
    print("RESULT " + json.dumps(value), flush=True)

def counted(llm):  # the engine's device, and the copies, syncs and async ops since reset_op_counts()
    counts = torch_neuronx.op_counts()
    return {"device": str(llm.llm_engine.vllm_config.device_config.device),
            "copy": {op: c["copy"] for op, c in counts.items() if c["copy"]},
            "sync": {op: c["sync"] for op, c in counts.items() if c["sync"]},
            "ops": sum(c["async"] for c in counts.values())}
"""


def run_vllm(script: str, timeout: int = 300, log: bool = False, cwd: str | None = None, **env) -> dict:
    """Runs PRELUDE + script in a fresh interpreter with vLLM's engine in that process; returns
    what the script passed to result() (and, with log=True, vLLM's INFO log as "log")."""
    env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_LOGGING_LEVEL": "INFO" if log else "WARNING", **env}
    proc = run_python(PRELUDE + textwrap.dedent(script), env=env, timeout=timeout, cwd=cwd)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(lines[-1][len("RESULT "):])
    if log:
        out["log"] = proc.stdout + proc.stderr
    return out


@pytest.mark.parametrize("name", ["llama", "qwen2", "mistral-window", "mixtral", "qwen3-moe"])
def test_greedy_batch_equals_hf_cpu(models, name):
    out = run_vllm(f"""
        llm = engine({models[name]!r})
        torch_neuronx.reset_op_counts()
        outputs = llm.generate({PROMPTS!r}, greedy({NEW_TOKENS}))
        result({{"tokens": tokens(outputs), **counted(llm)}})
    """)
    assert out["device"] == "neuron"
    assert out["tokens"] == hf_greedy(models[name], PROMPTS)
    assert out["ops"] > 0  # the counts did see the generate's device ops
    assert out["copy"] == {} and out["sync"] == {}


@pytest.mark.parametrize("name", ["bloom", "gemma2-softcap"])
def test_attention_variants_equal_hf_cpu(models, name):
    """ALiBi (Bloom) and logit soft-capping (Gemma-2) in the neuron attention backend. Their effect
    on a tiny random model's greedy tokens can be slight, so the tokens' log-probabilities are
    compared too: without the cap they move by 1e-3 or more."""
    out = run_vllm(f"""
        llm = engine({models[name]!r})
        outputs = llm.generate({PROMPTS!r}, SamplingParams(max_tokens={NEW_TOKENS}, min_tokens={NEW_TOKENS},
                                                           temperature=0.0, logprobs=0))
        result({{"tokens": tokens(outputs), "logprobs": logprobs(outputs)}})
    """)
    expected, expected_logprobs = hf_greedy(models[name], PROMPTS, logprobs=True)
    assert out["tokens"] == expected
    # vLLM's Bloom uses the exact GELU where HF's uses its tanh approximation: 5e-4 apart here
    # (without the slopes, 0.15 and more).
    atol = 2e-3 if name == "bloom" else 1e-4
    assert torch.allclose(torch.tensor(out["logprobs"]), torch.tensor(expected_logprobs), atol=atol, rtol=0)


def serve_each(paths: dict, timeout_each: int, engine_args: dict | None = None, **env) -> dict:
    """Serves every model of `paths` ({name: path}) in turn in one interpreter, each as
    engine(path, **engine_args) under run_vllm's environment plus `env`: an in-process engine's
    shutdown tears down its distributed state and frees its memory, so the next one starts clean,
    without the ~10 s of imports a fresh interpreter costs each. Per name: PROMPTS' greedy tokens and
    log-probabilities, the programs made before the engine was ready ("ready") and after generating
    ("after"), the compilation mode, the generate's op counts (counted) and the seconds; or the
    error, so that one model's failure fails only its own test."""
    out = run_vllm(f"""
        import gc, time, traceback
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory
        out = {{}}
        for name, path in {paths!r}.items():
            start, llm = time.perf_counter(), None
            try:
                llm = engine(path, **{engine_args or {}!r})
                ready = torch_neuronx.compile_stats()["programs"]
                torch_neuronx.reset_op_counts()
                outputs = llm.generate({PROMPTS!r}, SamplingParams(max_tokens={NEW_TOKENS}, min_tokens={NEW_TOKENS},
                                                                   temperature=0.0, logprobs=0))
                out[name] = {{"tokens": tokens(outputs), "logprobs": logprobs(outputs), "ready": ready,
                             "after": torch_neuronx.compile_stats()["programs"],
                             "mode": int(llm.llm_engine.vllm_config.compilation_config.mode), **counted(llm)}}
            except Exception:
                out[name] = {{"error": traceback.format_exc()[-4000:]}}
            finally:
                if llm is not None:
                    llm.llm_engine.engine_core.shutdown()
                else:
                    cleanup_dist_env_and_memory()
                del llm
                gc.collect()
            out[name]["seconds"] = round(time.perf_counter() - start, 1)
        result(out)
    """, timeout=timeout_each * len(paths), **env)
    return out


@pytest.fixture(scope="module")
def more_archs(models, request):
    """Each of MORE_ARCHS this session selected, served eagerly by serve_each."""
    test = test_greedy_batch_of_more_architectures_equals_hf_cpu.__name__
    selected = {item.callspec.params["name"] for item in request.session.items
                if getattr(item, "originalname", None) == test}
    paths = {name: models[name] for name in vllm_models.MORE_ARCHS if name in selected}
    out = serve_each(paths, 60)
    print("engine + generate seconds:", {name: r["seconds"] for name, r in out.items()})
    return out


@pytest.mark.parametrize("name", vllm_models.MORE_ARCHS)
def test_greedy_batch_of_more_architectures_equals_hf_cpu(models, more_archs, name):
    """As test_greedy_batch_equals_hf_cpu, for the other architectures vLLM implements (Falcon in
    both layouts); their log-probabilities too, since a random model's tokens can be near-ties."""
    out = more_archs[name]
    assert "error" not in out, out["error"]
    assert out["device"] == "neuron"
    expected, expected_logprobs = hf_greedy(models[name], PROMPTS, logprobs=True)
    assert out["tokens"] == expected
    # Measured at most 1e-5 apart (Nemotron 9.4e-6, most 5e-7 to 6e-6): the same float32 maths.
    diff = (torch.tensor(out["logprobs"]) - torch.tensor(expected_logprobs)).abs().max().item()
    assert diff <= 1e-4, diff
    assert out["ops"] > 0
    assert out["copy"] == {} and out["sync"] == {}


def test_engine_starts_from_the_repository_root_with_cold_caches(models, tmp_path):
    """vLLM inspects each model class it meets (cached in VLLM_CACHE_ROOT), on CUDA in a subprocess
    that spares the parent CUDA's initialisation; on neuron in the process itself (the general
    plugin), which saves an interpreter's start per architecture and leaves the device untouched
    (the engine's process can still be forked). Started in the repository root with nothing cached,
    the installed package is what runs."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = run_vllm(f"""
        from vllm.model_executor.models import registry
        llm = engine({models["llama"]!r}, enforce_eager=True)
        result({{"tokens": tokens(llm.generate({PROMPTS[:2]!r}, greedy({NEW_TOKENS}))),
                 "in_process": registry._run_in_subprocess.__module__ == "torch_neuronx.vllm.platform"}})
    """, cwd=repo, VLLM_CACHE_ROOT=str(tmp_path / "vllm-cache"))
    assert out["tokens"] == hf_greedy(models["llama"], PROMPTS[:2])
    assert out["in_process"]
    assert os.listdir(tmp_path / "vllm-cache" / "modelinfos"), "vLLM cached nothing: the cold path did not run"


SPAWN_WARNING = "We must use the `spawn` multiprocessing start method"


def test_script_without_main_guard_forks_its_engine(models, tmp_path):
    """A script that builds its LLM at module level: the parent has not used the device, so the
    engine's process is forked (spawn would re-run the script in the child and fail in Python's
    bootstrapping check)."""
    script = tmp_path / "script.py"
    script.write_text(PRELUDE + textwrap.dedent(f"""
        import torch
        llm = engine({models["llama"]!r})
        result({{"tokens": tokens(llm.generate({PROMPTS[:2]!r}, greedy({NEW_TOKENS}))),
                 "parent_initialized": torch.neuron.is_initialized()}})
    """))
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "1", "VLLM_LOGGING_LEVEL": "INFO"}
    env.pop("VLLM_WORKER_MULTIPROC_METHOD", None)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300,
                          cwd=tmp_path)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-6000:]
    out = json.loads([line for line in proc.stdout.splitlines() if line.startswith("RESULT ")][-1][7:])
    assert out["tokens"] == hf_greedy(models["llama"], PROMPTS[:2])
    assert not out["parent_initialized"]
    assert SPAWN_WARNING not in log


def test_engine_spawns_with_a_warning_once_the_parent_used_the_device(models):
    out = run_vllm(f"""
        import torch
        torch.ones(1, device="neuron").sum().item()
        llm = engine({models["llama"]!r})
        result({{"tokens": tokens(llm.generate({PROMPTS[:2]!r}, greedy({NEW_TOKENS}))),
                 "method": os.environ.get("VLLM_WORKER_MULTIPROC_METHOD")}})
    """, log=True, VLLM_ENABLE_V1_MULTIPROCESSING="1")
    assert out["tokens"] == hf_greedy(models["llama"], PROMPTS[:2])
    assert out["method"] == "spawn"
    assert SPAWN_WARNING in out["log"] and "Reasons: the neuron device is initialized" in out["log"]


def test_seeded_sampling_is_reproducible(models):
    out = run_vllm(f"""
        llm = engine({models["llama"]!r})
        def sample(seed):
            params = SamplingParams(max_tokens=16, temperature=1.0, top_p=0.9, top_k=50, seed=seed)
            return tokens(llm.generate({PROMPTS!r}, params))
        result({{"a": sample(7), "b": sample(7), "c": sample(8)}})
    """)
    assert out["a"] == out["b"]
    assert out["a"] != out["c"]


def test_prefix_cache_hit_gives_the_same_tokens(models):
    shared = "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be"
    prompts = [shared + " in want of a wife.", shared + " the question"]
    out = run_vllm(f"""
        llm = engine({models["llama"]!r}, enable_prefix_caching=True)
        first = llm.generate([{prompts[0]!r}], greedy({NEW_TOKENS}))
        second = llm.generate([{prompts[1]!r}], greedy({NEW_TOKENS}))
        result({{"tokens": tokens(first) + tokens(second), "cached": second[0].num_cached_tokens}})
    """)
    assert out["cached"] >= 16  # at least one whole 16-token block of the shared prefix
    assert out["tokens"] == hf_greedy(models["llama"], prompts)


def test_chunked_prefill_equals_hf_cpu(models):
    """A step takes at most 16 tokens: the longer prompts prefill over several steps, beside the
    other requests' decodes."""
    prompts = PROMPTS + [demo.TEXT[:300]]
    out = run_vllm(f"""
        llm = engine({models["qwen2"]!r}, max_num_batched_tokens=16, max_num_seqs=4, enable_chunked_prefill=True)
        result({{"tokens": tokens(llm.generate({prompts!r}, greedy({NEW_TOKENS}))),
                 "chunked": llm.llm_engine.vllm_config.scheduler_config.enable_chunked_prefill}})
    """)
    assert out["chunked"]
    assert out["tokens"] == hf_greedy(models["qwen2"], prompts)


def test_compiled_model_equals_hf_cpu(models):
    """With TORCH_NEURONX_VLLM_COMPILE=1 and without enforce_eager, vLLM compiles the model once
    with Dynamo (backend "neuron", symbolic token count; attention stays vLLM's custom op), and
    every token-count bucket is compiled before the engine is ready: generating adds no program."""
    out = run_vllm(f"""
        llm = engine({models["llama"]!r}, enforce_eager=False, max_num_batched_tokens=64)
        config = llm.llm_engine.vllm_config.compilation_config
        ready = torch_neuronx.compile_stats()["programs"]
        outputs = llm.generate({PROMPTS!r}, greedy({NEW_TOKENS}))
        result({{"tokens": tokens(outputs), "backend": config.backend, "mode": int(config.mode),
                 "ready": ready, "programs": torch_neuronx.compile_stats()["programs"]}})
    """, log=True, TORCH_NEURONX_VLLM_COMPILE="1")
    assert out["backend"] == "neuron" and out["mode"] == 2  # CompilationMode.DYNAMO_TRACE_ONCE
    assert "compiled or loaded the model's 7 token-count buckets (1, 2, 4, 8, 16, 32, 64)" in out["log"]
    assert out["ready"] > 0 and out["programs"] == out["ready"]
    assert out["tokens"] == hf_greedy(models["llama"], PROMPTS)


def test_model_runs_eagerly_by_default(models):
    """Compiled serving is slower than eager so far: without TORCH_NEURONX_VLLM_COMPILE=1 the
    plugin runs the model eagerly even where vLLM would compile it."""
    out = run_vllm(f"""
        llm = engine({models["llama"]!r}, enforce_eager=False)
        config = llm.llm_engine.vllm_config
        result({{"mode": int(config.compilation_config.mode), "eager": config.model_config.enforce_eager,
                 "tokens": tokens(llm.generate({PROMPTS[:1]!r}, greedy(4)))}})
    """, log=True)
    assert out["mode"] == 0 and out["eager"]  # CompilationMode.NONE
    assert "TORCH_NEURONX_VLLM_COMPILE=1 compiles it" in out["log"]
    assert out["tokens"] == hf_greedy(models["llama"], PROMPTS[:1], 4)


def test_tensor_parallel_2_equals_hf_cpu(models):
    out = run_vllm(f"""
        if __name__ == "__main__":
            llm = engine({models["llama"]!r}, tensor_parallel_size=2)
            result({{"tokens": tokens(llm.generate({PROMPTS!r}, greedy({NEW_TOKENS}))),
                     "backend": llm.llm_engine.vllm_config.parallel_config.distributed_executor_backend}})
    """, timeout=400)
    assert out["backend"] == "mp"
    assert out["tokens"] == hf_greedy(models["llama"], PROMPTS)


def test_default_kv_cache_is_bounded_by_free_host_memory(models):
    """The software NeuronCore's memory is host RAM: sized by gpu_memory_utilization alone (0.9 of
    a 24 GiB device), the KV cache would take more than this host has. Here the host reports 2 GiB
    free: the cache gets half of it."""
    out = run_vllm(f"""
        from unittest import mock
        import psutil
        host = psutil.virtual_memory()._replace(total=8 << 30, available=2 << 30)
        with mock.patch("psutil.virtual_memory", return_value=host):
            llm = engine({models["llama"]!r}, kv_cache_memory_bytes=None, gpu_memory_utilization=0.9)
        cache = llm.llm_engine.vllm_config.cache_config
        result({{"blocks": cache.num_gpu_blocks, "block_size": cache.block_size,
                 "tokens": tokens(llm.generate(["the"], greedy(4)))}})
    """, log=True)
    layers, kv_heads, head_dim = 2, 2, 32
    block_bytes = layers * 2 * out["block_size"] * kv_heads * head_dim * 4
    bound = 1 << 30
    assert 0.9 * bound <= out["blocks"] * block_bytes <= bound
    assert "KV cache bounded by host memory: 2.0 GiB free on the host, 1.0 GiB for this worker" in out["log"]
    assert out["tokens"] == hf_greedy(models["llama"], ["the"], 4)


def test_kv_cache_within_free_host_memory_is_sized_by_the_device(models):
    """Where half the host's free memory exceeds what gpu_memory_utilization gives, vLLM's own
    sizing stands: 0.001 of the 24 GiB device, less the model, is about 24 MiB."""
    out = run_vllm(f"""
        from unittest import mock
        import psutil
        host = psutil.virtual_memory()._replace(total=256 << 30, available=200 << 30)
        with mock.patch("psutil.virtual_memory", return_value=host):
            llm = engine({models["llama"]!r}, kv_cache_memory_bytes=None, gpu_memory_utilization=0.001)
        cache = llm.llm_engine.vllm_config.cache_config
        result({{"blocks": cache.num_gpu_blocks, "block_size": cache.block_size}})
    """, log=True)
    block_bytes = 2 * 2 * out["block_size"] * 2 * 32 * 4
    assert 16 << 20 <= out["blocks"] * block_bytes <= 0.001 * (24 << 30)
    assert "KV cache bounded by host memory" not in out["log"]


def test_bad_input_gives_clear_errors(models, tmp_path):
    unsupported = tmp_path / "unsupported"
    unsupported.mkdir()
    for f in os.listdir(models["llama"]):
        (unsupported / f).write_bytes(open(os.path.join(models["llama"], f), "rb").read())
    config = json.loads((unsupported / "config.json").read_text())
    config["architectures"] = ["NoSuchModelForCausalLM"]
    (unsupported / "config.json").write_text(json.dumps(config))
    quantized = tmp_path / "quantized"
    shutil.copytree(models["llama"], quantized)
    config = json.loads((quantized / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic"}
    (quantized / "config.json").write_text(json.dumps(config))
    mamba = str(tmp_path / "mamba")
    tokenizer = transformers.AutoTokenizer.from_pretrained(models["llama"])
    vllm_models.save(mamba, transformers.MambaConfig(vocab_size=len(tokenizer), hidden_size=64,
                                                     num_hidden_layers=2, state_size=8), tokenizer)
    out = run_vllm(f"""
        errors = {{}}
        for name, path, kwargs in [("missing", {str(tmp_path / "no-such-model")!r}, {{}}),
                                   ("architecture", {str(unsupported)!r}, {{}}),
                                   ("kv_cache", {models["llama"]!r}, {{"kv_cache_memory_bytes": 64 << 30}}),
                                   ("mamba", {mamba!r}, {{}}),
                                   ("quantized", {str(quantized)!r}, {{"dtype": "bfloat16"}})]:
            try:
                engine(path, **kwargs)
                errors[name] = None
            except Exception as e:
                errors[name] = type(e).__name__ + ": " + str(e)
        llm = engine({models["llama"]!r})
        try:
            llm.generate(["word " * 200], greedy(4))
        except Exception as e:
            errors["too_long"] = type(e).__name__ + ": " + str(e)
        errors["after"] = tokens(llm.generate(["the"], greedy(4)))
        result(errors)
    """)
    assert "no-such-model" in out["missing"]
    assert "NoSuchModelForCausalLM" in out["architecture"] and "not supported" in out["architecture"]
    assert out["kv_cache"].startswith("OutOfMemoryError") and "neuron out of memory" in out["kv_cache"]
    assert "Mamba and hybrid models are not supported" in out["mamba"]
    assert "fp8 quantization is not supported" in out["quantized"]
    assert "maximum context length is 128" in out["too_long"]
    assert out["after"] == hf_greedy(models["llama"], ["the"], 4)  # the engine still serves


def test_serve_defaults_to_loopback_and_host_still_opens_it():
    out = run_vllm("""
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
        from vllm.utils.argparse_utils import FlexibleArgumentParser
        parser = make_arg_parser(FlexibleArgumentParser())
        result([parser.parse_args(["m"]).host, parser.parse_args(["m", "--host", "0.0.0.0"]).host,
                parser.parse_args(["m"]).shutdown_timeout,
                parser.parse_args(["m", "--shutdown-timeout", "0"]).shutdown_timeout])
    """)
    assert out == ["127.0.0.1", "0.0.0.0", 30, 0]


def _vllm_cli() -> list[str]:
    """The `vllm` command of this interpreter's environment (a layered virtual environment may
    hold vLLM without its script)."""
    script = os.path.join(os.path.dirname(sys.executable), "vllm")
    if os.path.exists(script):
        return [script]
    return [sys.executable, "-c", "import sys; from vllm.entrypoints.cli.main import main; sys.exit(main())"]


def _serve(path, tmp_path, *args, port_offset=0):
    """`vllm serve` on `path` once it answers /health: (process, base URL)."""
    port = 18000 + (os.getpid() + port_offset) % 2000
    log = open(tmp_path / "serve.log", "w")
    proc = subprocess.Popen(
        [*_vllm_cli(), "serve", path, "--port", str(port), "--dtype", "float32",
         "--max-model-len", "128", "--kv-cache-memory-bytes", str(32 << 20), "--seed", "0", *args],
        cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "VLLM_LOGGING_LEVEL": "WARNING"},
        start_new_session=True,
    )
    log.close()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while True:
        if proc.poll() is not None or time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            pytest.fail("vllm serve did not answer /health in 180 s: " + (tmp_path / "serve.log").read_text()[-5000:])
        try:
            if httpx.get(base + "/health", timeout=2).status_code == 200:
                return proc, base
        except httpx.TransportError:
            pass
        time.sleep(0.5)


@pytest.fixture
def server(models, tmp_path):
    proc, base = _serve(models["llama"], tmp_path, "--enforce-eager")
    try:
        yield base
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_vllm_serve_openai_api(server, models):
    port = int(server.rpartition(":")[2])
    listening = {c.laddr.ip for c in psutil.net_connections("tcp") if c.status == "LISTEN" and c.laddr.port == port}
    assert listening == {"127.0.0.1"}, listening  # no --host given: loopback only, not vLLM's every interface
    tokenizer = transformers.AutoTokenizer.from_pretrained(models["llama"])
    client = httpx.Client(base_url=server, timeout=60)
    model = client.get("/v1/models").json()["data"][0]["id"]
    prompt = PROMPTS[2]
    body = {"model": model, "prompt": prompt, "max_tokens": NEW_TOKENS, "temperature": 0, "min_tokens": NEW_TOKENS}

    completion = client.post("/v1/completions", json=body).json()
    expected = tokenizer.decode(hf_greedy(models["llama"], [prompt])[0])
    assert completion["choices"][0]["text"] == expected
    assert completion["usage"]["completion_tokens"] == NEW_TOKENS

    chunks = []
    with client.stream("POST", "/v1/completions", json={**body, "stream": True}) as response:
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[6:])["choices"][0]["text"])
    assert len(chunks) > 1 and "".join(chunks) == expected

    messages = [{"role": "user", "content": "To be, or not to be"}]
    chat = client.post("/v1/chat/completions", json={
        "model": model, "messages": messages, "max_tokens": NEW_TOKENS, "min_tokens": NEW_TOKENS, "temperature": 0,
    }).json()
    templated = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert chat["choices"][0]["message"]["role"] == "assistant"
    assert chat["choices"][0]["message"]["content"] == tokenizer.decode(hf_greedy(models["llama"], [templated])[0])

    too_long = client.post("/v1/completions", json={**body, "prompt": "word " * 200})
    assert too_long.status_code == 400 and "maximum context length" in too_long.text
    assert client.post("/v1/completions", json=body).json()["choices"][0]["text"] == expected  # still serving


def test_serve_sigterm_ends_open_streams(models, tmp_path):
    """SIGTERM while streams are open: by the plugin's default --shutdown-timeout the engine
    drains them, so every stream ends with its last token and [DONE], and the server exits."""
    proc, base = _serve(models["llama"], tmp_path, "--enforce-eager", port_offset=1)
    new_tokens, streams = 96, 6
    started = threading.Barrier(streams + 1, timeout=120)
    ends = [None] * streams

    def stream(i):
        # A server that runs behind sends two tokens in one event: the tokens are counted from
        # the usage the stream ends with, not from its events.
        body = {"model": models["llama"], "prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": new_tokens,
                "min_tokens": new_tokens, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}}
        count, done, first = 0, False, True
        try:
            with httpx.stream("POST", base + "/v1/completions", json=body, timeout=120) as response:
                for line in response.iter_lines():
                    if line == "data: [DONE]":
                        done = True
                    elif line.startswith("data: "):
                        usage = json.loads(line[len("data: "):]).get("usage")
                        if usage:
                            count = usage["completion_tokens"]
                        if first:
                            first = False
                            started.wait()
        except Exception as e:  # the stream was cut: recorded, asserted below
            ends[i] = (count, done, repr(e), time.monotonic())
            return
        ends[i] = (count, done, None, time.monotonic())

    threads = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(streams)]
    try:
        for t in threads:
            t.start()
        started.wait()
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(timeout=90)
        exit_code = proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    log = (tmp_path / "serve.log").read_text()[-3000:]
    assert all(end is not None for end in ends), log
    for count, done, error, _ in ends:
        assert error is None and done and count == new_tokens, (ends, log)
    assert max(end[3] for end in ends) - signalled < 60
    assert exit_code in (0, -signal.SIGTERM), log


def test_vllm_bench_serve_completes_every_request(server, models, tmp_path):
    """vLLM's own load client, `vllm bench serve` (random dataset, every request at once), against
    the neuron server: every request completes with its full output, nothing fails."""
    n, input_len, output_len = 16, 32, 16
    model = httpx.get(server + "/v1/models", timeout=30).json()["data"][0]["id"]
    proc = subprocess.run(
        [*_vllm_cli(), "bench", "serve", "--backend", "vllm", "--base-url", server, "--model", model,
         "--tokenizer", models["llama"], "--dataset-name", "random", "--random-input-len", str(input_len),
         "--random-output-len", str(output_len), "--num-prompts", str(n), "--request-rate", "inf", "--ignore-eos",
         "--seed", "0", "--disable-tqdm", "--save-result", "--result-dir", str(tmp_path),
         "--result-filename", "bench.json"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "VLLM_LOGGING_LEVEL": "WARNING"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((tmp_path / "bench.json").read_text())
    assert result["completed"] == n and result["failed"] == 0, proc.stdout[-3000:]
    assert result["total_output_tokens"] == n * output_len  # --ignore-eos: every request its full length
    assert result["total_input_tokens"] >= n * (input_len // 2)
    assert result["output_throughput"] > 0 and result["mean_ttft_ms"] > 0
