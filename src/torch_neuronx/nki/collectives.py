"""`nki.collectives` (import as `ncc`): collective communication between NeuronCores inside a kernel.
Not supported yet: the software NeuronCore runs one kernel on one core. Every public name resolves
(`from nki.collectives import ReplicaGroup` in a module that only sometimes uses it keeps working)
and raises "not supported yet" when it is used."""
from __future__ import annotations

from ._api import NotSupportedYet


def __getattr__(name):
    if name.startswith("_"):
        raise AttributeError(f"module 'nki.collectives' has no attribute {name!r}")
    return NotSupportedYet(f"nki.collectives.{name}")
