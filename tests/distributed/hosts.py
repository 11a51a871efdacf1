"""Scenario group "hosts": what is particular to a group spanning two hosts (two network
namespaces, tests/test_two_hosts.py), run by 2 x 2 ranks where ranks 0, 1 share one host and 2, 3
the other (torchrun numbers a node's ranks contiguously).

- the transports: hybrid for groups spanning hosts, shared memory for a group inside one host;
- hierarchical all_reduce on a tensor larger than a shared-memory round, every op, every rank
  bitwise equal, and a group inside one host next to it (new_group with one host's ranks).
"""
import torch
import torch.distributed as dist

from collectives import OPS, contrib, reduce_ref
from common import Skip


def _need_two_hosts(ctx):
    if ctx.backend != "neuron" or ctx.world != 4:
        raise Skip("needs the neuron backend on 2 x 2 ranks")


def transports(ctx, check):
    _need_two_hosts(ctx)
    import torch_neuronx.distributed as nd
    check.equal("world", nd.transport(), "hybrid")
    for members, want in (([2, 3], "shm"), ([1, 3], "hybrid"), ([0, 1], "shm")):
        g = dist.new_group(members)  # every rank creates every group
        if ctx.rank in members:
            check.equal(f"group {members}", nd.transport(g), want)


def large_all_reduce(ctx, check):
    """4 MiB per rank (16 x a shared-memory round's metadata buffer): every op; all ranks bitwise equal."""
    _need_two_hosts(ctx)
    for op_name, op in OPS.items():
        name = f"hosts/large_all_reduce/{op_name}"
        kind = "product" if op_name == "product" else "normal"
        x = contrib(name, ctx.rank, (1 << 20,), torch.float32, kind).to(ctx.device)
        dist.all_reduce(x, op=op)
        want = reduce_ref([contrib(name, r, (1 << 20,), torch.float32, kind) for r in range(ctx.world)], op_name,
                          torch.float32)
        check.close(op_name, x, want, 1e-5, 1e-5)
        first = x.clone()
        dist.broadcast(first, src=0)
        check.true(f"{op_name}: every rank holds rank 0's bits", torch.equal(first.cpu(), x.cpu()))


def one_host_group(ctx, check):
    """A group of one host's ranks beside the world group: its own shared memory, its own sums."""
    _need_two_hosts(ctx)
    for members in ([0, 1], [2, 3]):
        g = dist.new_group(members)
        if ctx.rank not in members:
            continue
        name = f"hosts/one_host_group/{members}"
        x = contrib(name, ctx.rank, (1000,), torch.float32).to(ctx.device)
        dist.all_reduce(x, group=g)
        check.close(f"all_reduce on {members}", x,
                    reduce_ref([contrib(name, r, (1000,), torch.float32) for r in members], "sum", torch.float32),
                    1e-5, 1e-5)
    y = torch.full((8,), float(ctx.rank), device=ctx.device)
    dist.all_reduce(y)  # the world group still works after them
    check.close("world all_reduce after", y, torch.full((8,), float(sum(range(ctx.world)))))


def scenarios(ctx):
    return [("hosts/transports", transports), ("hosts/large_all_reduce", large_all_reduce),
            ("hosts/one_host_group", one_host_group)]
