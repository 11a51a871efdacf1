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
def compiled_runs(vllm_models_saved):
    """Every architecture of ARCHS served compiled by serve_each."""
    from test_vllm import serve_each

    paths = {name: vllm_models_saved[name] for name in ARCHS}
    out = serve_each(paths, 240, {"enforce_eager": False, "max_num_batched_tokens": 64},
                     TORCH_NEURONX_VLLM_COMPILE="1")
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
