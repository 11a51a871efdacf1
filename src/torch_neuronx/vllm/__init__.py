"""vLLM on the neuron device: the platform plugin (entry point `vllm.platform_plugins`, name
`neuron`). vLLM calls `register()` in every process it starts; the platform, worker, model runner
and attention backend load only after it chose this platform. The general plugin of the same name
(`vllm.general_plugins`, `register_general()`) adjusts vLLM where the platform has no hook.

Another installed platform is chosen with vLLM's own filter, `VLLM_PLUGINS` (a list of plugin
names to load): an out-of-tree platform wins over vLLM's built-in CUDA/CPU detection.
"""


def register() -> str | None:
    """The NeuronPlatform's qualified name when a neuron device exists, else None."""
    import torch

    neuron = getattr(torch, "neuron", None)
    if neuron is None or not neuron.is_available():
        return None
    return "torch_neuronx.vllm.platform.NeuronPlatform"


def register_general() -> None:
    """vLLM's general plugin, run in each of its processes before the engine's configuration: on
    the neuron platform, model classes are inspected in this process
    (platform.inspect_models_in_process)."""
    if register() is not None:
        from .platform import inspect_models_in_process

        inspect_models_in_process()
