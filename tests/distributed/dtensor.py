"""Scenario group "dtensor": distribute_tensor / redistribute / Partial reductions / a few ops and
their backward on a 1-D mesh over all ranks and (4 ranks) a 2-D (2, 2) mesh; DTensor random ops.

The tensors are the same on every rank (seeded), except the local parts of Partial DTensors,
which depend on the rank in a way every rank can recompute.
"""
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

from collectives import contrib
from common import Skip

F32 = (1e-5, 1e-5)


def mesh_1d(ctx):
    if "mesh_1d" not in ctx.__dict__:
        ctx.mesh_1d = init_device_mesh(ctx.device.type, (ctx.world,))
    return ctx.mesh_1d


def local_of(full, placements, coords, mesh_shape):
    """The local shard DTensor must hold: torch.chunk along each sharded dim, in mesh-dim order."""
    t = full
    for p, c, n in zip(placements, coords, mesh_shape):
        if isinstance(p, Shard):
            t = t.chunk(n, dim=p.dim)[c]
    return t


def distribute(ctx, check):
    mesh = mesh_1d(ctx)
    full = contrib("dtensor/distribute", 0, (8, 4 * ctx.world), torch.float32)
    for pl in ([Shard(0)], [Shard(1)], [Replicate()]):
        dt = distribute_tensor(full.to(ctx.device), mesh, pl)
        check.equal(f"{pl} device", dt.to_local().device.type, ctx.device.type)
        check.close(f"{pl} local", dt.to_local(), local_of(full, pl, [ctx.rank], [ctx.world]))
        check.close(f"{pl} full_tensor", dt.full_tensor(), full)


def redistribute(ctx, check):
    mesh = mesh_1d(ctx)
    full = contrib("dtensor/redistribute", 0, (4 * ctx.world, 2 * ctx.world), torch.float32)
    pairs = [([Shard(0)], [Replicate()]), ([Shard(0)], [Shard(1)]), ([Replicate()], [Shard(0)]),
             ([Shard(1)], [Shard(0)])]
    for src, dst in pairs:
        dt = distribute_tensor(full.to(ctx.device), mesh, src).redistribute(mesh, dst)
        check.equal(f"{src}->{dst} placements", list(dt.placements), dst)
        check.close(f"{src}->{dst} local", dt.to_local(), local_of(full, dst, [ctx.rank], [ctx.world]))
        check.close(f"{src}->{dst} full_tensor", dt.full_tensor(), full)


def partial(ctx, check):
    mesh = mesh_1d(ctx)
    shape = (2 * ctx.world, 3)
    parts = [contrib("dtensor/partial", r, shape, torch.float32) for r in range(ctx.world)]
    total = torch.stack(parts).sum(0)
    mine = parts[ctx.rank].to(ctx.device)
    dt = DTensor.from_local(mine, mesh, [Partial()])
    check.close("Partial->Replicate sums", dt.redistribute(mesh, [Replicate()]).to_local(), total, *F32)
    check.close("Partial->Shard(0) reduce-scatters", dt.redistribute(mesh, [Shard(0)]).to_local(),
                total.chunk(ctx.world)[ctx.rank], *F32)
    check.close("Partial full_tensor", dt.full_tensor(), total, *F32)
    avg = DTensor.from_local(mine, mesh, [Partial("avg")])
    check.close("Partial(avg)->Replicate", avg.full_tensor(), total / ctx.world, *F32)


def ops(ctx, check):
    mesh = mesh_1d(ctx)
    x = contrib("dtensor/ops/x", 0, (4 * ctx.world, 6), torch.float32)
    w = contrib("dtensor/ops/w", 0, (6, 5), torch.float32)
    dx = distribute_tensor(x.to(ctx.device), mesh, [Shard(0)]).requires_grad_()
    dw = distribute_tensor(w.to(ctx.device), mesh, [Replicate()]).requires_grad_()
    y = dx @ dw
    check.equal("matmul keeps the row sharding", list(y.placements), [Shard(0)])
    check.close("matmul", y.full_tensor(), x @ w, *F32)
    s = (y.tanh() * 2).sum()
    check.close("sum over a sharded DTensor", s.full_tensor(), ((x @ w).tanh() * 2).sum(), 1e-4, 1e-5)
    s.backward()
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    ((xr @ wr).tanh() * 2).sum().backward()
    check.close("grad of the sharded input", dx.grad.full_tensor(), xr.grad, *F32)
    check.close("grad of the replicated weight", dw.grad.full_tensor(), wr.grad, 1e-4, 1e-5)


def gather_to_all(ctx, t):
    out = [torch.empty_like(t) for _ in range(ctx.world)]
    dist.all_gather(out, t)
    return [o.cpu() for o in out]


def random_dropout(ctx, check):
    """Dropout on a sharded DTensor after the same manual_seed: the full mask is the same on every rank."""
    mesh = mesh_1d(ctx)
    torch.manual_seed(7)
    ones = distribute_tensor(torch.ones(4 * ctx.world, 8, device=ctx.device), mesh, [Shard(0)])
    d = torch.nn.functional.dropout(ones, p=0.5).full_tensor()
    for r, other in enumerate(gather_to_all(ctx, d)):
        check.close(f"dropout mask equals rank {r}'s", d, other)
    check.true("dropout zeroed something and kept something", 0 < int((d == 0).sum()) < d.numel())
    check.true("kept values are scaled by 1/(1-p)", bool(((d == 0) | (d == 2)).all()))


def random_offset_tracker(ctx, check):
    """Accelerator meshes get DTensor's offset-based RNG tracker: shards come from disjoint parts of
    one Philox stream, so they differ, the full tensor is the same on every rank, and every rank
    ends at the same generator state."""
    if ctx.device.type == "cpu":
        raise Skip("DTensor's RNG tracker refuses cpu meshes (torch.distributed.tensor.randn asserts one)")
    from torch.distributed import tensor as dtensor_api
    from torch.distributed.tensor import _random
    mesh = mesh_1d(ctx)
    torch.manual_seed(11)
    a = dtensor_api.randn(4 * ctx.world, 8, device_mesh=mesh, placements=[Shard(0)])
    b = dtensor_api.randn(4 * ctx.world, 8, device_mesh=mesh, placements=[Shard(0)])
    check.true("OffsetBasedRNGTracker in use", isinstance(_random._rng_tracker, _random.OffsetBasedRNGTracker),
               f"tracker is {type(_random._rng_tracker).__name__}")
    fa, fb = a.full_tensor(), b.full_tensor()
    for r, other in enumerate(gather_to_all(ctx, fa)):
        check.close(f"randn full_tensor equals rank {r}'s", fa, other)
    check.true("a second draw differs from the first", not torch.equal(fa.cpu(), fb.cpu()))
    shards = fa.cpu().chunk(ctx.world)
    check.true("randn shards differ", all(not torch.equal(shards[0], s) for s in shards[1:]))
    ones = distribute_tensor(torch.ones(4 * ctx.world, 64, device=ctx.device), mesh, [Shard(0)])
    masks = (torch.nn.functional.dropout(ones, p=0.5).full_tensor() == 0).cpu().chunk(ctx.world)
    check.true("dropout masks differ between shards", all(not torch.equal(masks[0], m) for m in masks[1:]))
    state = torch.neuron.get_rng_state().to(ctx.device)
    for r, other in enumerate(gather_to_all(ctx, state)):
        check.close(f"generator state equals rank {r}'s", state, other)


def ops_while_a_collective_ends(ctx, check):
    """A collective ends while rank 0's host waits for a free slot of its full queue inside a
    DTensor op, which holds the GIL (FSDP2's optimizer step did this): the collective's task must
    finish without the GIL. A task that held the tensor and let go of it on the worker deadlocked."""
    mesh = mesh_1d(ctx)
    x = torch.full((1024,), float(ctx.rank + 1), device=ctx.device)
    if ctx.rank != 0:
        time.sleep(1.0)  # rank 0 fills its queue meanwhile, behind the all_reduce
    dist.all_reduce(x)  # the current stream waits for it; the Python tensor x stays alive
    d = DTensor.from_local(torch.zeros(4, device=ctx.device), mesh, [Replicate()], run_check=False)
    steps = 1500  # more tasks than a queue holds
    for _ in range(steps):
        d.add_(1)
    check.close("the all_reduce", x, torch.full((1024,), float(sum(range(1, ctx.world + 1)))))
    check.close("the DTensor ops after it", d.to_local(), torch.full((4,), float(steps)))


def mesh_2d(ctx, check):
    if ctx.world != 4:
        raise Skip("needs 4 ranks")
    mesh = init_device_mesh(ctx.device.type, (2, 2), mesh_dim_names=("dp", "tp"))
    coords = mesh.get_coordinate()
    full = contrib("dtensor/2d", 0, (8, 8), torch.float32)
    for pl in ([Shard(0), Shard(1)], [Replicate(), Shard(0)], [Shard(1), Replicate()]):
        dt = distribute_tensor(full.to(ctx.device), mesh, pl)
        check.close(f"{pl} local", dt.to_local(), local_of(full, pl, coords, [2, 2]))
        check.close(f"{pl} full_tensor", dt.full_tensor(), full)
        rep = dt.redistribute(mesh, [Replicate(), Replicate()])
        check.close(f"{pl}->replicated", rep.to_local(), full)
    # partial along tp only: the local part depends on the tp coordinate, not on dp
    parts = [contrib("dtensor/2d/partial", j, (4, 4), torch.float32) for j in range(2)]
    dt = DTensor.from_local(parts[coords[1]].to(ctx.device), mesh, [Replicate(), Partial()])
    check.close("[Replicate, Partial]->[Replicate, Replicate]",
                dt.redistribute(mesh, [Replicate(), Replicate()]).to_local(), parts[0] + parts[1], *F32)
    check.close("[Replicate, Partial]->[Shard(0), Shard(1)]",
                dt.redistribute(mesh, [Shard(0), Shard(1)]).to_local(),
                local_of(parts[0] + parts[1], [Shard(0), Shard(1)], coords, [2, 2]), *F32)
    # the sub-meshes' groups: mesh [[0, 1], [2, 3]], so tp pairs neighbours and dp pairs 0-2, 1-3
    for dim, peers in (("tp", [ctx.rank // 2 * 2, ctx.rank // 2 * 2 + 1]), ("dp", [ctx.rank % 2, ctx.rank % 2 + 2])):
        t = torch.tensor([float(ctx.rank + 1)], device=ctx.device)
        dist.all_reduce(t, group=mesh.get_group(dim))
        check.close(f"all_reduce over the {dim} sub-mesh", t, torch.tensor([float(sum(peers) + 2)]))


def scenarios(ctx):
    if ctx.world == 4:
        return [("dtensor/mesh_2d", mesh_2d)]
    return [("dtensor/distribute", distribute), ("dtensor/redistribute", redistribute),
            ("dtensor/partial", partial), ("dtensor/ops", ops), ("dtensor/random_dropout", random_dropout),
            ("dtensor/random_offset_tracker", random_offset_tracker),
            ("dtensor/ops_while_a_collective_ends", ops_while_a_collective_ends)]
