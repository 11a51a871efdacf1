"""Scenario group "collectives": every c10d collective, on the world group and (with 4 ranks) on the
sub-group [1, 3], in several dtypes; functional collectives, one compiled; object collectives.

Each rank's input is drawn from a generator seeded by (scenario, rank), so every rank can compute
what every other rank contributed, and from that the exact expected result. Sources and
destinations are the group's last rank, so that "rank 0" defaults cannot pass by accident; split
sizes are uneven for the same reason.
"""
import os
import time
import zlib

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc

from common import Skip

FLOATS = [torch.float32, torch.bfloat16, torch.float16]
DTYPES = FLOATS + [torch.int32, torch.int64]
# (atol, rtol): one rounding per partial sum at most, over at most 4 ranks
TOL = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (2e-2, 1.6e-2), torch.float16: (2e-3, 2e-3),
       torch.int32: (0, 0), torch.int64: (0, 0)}
OPS = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "min": dist.ReduceOp.MIN,
       "max": dist.ReduceOp.MAX, "product": dist.ReduceOp.PRODUCT}


class Group:
    """A group seen from one rank: its global ranks, this rank's index in it (None: not a member)."""

    def __init__(self, label, pg, ranks, rank):
        self.label, self.pg, self.ranks = label, pg or dist.group.WORLD, ranks
        self.size = len(ranks)
        self.me = ranks.index(rank) if rank in ranks else None
        self.last = ranks[-1]


def contrib(name, rank, shape, dtype, kind="normal"):
    """What `rank` puts into scenario `name`: the same on every rank that asks."""
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()) * 64 + rank)
    if kind == "product":  # near 1, so that a product over 4 ranks stays in range for every dtype
        x = 1 + 0.1 * torch.randn(shape, generator=g) if dtype.is_floating_point \
            else torch.randint(1, 3, shape, generator=g)
    elif dtype.is_floating_point:
        x = torch.randn(shape, generator=g)
    else:
        x = torch.randint(-50, 50, shape, generator=g)
    return x.to(dtype)


def reduce_ref(xs, op, dtype):
    s = torch.stack([x.double() if dtype.is_floating_point else x.long() for x in xs])
    r = {"sum": lambda: s.sum(0), "avg": lambda: s.mean(0), "min": lambda: s.min(0).values,
         "max": lambda: s.max(0).values, "product": lambda: s.prod(0)}[op]()
    return r.to(dtype)


def dname(dtype):
    return str(dtype).removeprefix("torch.")


def _scenarios_for(g: Group, dtypes, full: bool):
    out = []

    def add(op, fn, dtype=None):
        name = f"collectives/{g.label}/{op}" + (f"[{dname(dtype)}]" if dtype is not None else "")
        out.append((name, lambda ctx, check: None if g.me is None else fn(ctx, check, name, dtype)))

    def mine(ctx, name, shape, dtype, kind="normal"):
        return contrib(name, ctx.rank, shape, dtype, kind).to(ctx.device)

    def everyone(name, shape, dtype, kind="normal"):
        return [contrib(name, r, shape, dtype, kind) for r in g.ranks]

    for dtype in dtypes:
        atol, rtol = TOL[dtype]

        def broadcast(ctx, check, name, dtype, atol=atol, rtol=rtol):
            t = mine(ctx, name, (5, 3), dtype)
            dist.broadcast(t, src=g.last, group=g.pg)
            check.close("broadcast", t, contrib(name, g.last, (5, 3), dtype), 0, 0)
        add("broadcast", broadcast, dtype)

        for op in OPS:
            if op == "avg" and not dtype.is_floating_point:
                continue
            if op == "product" and not full and dtype != torch.float32:
                continue

            def all_reduce(ctx, check, name, dtype, op=op, atol=atol, rtol=rtol):
                kind = "product" if op == "product" else "normal"
                t = mine(ctx, name, (7, 5), dtype, kind)
                dist.all_reduce(t, op=OPS[op], group=g.pg)
                check.close(op, t, reduce_ref(everyone(name, (7, 5), dtype, kind), op, dtype), atol, rtol)
            add(f"all_reduce_{op}", all_reduce, dtype)

        def all_reduce_coalesced(ctx, check, name, dtype, atol=atol, rtol=rtol):
            shapes = [(3, 4), (11,)]
            ts = [mine(ctx, name + str(i), s, dtype) for i, s in enumerate(shapes)]
            dist.all_reduce_coalesced(ts, group=g.pg)
            for i, (t, s) in enumerate(zip(ts, shapes)):
                check.close(f"tensor {i}", t, reduce_ref(everyone(name + str(i), s, dtype), "sum", dtype), atol, rtol)
        add("all_reduce_coalesced", all_reduce_coalesced, dtype)

        def reduce(ctx, check, name, dtype, atol=atol, rtol=rtol):
            t = mine(ctx, name, (4, 6), dtype)
            dist.reduce(t, dst=g.last, op=dist.ReduceOp.SUM, group=g.pg)
            if ctx.rank == g.last:
                check.close("dst", t, reduce_ref(everyone(name, (4, 6), dtype), "sum", dtype), atol, rtol)
            else:
                check.true("non-dst ranks returned", True)
        add("reduce", reduce, dtype)

        def all_gather(ctx, check, name, dtype):
            outs = [torch.empty(3, 2, dtype=dtype, device=ctx.device) for _ in g.ranks]
            dist.all_gather(outs, mine(ctx, name, (3, 2), dtype), group=g.pg)
            for o, e, r in zip(outs, everyone(name, (3, 2), dtype), g.ranks):
                check.close(f"from rank {r}", o, e)
        add("all_gather", all_gather, dtype)

        def all_gather_into_tensor(ctx, check, name, dtype):
            o = torch.empty(3 * g.size, 4, dtype=dtype, device=ctx.device)
            dist.all_gather_into_tensor(o, mine(ctx, name, (3, 4), dtype), group=g.pg)
            check.close("gathered", o, torch.cat(everyone(name, (3, 4), dtype)))
        add("all_gather_into_tensor", all_gather_into_tensor, dtype)

        def reduce_scatter(ctx, check, name, dtype, atol=atol, rtol=rtol):
            # input i of rank r is chunk i of rank r's (size*3, 2) contribution
            ins = list(mine(ctx, name, (g.size * 3, 2), dtype).chunk(g.size))
            o = torch.empty(3, 2, dtype=dtype, device=ctx.device)
            dist.reduce_scatter(o, ins, group=g.pg)
            full = reduce_ref(everyone(name, (g.size * 3, 2), dtype), "sum", dtype)
            check.close("my chunk", o, full.chunk(g.size)[g.me], atol, rtol)
        add("reduce_scatter", reduce_scatter, dtype)

        def reduce_scatter_tensor(ctx, check, name, dtype, atol=atol, rtol=rtol):
            ops = ["sum", "avg"] if dtype.is_floating_point else ["sum"]
            for op in ops:
                t = mine(ctx, name + op, (g.size * 2, 5), dtype)
                o = torch.empty(2, 5, dtype=dtype, device=ctx.device)
                dist.reduce_scatter_tensor(o, t, op=OPS[op], group=g.pg)
                full = reduce_ref(everyone(name + op, (g.size * 2, 5), dtype), op, dtype)
                check.close(op, o, full.chunk(g.size)[g.me], atol, rtol)
        add("reduce_scatter_tensor", reduce_scatter_tensor, dtype)

        def all_to_all(ctx, check, name, dtype, uneven=True):
            # group rank i sends i + 2j + 1 rows to group rank j: every pair a different length
            if uneven and ctx.backend == "gloo":
                raise Skip("gloo's list all_to_all needs equal sizes (ProcessGroupGloo::alltoall: invalid tensor size)")
            n = (lambda i, j: i + 2 * j + 1) if uneven else (lambda i, j: 3)  # noqa: E731
            ins = [contrib(f"{name}/{g.me}->{j}", ctx.rank, (n(g.me, j), 2), dtype).to(ctx.device)
                   for j in range(g.size)]
            outs = [torch.empty(n(i, g.me), 2, dtype=dtype, device=ctx.device) for i in range(g.size)]
            dist.all_to_all(outs, ins, group=g.pg)
            for i, o in enumerate(outs):
                check.close(f"from {i}", o, contrib(f"{name}/{i}->{g.me}", g.ranks[i], (n(i, g.me), 2), dtype))
        add("all_to_all", lambda ctx, check, name, dtype: all_to_all(ctx, check, name, dtype, uneven=False), dtype)
        add("all_to_all_uneven", all_to_all, dtype)

        def all_to_all_single(ctx, check, name, dtype):
            n = lambda i, j: i + 2 * j + 1  # noqa: E731
            send = [n(g.me, j) for j in range(g.size)]
            recv = [n(i, g.me) for i in range(g.size)]
            t = mine(ctx, name, (sum(send), 3), dtype)
            o = torch.empty(sum(recv), 3, dtype=dtype, device=ctx.device)
            dist.all_to_all_single(o, t, output_split_sizes=recv, input_split_sizes=send, group=g.pg)
            exp = []
            for i, r in enumerate(g.ranks):
                theirs = contrib(name, r, (sum(n(i, j) for j in range(g.size)), 3), dtype)
                exp.append(theirs.split([n(i, j) for j in range(g.size)])[g.me])
            check.close("received", o, torch.cat(exp))
        add("all_to_all_single", all_to_all_single, dtype)

        def send_recv(ctx, check, name, dtype):
            # a ring; even group ranks send first so blocking calls cannot all wait on each other
            nxt, prv = g.ranks[(g.me + 1) % g.size], g.ranks[(g.me - 1) % g.size]
            t = mine(ctx, name, (6,), dtype)
            o = torch.empty(6, dtype=dtype, device=ctx.device)
            if g.me % 2 == 0:
                dist.send(t, nxt, group=g.pg)
                dist.recv(o, prv, group=g.pg)
            else:
                dist.recv(o, prv, group=g.pg)
                dist.send(t, nxt, group=g.pg)
            check.close("from previous", o, contrib(name, prv, (6,), dtype))
        add("send_recv", send_recv, dtype)

        def isend_irecv(ctx, check, name, dtype):
            # both calls are posted before either is waited on; even group ranks post the send first
            # and odd ones the receive, the order that also suits backends running them in stream order
            nxt, prv = g.ranks[(g.me + 1) % g.size], g.ranks[(g.me - 1) % g.size]
            o = torch.empty(9, dtype=dtype, device=ctx.device)
            t = mine(ctx, name, (9,), dtype)
            if g.me % 2 == 0:
                works = [dist.isend(t, nxt, group=g.pg), dist.irecv(o, prv, group=g.pg)]
            else:
                works = [dist.irecv(o, prv, group=g.pg), dist.isend(t, nxt, group=g.pg)]
            for w in works:
                w.wait()
            check.close("from previous", o, contrib(name, prv, (9,), dtype))
        add("isend_irecv", isend_irecv, dtype)

        def batch_isend_irecv(ctx, check, name, dtype):
            # every rank lists the same thing, the way PyTorch's documentation shows it
            nxt, prv = g.ranks[(g.me + 1) % g.size], g.ranks[(g.me - 1) % g.size]
            o = torch.empty(5, 2, dtype=dtype, device=ctx.device)
            ops = [dist.P2POp(dist.isend, mine(ctx, name, (5, 2), dtype), nxt, group=g.pg),
                   dist.P2POp(dist.irecv, o, prv, group=g.pg)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()
            check.close("from previous", o, contrib(name, prv, (5, 2), dtype))
        add("batch_isend_irecv", batch_isend_irecv, dtype)

        def gather(ctx, check, name, dtype):
            outs = [torch.empty(2, 3, dtype=dtype, device=ctx.device) for _ in g.ranks] \
                if ctx.rank == g.last else None
            dist.gather(mine(ctx, name, (2, 3), dtype), outs, dst=g.last, group=g.pg)
            if outs is None:
                check.true("non-dst ranks returned", True)
                return
            for o, e, r in zip(outs, everyone(name, (2, 3), dtype), g.ranks):
                check.close(f"from rank {r}", o, e)
        add("gather", gather, dtype)

        def scatter(ctx, check, name, dtype):
            o = torch.empty(4, dtype=dtype, device=ctx.device)
            pieces = contrib(name, g.last, (g.size, 4), dtype)
            ins = [p.to(ctx.device) for p in pieces] if ctx.rank == g.last else None
            dist.scatter(o, ins, src=g.last, group=g.pg)
            check.close("my piece", o, pieces[g.me])
        add("scatter", scatter, dtype)

    def async_ops(ctx, check, name, _):
        t1 = mine(ctx, name + "ar", (8,), torch.float32)
        t2 = torch.empty(2 * g.size, device=ctx.device)
        t3 = torch.empty(2, device=ctx.device)
        t4 = mine(ctx, name + "bc", (3,), torch.float32)
        works = [dist.all_reduce(t1, group=g.pg, async_op=True),
                 dist.all_gather_into_tensor(t2, mine(ctx, name + "ag", (2,), torch.float32), group=g.pg,
                                             async_op=True),
                 dist.reduce_scatter_tensor(t3, mine(ctx, name + "rs", (2 * g.size,), torch.float32),
                                            group=g.pg, async_op=True),
                 dist.broadcast(t4, src=g.last, group=g.pg, async_op=True)]
        for w in works:
            w.wait()
        check.close("all_reduce", t1, reduce_ref(everyone(name + "ar", (8,), torch.float32), "sum", torch.float32),
                    1e-5, 1e-5)
        check.close("all_gather_into_tensor", t2, torch.cat(everyone(name + "ag", (2,), torch.float32)))
        rs = reduce_ref(everyone(name + "rs", (2 * g.size,), torch.float32), "sum", torch.float32)
        check.close("reduce_scatter_tensor", t3, rs.chunk(g.size)[g.me], 1e-5, 1e-5)
        check.close("broadcast", t4, contrib(name + "bc", g.last, (3,), torch.float32))
    add("async_op", async_ops)

    def barrier(ctx, check, name, _):
        # the last rank arrives late: nobody may leave before it arrived
        if ctx.rank == g.last:
            time.sleep(0.3)
        arrived = time.time()
        dist.barrier(group=g.pg)
        left = time.time()
        arrivals = [None] * g.size
        dist.all_gather_object(arrivals, arrived, group=g.pg)
        check.true("left after the last arrival", left >= max(arrivals),
                   f"left at {left:.3f}, last arrival {max(arrivals):.3f}")
    add("barrier", barrier)

    def functional(ctx, check, name, _):
        x = mine(ctx, name, (g.size * 2, 3), torch.float32)
        xs = everyone(name, (g.size * 2, 3), torch.float32)
        total = reduce_ref(xs, "sum", torch.float32)
        check.close("all_reduce", fc.wait_tensor(fc.all_reduce(x, "sum", g.pg)), total, 1e-5, 1e-5)
        check.close("all_gather_tensor", fc.wait_tensor(fc.all_gather_tensor(x, 0, g.pg)), torch.cat(xs))
        check.close("reduce_scatter_tensor", fc.wait_tensor(fc.reduce_scatter_tensor(x, "sum", 0, g.pg)),
                    total.chunk(g.size)[g.me], 1e-5, 1e-5)
        # unlike dist.broadcast, the functional form takes the source's rank in the group
        check.close("broadcast", fc.wait_tensor(fc.broadcast(x, g.size - 1, g.pg)), xs[-1])
        check.true("input untouched", torch.equal(x.cpu(), xs[g.me]))
    add("functional", functional)

    def objects(ctx, check, name, _):
        mine_obj = {"rank": ctx.rank, "payload": list(range(ctx.rank + 1)), "name": name}
        got = [None] * g.size
        dist.all_gather_object(got, mine_obj, group=g.pg)
        check.equal("all_gather_object", got,
                    [{"rank": r, "payload": list(range(r + 1)), "name": name} for r in g.ranks])
        objs = [("from", ctx.rank), {"k": ctx.rank * 10}] if ctx.rank == g.last else [None, None]
        dist.broadcast_object_list(objs, src=g.last, group=g.pg)
        check.equal("broadcast_object_list", objs, [("from", g.last), {"k": g.last * 10}])
    add("objects", objects)
    return out


def compiled(ctx, check):
    """A torch.compile'd function around a functional all_reduce: one graph, collective included."""
    backend = "neuron" if ctx.device.type == "neuron" else "aot_eager"
    name = "collectives/world/compiled"

    def step(x):
        return fc.all_reduce(x * 2, "sum", dist.group.WORLD) + 1

    fn = torch.compile(step, backend=backend, fullgraph=True)
    x = contrib(name, ctx.rank, (4, 4), torch.float32).to(ctx.device)
    expected = reduce_ref([contrib(name, r, (4, 4), torch.float32) * 2 for r in range(ctx.world)], "sum",
                          torch.float32) + 1
    check.close(f"backend={backend}", fn(x), expected, 1e-5, 1e-5)
    check.close("second call, new values", fn(x + 1), expected + 2 * ctx.world, 1e-5, 1e-5)


def transport(ctx, check):
    """The neuron backend moves data the way TORCH_NEURONX_DIST_TRANSPORT asks (shared memory when
    the ranks share a host, unless told to go through gloo)."""
    if ctx.backend != "neuron":
        raise Skip("only the neuron backend has transports")
    import torch_neuronx.distributed as nd
    want = "host" if os.environ.get("TORCH_NEURONX_DIST_TRANSPORT") == "host" else "shm"
    want = os.environ.get("NEURONX_TEST_TRANSPORT", want)  # two hosts (test_two_hosts.py): hybrid
    check.equal("transport", nd.transport(), want)


def scenarios(ctx):
    world = Group("world", None, list(range(ctx.world)), ctx.rank)
    out = [("collectives/world/transport", transport)]
    out += _scenarios_for(world, DTYPES, full=True)
    out.append(("collectives/world/compiled", compiled))
    if ctx.world >= 4:
        # every rank must create the group, members or not
        sub = [1, 3]
        g13 = Group("group[1,3]", dist.new_group(sub), sub, ctx.rank)
        out += _scenarios_for(g13, [torch.float32, torch.bfloat16, torch.int64], full=False)
    return out
