"""Scenario group "hosts": what is particular to a group spanning two hosts (two network
namespaces, tests/test_two_hosts.py), run by 2 x 2 ranks where ranks 0, 1 share one host and 2, 3
the other (torchrun numbers a node's ranks contiguously).

- the transports: hybrid for groups spanning hosts, shared memory for a group inside one host;
- hierarchical all_reduce on a tensor larger than a shared-memory round, every op, every rank
  bitwise equal, and a group inside one host next to it (new_group with one host's ranks);
- hierarchical all_gather and reduce_scatter (both forms, every op, PREMUL_SUM included) on the
  world group and on [0, 1, 3], whose hosts have 2 ranks and 1, so the leaders' exchange pads
  the smaller host; the inputs are left as they were.
"""
import torch
import torch.distributed as dist

from collectives import OPS, TOL, contrib, dname, reduce_ref
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
    """9 MiB per rank (36 x a shared-memory round's metadata buffer, and 2 1/4 of the chunks the
    exchange between hosts pipelines): every op; all ranks bitwise equal."""
    _need_two_hosts(ctx)
    n = 9 << 18
    for op_name, op in OPS.items():
        name = f"hosts/large_all_reduce/{op_name}"
        kind = "product" if op_name == "product" else "normal"
        x = contrib(name, ctx.rank, (n,), torch.float32, kind).to(ctx.device)
        dist.all_reduce(x, op=op)
        want = reduce_ref([contrib(name, r, (n,), torch.float32, kind) for r in range(ctx.world)], op_name,
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


def gather_and_scatter(ctx, check):
    """all_gather and reduce_scatter, both forms, on groups whose hosts hold equal and unequal
    numbers of ranks, against the CPU's sums of every rank's contribution."""
    _need_two_hosts(ctx)
    for members in ([0, 1, 2, 3], [0, 1, 3]):
        g = dist.new_group(members)  # every rank creates every group
        if ctx.rank not in members:
            continue
        me, n = members.index(ctx.rank), len(members)
        for dtype in (torch.float32, torch.bfloat16, torch.int64):
            atol, rtol = TOL[dtype]
            label = f"{members} {dname(dtype)}"
            name = f"hosts/gather/{members}/{dname(dtype)}"

            def each(shape, tag):
                return [contrib(name + tag, r, shape, dtype) for r in members]
            # 2-10 pipelined chunks per rank's piece, the last one partial
            big = 1_200_000
            x = contrib(name, ctx.rank, (big,), dtype).to(ctx.device)
            out = torch.empty(n * big, dtype=dtype, device=ctx.device)
            dist.all_gather_into_tensor(out, x, group=g)
            check.true(f"all_gather_into_tensor {label}", torch.equal(out.cpu(), torch.cat(each((big,), ""))))
            outs = [torch.empty(3, 2, dtype=dtype, device=ctx.device) for _ in members]
            dist.all_gather(outs, contrib(name + "l", ctx.rank, (3, 2), dtype).to(ctx.device), group=g)
            check.true(f"all_gather {label}",
                       torch.equal(torch.stack([o.cpu() for o in outs]), torch.stack(each((3, 2), "l"))))

            ops = {k: v for k, v in OPS.items() if dtype.is_floating_point or k != "avg"}
            if dtype.is_floating_point:
                ops["premul_sum"] = dist._make_nccl_premul_sum(0.5)
            for op_name, op in ops.items():
                kind = "product" if op_name == "product" else "normal"
                tag = f"rs/{op_name}"
                t = contrib(name + tag, ctx.rank, (n * 1000, 3), dtype, kind).to(ctx.device)
                before = t.cpu()
                o = torch.empty(1000, 3, dtype=dtype, device=ctx.device)
                dist.reduce_scatter_tensor(o, t, op=op, group=g)
                xs = [contrib(name + tag, r, (n * 1000, 3), dtype, kind) for r in members]
                if op_name == "premul_sum":
                    want = reduce_ref([v.double() * 0.5 for v in xs], "sum", torch.float64).to(dtype)
                else:
                    want = reduce_ref(xs, op_name, dtype)
                check.close(f"reduce_scatter_tensor {op_name} {label}", o, want.chunk(n)[me], atol, rtol)
                check.true(f"reduce_scatter_tensor {op_name} {label}: input unchanged", torch.equal(t.cpu(), before))
            ins = list(contrib(name + "rsl", ctx.rank, (n * 3, 2), dtype).to(ctx.device).chunk(n))
            o = torch.empty(3, 2, dtype=dtype, device=ctx.device)
            dist.reduce_scatter(o, ins, group=g)
            want = reduce_ref(each((n * 3, 2), "rsl"), "sum", dtype).chunk(n)[me]
            check.close(f"reduce_scatter {label}", o, want, atol, rtol)


def scenarios(ctx):
    return [("hosts/transports", transports), ("hosts/large_all_reduce", large_all_reduce),
            ("hosts/one_host_group", one_host_group), ("hosts/gather_and_scatter", gather_and_scatter)]
