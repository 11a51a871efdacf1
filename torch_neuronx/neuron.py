"""`torch.neuron`: the device module, mirroring `torch.cuda`."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Optional, Union

import torch

from . import _C
from ._device import device_index
from .memory import (  # noqa: F401  (re-exported as torch.neuron.*)
    empty_cache,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
)

_device_t = Union[torch.device, str, int, None]
def _is_in_bad_fork() -> bool:
    """True in a process forked after its parent used the device: the runtime's queue workers do
    not survive fork, so any device use there raises (as CUDA's does)."""
    return _C._in_bad_fork()


def _lazy_init() -> None:
    if _is_in_bad_fork():
        raise RuntimeError(
            "neuron: cannot re-initialize the neuron runtime in a forked subprocess: the parent used the device "
            "before fork(). To use the neuron device with multiprocessing, use the 'spawn' start method"
        )
    err = _C._runtime_error()
    if err:
        raise RuntimeError(f"neuron: the runtime failed to start: {err}")
    _C._init()


init = _lazy_init


def is_initialized() -> bool:
    return _C._is_initialized()


def is_available() -> bool:
    return device_count() > 0


def device_count() -> int:
    return _C._device_count()


def current_device() -> int:
    return _C._current_device()


def set_device(device: _device_t) -> None:
    idx = device_index(device)
    if idx >= 0:
        _C._set_device(idx)


class device:
    """Context manager that changes the current neuron device."""

    def __init__(self, device: _device_t):
        self.idx = device_index(device) if device is not None else -1
        self.prev = -1

    def __enter__(self):
        if self.idx >= 0:
            self.prev = current_device()
            _C._set_device(self.idx)

    def __exit__(self, *exc):
        if self.prev >= 0:
            _C._set_device(self.prev)
        return False


class device_of(device):
    def __init__(self, obj):
        super().__init__(obj.get_device() if obj.device.type == "neuron" else None)


def synchronize(device: _device_t = None) -> None:
    """Waits for all work on all streams of the device; raises a failure of queued work."""
    _lazy_init()
    _C._synchronize(device_index(device))


@dataclass(frozen=True)
class _NeuronDeviceProperties:
    name: str
    profile: str
    core_version: str
    total_memory: int
    logical_core: int
    chip: int
    lnc: int
    physical_cores_per_chip: int
    logical_cores_per_chip: int
    hbm_bytes_per_s: float
    dense_bf16_flops: float
    dense_fp32_flops: float
    sbuf_bytes: int
    psum_bytes: int
    type: str = "neuron"


def get_device_properties(device: _device_t = None) -> _NeuronDeviceProperties:
    _lazy_init()
    return _NeuronDeviceProperties(**_C._device_properties(device_index(device)))


def get_device_name(device: _device_t = None) -> str:
    return get_device_properties(device).name


def get_device_capability(device: _device_t = None) -> tuple:
    return (3, 0) if get_device_properties(device).profile == "trn2" else (4, 0)


# ---- streams and events ----------------------------------------------------------------------


class Stream(torch.Stream):
    """A neuron stream: an in-order queue of the device. Lower priority numbers run first."""

    def __new__(cls, device: _device_t = None, priority: int = 0, **kwargs):
        if "stream_id" in kwargs:
            return super().__new__(cls, **kwargs)
        with globals()["device"](device):
            return super().__new__(cls, device=torch.device("neuron", current_device()), priority=priority)

    @property
    def priority(self) -> int:
        return _C._stream_priority(self.device_index, self.stream_id)

    def __repr__(self):
        return f"<torch.neuron.Stream device=neuron:{self.device_index} stream_id={self.stream_id}>"


def Event(enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> torch.Event:
    """A neuron event (a torch.Event on the current neuron device)."""
    return torch.Event(device=torch.device("neuron", current_device()), enable_timing=enable_timing,
                       blocking=blocking, interprocess=interprocess)


def _wrap(s: torch.Stream) -> Stream:
    return Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)


def current_stream(device: _device_t = None) -> Stream:
    _lazy_init()
    return _wrap(torch._C._accelerator_getStream(device_index(device)))


def default_stream(device: _device_t = None) -> Stream:
    _lazy_init()
    cur = current_stream(device)
    return Stream(stream_id=0, device_index=cur.device_index, device_type=cur.device_type)


def set_stream(stream: torch.Stream) -> None:
    if stream is None:
        return
    torch._C._accelerator_setStream(stream)


@contextlib.contextmanager
def stream(s: Optional[torch.Stream]):
    """Makes `s` the current stream of its device inside the block."""
    if s is None:
        yield
        return
    prev = current_stream(s.device_index)
    prev_device = current_device()
    _C._set_device(s.device_index)
    set_stream(s)
    try:
        yield
    finally:
        set_stream(prev)
        _C._set_device(prev_device)


# ---- random number generation ---------------------------------------------------------------


_default_generators: tuple = ()


def _generators():
    global _default_generators
    if not _default_generators:
        _default_generators = tuple(_C._default_generator(i) for i in range(device_count()))
    return _default_generators


def __getattr__(name):
    # `torch.neuron.default_generators`, one per device as `torch.cuda.default_generators` after
    # initialisation; made on first access, so importing starts nothing.
    if name == "default_generators":
        return _generators()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_rng_state(device: _device_t = None) -> torch.Tensor:
    return _generators()[device_index(device)].get_state()


def get_rng_state_all() -> list:
    return [g.get_state() for g in _generators()]


def set_rng_state(new_state: torch.Tensor, device: _device_t = None) -> None:
    _generators()[device_index(device)].set_state(new_state.cpu())


def set_rng_state_all(new_states) -> None:
    for i, s in enumerate(new_states):
        set_rng_state(s, i)


def manual_seed(seed: int) -> None:
    _generators()[current_device()].manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for g in _generators():
        g.manual_seed(int(seed))


def seed() -> None:
    _generators()[current_device()].seed()


def seed_all() -> None:
    s = _generators()[0].seed()
    for g in _generators()[1:]:
        g.manual_seed(s)


def initial_seed() -> int:
    return _generators()[current_device()].initial_seed()


# ---- dtypes and autocast ---------------------------------------------------------------------


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def get_amp_supported_dtype() -> list:
    # Trainium computes in bf16 natively; fp16 is supported by the hardware too.
    return [torch.bfloat16, torch.float16]


def _get_device_index(device: Any, optional: bool = False) -> int:
    return device_index(device)


def _sleep(ms: float) -> None:
    """Queues `ms` milliseconds of busy time on the current stream (tests use it, as CUDA's)."""
    _lazy_init()
    _C._sleep(float(ms))


def runtime_config() -> dict:
    """How the software NeuronCore was configured (profile, chips, launch blocking, sanitizer)."""
    return dict(_C._runtime_config())


def transfer_stats() -> dict:
    """Bytes copied host to device, device to host and device to device since the process
    started (transfers are not ops; torch_neuronx.op_counts() counts those)."""
    return dict(_C._transfer_stats())
