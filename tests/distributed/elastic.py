"""A DDP run that checkpoints with DCP after every step and survives a crash by torchrun's elastic
restart (`--max-restarts 1`): on the first attempt rank 3 exits abruptly right after the
checkpoint of step `--crash-after`; the others fail at their next collective, torchrun restarts
every rank on both hosts, and the second attempt resumes from the newest complete checkpoint.
Rank 0 writes `elastic.json` at the end: the step it resumed from, the attempt, the final
parameters (pytest compares them with one process's full-batch SGD, workloads.ddp_reference).

Each step's checkpoint has its own folder: a save that a crash interrupts must not overwrite the
files of the last good one (DCP writes `.metadata` last, so a folder without it is incomplete).
"""
import json
import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

import common
import workloads as W


def latest(folder):
    done = [int(n.removeprefix("step")) for n in os.listdir(folder) if os.path.exists(
        os.path.join(folder, n, ".metadata"))] if os.path.isdir(folder) else []
    return max(done, default=0)


def main():
    args = common.parse_args(lambda p: (p.add_argument("--steps", type=int, default=4),
                                        p.add_argument("--crash-after", type=int, default=2)))
    args.timeout = 20.0
    ctx = common.init(args)
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    model = W.mlp().to(ctx.device)
    ckpt = os.path.join(ctx.out, "ckpt")
    start = latest(ckpt)
    if start:
        state = {"model": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}}
        dcp.load(state, checkpoint_id=os.path.join(ckpt, f"step{start}"))
        model.load_state_dict(state["model"])
    ids = None if ctx.device.type == "cpu" else [ctx.device.index]
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
    opt = torch.optim.SGD(ddp.parameters(), lr=W.LR)  # no momentum: the parameters are the whole state
    for step in range(start, args.steps):
        x, y = (t.chunk(ctx.world)[ctx.rank].to(ctx.device) for t in W.mlp_batch(step))
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        opt.zero_grad()
        state = {"model": {k: v.detach().cpu() for k, v in model.state_dict().items()}}
        dcp.save(state, checkpoint_id=os.path.join(ckpt, f"step{step + 1}"))
        if attempt == 0 and step + 1 == args.crash_after and ctx.rank == 3:
            os._exit(1)  # a crash: no teardown
    if ctx.rank == 0:
        with open(os.path.join(ctx.out, "elastic.json"), "w") as f:
            json.dump({"attempt": attempt, "resumed_from": start,
                       "params": {k: v.tolist() for k, v in W.full_state(model).items()}}, f)
    dist.barrier()
    common.finish()


if __name__ == "__main__":
    main()
