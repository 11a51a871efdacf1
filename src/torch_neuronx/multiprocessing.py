"""Neuron tensors across processes of the host (torch.multiprocessing, DataLoader workers,
mp.spawn arguments), as CUDA tensors are shared: the receiver maps the sender's device memory,
so both see the same storage and each other's writes. As with CUDA, the sender keeps the
memory: it stays allocated while any receiver holds the tensor (a shared count, neuronrt/ipc.h),
and a receiver must not outlive what it needs from the sender's data. Queued work on the tensor
finishes before it is sent.

Registered with multiprocessing's pickler for torch.Tensor and nn.Parameter; tensors of other
devices take PyTorch's own reduction."""
from __future__ import annotations

import multiprocessing.reduction as _reduction
import threading

import torch
from torch.multiprocessing import reductions as _torch_reductions

from . import _C

_lock = threading.Lock()
_sent: dict = {}  # slot -> storage this process shared, kept until no receiver holds it


def ipc_collect() -> None:
    """Frees the device memory this process shared that no receiver holds any more (it is also
    done at each share), as torch.cuda.ipc_collect does for CUDA IPC."""
    with _lock:
        for slot in [s for s in _sent if _C._share_count(s) == 0]:
            del _sent[slot]
            _C._share_release(slot)


def shared_blocks() -> int:
    """How many storages this process has shared that a receiver may still hold (after
    ipc_collect())."""
    ipc_collect()
    return len(_sent)


def _rebuild_neuron_tensor(cls, mem_fd, offset, nbytes, counters_fd, slot, device, dtype, size, stride,
                           storage_offset, requires_grad):
    import os

    torch.neuron._lazy_init()
    fds = (mem_fd.detach(), counters_fd.detach())  # this process's copies: the mapping keeps its own
    try:
        t = _C._open_shared_tensor(fds[0], offset, nbytes, fds[1], slot, device, dtype, list(size), list(stride),
                                   storage_offset)
    finally:
        for fd in fds:
            os.close(fd)
    if cls is torch.nn.Parameter:
        return torch.nn.Parameter(t, requires_grad=requires_grad)
    return t.requires_grad_(requires_grad)


def _reduce_neuron_tensor(tensor: torch.Tensor):
    if tensor.device.type != "neuron":
        return _torch_reductions.reduce_tensor(tensor)
    if tensor.requires_grad and not tensor.is_leaf:
        raise RuntimeError(
            "Cowardly refusing to serialize non-leaf tensor which requires_grad, since autograd does not support "
            "crossing process boundaries. If you just want to transfer the data, call detach() on the tensor "
            "before serializing (e.g., putting it on the queue).")
    if tensor.layout != torch.strided:
        raise RuntimeError(f"neuron: a {tensor.layout} neuron tensor cannot be shared with another process; "
                           "share its strided parts (indices and values) or a dense copy")
    ipc_collect()
    # The receiver reads the memory as soon as it maps it: queued writes must have landed.
    torch.neuron.synchronize(tensor.device)
    mem_fd, offset, nbytes, counters_fd, slot, own_slot = _C._share_storage(tensor)
    if own_slot:
        with _lock:
            _sent[slot] = tensor.untyped_storage()
    return (_rebuild_neuron_tensor,
            (type(tensor), _reduction.DupFd(mem_fd), offset, nbytes, _reduction.DupFd(counters_fd), slot,
             tensor.device.index, tensor.dtype, tuple(tensor.size()), tuple(tensor.stride()),
             tensor.storage_offset(), tensor.requires_grad))


def register() -> None:
    """After PyTorch's own registrations (torch.multiprocessing registers its reductions when it is
    imported, which `import torch` does)."""
    for cls in (torch.Tensor, torch.nn.Parameter):
        _reduction.ForkingPickler.register(cls, _reduce_neuron_tensor)
