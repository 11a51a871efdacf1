"""torch.compile on neuron: the "neuron" backend (backend.py), Inductor on neuron (inductor.py),
the disk cache (cache.py) and the counters (stats.py)."""
from .stats import compile_stats, reset_compile_stats

__all__ = ["compile_stats", "reset_compile_stats"]


def _register_lazily() -> None:
    """Registers the Dynamo backend and Inductor's neuron code generator when those modules load:
    importing them eagerly would double the cost of `import torch`."""
    from .. import _patches

    def register_backend(registry):
        if "neuron" not in registry._BACKENDS:  # else its entry point is being loaded
            from .backend import neuron_backend

            registry.register_backend(compiler_fn=neuron_backend, name="neuron")

    def register_inductor(_module):
        from . import cache, inductor

        cache.configure()
        inductor.register()

    _patches.after_import("torch._dynamo.backends.registry", register_backend)
    _patches.after_import("torch._inductor.runtime.cache_dir_utils", lambda _m: _configure_cache())
    _patches.after_import("torch._inductor.compile_fx", register_inductor)


def _configure_cache() -> None:
    from . import cache

    cache.configure()
