"""vLLM's unquantized fused-MoE method on neuron.

vLLM picks no MoE kernel for an out-of-tree platform: its unquantized method is left without
experts or kernel and expects the platform to register its own (`register_oot`). The router vLLM
would otherwise run first calls a CUDA kernel (`_moe_C.topk_softmax`), so this method is
"monolithic": it takes the router logits and does the routing and the experts in neuron ops.

Every local expert runs on every token and the outputs are summed with the routing weights (zero
for experts a token did not pick). The shapes then depend on the token count alone: no host
synchronisation to learn which tokens went where, and one compiled program per bucket. The cost
is compute in proportion to the experts, not to top-k.
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
    if layer.use_grouped_topk:
        return "grouped top-k routing"
    if layer.e_score_correction_bias is not None:
        return "routing with a score-correction bias"
    if layer.routed_scaling_factor not in (None, 1.0):
        return "a routed scaling factor"
    if layer.apply_router_weight_on_input:
        return "router weights applied to the input"
    if layer.expert_map is not None:
        return "expert parallelism"
    if layer.scoring_func not in ("softmax", "sigmoid"):
        return f"the {layer.scoring_func} scoring function"
    return None


def route(layer, x: torch.Tensor, router_logits: torch.Tensor) -> torch.Tensor:
    """Each token's weight for each expert, [tokens, experts] in float32 (zero where not picked)."""
    logits = router_logits.float()
    if layer.custom_routing_function is not None:
        weights, ids = layer.custom_routing_function(x, logits, layer.top_k, layer.renormalize)
    else:
        scores = logits.softmax(-1) if layer.scoring_func == "softmax" else logits.sigmoid()
        weights, ids = scores.topk(layer.top_k, dim=-1)
        if layer.renormalize:
            weights = weights / weights.sum(-1, keepdim=True)
    return torch.zeros_like(logits).scatter_(1, ids.long(), weights.float())


@UnquantizedFusedMoEMethod.register_oot
class NeuronFusedMoEMethod(UnquantizedFusedMoEMethod):
    @property
    def is_monolithic(self) -> bool:
        return True

    def apply_monolithic(self, layer, x, router_logits, input_ids=None):
        problem = _unsupported(layer)
        if problem is not None:
            raise NotImplementedError(f"neuron: vLLM's fused MoE with {problem} is not supported yet")
        combine = route(layer, x, router_logits).to(x.dtype)  # [tokens, experts]
        # [experts, tokens, 2 * intermediate] (gate then up) or [experts, tokens, intermediate]
        h = torch.matmul(x, layer.w13_weight.transpose(1, 2))
        if self.moe.has_bias:
            h = h + layer.w13_bias[:, None, :]
        if layer.activation in _GATED:
            gate, up = h.chunk(2, dim=-1)
            h = _GATED[layer.activation](gate) * up
        else:
            h = _PLAIN[layer.activation](h)
        out = torch.matmul(h, layer.w2_weight.transpose(1, 2))  # [experts, tokens, hidden]
        if self.moe.has_bias:
            out = out + layer.w2_bias[:, None, :]
        return (out * combine.t()[:, :, None]).sum(0)
