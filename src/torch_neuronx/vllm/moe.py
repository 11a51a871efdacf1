"""vLLM's unquantized fused-MoE method on neuron.

vLLM picks no MoE kernel for an out-of-tree platform: its unquantized method is left without
experts or kernel and expects the platform to register its own (`register_oot`). The router vLLM
would otherwise run first calls a CUDA kernel (`_moe_C.topk_softmax`), so this method is
"monolithic": it takes the router logits and does the routing and the experts in neuron ops.

Each token runs through the top-k experts it picked, and no others: its k (token, expert) pairs
are sorted by expert on the device, each expert's rows are found by a search in the sorted
experts, and `torch._grouped_mm` multiplies each expert's rows by its weights. Every shape is
(tokens * k, ...) whatever the routing, so nothing waits for the host to learn which tokens went
where, and a compiled program serves every routing of its token count.
"""

import torch
import torch.nn.functional as F
from vllm.model_executor.layers.fused_moe.activation import MoEActivation
from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import UnquantizedFusedMoEMethod

_GATED = {
    MoEActivation.SILU: F.silu,
    MoEActivation.GELU: F.gelu,
    MoEActivation.GELU_TANH: lambda x: F.gelu(x, approximate="tanh"),
}
_PLAIN = {
    MoEActivation.SILU_NO_MUL: F.silu,
    MoEActivation.GELU_NO_MUL: F.gelu,
    MoEActivation.GELU_TANH_NO_MUL: lambda x: F.gelu(x, approximate="tanh"),
}


def _unsupported(layer) -> str | None:
    """What of this layer's routing the method does not do, or None."""
    if layer.activation not in _GATED and layer.activation not in _PLAIN:
        return f"the {layer.activation.value} activation"
    if layer.use_grouped_topk and layer.custom_routing_function is not None:
        return "grouped top-k routing beside a custom routing function"
    if layer.use_grouped_topk and layer.w13_weight.shape[0] % layer.num_expert_group:
        return f"{layer.w13_weight.shape[0]} experts in {layer.num_expert_group} groups"
    if layer.apply_router_weight_on_input and layer.top_k != 1:
        return "router weights applied to the input of more than one expert per token"
    if layer.expert_map is not None:
        return "expert parallelism"
    if layer.scoring_func not in ("softmax", "sigmoid"):
        return f"the {layer.scoring_func} scoring function"
    return None


def route(layer, x: torch.Tensor, router_logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each token's top-k experts and their weights: ([tokens, k] float32, [tokens, k] int64).

    As vLLM routes: a score-correction bias (DeepSeek-V3, GLM-4.5) moves which experts are picked
    but not their weights; grouped top-k first keeps each token's `topk_group` best groups of
    experts (a group scored by its best expert, or its best two with a bias) and picks among them;
    the routed scaling factor multiplies the weights after renormalising."""
    logits = router_logits.float()
    if layer.custom_routing_function is not None:
        weights, ids = layer.custom_routing_function(x, logits, layer.top_k, layer.renormalize)
        return weights.float(), ids.long()
    scores = logits.softmax(-1) if layer.scoring_func == "softmax" else logits.sigmoid()
    bias = layer.e_score_correction_bias
    picking = scores if bias is None else scores + bias.float()
    if layer.use_grouped_topk:
        tokens, experts = picking.shape
        groups = picking.view(tokens, layer.num_expert_group, -1)
        group_scores = groups.amax(-1) if bias is None else groups.topk(2, dim=-1)[0].sum(-1)
        best = group_scores.topk(layer.topk_group, dim=-1)[1]
        kept = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, best, True)
        kept = kept.repeat_interleave(experts // layer.num_expert_group, dim=1)
        picking = picking.masked_fill(~kept, float("-inf"))
    ids = picking.topk(layer.top_k, dim=-1)[1]
    weights = scores.gather(1, ids)
    if layer.renormalize:
        weights = weights / weights.sum(-1, keepdim=True)
    if layer.routed_scaling_factor not in (None, 1.0):
        weights = weights * layer.routed_scaling_factor
    return weights, ids.long()


def _by_expert(layer, x: torch.Tensor, router_logits: torch.Tensor):
    """The (token, expert) pairs sorted by expert: each pair's token and routing weight, its
    expert, and where each expert's rows end (the offsets `_grouped_mm` takes)."""
    weights, ids = route(layer, x, router_logits)
    k = ids.shape[1]
    # A stable sort keeps each expert's tokens in token order, as a loop over experts takes them.
    experts, order = ids.reshape(-1).sort(stable=True)
    # Not bincount: its length depends on the largest id, a value, so sizing it would wait.
    ends = torch.searchsorted(experts, torch.arange(layer.w13_weight.shape[0], device=x.device), right=True)
    return order // k, weights.reshape(-1)[order], experts, ends.to(torch.int32)


@UnquantizedFusedMoEMethod.register_oot
class NeuronFusedMoEMethod(UnquantizedFusedMoEMethod):
    @property
    def is_monolithic(self) -> bool:
        return True

    def apply_monolithic(self, layer, x, router_logits, input_ids=None):
        problem = _unsupported(layer)
        if problem is not None:
            raise NotImplementedError(f"neuron: vLLM's fused MoE with {problem} is not supported yet")
        tokens, weights, experts, ends = _by_expert(layer, x, router_logits)
        rows = x.index_select(0, tokens)  # [tokens * k, hidden], grouped by expert
        if layer.apply_router_weight_on_input:  # (Llama 4, one expert per token) weighted before the experts
            rows = rows * weights.to(rows.dtype)[:, None]
            weights = torch.ones_like(weights)
        # [tokens * k, 2 * intermediate] (gate then up) or [tokens * k, intermediate]
        h = torch._grouped_mm(rows, layer.w13_weight.transpose(1, 2), offs=ends)
        if self.moe.has_bias:
            h = h + layer.w13_bias.index_select(0, experts)
        if layer.activation in _GATED:
            gate, up = h.chunk(2, dim=-1)
            h = _GATED[layer.activation](gate) * up
        else:
            h = _PLAIN[layer.activation](h)
        out = torch._grouped_mm(h, layer.w2_weight.transpose(1, 2), offs=ends)  # [tokens * k, hidden]
        if self.moe.has_bias:
            out = out + layer.w2_bias.index_select(0, experts)
        out = out * weights.to(out.dtype)[:, None]
        return torch.zeros_like(x).index_add_(0, tokens, out)
