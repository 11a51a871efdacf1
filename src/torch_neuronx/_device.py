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


def _get_device_index(device, optional: bool = False, allow_cpu: bool = False) -> int:
    """torch.cuda._utils._get_device_index's contract (torch.load's map_location asks for it)."""
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if allow_cpu and device.type == "cpu":
            return -1
        if device.index is None and not optional:
            raise ValueError(f"neuron: expected a neuron device with a specified index, got {device}")
    elif device is None and not optional:
        raise ValueError("neuron: expected a neuron device, got None")
    return device_index(device)
