"""The `neuron` process-group backend for torch.distributed.

Importing torch_neuronx registers it for device "neuron", so `init_process_group("neuron")`,
`init_process_group()` with neuron tensors, DeviceMesh("neuron", ...), DTensor, FSDP2 and
accelerate's MULTI_NEURON all reach ProcessGroupNeuron (csrc/distributed/).

Ranks that share a host read and write each other's device memory in place (the memory files
are handed over a unix socket); a group that spans hosts runs its collectives through gloo, with
tensors staged through host memory. The choice is made per group from each rank's host identity,
exchanged through the group's store.
TORCH_NEURONX_DIST_TRANSPORT=host forces the gloo path on one host (to test it); `shm` insists on
shared memory and fails if the ranks are not on one host.
"""

from __future__ import annotations

import os
import socket

import torch
import torch.distributed as dist

from . import _C


def _host_identity() -> str:
    """Ranks can share device memory when they run on one kernel in one IPC, PID and network
    namespace (the memory files travel over abstract unix sockets, which are per network
    namespace)."""
    parts = [socket.gethostname()]
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            parts.append(f.read().strip())
    except OSError:
        pass
    for ns in ("ipc", "pid", "net"):
        try:
            parts.append(os.readlink(f"/proc/self/ns/{ns}"))
        except OSError:
            pass
    return "|".join(parts)


def _create_backend(opts, backend_options):
    store, rank, size, timeout = opts.store, opts.group_rank, opts.group_size, opts.timeout
    transport = _C._dist_transport_setting()  # parsed strictly, like every setting
    store.set(f"neuronx_host/{rank}", _host_identity())
    hosts = {store.get(f"neuronx_host/{r}").decode() for r in range(size)}
    ranks = list(opts.global_ranks_in_group or range(size))
    label = f"group '{opts.group_id}' (global ranks {ranks})"
    if transport == "shm" and len(hosts) > 1:
        raise RuntimeError(
            f"neuron: TORCH_NEURONX_DIST_TRANSPORT=shm, but the ranks of {label} run on {len(hosts)} hosts"
        )
    host = None
    if transport == "host" or len(hosts) > 1:
        host = dist.ProcessGroupGloo(dist.PrefixStore("neuronx_gloo/", store), rank, size, timeout)
    return _C._create_process_group(store, rank, size, timeout, label, host)


def transport(group=None) -> str:
    """'shm' or 'host': how the neuron backend of `group` (default: the default group) moves data."""
    pg = group if group is not None else dist.group.WORLD
    return _C._process_group_transport(pg._get_backend(torch.device("neuron")))


def _register() -> None:
    if not dist.is_available() or "neuron" in dist.Backend.backend_list:
        return
    dist.Backend.register_backend("neuron", _create_backend, extended_api=True, devices=["neuron"])
