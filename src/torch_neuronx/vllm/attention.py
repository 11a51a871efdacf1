"""Paged attention for vLLM in neuron ops: the KV cache in blocks, block tables per request,
prefill (chunked, with cached prefixes) and decode, grouped-query attention, sliding windows,
ALiBi (Bloom) and logit soft-capping (Gemma-2).

Each layer's KV tensor is vLLM's logical [blocks, kv_heads, block_size, 2 * head_size] stored in
LBNHC order, so `kv.transpose(1, 2)` is a contiguous [blocks, block_size, kv_heads, 2 * head_size]:
one token's keys and values are one row of a [blocks * block_size, kv_heads, 2 * head_size] view.
"""

from dataclasses import dataclass, field
from typing import ClassVar

import torch
import torch.nn.functional as F
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionImpl,
    AttentionMetadataBuilder,
    AttentionType,
    CommonAttentionMetadata,
)
from vllm.v1.attention.backends.utils import split_decodes_and_prefills
from vllm.v1.kv_cache_interface import KVCacheLayout


class NeuronAttentionBackend(AttentionBackend):
    forward_includes_kv_cache_update = False
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float32, torch.bfloat16, torch.float16]
    supported_kv_cache_dtypes: ClassVar[list[str]] = ["auto", "float32", "bfloat16", "float16"]

    @staticmethod
    def get_name() -> str:
        return "CUSTOM"

    @staticmethod
    def get_impl_cls():
        return NeuronAttentionImpl

    @staticmethod
    def get_builder_cls():
        return NeuronAttentionMetadataBuilder

    @classmethod
    def supported_kv_cache_layouts(cls):
        return (KVCacheLayout.LBNHC,)

    @classmethod
    def supports_sliding_window(cls) -> bool:
        return True

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER


@dataclass
class NeuronAttentionMetadata:
    """One step's batch, shared by every layer: what does not depend on a layer is computed once."""

    num_actual_tokens: int
    # Requests [0, num_decodes) have one query token each (vLLM orders decodes first); they are
    # attended to in one batch over as many blocks as the longest needs: their block numbers and
    # each one's query position.
    num_decodes: int
    decode_blocks: torch.Tensor | None  # [decodes, blocks], int64, on the device
    decode_positions: torch.Tensor | None  # [decodes, 1] on the device
    # The others, one by one: (first query token, query tokens, sequence length, its blocks [1, b]).
    prefills: list[tuple[int, int, int, torch.Tensor]]
    # The attention masks (decodes first, then each prefill's) by sliding window and ALiBi slopes,
    # made by the first layer with them and reused by the others.
    masks: dict = field(default_factory=dict)


class NeuronAttentionMetadataBuilder(AttentionMetadataBuilder[NeuronAttentionMetadata]):
    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self._init_reorder_batch_threshold(1)

    def build(self, common_prefix_len, common_attn_metadata: CommonAttentionMetadata, fast_build=False):
        meta = common_attn_metadata
        block_size = self.kv_cache_spec.block_size
        table = meta.block_table_tensor
        n, _, _, _ = split_decodes_and_prefills(meta, decode_threshold=1)
        # Host copies vLLM keeps beside the device ones: reading them never waits for the device.
        starts = meta.query_start_loc_cpu[: meta.num_reqs + 1].tolist()
        lengths = meta.seq_lens_cpu_upper_bound[: meta.num_reqs].tolist()
        decode_blocks = -(-max(lengths[:n], default=0) // block_size)
        prefills = [
            (starts[r], starts[r + 1] - starts[r], lengths[r], table[r : r + 1, : -(-lengths[r] // block_size)].long())
            for r in range(n, meta.num_reqs)
            if starts[r + 1] > starts[r]
        ]
        return NeuronAttentionMetadata(
            num_actual_tokens=meta.num_actual_tokens,
            num_decodes=n,
            decode_blocks=table[:n, :decode_blocks].long() if n else None,
            decode_positions=meta.seq_lens[:n, None] - 1 if n else None,
            prefills=prefills,
        )


class NeuronAttentionImpl(AttentionImpl):
    def __init__(
        self,
        num_heads,
        head_size,
        scale,
        num_kv_heads,
        alibi_slopes,
        sliding_window,
        kv_cache_dtype,
        logits_soft_cap=None,
        attn_type=AttentionType.DECODER,
        kv_sharing_target_layer_name=None,
        sinks=None,
    ):
        if sinks is not None:
            raise NotImplementedError("neuron: vLLM attention with attention sinks is not supported yet")
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads
        self.sliding_window = sliding_window  # None, or how many tokens a query sees, itself included
        # One slope per local head (the model slices them for tensor parallelism); as a tuple, the
        # key of this layer's masks in the step's metadata, shared by layers with the same slopes.
        self.alibi_slopes = None if alibi_slopes is None else tuple(float(x) for x in alibi_slopes)
        if self.alibi_slopes is not None and len(self.alibi_slopes) != num_heads:
            raise ValueError(f"neuron: {len(self.alibi_slopes)} ALiBi slopes for {num_heads} attention heads")
        self.logits_soft_cap = float(logits_soft_cap) if logits_soft_cap else None

    def _tokens(self, kv_cache: torch.Tensor) -> torch.Tensor:
        """[blocks * block_size, kv_heads, 2 * head_size]: row s is KV slot s."""
        return kv_cache.transpose(1, 2).flatten(0, 1)

    def do_kv_cache_update(self, layer, key, value, kv_cache, slot_mapping) -> None:
        n = slot_mapping.shape[0]
        # Padding tokens (slot -1) go to slot 0: block 0 is vLLM's null block, never a request's.
        slots = slot_mapping.clamp_min(0)
        rows = torch.cat([key[:n], value[:n]], dim=-1).to(kv_cache.dtype)
        self._tokens(kv_cache).index_copy_(0, slots, rows)

    def _mask(self, query_pos: torch.Tensor, key_pos: torch.Tensor) -> torch.Tensor:
        """Which keys each query sees ([..., queries, keys], bool); with ALiBi, the additive bias
        [..., heads, queries, keys] instead: slope * (key - query) where seen, -inf elsewhere."""
        visible = key_pos <= query_pos
        if self.sliding_window:
            visible = visible & (key_pos > query_pos - self.sliding_window)
        if self.alibi_slopes is None:
            return visible
        slopes = torch.tensor(self.alibi_slopes, dtype=torch.float32, device=key_pos.device)[:, None, None]
        distance = (key_pos - query_pos).float()[..., None, :, :]
        bias = slopes * distance
        return bias.masked_fill(~visible[..., None, :, :], float("-inf"))

    def _masks(self, meta: NeuronAttentionMetadata, block_size: int) -> list[torch.Tensor]:
        """The decodes' mask [decodes, 1, 1, keys], then each prefill's [1, 1, queries, keys]."""
        out = []
        if meta.num_decodes:
            keys = torch.arange(meta.decode_blocks.shape[1] * block_size, device=meta.decode_blocks.device)
            # [decodes, 1, 1, keys], or [decodes, heads, 1, keys] with ALiBi
            mask = self._mask(meta.decode_positions[:, None, :], keys[None, None, :])
            out.append(mask[:, None] if mask.dim() == 3 else mask)
        for _, q_len, seq_len, blocks in meta.prefills:
            keys = torch.arange(seq_len, device=blocks.device)
            mask = self._mask(keys[seq_len - q_len :, None], keys)
            out.append(mask[None, None] if mask.dim() == 2 else mask[None])
        return out

    def _attend(self, q, k, v, mask) -> torch.Tensor:
        """q [n, heads, q_len, d], k and v [n, kv_heads, k_len, d], mask [n, 1 or heads, q_len,
        k_len] (bool, or float with ALiBi)."""
        if mask.dtype != torch.bool:
            mask = mask.to(q.dtype)
        if self.logits_soft_cap is None:
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, scale=self.scale, enable_gqa=self.num_heads != self.num_kv_heads
            )
        # Soft-capping bends the scores before the mask and softmax, which SDPA cannot express.
        if self.num_heads != self.num_kv_heads:
            k = k.repeat_interleave(self.num_heads // self.num_kv_heads, dim=1)
            v = v.repeat_interleave(self.num_heads // self.num_kv_heads, dim=1)
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.scale
        scores = torch.tanh(scores / self.logits_soft_cap) * self.logits_soft_cap
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask
        return torch.matmul(scores.float().softmax(-1).to(v.dtype), v)

    def _gather(self, kv_cache, blocks) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys and values of `blocks` ([n, b], int64) as [n, kv_heads, b * block_size, d]."""
        rows = kv_cache.transpose(1, 2)[blocks]  # [n, b, block_size, kv_heads, 2d]
        rows = rows.flatten(1, 2).transpose(1, 2)
        return rows[..., : self.head_size], rows[..., self.head_size :]

    def forward(
        self,
        layer,
        query,
        key,
        value,
        kv_cache,
        attn_metadata,
        output,
        output_scale=None,
        output_block_scale=None,
    ):
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("neuron: quantized attention output is not supported")
        if attn_metadata is None:  # vLLM's memory-profiling run
            return output.fill_(0)
        meta = attn_metadata
        block_size = kv_cache.shape[2]
        if output.shape[0] > meta.num_actual_tokens:  # a compiled step's padding tokens
            output[meta.num_actual_tokens :].zero_()
        key = (self.sliding_window, self.alibi_slopes)
        masks = meta.masks.get(key)
        if masks is None:
            masks = meta.masks[key] = self._masks(meta, block_size)
        if meta.num_decodes:
            n = meta.num_decodes
            k, v = self._gather(kv_cache, meta.decode_blocks)
            out = self._attend(query[:n, :, None, :], k, v, masks[0])
            output[:n] = out.squeeze(2).to(output.dtype)
        for (start, q_len, seq_len, blocks), mask in zip(meta.prefills, masks[1 if meta.num_decodes else 0 :]):
            k, v = self._gather(kv_cache, blocks)
            k, v = k[:, :, :seq_len], v[:, :, :seq_len]
            q = query[start : start + q_len].transpose(0, 1)[None]
            output[start : start + q_len] = self._attend(q, k, v, mask)[0].transpose(0, 1).to(output.dtype)
        return output
