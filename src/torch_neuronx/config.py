"""Every TORCH_NEURONX_* / NEURON_* setting the backend reads (the table lives in the runtime's
config module, runtime/src/config.cpp, which also parses them strictly)."""
from __future__ import annotations

from . import _C


def settings() -> list:
    """[(name, default, meaning), ...] in the order the README lists them."""
    return [tuple(s) for s in _C._settings()]
