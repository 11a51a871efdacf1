"""Turning a device argument (None, int, str, torch.device) into a neuron device index."""
from typing import Union

import torch

from . import _C


def device_index(device: Union[torch.device, str, int, None]) -> int:
    if device is None:
        return _C._current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != "neuron":
        raise ValueError(f"neuron: expected a neuron device, got {device}")
    return _C._current_device() if device.index is None else device.index
