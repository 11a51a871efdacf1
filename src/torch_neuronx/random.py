"""`torch.neuron.random`: the devices' default generators and their states, as torch.cuda.random
(the Trainer's checkpoints restore them through it)."""
from __future__ import annotations

import torch

from . import _C
from ._device import device_index

_default_generators: tuple = ()


def _generators() -> tuple:
    global _default_generators
    if not _default_generators:
        _default_generators = tuple(_C._default_generator(i) for i in range(_C._device_count()))
    return _default_generators


def _get_generator(device: torch.device) -> torch.Generator:
    """The default generator of `device` (AOTAutograd's graph-safe RNG asks for it)."""
    return _generators()[device_index(device)]


def get_rng_state(device=None) -> torch.Tensor:
    return _generators()[device_index(device)].get_state()


def get_rng_state_all() -> list:
    return [g.get_state() for g in _generators()]


def set_rng_state(new_state: torch.Tensor, device=None) -> None:
    _generators()[device_index(device)].set_state(new_state.cpu())


def set_rng_state_all(new_states) -> None:
    for i, s in enumerate(new_states):
        set_rng_state(s, i)


def manual_seed(seed: int) -> None:
    _generators()[_C._current_device()].manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for g in _generators():
        g.manual_seed(int(seed))


def seed() -> None:
    _generators()[_C._current_device()].seed()


def seed_all() -> None:
    s = _generators()[0].seed()
    for g in _generators()[1:]:
        g.manual_seed(s)


def initial_seed() -> int:
    return _generators()[_C._current_device()].initial_seed()
