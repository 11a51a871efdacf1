"""Serving throughput on neuron: vLLM (torch_neuronx.vllm: continuous batching over a paged KV
cache) against Hugging Face static-cache `generate` one request at a time, both on the neuron
device, measured in the same run.

16 requests of 32 prompt tokens, 64 new tokens each (greedy, no early stop), on a Llama-style
model built from a config (float32, 4 layers, hidden 512). Target (issue #26): vLLM's tokens/s
≥ 3× Hugging Face's. Also the time to first token. Each system runs in a process of its own after
one warm-up round (compiles included there, not in the timings). `make bench-vllm`, on a quiet
machine.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REQUESTS, PROMPT_TOKENS, NEW_TOKENS = 16, 32, 64


def build(path: str) -> None:
    import torch
    import transformers

    from torch_neuronx import demo

    tokenizer = demo.train_tokenizer(demo.TEXT, 512)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=512, intermediate_size=1536, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=256,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(path)
    tokenizer.save_pretrained(path)


def prompts(seed: int) -> list[list[int]]:
    """Random token ids: the warm-up round's (seed 1) share no prefix with the timed round's (seed
    0), so vLLM's prefix cache does not shorten the timed prefill."""
    import random

    rng = random.Random(seed)
    return [[rng.randrange(3, 500) for _ in range(PROMPT_TOKENS)] for _ in range(REQUESTS)]


def run_hf(path: str) -> dict:
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(path, device_map="neuron", dtype=torch.float32)

    def generate(ids, n):
        ids = torch.tensor([ids], device="neuron")
        out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, cache_implementation="static")
        return out[0, ids.shape[1]:].tolist()  # .tolist() waits for the device

    requests = prompts(0)
    warm = prompts(1)[0]
    generate(warm, NEW_TOKENS)  # warm-up: compiles the prefill and the decode step
    generate(warm, 1)
    start = time.perf_counter()
    generate(requests[1], 1)
    ttft = time.perf_counter() - start
    start = time.perf_counter()
    tokens = sum(len(generate(ids, NEW_TOKENS)) for ids in requests)
    elapsed = time.perf_counter() - start
    return {"tokens": tokens, "seconds": elapsed, "ttft_s": ttft}


def run_vllm(path: str, eager: bool) -> dict:
    from vllm import LLM, SamplingParams

    import torch_neuronx

    llm = LLM(model=path, dtype="float32", max_model_len=256, max_num_seqs=REQUESTS, kv_cache_memory_bytes=256 << 20,
              enforce_eager=eager, seed=0, disable_log_stats=False)
    requests = [{"prompt_token_ids": ids} for ids in prompts(0)]
    params = SamplingParams(max_tokens=NEW_TOKENS, min_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)
    # Warm-up (the compiled mode compiles its programs here).
    llm.generate([{"prompt_token_ids": ids} for ids in prompts(1)], params, use_tqdm=False)
    llm.generate([{"prompt_token_ids": prompts(3)[0]}], SamplingParams(max_tokens=1), use_tqdm=False)
    torch_neuronx.reset_op_counts()
    start = time.perf_counter()
    outputs = llm.generate(requests, params, use_tqdm=False)
    elapsed = time.perf_counter() - start
    counts = torch_neuronx.op_counts()
    ttfts = [o.metrics.first_token_latency for o in outputs if o.metrics is not None]
    lone = {"prompt_token_ids": prompts(2)[0]}  # a prompt the prefix cache has not seen
    start = time.perf_counter()
    llm.generate([lone], SamplingParams(max_tokens=1), use_tqdm=False)
    ttft = time.perf_counter() - start
    return {"tokens": sum(len(o.outputs[0].token_ids) for o in outputs), "seconds": elapsed, "ttft_s": ttft,
            "ttft_batch_s": sum(ttfts) / len(ttfts) if ttfts else float("nan"),
            "copy": sum(c["copy"] for c in counts.values()), "sync": sum(c["sync"] for c in counts.values())}


def worker(kind: str, path: str) -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    if kind == "vllm-compiled":
        os.environ["TORCH_NEURONX_VLLM_COMPILE"] = "1"  # the plugin runs models eagerly unless asked
    result = run_hf(path) if kind == "hf" else run_vllm(path, eager=kind == "vllm-eager")
    print("RESULT " + json.dumps(result), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=["hf", "vllm-eager", "vllm-compiled"])
    parser.add_argument("--model")
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.model)
    with tempfile.TemporaryDirectory() as path:
        build(path)
        results = {}
        for kind in ("hf", "vllm-eager", "vllm-compiled"):
            proc = subprocess.run([sys.executable, __file__, "--worker", kind, "--model", path],
                                  capture_output=True, text=True, timeout=1800)
            lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
            if proc.returncode != 0 or not lines:
                sys.exit(f"{kind} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
            results[kind] = json.loads(lines[-1][len("RESULT "):])
    base = results["hf"]["tokens"] / results["hf"]["seconds"]
    print(f"{REQUESTS} requests x ({PROMPT_TOKENS} prompt + {NEW_TOKENS} new tokens), Llama 4 x 512 float32, "
          "on neuron (software NeuronCore)")
    print("TTFT: the time to the first token of a lone request; in batch: the mean over the 16 requests sent "
          "together (vLLM prefills them in one step)")
    print(f"{'system':<44}{'tokens/s':>10}{'vs HF':>8}{'TTFT ms':>9}{'in batch':>9}{'copy':>6}{'sync':>6}")
    names = {"hf": "HF generate, static cache, one at a time",
             "vllm-eager": "vLLM LLM.generate, 16 at once, eager",
             "vllm-compiled": "vLLM LLM.generate, 16 at once, compiled"}
    for kind, r in results.items():
        rate = r["tokens"] / r["seconds"]
        batch = f"{r['ttft_batch_s'] * 1000:.1f}" if "ttft_batch_s" in r else "-"
        print(f"{names[kind]:<44}{rate:>10.1f}{rate / base:>7.2f}x{r['ttft_s'] * 1000:>9.1f}{batch:>9}"
              f"{r.get('copy', '-'):>6}{r.get('sync', '-'):>6}")
    print("target: vLLM tokens/s >= 3x HF's")


if __name__ == "__main__":
    main()
