"""`torch.neuron`: the device module, mirroring `torch.cuda`."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Optional, Union

import torch

from . import _C
from . import _device as _utils  # noqa: F401  (torch.serialization asks torch.neuron._utils)
from . import random  # noqa: F401  (torch.neuron.random, as torch.cuda.random)
from ._device import _get_device_index, device_index  # noqa: F401
from .graphs import (  # noqa: F401  (re-exported as torch.neuron.*)
    NeuronGraph,
    graph,
    graph_pool_handle,
    is_current_stream_capturing,
    make_graphed_callables,
)
from .multiprocessing import ipc_collect  # noqa: F401  (re-exported as torch.neuron.*)
from . import memory  # noqa: F401  (torch.neuron.memory, as torch.cuda.memory)
from .memory import (  # noqa: F401  (re-exported as torch.neuron.*)
    _record_memory_history,
    _snapshot,
    empty_cache,
    get_per_process_memory_fraction,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_snapshot,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
    set_per_process_memory_fraction,
)
from .random import (  # noqa: F401  (re-exported as torch.neuron.*)
    _get_generator,
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
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


def __getattr__(name):
    # Attributes read as torch.cuda's module variables, answered when asked:
    # - `_initialized`: torch.utils.checkpoint saves and restores a device's RNG state only when
    #   it is true, so recomputed dropout masks equal the forward's;
    # - `default_generators`, one per device, made on first access (importing starts nothing).
    if name == "_initialized":
        return is_initialized()
    if name == "default_generators":
        return random._generators()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    description: str = ""
    software: bool = False
    type: str = "neuron"


def get_device_properties(device: _device_t = None) -> _NeuronDeviceProperties:
    _lazy_init()
    return _NeuronDeviceProperties(**_C._device_properties(device_index(device)))


def device_health(device: _device_t = None) -> str:
    """"healthy", "unhealthy" or "unknown", as nobs reports it: this process's view of the device
    (an injected memory error, a hung queue) and what every other process using it publishes.
    Work on a device with an uncorrectable memory error in this process raises at the call."""
    idx = device_index(device)
    status, _ = _C._device_health(idx)
    if status != "healthy":
        return status
    from .observer import state

    return state.device_health(state.read(), idx)[0]


def get_device_name(device: _device_t = None) -> str:
    """"neuron", as Trainium's PyTorch backend names its devices; the chip is
    get_device_properties(device).name ("trn2", "trn3"): tools that recognise Trainium (TorchTitan's
    MFU table) read the two."""
    get_device_properties(device)  # checks the index
    return "neuron"


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


# ---- dtypes and autocast ---------------------------------------------------------------------


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def get_amp_supported_dtype() -> list:
    # Trainium computes in bf16 natively; fp16 is supported by the hardware too.
    return [torch.bfloat16, torch.float16]


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


_busy_marks: dict = {}  # device -> (wall ns, busy ns) at the previous utilization() call


def utilization(device: _device_t = None) -> int:
    """Percent of the time since the previous call for this device (the first call: since the
    device started) during which its queues ran tasks, as torch.cuda.utilization() reports the
    share of its sample period in which a kernel ran. Streams busy at once count up to 100."""
    import time

    _lazy_init()
    idx = device_index(device)
    now, busy = time.monotonic_ns(), _C._busy_ns(idx)
    then, busy_then = _busy_marks.get(idx, (_C._started_ns(), 0))
    _busy_marks[idx] = (now, busy)
    if now <= then:
        return 0
    return max(0, min(100, round(100 * (busy - busy_then) / (now - then))))
