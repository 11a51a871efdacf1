"""One forward of the vLLM plugin's fused-MoE layer on neuron (torch_neuronx/vllm/moe.py): the
installed method, eager and compiled, on a float32 layer of 64 experts, 2 per token, 256 tokens,
hidden 256, intermediate 512 (each its own flag).

Run: `python benchmarks/moe_layer.py [--experts 64 --top-k 2 --tokens 256 --hidden 256 --inter 512]`.
Run it with two installs (before and after a change) to compare them; the cost model's FLOPs
line says how much expert work the method asks for, whatever the machine.
"""
import argparse
import statistics
import time
import types

import torch
from vllm.model_executor.layers.fused_moe.activation import MoEActivation

import torch_neuronx
from torch_neuronx.vllm.moe import NeuronFusedMoEMethod


def layer(experts, hidden, inter, top_k):
    return types.SimpleNamespace(
        activation=MoEActivation.SILU, use_grouped_topk=False, e_score_correction_bias=None,
        routed_scaling_factor=1.0, apply_router_weight_on_input=False, expert_map=None, scoring_func="softmax",
        custom_routing_function=None, top_k=top_k, renormalize=True,
        w13_weight=torch.randn(experts, 2 * inter, hidden, device="neuron") / hidden**0.5,
        w2_weight=torch.randn(experts, hidden, inter, device="neuron") / inter**0.5)


def timed(fn, repeat):
    for _ in range(3):
        fn()
    torch.neuron.synchronize()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        torch.neuron.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3, min(times) * 1e3


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--experts", type=int, default=64)
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--inter", type=int, default=512)
    p.add_argument("--repeat", type=int, default=10)
    a = p.parse_args()
    torch.manual_seed(0)
    method = object.__new__(NeuronFusedMoEMethod)
    torch.nn.Module.__init__(method)
    method.moe = types.SimpleNamespace(has_bias=False)
    moe = layer(a.experts, a.hidden, a.inter, a.top_k)
    x = torch.randn(a.tokens, a.hidden, device="neuron")
    logits = torch.randn(a.tokens, a.experts, device="neuron")
    print(f"{a.experts} experts, top-k {a.top_k}, {a.tokens} tokens, hidden {a.hidden}, intermediate {a.inter}, "
          f"float32; {torch.get_num_threads()} CPU threads")
    flops = sum(o.flops for o in torch_neuronx.estimate(method.apply_monolithic, moe, x, logits).ops)
    needed = 2 * a.tokens * a.top_k * 3 * a.hidden * a.inter
    print(f"cost model: {flops / 1e9:.3f} GFLOP per forward ({flops / needed:.2f}x what top-k needs)")
    med, best = timed(lambda: method.apply_monolithic(moe, x, logits), a.repeat)
    print(f"eager:    median {med:8.2f} ms, best {best:8.2f} ms")
    compiled = torch.compile(method.apply_monolithic, backend="neuron")
    med, best = timed(lambda: compiled(moe, x, logits), a.repeat)
    print(f"compiled: median {med:8.2f} ms, best {best:8.2f} ms")


if __name__ == "__main__":
    main()
