"""The vLLM plugin's fused-MoE method (torch_neuronx/vllm/moe.py) called directly, layer by layer:
its result against a float64 reference that loops over each token's picked experts on the CPU,
and the work it does against what top-k routing needs. The models it serves are compared with
HF in tests/test_vllm.py."""

import types

import pytest
import torch
import torch.nn.functional as F

import torch_neuronx

pytest.importorskip("vllm")
from vllm.model_executor.layers.fused_moe.activation import MoEActivation  # noqa: E402

from torch_neuronx.vllm.moe import NeuronFusedMoEMethod, route  # noqa: E402

ACT = {
    MoEActivation.SILU: F.silu,
    MoEActivation.GELU: F.gelu,
    MoEActivation.GELU_TANH: lambda x: F.gelu(x, approximate="tanh"),
    MoEActivation.SILU_NO_MUL: F.silu,
    MoEActivation.GELU_NO_MUL: F.gelu,
}
GATED = {MoEActivation.SILU, MoEActivation.GELU, MoEActivation.GELU_TANH}


def make_layer(experts, hidden, inter, top_k, activation=MoEActivation.SILU, bias=False, seed=0, **routing):
    """What the method reads of vLLM's FusedMoE layer, with random CPU weights."""
    g = torch.Generator().manual_seed(seed)
    up = 2 * inter if activation in GATED else inter
    layer = types.SimpleNamespace(
        activation=activation, use_grouped_topk=False, e_score_correction_bias=None, routed_scaling_factor=1.0,
        apply_router_weight_on_input=False, expert_map=None, scoring_func="softmax", custom_routing_function=None,
        top_k=top_k, renormalize=True,
        w13_weight=torch.randn(experts, up, hidden, generator=g) / hidden**0.5,
        w2_weight=torch.randn(experts, hidden, inter, generator=g) / inter**0.5,
        w13_bias=torch.randn(experts, up, generator=g) if bias else None,
        w2_bias=torch.randn(experts, hidden, generator=g) if bias else None)
    layer.__dict__.update(routing)
    return layer


def on(layer, device, dtype=None):
    out = types.SimpleNamespace(**layer.__dict__)
    for name in ("w13_weight", "w2_weight", "w13_bias", "w2_bias"):
        t = getattr(layer, name)
        if t is not None:
            setattr(out, name, t.to(device, dtype))
    return out


def method(bias=False):
    # The routing and experts need no FusedMoEConfig beyond has_bias (vLLM's constructor picks a
    # CUDA backend, which this method replaces).
    m = object.__new__(NeuronFusedMoEMethod)
    torch.nn.Module.__init__(m)  # the method is a Module (CustomOp)
    m.moe = types.SimpleNamespace(has_bias=bias)
    return m


def reference(layer, x, logits):
    """float64, token by token, over the experts each token picked only."""
    logits = logits.double()
    scores = logits.softmax(-1) if layer.scoring_func == "softmax" else logits.sigmoid()
    weights, ids = scores.topk(layer.top_k, dim=-1)
    if layer.renormalize:
        weights = weights / weights.sum(-1, keepdim=True)
    return experts64(layer, x, weights, ids)


def experts64(layer, x, weights, ids, on_input=False):
    """float64: each token through the experts `ids` picked for it, each output weighted by its
    routing weight, or (`on_input`) each input row."""
    layer = on(layer, "cpu", torch.float64)
    x = x.double()
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for w, e in zip(weights[t].double(), ids[t].tolist()):
            row = w * x[t] if on_input else x[t]
            h = layer.w13_weight[e] @ row
            if layer.w13_bias is not None:
                h = h + layer.w13_bias[e]
            if layer.activation in GATED:
                gate, up = h.chunk(2)
                h = ACT[layer.activation](gate) * up
            else:
                h = ACT[layer.activation](h)
            y = layer.w2_weight[e] @ h
            if layer.w2_bias is not None:
                y = y + layer.w2_bias[e]
            out[t] += y if on_input else w * y
    return out


@pytest.mark.parametrize("case", [
    dict(),
    dict(renormalize=False),
    dict(scoring_func="sigmoid"),
    dict(activation=MoEActivation.GELU, bias=True),
    dict(activation=MoEActivation.GELU_TANH),
    dict(activation=MoEActivation.SILU_NO_MUL),
    dict(activation=MoEActivation.GELU_NO_MUL, bias=True),
])
def test_fused_moe_equals_float64_reference(case):
    """32 experts, 2 per token, 45 tokens: most experts get a few tokens, some none."""
    case = dict(case)
    bias = case.pop("bias", False)
    layer = make_layer(32, 64, 48, 2, bias=bias, **case)
    g = torch.Generator().manual_seed(1)
    x, logits = torch.randn(45, 64, generator=g), torch.randn(45, 32, generator=g)
    torch_neuronx.reset_op_counts()
    out = method(bias).apply_monolithic(on(layer, "neuron"), x.to("neuron"), logits.to("neuron"))
    counts = torch_neuronx.op_counts()
    assert out.device.type == "neuron" and out.dtype == torch.float32 and out.shape == x.shape
    # Routing decides which rows go where on the device: nothing copied to the host or waited for.
    assert {op: c for op, c in counts.items() if c["sync"] or c["copy"]} == {}
    torch.testing.assert_close(out.cpu().double(), reference(layer, x, logits), rtol=1e-5, atol=1e-5)


def test_fused_moe_bfloat16_and_empty_batch():
    layer = make_layer(16, 32, 32, 2)
    x, logits = torch.randn(9, 32), torch.randn(9, 16)
    out = method().apply_monolithic(on(layer, "neuron", torch.bfloat16), x.to("neuron", torch.bfloat16),
                                    logits.to("neuron", torch.bfloat16))
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.cpu().double(), reference(layer, x.bfloat16().float(), logits.bfloat16().float()),
                               rtol=0.05, atol=0.05)
    empty = method().apply_monolithic(on(layer, "neuron"), torch.empty(0, 32, device="neuron"),
                                      torch.empty(0, 16, device="neuron"))
    assert empty.shape == (0, 32)


def test_experts_no_token_picked_are_not_computed():
    """Experts 4.. hold NaN weights and no token picks them (their router logits are far below):
    computed with zero routing weights, their NaN would reach every output (0 * NaN = NaN)."""
    layer = make_layer(64, 32, 32, 2)
    clean = types.SimpleNamespace(**{**layer.__dict__, "w13_weight": layer.w13_weight[:4].clone(),
                                     "w2_weight": layer.w2_weight[:4].clone()})
    layer.w13_weight[4:] = float("nan")
    layer.w2_weight[4:] = float("nan")
    g = torch.Generator().manual_seed(2)
    x, logits = torch.randn(20, 32, generator=g), torch.randn(20, 64, generator=g)
    logits[:, 4:] -= 100.0
    out = method().apply_monolithic(on(layer, "neuron"), x.to("neuron"), logits.to("neuron")).cpu()
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), reference(clean, x, logits[:, :4]), rtol=1e-5, atol=1e-5)


def test_fused_moe_work_scales_with_top_k_not_experts():
    """The cost model's FLOPs of one layer: with 8 or 64 experts the same (the experts each token
    picks, 2 of them), and what top-k routing needs: 2 * tokens * k * (hidden * 2I + I * hidden)."""
    tokens, hidden, inter, k = 64, 64, 32, 2
    x, flops = torch.randn(tokens, hidden, device="neuron"), {}
    for experts in (8, 64):
        layer = on(make_layer(experts, hidden, inter, k), "neuron")
        logits = torch.randn(tokens, experts, device="neuron")
        est = torch_neuronx.estimate(method().apply_monolithic, layer, x, logits)
        flops[experts] = sum(o.flops for o in est.ops)
    needed = 2 * tokens * k * (hidden * 2 * inter + inter * hidden)
    assert needed <= flops[8] <= 1.1 * needed, (flops, needed)
    assert flops[64] <= 1.1 * flops[8], flops


def test_fused_moe_compiled_equals_eager(fresh_dynamo):
    """Under torch.compile (backend neuron, token count symbolic, as the plugin compiles a model):
    the routing and _grouped_mm trace in float32, and each token count gives the eager result."""
    layer = on(make_layer(16, 32, 32, 2), "neuron")
    m = method()
    compiled = torch.compile(m.apply_monolithic, backend="neuron", fullgraph=True)
    for tokens in (5, 12):
        x, logits = torch.randn(tokens, 32, device="neuron"), torch.randn(tokens, 16, device="neuron")
        torch._dynamo.mark_dynamic(x, 0)
        torch._dynamo.mark_dynamic(logits, 0)
        torch.testing.assert_close(compiled(layer, x, logits).cpu(), m.apply_monolithic(layer, x, logits).cpu(),
                                   rtol=1e-5, atol=1e-5)
    assert torch_neuronx.compile_stats()["graph_breaks"] == 0


@pytest.mark.parametrize("case", [
    dict(scoring_func="sigmoid", bias=True, scale=2.5, renormalize=True),  # DeepSeek-V3, GLM-4.5
    dict(scoring_func="softmax", bias=False, scale=1.0, renormalize=False),  # DeepSeek-V2
    dict(scoring_func="softmax", bias=True, scale=16.0, renormalize=False),
])
def test_grouped_top_k_routes_as_vllm(case):
    """Grouped top-k with a score-correction bias and a routed scaling factor picks the experts
    and weights vLLM's own (pure-torch) grouped_topk picks, and the layer's output is the float64
    loop over those experts."""
    from vllm.model_executor.layers.fused_moe.router.grouped_topk_router import grouped_topk

    g = torch.Generator().manual_seed(3)
    experts, groups, top_k = 32, 8, 4
    bias = torch.randn(experts, generator=g) if case["bias"] else None
    layer = make_layer(experts, 32, 16, top_k, use_grouped_topk=True, num_expert_group=groups, topk_group=3,
                       scoring_func=case["scoring_func"], e_score_correction_bias=bias,
                       routed_scaling_factor=case["scale"], renormalize=case["renormalize"])
    x, logits = torch.randn(40, 32, generator=g), torch.randn(40, experts, generator=g)
    want_w, want_ids = grouped_topk.__wrapped__(x, logits, top_k, case["renormalize"], groups, 3,
                                                case["scoring_func"], case["scale"], bias)
    device = on(layer, "neuron")
    if bias is not None:
        device.e_score_correction_bias = bias.to("neuron")
    weights, ids = route(device, x.to("neuron"), logits.to("neuron"))
    for t in range(x.shape[0]):
        mine = sorted(zip(ids[t].cpu().tolist(), weights[t].cpu().tolist()))
        theirs = sorted(zip(want_ids[t].tolist(), want_w[t].tolist()))
        assert [e for e, _ in mine] == [e for e, _ in theirs], t
        torch.testing.assert_close(torch.tensor([w for _, w in mine]), torch.tensor([w for _, w in theirs]))
    out = method().apply_monolithic(device, x.to("neuron"), logits.to("neuron")).cpu().double()
    torch.testing.assert_close(out, experts64(layer, x, want_w, want_ids), rtol=1e-5, atol=1e-5)


def test_router_weight_on_the_input():
    """One expert per token, its weight applied to the input rows (Llama 4): the expert sees the
    weighted row, and its output is not weighted again."""
    layer = make_layer(8, 16, 16, 1, apply_router_weight_on_input=True, scoring_func="sigmoid", renormalize=False)
    g = torch.Generator().manual_seed(4)
    x, logits = torch.randn(10, 16, generator=g), torch.randn(10, 8, generator=g)
    out = method().apply_monolithic(on(layer, "neuron"), x.to("neuron"), logits.to("neuron")).cpu().double()
    weights, ids = logits.double().sigmoid().topk(1, dim=-1)
    torch.testing.assert_close(out, experts64(layer, x, weights, ids, on_input=True), rtol=1e-5, atol=1e-5)


def test_unsupported_routing_names_what(monkeypatch):
    layer = make_layer(4, 8, 8, 2, expert_map=torch.arange(4))
    with pytest.raises(NotImplementedError, match="fused MoE with expert parallelism is not supported"):
        method().apply_monolithic(on(layer, "neuron"), torch.randn(3, 8, device="neuron"),
                                  torch.randn(3, 4, device="neuron"))


# ---- the method inside vLLM's engine: MoE models against HF on the CPU ----------------------------

@pytest.fixture(scope="module")
def moe_models(vllm_models_saved):
    return {name: vllm_models_saved[name] for name in ("mixtral", "qwen3-moe", "qwen2-moe", "glm4-moe")}


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("name", ["mixtral", "qwen3-moe", "qwen2-moe", "glm4-moe"])
def test_moe_models_equal_hf_cpu(moe_models, name, mode):
    """Mixtral, Qwen3-MoE (4 experts, 2 per token), Qwen2-MoE (8 experts, 2 per token, weights
    not renormalised, a shared expert) and GLM-4.5-MoE (grouped top-k with a score-correction
    bias and a routed scaling factor) through vLLM's fused-MoE layer, eager and compiled
    (TORCH_NEURONX_VLLM_COMPILE=1 without enforce_eager: one Dynamo trace with a symbolic token
    count, a program per bucket): HF's greedy tokens, and their log-probabilities within 1e-4; the
    experts run as _grouped_mm, a step neither copies nor waits, and no routing needs a program
    the engine did not make before it was ready."""
    from test_vllm import NEW_TOKENS, PROMPTS, hf_greedy, run_vllm

    compiled = mode == "compiled"
    out = run_vllm(f"""
        llm = engine({moe_models[name]!r}, enforce_eager={not compiled}, max_num_batched_tokens=64)
        ready = torch_neuronx.compile_stats()["programs"]
        torch_neuronx.reset_op_counts()
        outputs = llm.generate({PROMPTS!r}, SamplingParams(max_tokens={NEW_TOKENS}, min_tokens={NEW_TOKENS},
                                                           temperature=0.0, logprobs=0))
        # The same engine on other prompts (other routings, other buckets): any program it lacked
        # would be made here.
        after_first = torch_neuronx.compile_stats()["programs"]
        llm.generate({[p[::-1] for p in PROMPTS] + ["a b c d e f g h i j k l m n o p q r s t u v"]!r}, greedy(6))
        grouped = torch_neuronx.op_counts().get("aten::_grouped_mm", {{}}).get("async", 0)
        result({{"tokens": tokens(outputs), "logprobs": logprobs(outputs), "grouped": grouped,
                 "mode": int(llm.llm_engine.vllm_config.compilation_config.mode),
                 "ready": ready, "after_first": after_first, "programs": torch_neuronx.compile_stats()["programs"],
                 **counted(llm)}})
    """, **({"TORCH_NEURONX_VLLM_COMPILE": "1"} if compiled else {}))
    expected, expected_logprobs = hf_greedy(moe_models[name], PROMPTS, logprobs=True)
    assert out["device"] == "neuron"
    assert out["mode"] == (2 if compiled else 0)  # CompilationMode.DYNAMO_TRACE_ONCE / NONE
    # Every bucket's program was made before the engine was ready (the first generate adds only
    # vLLM's own compiled log-prob ranking, in eager mode too), and no routing asks for another.
    assert (out["ready"] > 0) == compiled and out["after_first"] <= out["ready"] + 1
    assert out["programs"] == out["after_first"]
    assert out["tokens"] == expected
    diff = (torch.tensor(out["logprobs"]) - torch.tensor(expected_logprobs)).abs().max().item()
    assert diff <= 1e-4, diff
    assert out["grouped"] > 0  # compiled programs call it as an extern kernel, a neuron op too
    assert out["copy"] == {} and out["sync"] == {}
