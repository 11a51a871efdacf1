"""Which ops ran without a dedicated neuron kernel.

- fallback: the op's tensors were copied to host memory, computed there, and copied back.
  TORCH_NEURONX_FALLBACK=warn (default, once per op) | error | silent.
- queued: no dedicated kernel, but the op's meta kernel sized its outputs on the host and its CPU
  kernel was queued on the stream over device memory: asynchronous, like the dedicated kernels.
- generic: the op's CPU kernel ran in place on device memory (no copy), synchronously on the
  current stream (value-dependent shapes, random ops, views). Correct, but it does not overlap
  with the host.
"""
from . import _C


def get_fallback_ops() -> dict:
    """{op name: number of calls} of ops that fell back to the CPU since the last reset."""
    return dict(_C._fallback_ops())


def get_generic_ops() -> dict:
    """{op name: number of calls} of ops run by the generic in-place mechanism."""
    return dict(_C._generic_ops())


def get_queued_ops() -> dict:
    """{op name: number of calls} of ops queued through their meta and CPU kernels."""
    return dict(_C._queued_ops())


def reset_fallback_ops() -> None:
    """Clears all three counters."""
    _C._reset_op_counts()


def _force_fallback(ops) -> None:
    """Testing aid: route these ops (e.g. "aten::erfinv") through the CPU fallback."""
    _C._set_forced_fallback_ops(list(ops))
