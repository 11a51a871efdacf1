"""Every change this package makes to the Hugging Face libraries' Python modules (accelerate,
transformers), in one place; PyTorch's are in _patches.py. Each works around one upstream
behaviour, named in its docstring; none changes what other devices do."""
from __future__ import annotations

import functools

import torch

from ._patches import _rebind, after_import


def accelerate_max_memory() -> None:
    """accelerate.utils.modeling.get_max_memory (accelerate 1.15) sizes the integer devices of
    device_map="auto"/"balanced"/"sequential" with the first accelerator it knows (npu, mlu, sdaa,
    musa, xpu, hpu, else cuda) and has no neuron branch: on a neuron host it finds no device, so the
    whole model goes to the CPU, and max_memory={0: ...} warns "Device 0 is not available". Where
    neuron is PyTorch's current accelerator (an integer device d is then neuron:d, as
    torch.device(d) says), integer devices are neuron devices: sized by torch.neuron.mem_get_info
    and checked against torch.neuron.device_count(), as CUDA's are by torch.cuda's. The CPU, MPS
    and disk entries stay accelerate's."""

    def patch(modeling):
        original = getattr(modeling, "get_max_memory", None)
        if original is None or getattr(original, "_neuron", False):
            return

        def get_max_memory(max_memory=None):
            accelerator = torch.accelerator.current_accelerator()
            if accelerator is None or accelerator.type != "neuron":
                return original(max_memory)
            count = torch.neuron.device_count()
            if max_memory is None:
                sizes = {i: torch.neuron.mem_get_info(i)[0] for i in range(count)}
                return {**sizes, **original(None)}
            for key, value in max_memory.items():  # in place, as accelerate does: callers read them back
                if isinstance(value, str):
                    max_memory[key] = modeling.convert_file_size_to_int(value)
            devices = sorted(k for k in max_memory if isinstance(k, int))
            for d in devices:
                if not 0 <= d < count:
                    modeling.logger.warning(
                        f"Device {d} is not available, available devices are {list(range(count))}")
            others = original({k: v for k, v in max_memory.items() if not isinstance(k, int)})
            return {**{d: max_memory[d] for d in devices}, **others}

        get_max_memory._neuron = True
        get_max_memory.__wrapped__ = original
        modeling.get_max_memory = get_max_memory
        _rebind(original, get_max_memory, {"accelerate.utils": ["get_max_memory"],
                                           "transformers.integrations.accelerate": ["accelerate_max_memory"],
                                           "diffusers.models.model_loading_utils": ["get_max_memory"],
                                           "diffusers.pipelines.pipeline_loading_utils": ["get_max_memory"]})

    after_import("accelerate.utils.modeling", patch)


def accelerate_local_rank_device() -> None:
    """accelerate.state.PartialState.set_device (accelerate 1.15) binds a rank of a multi-process
    CUDA, XPU, NPU... run to its local process's device (`set_device(local_process_index %
    device_count())`), but for MULTI_NEURON only reads torch.neuron.current_device(), which is 0 in
    every process that bound nothing: under `accelerate launch` or `torchrun`, every rank got
    neuron:0. A neuron rank is bound as a CUDA rank is, before accelerate reads the current device."""

    def patch(state):
        cls = getattr(state, "PartialState", None)
        original = getattr(cls, "set_device", None)
        multi_neuron = getattr(getattr(state, "DistributedType", None), "MULTI_NEURON", None)
        if original is None or multi_neuron is None or getattr(original, "_neuron", False):
            return

        def set_device(self):
            if self.device is None and self.distributed_type == multi_neuron:
                torch.neuron.set_device(self.local_process_index % torch.neuron.device_count())
            return original(self)

        set_device._neuron = True
        set_device.__wrapped__ = original
        cls.set_device = set_device

    after_import("accelerate.state", patch)


STATIC_CACHE_BUCKET = 256


def static_cache_bucket(length: int) -> int:
    """The cache length generate allocates on neuron for `length` tokens: the next power of two from
    64 up to STATIC_CACHE_BUCKET, then the next multiple of STATIC_CACHE_BUCKET. Few lengths (few
    decode programs), and a short prompt does not attend over a long cache."""
    if length > STATIC_CACHE_BUCKET:
        return -(-length // STATIC_CACHE_BUCKET) * STATIC_CACHE_BUCKET
    return max(64, 1 << (length - 1).bit_length())


SLIDING_WINDOW_LENGTHS = r".*\.cumulative_length_int"


def generate_static_cache_programs() -> None:
    """transformers' generate with a static KV cache compiles its decode step with backend "neuron"
    and static shapes, which costs a decode program per cache length, and per step for a
    sliding-window cache until its window fills. On neuron:
    - the cache length is rounded up (static_cache_bucket, within the model's
      max_position_embeddings), unless the user sets generation_config.max_cache_len: prompts of
      many lengths share one decode program;
    - a sliding-window layer's Python count of cached tokens (StaticSlidingWindowLayer.
      cumulative_length_int, on which Dynamo would guard value by value) is compiled as a symbolic
      integer: two decode programs, before and after the window fills (compile/per_shape.py keeps
      an integer that sizes no tensor an argument of the program).
    The rounding stays inside generate: the cache it returns (output.past_key_values) is cut back
    to the length the CPU gives it, and the length generate keeps for its next call
    (model._previous_max_cache_length) is the CPU's too."""

    def patch(generation_utils):
        from transformers.cache_utils import StaticLayer

        mixin = generation_utils.GenerationMixin
        prepare = mixin._prepare_cache_for_generation
        if getattr(prepare, "_neuron", False):
            return

        @functools.wraps(prepare)
        def prepare_cache(self, generation_config, model_kwargs, generation_mode, batch_size, max_cache_length,
                          *args, **kwargs):
            if (self.device.type != "neuron" or generation_config.max_cache_len is not None
                    or generation_config.cache_implementation not in generation_utils.ALL_STATIC_CACHE_IMPLEMENTATIONS
                    or model_kwargs.get("past_key_values") is not None):
                return prepare(self, generation_config, model_kwargs, generation_mode, batch_size, max_cache_length,
                               *args, **kwargs)
            # the length the CPU allocates (transformers' _prepare_static_cache never shrinks a model's cache)
            length = max(max_cache_length, getattr(self, "_previous_max_cache_length", -1))
            bucket = static_cache_bucket(length)
            limit = getattr(self.config.get_text_config(decoder=True), "max_position_embeddings", None)
            bucket = min(bucket, max(length, limit)) if isinstance(limit, int) else bucket
            result = prepare(self, generation_config, model_kwargs, generation_mode, batch_size, bucket,
                             *args, **kwargs)
            self._previous_max_cache_length = length
            cache = model_kwargs.get("past_key_values")
            cache = getattr(cache, "self_attention_cache", cache)  # an encoder-decoder's cross cache is not rounded
            if cache is not None:
                cache._neuron_visible_length = length
            return result

        def cut_to_cpu_length(output):
            cache = getattr(output, "past_key_values", None)
            cache = getattr(cache, "self_attention_cache", cache)
            length = getattr(cache, "__dict__", {}).pop("_neuron_visible_length", None)
            if length is None:
                return
            for layer in cache.layers:
                if not isinstance(layer, StaticLayer):
                    continue
                visible = min(layer.max_cache_len, length)  # a sliding layer holds at most its window
                layer.max_cache_len = visible
                if getattr(layer, "is_initialized", False) and layer.keys.shape[-2] > visible:
                    # a copy of the CPU's size and layout, static for Dynamo as the layer's own tensors are
                    layer.keys = layer.keys[:, :, :visible].clone()
                    layer.values = layer.values[:, :, :visible].clone()
                    torch._dynamo.mark_static_address(layer.keys)
                    torch._dynamo.mark_static_address(layer.values)

        generate = mixin.generate

        @functools.wraps(generate)
        def generate_with_cpu_cache_length(self, *args, **kwargs):
            output = generate(self, *args, **kwargs)
            cut_to_cpu_length(output)
            return output

        prepare_cache._neuron = True
        generate_with_cpu_cache_length._neuron = True
        mixin._prepare_cache_for_generation = prepare_cache
        mixin.generate = generate_with_cpu_cache_length

    def patch_compiled_call(modeling_utils):
        model_class = modeling_utils.PreTrainedModel
        if getattr(model_class.get_compiled_call, "_neuron", False):
            return
        compiled_call = model_class.get_compiled_call

        @functools.wraps(compiled_call)
        def get_compiled_call(self, compile_config):
            call = compiled_call(self, compile_config)
            if self.device.type != "neuron":
                return call

            @functools.wraps(call)
            def call_with_sliding_lengths(*args, **kwargs):
                sources = torch.compiler.config.dynamic_sources
                if SLIDING_WINDOW_LENGTHS in sources.split(","):
                    return call(*args, **kwargs)
                widened = ",".join(filter(None, (sources, SLIDING_WINDOW_LENGTHS)))
                with torch.compiler.config.patch(dynamic_sources=widened):
                    return call(*args, **kwargs)

            return call_with_sliding_lengths

        get_compiled_call._neuron = True
        model_class.get_compiled_call = get_compiled_call

    after_import("transformers.generation.utils", patch)
    after_import("transformers.modeling_utils", patch_compiled_call)


def install() -> None:
    accelerate_max_memory()
    accelerate_local_rank_device()
    generate_static_cache_programs()
