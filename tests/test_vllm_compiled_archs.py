"""vLLM's compiled mode (TORCH_NEURONX_VLLM_COMPILE=1 without enforce_eager) for architectures
other than Llama: one per family of what differs in the graph Dynamo traces — learned positions
(GPT-2), interleaved sliding-window and global layers with norms around each block (Gemma-3), the
parallel attention/MLP block with one shared KV head (Falcon's old layout), and partial rotary
with a dense LayerNorm (Phi). Each against HF's greedy generate on the CPU, as their eager runs in
tests/test_vllm.py (about 30 s an architecture, the buckets' compiles included)."""

import pytest
import torch

pytest.importorskip("vllm")

ARCHS = ["gpt2", "gemma3", "falcon-parallel", "phi"]


@pytest.fixture(scope="module")
def compiled_runs(tmp_path_factory):
    """Every architecture of ARCHS served compiled in turn by one interpreter (an in-process
    engine's shutdown leaves the next one a clean state): tokens, log-probs, programs made before
    the engine was ready and after generating, and the op counts; or the error."""
    import vllm_models
    from test_vllm import CHAT_TEMPLATE, NEW_TOKENS, PROMPTS, demo, run_vllm

    root = tmp_path_factory.mktemp("vllm-compiled-archs")
    tokenizer = demo.train_tokenizer(demo.TEXT, 512)
    tokenizer.chat_template = CHAT_TEMPLATE
    configs = vllm_models.configs(tokenizer)
    paths = {}
    for name in ARCHS:
        paths[name] = str(root / name)
        vllm_models.save(paths[name], configs[name], tokenizer)
    out = run_vllm(f"""
        import gc, traceback
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory
        out = {{}}
        for name, path in {paths!r}.items():
            llm = None
            try:
                llm = engine(path, enforce_eager=False, max_num_batched_tokens=64)
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
        result(out)
    """, timeout=240 * len(ARCHS), TORCH_NEURONX_VLLM_COMPILE="1")
    return paths, out


@pytest.mark.parametrize("name", ARCHS)
def test_compiled_architecture_equals_hf_cpu(compiled_runs, name):
    from test_vllm import PROMPTS, hf_greedy

    paths, runs = compiled_runs
    out = runs[name]
    assert "error" not in out, out["error"]
    assert out["device"] == "neuron"
    assert out["mode"] == 2  # CompilationMode.DYNAMO_TRACE_ONCE: compiled, not eager
    # The programs were made before the engine was ready; generating adds at most vLLM's own
    # compiled log-prob ranking (which eager mode makes too).
    assert out["ready"] > 0 and out["after"] <= out["ready"] + 1
    expected, expected_logprobs = hf_greedy(paths[name], PROMPTS, logprobs=True)
    assert out["tokens"] == expected
    diff = (torch.tensor(out["logprobs"]) - torch.tensor(expected_logprobs)).abs().max().item()
    assert diff <= 1e-4, diff
    assert out["copy"] == {} and out["sync"] == {}
