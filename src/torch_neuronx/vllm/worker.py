"""vLLM's GPU worker on a neuron device: device set-up, memory accounting bounded by the host,
no CUDA-only warm-ups."""

import gc
import time
from contextlib import nullcontext
from unittest import mock

import psutil
import torch
import vllm.v1.worker.gpu_worker as gpu_worker
from vllm.logger import init_logger
from vllm.platforms import current_platform
from vllm.utils.mem_utils import MemorySnapshot, format_gib
from vllm.utils.torch_utils import set_random_seed
from vllm.v1.worker.utils import request_memory
from vllm.v1.worker.workspace import init_workspace_manager

# Under "vllm.": vLLM configures its log handlers for that namespace only.
logger = init_logger("vllm." + __name__)

# The share of the host's free memory the KV caches of its workers may take together: the rest
# stays for the engine's and the API server's processes and whatever else the machine runs.
HOST_SHARE = 0.5


class NeuronWorker(gpu_worker.Worker):
    def init_device(self):
        self.device = torch.device(f"neuron:{self.local_rank}")
        torch.neuron.set_device(self.device)
        current_platform.check_if_supports_dtype(self.model_config.dtype)
        gpu_worker.init_worker_distributed_environment(
            self.vllm_config, self.rank, self.distributed_init_method, self.local_rank, current_platform.dist_backend
        )
        set_random_seed(self.model_config.seed)
        gc.collect()
        torch.accelerator.empty_cache()
        self.init_snapshot = MemorySnapshot(device=self.device)
        self.requested_memory = request_memory(self.init_snapshot, self.cache_config)
        init_workspace_manager(self.device, 1, gpu_worker._num_workspace_lanes(self.vllm_config, False))
        from .model_runner import NeuronModelRunner

        self.model_runner = NeuronModelRunner(self.vllm_config, self.device)

    def _maybe_get_memory_pool_context(self, tag):
        return nullcontext()  # no sleep mode: its memory pool is CUDA's cumem allocator

    def determine_available_memory(self) -> int:
        device_bytes = super().determine_available_memory()
        if self.cache_config.kv_cache_memory_bytes:
            return device_bytes  # asked for explicitly: the device's capacity is the only bound
        # The software NeuronCore's memory is host RAM and each device reports a whole Trainium's
        # HBM: sized from the device alone, a default `vllm serve` would ask for more than the host
        # has. Every local worker gets an equal share of what the host has free now.
        host = psutil.virtual_memory()
        workers = max(1, self.parallel_config.local_world_size)
        host_bytes = int(host.available * HOST_SHARE / workers)
        if host_bytes >= device_bytes:
            return device_bytes
        logger.info(
            "neuron: KV cache bounded by host memory: %s GiB free on the host, %s GiB for this "
            "worker's KV cache (%.0f%% of it over %d local workers; the device alone would allow %s GiB)",
            format_gib(host.available),
            format_gib(host_bytes),
            HOST_SHARE * 100,
            workers,
            format_gib(device_bytes),
        )
        self.available_kv_cache_memory_bytes = host_bytes
        return host_bytes

    def compile_or_warm_up_model(self):
        # vLLM's kernel warm-up compiles Triton kernels and imports torchvision-based models'
        # modules; neither exists on neuron. Everything else in the warm-up runs.
        with mock.patch.object(gpu_worker, "kernel_warmup", lambda worker, **kwargs: None):
            times = super().compile_or_warm_up_model()
        if self.model_runner.pad_to_buckets:
            self._compile_buckets()
        return times

    def _compile_buckets(self) -> None:
        """Every token-count bucket a compiled model can meet, compiled (or loaded from the cache)
        now, before the server reports ready: otherwise the first requests to reach each bucket
        wait for its compile."""
        runner = self.model_runner
        sizes = sorted({min(1 << i, runner.max_num_tokens) for i in range(runner.max_num_tokens.bit_length() + 1)})
        start = time.perf_counter()
        for size in sizes:
            runner._dummy_run(size, skip_eplb=True, remove_lora=False)
        torch.neuron.synchronize()
        logger.info(
            "neuron: compiled or loaded the model's %d token-count buckets (%s) in %.1f s",
            len(sizes),
            ", ".join(map(str, sizes)),
            time.perf_counter() - start,
        )
