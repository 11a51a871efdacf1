"""torch.compile on neuron: the "neuron" backend (backend.py), Inductor on neuron (inductor.py),
the disk cache (cache.py) and the counters (stats.py)."""
from .stats import compile_stats, reset_compile_stats

__all__ = ["compile_stats", "reset_compile_stats"]


def _register_lazily() -> None:
    """Registers the Dynamo backend and Inductor's neuron code generator when those modules load:
    importing them eagerly would double the cost of `import torch`. Nothing here touches a cache:
    the neuron compile cache is set up by each neuron compile (cache.py), never for other devices."""
    from .. import _patches

    def register_backend(registry):
        if "neuron" not in registry._BACKENDS:  # else its entry point is being loaded
            from .backend import neuron_backend

            registry.register_backend(compiler_fn=neuron_backend, name="neuron")

    def register_inductor(module):
        from . import inductor

        inductor.register()
        _patches.inductor_neuron_compile_cache(module)

    _patches.after_import("torch._dynamo.backends.registry", register_backend)
    _patches.after_import("torch._inductor.compile_fx", register_inductor)
