"""The cost model (torch_neuronx.report, trn2 profile) against latencies AWS published for Trainium2,
in the published configurations. Built from configs on the meta device: nothing is downloaded.

The ratio is estimate / published: below 1 the model is optimistic. Decode at batch 1-2 on 8-64
logical cores is latency bound (collectives, kernel launches), which an analytic roofline with a
1.5 µs fixed cost per op and per collective does not capture; prefill is closer to its rooflines.
"""
import json
import os
import tempfile
import time

from torch_neuronx import report

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_key_value_heads": 8,
         "vocab_size": 128256, "max_position_embeddings": 131072, "rope_theta": 500000.0}
MODELS = {
    "Llama-3.1-8B": dict(LLAMA, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                         num_attention_heads=32),
    "Llama-3.3-70B": dict(LLAMA, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                          num_attention_heads=64),
    "Llama-3.1-405B": dict(LLAMA, hidden_size=16384, intermediate_size=53248, num_hidden_layers=126,
                           num_attention_heads=128),
}
SDK = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/"
# (model, batch, input tokens, logical cores, published TTFT ms, published TPOT ms, source)
PUBLISHED = [
    ("Llama-3.3-70B", 1, 10000, 64, 814.2, 19.6,
     SDK + "libraries/nxd-inference/tutorials/trn2-llama3.3-70b-tutorial.html (p50, no speculation)"),
    ("Llama-3.1-405B", 1, 10000, 64, 2442.0, 37.9,
     SDK + "libraries/nxd-inference/tutorials/trn2-llama3.1-405b-speculative-tutorial.html (p50, BF16)"),
    ("Llama-3.1-8B", 2, 512, 8, 51.07, 10.52,
     SDK + "vllm-neuron/docs/tutorials/tutorial-eagle3-speculative-decoding-llama-3-1.html (median, no EAGLE)"),
]


def main():
    print(f"{'model':<16}{'batch':>6}{'input':>7}{'cores':>6}  {'TTFT ms est/pub':>20}{'ratio':>7}"
          f"  {'TPOT ms est/pub':>18}{'ratio':>7}{'wall s':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for model, batch, seq, cores, ttft, tpot, _ in PUBLISHED:
            path = os.path.join(tmp, model)
            os.makedirs(path, exist_ok=True)
            with open(os.path.join(path, "config.json"), "w") as f:
                json.dump(MODELS[model], f)
            t0 = time.perf_counter()
            r = report.assess(path, batch=batch, seq=seq, generate=1, devices=cores)["estimate"]["trn2"]
            wall = time.perf_counter() - t0
            token_ms = r["token_seconds"] * 1e3
            first_ms = r["step_seconds"] * 1e3 - token_ms  # the prefill, which gives the first token
            print(f"{model:<16}{batch:>6}{seq:>7}{cores:>6}  {first_ms:>9.1f} / {ttft:<8.1f}{first_ms / ttft:>7.2f}"
                  f"  {token_ms:>7.2f} / {tpot:<8.2f}{token_ms / tpot:>7.2f}{wall:>8.1f}")
    print("\nsources (trn2.48xlarge, BF16, LNC=2):")
    for model, *_, source in PUBLISHED:
        print(f"  {model}: {source}")


if __name__ == "__main__":
    main()
