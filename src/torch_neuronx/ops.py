"""How ops ran on neuron: counts per op and mode, and the plan of any op.

Every op call that runs a kernel on the device is counted under one mode
(csrc/pipeline/op_policy.cpp says which, and why):

- async: queued on the stream; the call returned at once.
- sync:  queued, and the caller waited for it (its result decides a shape or a value the host
  needs, e.g. nonzero); no host copy.
- copy:  the CPU fallback: tensors copied to host memory and back. TORCH_NEURONX_FALLBACK=warn
  (default, once per op) | error | silent.

"first_waits" counts the async calls that waited for their kernel: the first call of each
signature (dtypes, ranks, mode arguments) waits, so an error the CPU kernel raises where the meta
kernel saw none (a dtype it does not implement) raises at the call, as on CUDA.

Transfers between host and device (`.cpu()`, `.item()`, `.to("neuron")`) are not ops; they are
counted in bytes by `torch.neuron.transfer_stats()`.
"""
from __future__ import annotations

from . import _C

_MODES = ("async", "sync", "copy")
_COUNTS = _MODES + ("first_waits", "concatenated", "solo")


def op_counts(reasons: bool = False) -> dict:
    """{op: {"async": n, "sync": n, "copy": n, "first_waits": n, "concatenated": n, "solo": n}} for
    every op called since the last reset. "concatenated" counts the async calls that ran inside one
    concatenated queue task (see set_concatenation). "solo" counts the async calls whose kernel ran
    on the queue worker alone rather than on its thread team: calls small enough that waking the
    team costs more than it saves, of kernels whose results do not depend on how their work is split
    (exact arithmetic: +, -, *, /, sqrt, neg, x ** 2, float rsqrt; sums and means into several
    outputs; copies, fills, cat, index_select; fused Adam and AdamW), so they are the team's bits.

    With reasons=True, ops with sync or copy calls also get "reasons": {mode: {why: calls}}.
    """
    out = {name: dict(zip(_COUNTS, calls)) for name, calls in _C._op_counts().items()}
    if reasons:
        for name, modes in _C._op_reasons().items():
            out.setdefault(name, dict.fromkeys(_COUNTS, 0))["reasons"] = {m: dict(r) for m, r in modes.items()}
    return out


def reset_op_counts() -> None:
    """Sets every count to zero."""
    _C._reset_op_counts()


def set_concatenation(enabled: bool, buffer_limit: int | None = None) -> bool:
    """Turns eager op concatenation on or off for the process (TORCH_NEURONX_ENABLE_CONCATENATION
    sets it at import); returns whether it was on. On, the async ops a stream queues gather into a
    segment that closes at anything else reaching the stream (a sync, a transfer, an op that does
    not run async, another thread's work) or at `buffer_limit` ops
    (TORCH_NEURONX_CONCATENATION_BUFFER_SIZE_LIMIT); a segment whose op sequence and argument
    descriptors were seen before runs as one queue task, a new one op by op. Results, errors and
    random draws are those of op-by-op execution. torch.use_deterministic_algorithms(True) turns
    it off. Turning it off runs every open segment."""
    was = _C._concatenation_enabled()
    if buffer_limit is not None:
        _C._set_concatenation_limit(int(buffer_limit))
    _C._set_concatenation(bool(enabled))
    return was


def concatenation_enabled() -> bool:
    return _C._concatenation_enabled()


def explain(op: str) -> str:
    """How `op` ("aten::nonzero", or one overload: "aten::add.Tensor") runs on neuron, why, and
    its calls so far."""
    return _C._explain(op)


def op_report() -> str:
    """A table of the counted ops, with the reasons of their sync and copy calls."""
    counts = op_counts(reasons=True)
    total = {m: sum(c[m] for c in counts.values()) for m in _COUNTS}
    lines = [f"{'op':<56}{'async':>9}{'sync':>7}{'copy':>7}{'1st-wait':>9}{'concat':>9}"]
    for name in sorted(counts, key=lambda n: (-counts[n]["sync"] - counts[n]["copy"], -counts[n]["async"], n)):
        c = counts[name]
        lines.append(f"{name:<56}{c['async']:>9}{c['sync']:>7}{c['copy']:>7}{c['first_waits']:>9}"
                     f"{c['concatenated']:>9}")
        for mode, whys in c.get("reasons", {}).items():
            for why, n in whys.items():
                lines.append(f"    {n} {mode}: {why}")
    lines.append(f"{'total':<56}{total['async']:>9}{total['sync']:>7}{total['copy']:>7}{total['first_waits']:>9}"
                 f"{total['concatenated']:>9}")
    return "\n".join(lines)
