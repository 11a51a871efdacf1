"""torch.compile on neuron against PyTorch CPU, measured in one run (issue #9 targets).

1. Tiny Llama training step (forward + backward + AdamW): neuron compiled, neuron eager, CPU eager,
   CPU Inductor, each in a process of its own. Target: neuron compiled >= 1.4x CPU eager, and no
   slower than CPU Inductor.
2. Static-cache greedy decode, tokens/s: neuron with the compiled decode step (transformers'
   default compile config for neuron: backend "neuron", mode "default"), and with
   mode "reduce-overhead" (each decode step replayed from a NeuronGraph), against CPU eager
   `generate`. Target (issue #38) >= 1.5x.
3. Cold compile (empty cache) against warm start (a fresh process hitting the disk cache), both as
   the time to the first result of the compiled training step, after the model is built. Target:
   warm <= 10% of cold.
4. The tiny Llama's forward over 12 sequence lengths, compiled: as it was (static shapes, a Dynamo
   trace per length up to the recompile limit, then eager) and now (automatic dynamic shapes: one
   symbolic trace, a static program per length).
Run on a quiet machine: `make bench-compile`.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import torch

from own_process import rerun


os.environ.setdefault("HF_HUB_OFFLINE", "1")


def llama(hidden=64, layers=2, vocab=512):
    import transformers

    cfg = transformers.LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                                   num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                                   max_position_embeddings=256)
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(cfg)


def sync(device):
    if device == "neuron":
        torch.neuron.synchronize()


def training_step(device, backend):
    model = llama().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 512, (2, 32), generator=torch.Generator().manual_seed(1)).to(device)
    fwd = torch.compile(model, backend=backend) if backend else model

    def step():
        fwd(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
    return step


def best_time(step, device, iters, rounds):
    for _ in range(2):
        step()
    sync(device)
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(iters):
            step()
        sync(device)
        best = min(best, (time.perf_counter() - t0) / iters)
    return best


def decode_rate(device, mode, tokens=32, rounds=10):
    """mode: None (eager generate), or the compiled decode step's torch.compile mode."""
    model = llama().eval().to(device)
    ids = torch.randint(0, 512, (1, 16), generator=torch.Generator().manual_seed(2)).to(device)
    kw = dict(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)
    if mode:
        from transformers.generation.configuration_utils import CompileConfig

        kw["cache_implementation"] = "static"
        kw["compile_config"] = CompileConfig(backend="neuron", dynamic=False, mode=mode)
    model.generate(ids, **kw)  # compiles the decode step
    sync(device)
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        model.generate(ids, **kw)
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return tokens / best


FIRST_STEP = """
import time, torch, torch_neuronx, sys
sys.path.insert(0, {here!r})
from compile import training_step
import transformers
step = training_step("neuron", "neuron")
t0 = time.perf_counter()
step()
torch.neuron.synchronize()
total = time.perf_counter() - t0
# The backend's share (AOTAutograd + Inductor, forward and backward: a neuron compile lowers the
# backward with the forward, inside the user compiler's time); the rest is Dynamo tracing the model
# and running the step.
times = torch._dynamo.utils.compilation_time_metrics
backend = sum(times.get("OutputGraph.call_user_compiler", []))
print(total, backend, torch_neuronx.compile_stats()["cache_hits"])
"""


def first_step_seconds(cache_dir):
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    env["TORCH_NEURONX_CACHE_DIR"] = cache_dir
    code = FIRST_STEP.format(here=os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    seconds, backend, hits = out.stdout.split()
    return float(seconds), float(backend), int(hits)


LENGTHS = (5, 9, 12, 17, 3, 21, 8, 30, 14, 25, 6, 11)


def twelve_lengths(automatic_dynamic):
    import torch_neuronx

    torch._dynamo.reset()
    torch_neuronx.reset_compile_stats()
    model = llama().eval().to("neuron")
    compiled = torch.compile(model, backend="neuron")
    g = torch.Generator().manual_seed(3)
    t0 = time.perf_counter()
    with torch._dynamo.config.patch(automatic_dynamic_shapes=automatic_dynamic), torch.no_grad():
        for n in LENGTHS:
            compiled(torch.randint(0, 512, (1, n), generator=g).to("neuron"))
    sync("neuron")
    return time.perf_counter() - t0, torch_neuronx.compile_stats()


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--child", nargs=2, metavar=("DEVICE", "BACKEND"), help=argparse.SUPPRESS)
    p.add_argument("--decode-child", nargs=2, metavar=("DEVICE", "MODE"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        device, backend = args.child
        print(1 / best_time(training_step(device, None if backend == "eager" else backend), device, args.iters,
                            args.rounds))
        return
    if args.decode_child:
        device, mode = args.decode_child
        print(decode_rate(device, None if mode == "eager" else mode))
        return
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; neuron = {torch.neuron.get_device_name()}\n")

    print("tiny Llama training step (hidden 64, 2 layers, 2x32 tokens), steps/s, best of rounds, each row in a "
          "process of its own (in one process the devices' OpenMP threads slow each other down)")
    rows = {"neuron compiled": ("neuron", "neuron"), "neuron eager": ("neuron", "eager"),
            "CPU eager": ("cpu", "eager"), "CPU Inductor": ("cpu", "inductor")}
    rate = {name: rerun(__file__, "--child", device, backend, "--rounds", args.rounds, "--iters", args.iters)
            for name, (device, backend) in rows.items()}
    for name, r in rate.items():
        print(f"  {name:<18}{r:>9.1f} steps/s  {r / rate['CPU eager']:>5.2f}x CPU eager  "
              f"{r / rate['CPU Inductor']:>5.2f}x CPU Inductor")
    print("  targets: neuron compiled >= 1.4x CPU eager, >= 1.0x CPU Inductor\n")

    print("static-cache greedy decode, 32 tokens after a 16-token prompt, tokens/s, best of 10 generates")
    cpu = rerun(__file__, "--decode-child", "cpu", "eager")
    print(f"  {'CPU eager generate':<42}{cpu:>9.1f}")
    for mode in ("default", "reduce-overhead"):
        neuron = rerun(__file__, "--decode-child", "neuron", mode)
        print(f"  {'neuron compiled decode, ' + mode:<42}{neuron:>9.1f}  {neuron / cpu:.2f}x CPU eager "
              "(target >= 1.5x)")
    print()

    with tempfile.TemporaryDirectory() as cache_dir:
        cold, cold_backend, cold_hits = first_step_seconds(cache_dir)
        warm, warm_backend, warm_hits = first_step_seconds(cache_dir)
    print("first compiled training step in a fresh process, after the model is built: total (Dynamo tracing, "
          "AOTAutograd, backend and the step), "
          "and the backend's compile alone")
    print(f"  cold (empty cache)   {cold:>7.2f} s total  {cold_backend:>7.2f} s backend  ({cold_hits} from cache)")
    print(f"  warm (disk cache)    {warm:>7.2f} s total  {warm_backend:>7.2f} s backend  ({warm_hits} from cache)")
    print(f"  warm / cold: {warm / cold:.0%} total, {warm_backend / cold_backend:.0%} backend  (target <= 10%)\n")

    print(f"tiny Llama forward over {len(LENGTHS)} sequence lengths, compiled with backend 'neuron' (empty cache)")
    with tempfile.TemporaryDirectory() as cache_dir:
        os.environ["TORCH_NEURONX_CACHE_DIR"] = cache_dir
        for name, automatic in (("static shapes (before)", False), ("automatic dynamic (now)", True)):
            seconds, s = twelve_lengths(automatic)
            print(f"  {name:<25} {seconds:>6.1f} s wall  {s['compile_seconds']:>6.1f} s compiling  "
                  f"{s['graphs_compiled']:>2} Dynamo graphs  {s['programs']:>2} programs  "
                  f"{s['recompile_limit_hits']} recompile-limit fallbacks to eager")


if __name__ == "__main__":
    main()
