"""Device memory statistics of the neuron caching allocator (the torch.cuda memory API)."""
from __future__ import annotations

import pickle
import sys

import torch

from . import _C
from ._device import device_index


def memory_stats(device=None) -> dict:
    return torch.accelerator.memory_stats(device_index(device))


def memory_allocated(device=None) -> int:
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device=None) -> int:
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device=None) -> int:
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device=None) -> int:
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device=None) -> None:
    torch.accelerator.reset_peak_memory_stats(device_index(device))


def reset_accumulated_memory_stats(device=None) -> None:
    torch.accelerator.reset_accumulated_memory_stats(device_index(device))


def empty_cache() -> None:
    """Returns cached, unused device memory to the device (waits for queued work first)."""
    torch._C._accelerator_emptyCache()


def mem_get_info(device=None) -> tuple:
    """(free, total) bytes of the logical core's device memory."""
    return torch._C._accelerator_getMemoryInfo(device_index(device))


def _fmt(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """A table of the allocator's statistics, like torch.cuda.memory_summary()."""
    idx = device_index(device)
    s = memory_stats(idx)
    free, total = mem_get_info(idx)
    props = _C._device_properties(idx)
    rows = [
        ("Allocated memory", "allocated_bytes", True),
        ("Active memory", "active_bytes", True),
        ("Requested memory", "requested_bytes", True),
        ("Reserved memory", "reserved_bytes", True),
        ("Allocations", "allocation", False),
        ("Active allocs", "active", False),
        ("Device segments", "segment", False),
    ]
    width = 75
    lines = ["=" * width,
             f" neuron:{idx} memory summary — {props['description']}, {_fmt(total)} device memory".ljust(width),
             "-" * width,
             f"{'Metric':<22}{'Cur Usage':>13}{'Peak Usage':>13}{'Tot Alloc':>13}{'Tot Freed':>13}",
             "-" * width]
    pools = [("all", "")] if abbreviated else [("all", ""), ("large_pool", "  from large pool"),
                                                ("small_pool", "  from small pool")]
    for title, key, is_bytes in rows:
        for pool, label in pools:
            vals = [s.get(f"{key}.{pool}.{k}", 0) for k in ("current", "peak", "allocated", "freed")]
            cells = [_fmt(v) if is_bytes else str(v) for v in vals]
            name = title if not label else label
            lines.append(f"{name:<22}" + "".join(f"{c:>13}" for c in cells))
        lines.append("-" * width)
    lines.append(f"{'Device free / total':<22}{_fmt(free):>13}{_fmt(total):>13}")
    lines.append(f"{'Alloc retries / OOMs':<22}{s.get('num_alloc_retries', 0):>13}{s.get('num_ooms', 0):>13}")
    lines.append("=" * width)
    return "\n".join(lines)


def set_per_process_memory_fraction(fraction: float, device=None) -> None:
    """Limits this process's caching allocator on `device` to `fraction` of its memory, as
    torch.cuda's: an allocation that would reserve more raises torch.OutOfMemoryError."""
    if not isinstance(fraction, (int, float)) or isinstance(fraction, bool):
        raise TypeError(f"neuron: invalid memory fraction {fraction!r}: expected a float between 0 and 1")
    _C._set_memory_fraction(float(fraction), device_index(device))


def get_per_process_memory_fraction(device=None) -> float:
    return _C._memory_fraction(device_index(device))


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries: int = sys.maxsize,
                           clear_history: bool = False) -> None:
    """Records what allocates device memory, as torch.cuda.memory._record_memory_history: with
    `enabled="state"` the stack of every live block, with "all" also a log of the allocator's
    actions (the newest `max_entries`); None stops. `context` picks which actions keep stacks
    (None, "state", "alloc", "all"); `stacks="python"` leaves out C++ frames. Read it with
    `_snapshot()`."""
    if enabled not in (None, "state", "all"):
        raise ValueError(f"neuron: _record_memory_history(enabled={enabled!r}): expected None, 'state' or 'all'")
    if context not in (None, "state", "alloc", "all"):
        raise ValueError(f"neuron: _record_memory_history(context={context!r}): expected None, 'state', 'alloc' "
                         "or 'all'")
    if stacks not in ("python", "all"):
        raise ValueError(f"neuron: _record_memory_history(stacks={stacks!r}): expected 'python' or 'all'")
    if not isinstance(max_entries, int) or isinstance(max_entries, bool) or max_entries <= 0:
        raise ValueError(f"neuron: _record_memory_history(max_entries={max_entries!r}): expected a positive int")
    _C._record_memory_history(enabled or "", context or "", stacks, min(max_entries, 2**63 - 1), clear_history)


def _snapshot(device=None) -> dict:
    """The allocator's segments and blocks now, and the recorded history, in torch.cuda.memory's
    snapshot format: torch.cuda._memory_viz and pytorch.org/memory_viz read it."""
    return _C._memory_snapshot()


def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    """Pickles `_snapshot()` to `filename`, for pytorch.org/memory_viz."""
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)


def memory_snapshot() -> list:
    """The allocator's segments (torch.cuda.memory_snapshot())."""
    return _snapshot()["segments"]
