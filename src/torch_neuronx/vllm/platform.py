"""vLLM's Platform for the neuron device.

vLLM forwards any attribute a Platform lacks to `torch.<device_type>`, so `empty_cache`,
`synchronize`, `mem_get_info`, `Event` and the like resolve to `torch.neuron` without code here;
what is below is what vLLM's base class leaves abstract or decides for CUDA.
"""

import functools
import os

import torch
from vllm.logger import init_logger
from vllm.platforms.interface import Platform, PlatformEnum

# Under "vllm.": vLLM configures its log handlers for that namespace only.
logger = init_logger("vllm." + __name__)

_PACKAGE = __name__.rpartition(".")[0]
LOOPBACK = "127.0.0.1"
# Seconds `vllm serve` lets in-flight requests finish after SIGTERM/SIGINT. vLLM's default, 0,
# aborts them, and its API server then left open streams unanswered until each client's own
# timeout (120 s with 16 streams); draining ends every stream, and the server exits once they end.
SHUTDOWN_TIMEOUT = 30
# Compiled serving was slower in steady state than eager (issue 40: 562-566 against 884-904 output
# tokens/s, 32 prompts at unbounded rate), so models run eagerly unless this is "1".
COMPILE_ENV = "TORCH_NEURONX_VLLM_COMPILE"


def _maybe_force_spawn(vllm_maybe_force_spawn) -> None:
    """vLLM's choice of start method before each process it starts, with the neuron device in the
    place of CUDA: fork (vLLM's default) while this process has not used the device, spawn once it
    has (a forked child cannot use a runtime its parent started). Fork lets a script that calls
    `LLM(...)` at module level, without a `__main__` guard, start its engine."""
    if os.environ.get("VLLM_WORKER_MULTIPROC_METHOD") != "spawn" and torch.neuron.is_initialized():
        logger.warning(
            "We must use the `spawn` multiprocessing start method. Overriding "
            "VLLM_WORKER_MULTIPROC_METHOD to 'spawn'. See https://docs.vllm.ai/en/latest/usage/"
            "troubleshooting.html#python-multiprocessing for more information. Reasons: the neuron "
            "device is initialized"
        )
        os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"
    vllm_maybe_force_spawn()


def _install_start_method_check() -> None:
    """get_mp_context() looks `_maybe_force_spawn` up in its module at each call: every process vLLM
    starts (engine core, workers, coordinator) passes through it. Installed when the config is
    checked, as vLLM's utilities import the platform (a forked child inherits it; a spawned one
    inherits VLLM_WORKER_MULTIPROC_METHOD=spawn)."""
    import vllm.utils.system_utils as system_utils

    current = system_utils._maybe_force_spawn
    if not isinstance(current, functools.partial):
        system_utils._maybe_force_spawn = functools.partial(_maybe_force_spawn, current)


def _run_here(fn):
    return fn()


def inspect_models_in_process() -> None:
    """vLLM inspects each model class it meets in a subprocess (cached per class in
    VLLM_CACHE_ROOT), to keep CUDA uninitialised in the process that may fork its engine. Importing
    a model's module leaves the neuron device untouched (`_maybe_force_spawn` still sees it
    unused), so the inspection runs in this process: a cold cache costs no extra interpreter
    importing torch and vLLM (about 9 s per architecture on a 2-core host)."""
    from vllm.model_executor.models import registry

    registry._run_in_subprocess = _run_here


class NeuronPlatform(Platform):
    _enum = PlatformEnum.OOT
    device_name = "neuron"  # process groups put their tensors on torch.device(f"neuron:{i}")
    device_type = "neuron"
    dispatch_key = "PrivateUse1"  # vLLM registers its custom ops (torch.ops.vllm.*) for this key
    dist_backend = "neuron"  # ProcessGroupNeuron
    device_control_env_var = "NEURON_RT_VISIBLE_CORES"
    simple_compile_backend = "neuron"

    @classmethod
    def pre_register_and_update(cls, parser=None) -> None:
        # `vllm serve` binds every interface when --host is not given. A development server of a
        # device plugin answers on loopback unless told otherwise, as `nobs serve` does.
        actions = {name: a for a in getattr(parser, "_actions", ()) for name in a.option_strings}
        host = actions.get("--host")
        if host is not None and host.default is None:
            host.default = LOOPBACK
            host.help = f"Host name (neuron: {LOOPBACK} unless given; --host 0.0.0.0 opens every interface)."
        shutdown = actions.get("--shutdown-timeout")
        if shutdown is not None and shutdown.default == 0:
            shutdown.default = SHUTDOWN_TIMEOUT
            shutdown.help = (
                f"Seconds in-flight requests may finish after SIGTERM/SIGINT (neuron: {SHUTDOWN_TIMEOUT} unless "
                "given; 0 aborts them)."
            )

    @classmethod
    def import_kernels(cls) -> None:
        """vLLM's compiled kernels (vllm._C) are CUDA builds; the neuron path uses none of them."""

    @staticmethod
    def _properties(device_id: int) -> dict:
        """The device's description, read from the runtime's topology without starting the device
        (torch.neuron.get_device_properties and mem_get_info start it): the engine's parent process
        asks these before it starts the engine, and must stay untouched to fork it, as vLLM reads
        a CUDA device's through NVML."""
        from torch_neuronx import _C

        return _C._device_properties(device_id)

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return cls._properties(device_id)["name"]

    @classmethod
    def get_device_uuid(cls, device_id: int = 0) -> str:
        return f"neuron-{os.getpid()}-{device_id}"

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        return cls._properties(device_id)["total_memory"]

    @classmethod
    def set_device(cls, device: torch.device) -> None:
        torch.neuron.set_device(device)

    @classmethod
    def manual_seed_all(cls, seed: int) -> None:
        torch.neuron.manual_seed_all(seed)

    @classmethod
    def check_if_supports_dtype(cls, dtype: torch.dtype) -> None:
        if dtype not in (torch.float32, torch.bfloat16, torch.float16):
            raise ValueError(f"neuron: vLLM models run in float32, bfloat16 or float16, not {dtype}")

    @classmethod
    def num_compute_units(cls, device_id: int = 0) -> int:
        return 1  # one NeuronCore per device

    @classmethod
    def get_current_memory_usage(cls, device: torch.types.Device | None = None) -> float:
        torch.neuron.reset_peak_memory_stats(device)
        return torch.neuron.max_memory_allocated(device)

    @classmethod
    def opaque_attention_op(cls) -> bool:
        # Attention reaches Dynamo as vLLM's custom op: traced into, its per-step metadata (block
        # tables, decode/prefill split) would be baked into a graph that vLLM runs with its guards
        # dropped.
        return True

    @classmethod
    def check_runner_kv_caches_multi_layer(cls) -> None:
        """One KV tensor per layer is what the neuron attention backend reads."""

    @classmethod
    def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None) -> str:
        if attn_selector_config.use_mla or attn_selector_config.use_sparse:
            raise NotImplementedError("neuron: vLLM's MLA and sparse attention have no neuron backend yet")
        if selected_backend is not None and selected_backend.name not in ("CUSTOM", "TORCH_SDPA"):
            logger.warning("neuron: attention backend %s is CUDA's; using the neuron backend", selected_backend.name)
        return f"{_PACKAGE}.attention.NeuronAttentionBackend"

    @classmethod
    def check_and_update_config(cls, vllm_config) -> None:
        from vllm.config import CompilationMode, CUDAGraphMode

        if vllm_config.speculative_config is not None:
            raise NotImplementedError("neuron: vLLM's speculative decoding is not supported yet (Triton kernels)")
        model = vllm_config.model_config
        if model is not None and (model.is_hybrid or model.is_attention_free or model.has_inner_state):
            raise NotImplementedError("neuron: vLLM's Mamba and hybrid models are not supported yet (Triton kernels)")
        if model is not None and model.quantization is not None:
            raise NotImplementedError(f"neuron: vLLM's {model.quantization} quantization is not supported yet")
        if vllm_config.lora_config is not None:
            raise NotImplementedError("neuron: vLLM's LoRA adapters are not supported yet (Triton kernels)")
        parallel = vllm_config.parallel_config
        if parallel.worker_cls == "auto":
            parallel.worker_cls = f"{_PACKAGE}.worker.NeuronWorker"
        compilation = vllm_config.compilation_config
        compile_setting = os.environ.get(COMPILE_ENV, "0")
        if compile_setting not in ("0", "1"):
            raise ValueError(f"{COMPILE_ENV}={compile_setting!r}: set it to 1 (compile vLLM's model) or 0 (eager)")
        if compilation.mode != CompilationMode.NONE and compile_setting != "1":
            logger.info(
                "neuron: running the model eagerly (compiled serving is slower here so far); %s=1 compiles it",
                COMPILE_ENV,
            )
            compilation.mode = CompilationMode.NONE
            if model is not None:
                model.enforce_eager = True
        if compilation.mode not in (CompilationMode.NONE, CompilationMode.DYNAMO_TRACE_ONCE):
            # vLLM's own compile mode splits graphs for CUDA graphs and runs Inductor's Triton
            # passes; on neuron the model compiles once with backend "neuron" and symbolic shapes.
            compilation.mode = CompilationMode.DYNAMO_TRACE_ONCE
        if compilation.mode == CompilationMode.DYNAMO_TRACE_ONCE:
            if compilation.backend in ("", "inductor"):
                compilation.backend = "neuron"
            # vLLM's ahead-of-time compile serialises the backend's callable; the neuron backend's
            # programs are cached on disk by their own key instead (TORCH_NEURONX_CACHE_DIR).
            os.environ["VLLM_USE_AOT_COMPILE"] = "0"
        compilation.cudagraph_mode = CUDAGraphMode.NONE
        compilation.cudagraph_capture_sizes = []
        cache = vllm_config.cache_config
        if cache is not None and not cache.user_specified_block_size:
            cache.block_size = 16
        # Asynchronous scheduling overlaps steps with CUDA streams and events the runner creates
        # as torch.cuda objects; the neuron queue already runs a step's ops asynchronously.
        vllm_config.scheduler_config.async_scheduling = False
        _install_start_method_check()
