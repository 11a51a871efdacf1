"""vLLM's GPU model runner on a neuron device: its CUDA streams and events become neuron ones and
its Triton kernel mapping tokens to KV-cache slots becomes device ops. (vLLM's other Triton kernel
here, zeroing freed KV blocks, serves Mamba layers and mixed-precision caches, which the neuron
attention backend does not take.)"""

import dataclasses
from contextlib import contextmanager

import torch
import vllm.v1.worker.block_table as block_table
from vllm.config import CompilationMode
from vllm.v1.attention.backends.utils import PAD_SLOT_ID
from vllm.v1.worker.gpu_model_runner import GPUModelRunner

from . import moe  # noqa: F401  (registers the neuron fused-MoE method before models are built)


class _SlotMapping:
    """Stands in for block_table's Triton kernel, with its call signature: the KV-cache slot of
    every scheduled token, computed on the device with no host synchronisation."""

    def register_warmup(self, **kwargs) -> None:
        """Nothing to compile ahead."""

    def __call__(
        self,
        num_reqs: int,
        num_tokens: int,
        max_num_tokens: int,
        query_start_loc: torch.Tensor,
        positions: torch.Tensor,
        block_table: torch.Tensor,
        block_table_stride: int,
        block_size: int,
        slot_mapping: torch.Tensor,
        kv_cache_block_size: int,
        blocks_per_kv_block: int,
        total_cp_world_size: int,
        total_cp_rank: int,
        cp_kv_cache_interleave_size: int,
    ) -> None:
        if total_cp_world_size != 1:
            raise NotImplementedError("neuron: vLLM's decode context parallelism is not supported")
        # Token t belongs to the request r with starts[r] <= t < starts[r + 1].
        ends = query_start_loc[1 : num_reqs + 1]
        tokens = torch.arange(num_tokens, device=positions.device, dtype=ends.dtype)
        requests = torch.searchsorted(ends, tokens, right=True)
        pos = positions[:num_tokens]
        within = pos % kv_cache_block_size
        index = (pos // kv_cache_block_size) * blocks_per_kv_block + within // block_size
        blocks = block_table.view(-1, block_table_stride)[requests, index].to(torch.int64)
        slot_mapping[:num_tokens] = blocks * block_size + within % block_size
        slot_mapping[num_tokens:max_num_tokens] = PAD_SLOT_ID


block_table._COMPUTE_SLOT_MAPPING_KERNEL = _SlotMapping()


@contextmanager
def _cuda_streams_as_neuron():
    """The runner's constructor makes CUDA streams and events by name (for overlapped copies);
    while it runs, those names make neuron ones."""
    names = ("Stream", "Event", "current_stream", "stream")
    saved = {name: getattr(torch.cuda, name) for name in names}
    for name in names:
        setattr(torch.cuda, name, getattr(torch.neuron, name))
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(torch.cuda, name, value)


class NeuronModelRunner(GPUModelRunner):
    def __init__(self, vllm_config, device):
        with _cuda_streams_as_neuron():
            super().__init__(vllm_config, device)
        self.cascade_attn_enabled = False  # cascade attention is FlashAttention's
        # A compiled model runs a static program per token count, as Trainium does: each step's
        # tokens are padded up to a power of two (at most max_num_batched_tokens), so a server
        # compiles a few programs instead of one for every batch it meets.
        self.pad_to_buckets = self.compilation_config.mode == CompilationMode.DYNAMO_TRACE_ONCE

    def _determine_batch_execution_and_padding(self, num_tokens, *args, **kwargs):
        mode, batch, *rest = super()._determine_batch_execution_and_padding(num_tokens, *args, **kwargs)
        if self.pad_to_buckets:
            padded = min(1 << max(batch.num_tokens - 1, 0).bit_length(), max(self.max_num_tokens, batch.num_tokens))
            batch = dataclasses.replace(batch, num_tokens=padded)
        return (mode, batch, *rest)
