"""vLLM on the neuron device: the platform plugin (entry point `vllm.platform_plugins`, name
`neuron`). vLLM calls `register()` in every process it starts; the platform, worker, model runner
and attention backend load only after it chose this platform.

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
