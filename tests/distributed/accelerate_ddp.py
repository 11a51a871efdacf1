"""A user's Accelerate training script, as `accelerate launch` or `torchrun` starts it: nothing binds
a device before `Accelerator()`. Each rank trains its half of every batch with DDP (an MLP: addmm
forward and backward) and writes out/rank{R}.json: its LOCAL_RANK, the device Accelerate chose, the
current neuron device, the distributed type, the step losses averaged over the ranks and the final
parameters. tests/test_distributed.py compares them with `train()` run in one process.

`accelerate launch --num_processes 2 accelerate_ddp.py OUT` or
`torchrun --nproc-per-node 2 accelerate_ddp.py OUT`.
"""
import json
import os
import sys

import torch

STEPS, BATCH = 4, 8


def model_and_batches():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(BATCH, 8, generator=g), torch.randn(BATCH, 1, generator=g)) for _ in range(STEPS)]
    return model, batches


def train(model, opt, batches, backward=lambda loss: loss.backward(), mean=lambda loss: loss):
    losses = []
    for x, y in batches:
        loss = torch.nn.functional.mse_loss(model(x), y)
        backward(loss)
        opt.step()
        opt.zero_grad()
        losses.append(mean(loss.detach()).item())
    return losses


def main():
    from accelerate import Accelerator

    acc = Accelerator()
    rank, world = acc.process_index, acc.num_processes
    model, batches = model_and_batches()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = acc.prepare(model, opt)
    share = slice(rank * BATCH // world, (rank + 1) * BATCH // world)  # this rank's half of every batch
    mine = [(x[share].to(acc.device), y[share].to(acc.device)) for x, y in batches]
    losses = train(model, opt, mine, acc.backward, lambda loss: acc.reduce(loss, "mean"))
    record = {
        "local_rank": int(os.environ["LOCAL_RANK"]),
        "accelerator_device": str(acc.device),
        "current_device": torch.neuron.current_device(),
        "distributed_type": str(acc.distributed_type),
        "parameter_devices": sorted({str(p.device) for p in model.parameters()}),
        "losses": losses,
        "parameters": {k: v.cpu().tolist() for k, v in acc.unwrap_model(model).state_dict().items()},
    }
    with open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w") as f:
        json.dump(record, f)
    acc.end_training()


if __name__ == "__main__":
    main()
