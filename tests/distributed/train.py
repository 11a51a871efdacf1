"""Scenario group "train": DDP, FSDP2 with bf16 mixed precision, tensor parallelism, pipeline
parallelism (torch.distributed.pipelining's 1F1B, 2 ranks) and (4 ranks) TP x FSDP on a 2-D mesh.
Each saves its losses and final full parameters; pytest compares them with the single-process
references of workloads.py. What the ranks must agree on among themselves (identical full
parameters) is checked here, bit for bit.
"""
import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import workloads as W
from common import Skip

DDP_STEPS = 3
FSDP_STEPS = 3


def mesh_1d(ctx):
    if "mesh_1d" not in ctx.__dict__:
        ctx.mesh_1d = init_device_mesh(ctx.device.type, (ctx.world,))
    return ctx.mesh_1d


def same_on_all_ranks(ctx, check, state: dict):
    """Every rank's full parameters are bitwise equal to rank 0's."""
    flat = torch.cat([t.reshape(-1).float() for t in state.values()]).to(ctx.device)
    ref = flat.clone()
    dist.broadcast(ref, src=0)
    check.close("full parameters equal rank 0's", flat, ref)


def sgd_steps(opt, steps, loss_at) -> list:
    """`steps` optimizer steps; `loss_at(step)` runs the forward. Returns each step's loss."""
    losses = []
    for step in range(steps):
        loss = loss_at(step)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def ddp(ctx, check):
    model = W.mlp().to(ctx.device)
    ids = None if ctx.device.type == "cpu" else [ctx.device.index]
    ddp_model = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
    opt = torch.optim.SGD(ddp_model.parameters(), lr=W.LR)

    def loss_at(step):
        x, y = (t.chunk(ctx.world)[ctx.rank].to(ctx.device) for t in W.mlp_batch(step))
        return torch.nn.functional.mse_loss(ddp_model(x), y)

    losses = sgd_steps(opt, DDP_STEPS, loss_at)
    state = W.full_state(model)
    same_on_all_ranks(ctx, check, state)
    ctx.save("train/ddp", {"losses": losses, "params": state})


def fsdp2(reshard_after_forward: bool):
    def scenario(ctx, check):
        model = W.tiny_llama().train().to(ctx.device)
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh_1d(ctx), reshard_after_forward=reshard_after_forward, mp_policy=mp)
        fully_shard(model, mesh=mesh_1d(ctx), reshard_after_forward=reshard_after_forward, mp_policy=mp)
        opt = torch.optim.SGD(model.parameters(), lr=W.LR)
        seen = []  # the dtype a layer computes with: the policy's param_dtype, whatever the resharding
        model.model.layers[0].mlp.up_proj.register_forward_pre_hook(lambda m, _: seen.append(m.weight.dtype))

        def loss_at(step):
            ids = W.tokens(step).chunk(ctx.world)[ctx.rank].to(ctx.device)
            loss = model(input_ids=ids, labels=ids).loss
            # between forward and backward a layer holds sharded DTensors when it resharded, else
            # the all-gathered bf16 parameters
            w = model.model.layers[0].mlp.up_proj.weight
            check.equal(f"step {step}: layer resharded after forward", hasattr(w, "full_tensor"),
                        reshard_after_forward)
            if not reshard_after_forward:
                check.equal(f"step {step}: unsharded parameter", (w.dtype, tuple(w.shape)),
                            (torch.bfloat16, (128, 64)))
            return loss

        losses = sgd_steps(opt, FSDP_STEPS, loss_at)
        check.true("sharded DTensors after the step", all(hasattr(p, "full_tensor") for p in model.parameters()))
        check.equal("forward ran in bf16", seen, [torch.bfloat16] * FSDP_STEPS)
        state = W.full_state(model)
        same_on_all_ranks(ctx, check, state)
        ctx.save(f"train/fsdp2_reshard_{reshard_after_forward}", {"losses": losses, "params": state})
    return scenario


def tp_plan():
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    return {name: styles[style]() for name, style in W.LAYER_TP_PLAN.items()}


def tp(ctx, check):
    """Tensor parallelism over all ranks: every rank feeds the same batch (it is replicated)."""
    model = W.tiny_llama().train().to(ctx.device)
    for layer in model.model.layers:
        parallelize_module(layer, mesh_1d(ctx), tp_plan())
    q = model.model.layers[0].self_attn.q_proj.weight
    check.equal("q_proj local rows", tuple(q.to_local().shape), (64 // ctx.world, 64))
    ids = W.tokens(0).to(ctx.device)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    # the default SGD: only the projections are DTensors; on neuron, as on CUDA, the default is a
    # foreach step over lists mixing them with plain tensors (cpu defaults to the per-tensor loop)
    torch.optim.SGD(model.parameters(), lr=W.LR).step()
    state = W.full_state(model)
    same_on_all_ranks(ctx, check, state)
    ctx.save("train/tp", {"logits": out.logits, "loss": out.loss.item(), "params": state})


def pp(ctx, check):
    """The MLP split in two stages (its first Linear and Tanh, then its last Linear), trained with
    torch.distributed.pipelining's 1F1B schedule: microbatches cross the ranks by send/recv."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    full = W.mlp()
    stage_module = (full[:2] if ctx.rank == 0 else full[2:]).to(ctx.device)
    stage = PipelineStage(stage_module, ctx.rank, ctx.world, ctx.device)
    schedule = Schedule1F1B(stage, n_microbatches=W.PP_MICROBATCHES, loss_fn=torch.nn.functional.mse_loss)
    opt = torch.optim.SGD(stage_module.parameters(), lr=W.LR)
    losses = []
    for step in range(W.PP_STEPS):
        x, y = (t.to(ctx.device) for t in W.mlp_batch(step))
        if ctx.rank == 0:
            schedule.step(x)
        else:
            mine = []
            schedule.step(target=y, losses=mine)
            check.equal(f"step {step}: a loss per microbatch, on the device", [loss.device for loss in mine],
                        [ctx.device] * W.PP_MICROBATCHES)
            losses.append([loss.item() for loss in mine])
        check.true(f"step {step}: every parameter of the stage has a gradient",
                   all(p.grad is not None and p.grad.device == ctx.device for p in stage_module.parameters()))
        opt.step()
        opt.zero_grad()
    ctx.save("train/pp", {"losses": losses, "params": W.full_state(stage_module)})


def tp_fsdp_2d(ctx, check):
    """dp=2 x tp=2: TP inside each data-parallel replica, FSDP across them; two SGD steps."""
    if ctx.world != 4:
        raise Skip("needs 4 ranks")
    mesh = init_device_mesh(ctx.device.type, (2, 2), mesh_dim_names=("dp", "tp"))
    model = W.tiny_llama().train().to(ctx.device)
    for layer in model.model.layers:
        parallelize_module(layer, mesh["tp"], tp_plan())
        fully_shard(layer, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    q = model.model.layers[0].self_attn.q_proj.weight
    # colwise TP halves the rows, FSDP halves them again (a strided shard on top of TP's shard)
    check.equal("q_proj local shape on the 2-D mesh", tuple(q.to_local().shape), (16, 64))
    check.equal("q_proj mesh", q.device_mesh.mesh_dim_names, ("dp", "tp"))
    opt = torch.optim.SGD(model.parameters(), lr=W.LR)
    dp_rank = mesh["dp"].get_local_rank()

    def loss_at(step):
        ids = W.tokens(step).chunk(2)[dp_rank].to(ctx.device)
        return model(input_ids=ids, labels=ids).loss

    losses = sgd_steps(opt, 2, loss_at)
    state = W.full_state(model)
    same_on_all_ranks(ctx, check, state)
    ctx.save("train/tp_fsdp_2d", {"losses": losses, "dp_rank": dp_rank, "params": state})


def scenarios(ctx):
    out = [("train/ddp", ddp), ("train/fsdp2_reshard_True", fsdp2(True)),
           ("train/fsdp2_reshard_False", fsdp2(False)), ("train/tp", tp)]
    if ctx.world == 2:
        out.append(("train/pp", pp))
    if ctx.world == 4:
        # across two hosts (test_two_hosts.py) DDP and FSDP2 run over all 4 ranks too
        across = os.environ.get("NEURONX_TEST_HOST") is not None
        out = (out[:3] if across else []) + [("train/tp_fsdp_2d", tp_fsdp_2d)]
    return out
