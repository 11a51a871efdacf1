"""Device memory statistics of the neuron caching allocator (the torch.cuda memory API)."""
from __future__ import annotations

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
             f" neuron:{idx} memory summary — {props['name']}, {_fmt(total)} device memory".ljust(width),
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
