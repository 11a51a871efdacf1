"""The `neuron` process-group backend for torch.distributed.

Importing torch_neuronx registers it for device "neuron", so `init_process_group("neuron")`,
`init_process_group()` with neuron tensors, DeviceMesh("neuron", ...), DTensor, FSDP2 and
accelerate's MULTI_NEURON all reach ProcessGroupNeuron (csrc/distributed/).

Ranks that share a host read and write each other's device memory in place (the memory files
are handed over a unix socket). A group that spans hosts is hybrid: the ranks of each host form a
shared-memory group, gloo runs between hosts, and all_reduce, all_gather and reduce_scatter are
hierarchical (inside each host onto its first rank, an exchange between those ranks, handed out
inside each host); the other collectives run through gloo over all ranks, with tensors staged
through host memory. The choice is made per group from each rank's
host identity (`_host_identity`), exchanged through the group's store.
TORCH_NEURONX_DIST_TRANSPORT=host forces gloo for everything, even on one host (to test it);
`shm` insists on shared memory and fails if the ranks are not on one host.
"""

from __future__ import annotations

import os
import socket

import torch
import torch.distributed as dist

from . import _C


HOST_ID_ENV = "TORCH_NEURONX_HOST_ID"
# The exchange between hosts gives up before the waits inside a host would: the ranks of a host
# then fail with the leader's error, which names the hosts, rather than with a bare timeout.
_LEADERS_TIMEOUT_SHARE = 0.8


def _host_identity() -> str:
    """What "one host" means to the process group: ranks can share device memory when they run on
    one kernel (boot id) in one IPC, PID and network namespace (the memory files travel over
    abstract unix sockets, which are per network namespace; the handshake checks the peers' pids).
    The hostname does not tell two network namespaces of one machine apart, nor /dev/shm, which
    they share. TORCH_NEURONX_HOST_ID overrides all of it (ranks with equal ids must still meet
    the conditions above)."""
    override = os.environ.get(HOST_ID_ENV)
    if override is not None:
        if not override.strip():
            raise ValueError(f"neuron: {HOST_ID_ENV} is set but empty; unset it or name the host")
        return f"id:{override.strip()}"
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


def _host_name(identity: str) -> str:
    """A host as errors name it: its TORCH_NEURONX_HOST_ID, else hostname and network namespace."""
    if identity.startswith("id:"):
        return identity[3:]
    parts = identity.split("|")
    net = next((p for p in parts if p.startswith("net:")), "")
    return f"{parts[0]} {net}".strip()


def _describe_hosts(hosts: list, members: dict, mine: int) -> str:
    def one(h):
        return f"host {h} '{_host_name(hosts[h])}' (ranks {members[hosts[h]]})"
    others = [one(h) for h in range(len(hosts)) if h != mine]
    return f"this rank is on {one(mine)}; other host(s): {', '.join(others)}"


def _create_backend(opts, backend_options):
    store, rank, size, timeout = opts.store, opts.group_rank, opts.group_size, opts.timeout
    transport = _C._dist_transport_setting()  # parsed strictly, like every setting
    store.set(f"neuronx_host/{rank}", _host_identity())
    ids = [store.get(f"neuronx_host/{r}").decode() for r in range(size)]
    hosts = list(dict.fromkeys(ids))  # in the order of their first rank
    ranks = list(opts.global_ranks_in_group or range(size))
    label = f"group '{opts.group_id}' (global ranks {ranks})"
    if transport == "shm" and len(hosts) > 1:
        raise RuntimeError(
            f"neuron: TORCH_NEURONX_DIST_TRANSPORT=shm, but the ranks of {label} run on {len(hosts)} hosts"
        )
    if transport != "host" and len(hosts) == 1:
        return _C._create_process_group(store, rank, size, timeout, label)
    host = dist.ProcessGroupGloo(dist.PrefixStore("neuronx_gloo/", store), rank, size, timeout)
    if transport == "host":
        return _C._create_process_group(store, rank, size, timeout, label, host)
    members = {h: [ranks[r] for r in range(size) if ids[r] == h] for h in hosts}
    mine = hosts.index(ids[rank])
    local = [r for r in range(size) if ids[r] == ids[rank]]
    leaders = None
    if local[0] == rank:
        leaders = dist.ProcessGroupGloo(dist.PrefixStore("neuronx_leaders/", store), mine, len(hosts),
                                        timeout * _LEADERS_TIMEOUT_SHARE)
    return _C._create_process_group(store, rank, size, timeout, label, host,
                                    local_store=dist.PrefixStore(f"neuronx_local/{mine}/", store),
                                    local_rank=local.index(rank), local_size=len(local), leaders=leaders,
                                    hosts=_describe_hosts(hosts, members, mine), host_index=mine,
                                    layout=[[r for r in range(size) if ids[r] == h] for h in hosts])


def transport(group=None) -> str:
    """'shm', 'host' or 'hybrid': how the neuron backend of `group` (default: the default group) moves data."""
    pg = group if group is not None else dist.group.WORLD
    return _C._process_group_transport(pg._get_backend(torch.device("neuron")))


def _register() -> None:
    if not dist.is_available() or "neuron" in dist.Backend.backend_list:
        return
    dist.Backend.register_backend("neuron", _create_backend, extended_api=True, devices=["neuron"])
