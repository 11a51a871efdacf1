"""torch.compile on neuron: the "neuron" backend (backend.py), Inductor on neuron (inductor.py,
and flex_attention.py for FlexAttention), the disk cache (cache.py) and the counters (stats.py)."""
from . import cache, stats
from .stats import compile_stats, reset_compile_stats

__all__ = ["compile_stats", "reset_compile_stats"]


def _register_lazily() -> None:
    """Registers Inductor's neuron code generator when Inductor loads: importing it eagerly would
    double the cost of `import torch`. (The Dynamo backend "neuron" is found through the package's
    `torch_dynamo_backends` entry point, PyTorch's way for out-of-tree backends.) Nothing here
    touches a cache: the neuron compile cache is set up by each neuron compile (cache.py), never for
    other devices."""
    from .. import _patches

    def register_inductor(module):
        from . import inductor

        inductor.register()
        _patches.inductor_neuron_compile_cache(module)

    _patches.after_import("torch._inductor.compile_fx", register_inductor)
    # what torch.compiler.load_cache_artifacts loads serves neuron compiles too
    _patches.after_import("torch.compiler._cache", lambda module: cache.keep_loaded_artifacts(module))
    # Dynamo's frame compiles are timed, and its recompile limit watched, from when Dynamo loads.
    _patches.after_import("torch._dynamo", stats.watch_dynamo)
