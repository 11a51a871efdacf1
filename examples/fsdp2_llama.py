"""Pre-train a tiny Llama with FSDP2 on two NeuronCores: the "neuron" process-group backend,
`init_device_mesh("neuron", ...)`, `fully_shard` per decoder layer and on the whole model, bf16
parameters with fp32 gradient reduction.
`torchrun --nproc-per-node 2 examples/fsdp2_llama.py`
`torchrun --nproc-per-node 2 examples/fsdp2_llama.py --device cpu` (the same on CPU with gloo)
Started without torchrun (`python examples/fsdp2_llama.py`), it starts itself under torchrun."""
import argparse
import os
import subprocess
import sys

import torch
import torch.distributed as dist
import transformers
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

p = argparse.ArgumentParser()
p.add_argument("--device", choices=["neuron", "cpu"], default="neuron")
p.add_argument("--steps", type=int, default=20)
p.add_argument("--nproc", type=int, default=2, help="processes to start when not run by torchrun")
args = p.parse_args()

if "RANK" not in os.environ:  # not under torchrun: become torchrun
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.nproc}",
           os.path.abspath(__file__), *sys.argv[1:]]
    sys.exit(subprocess.call(cmd, env=dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))))

rank, world, local_rank = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
if args.device == "neuron":
    torch.neuron.set_device(local_rank)  # before the process group: collectives run on this rank's core
    dist.init_process_group("neuron")
else:
    dist.init_process_group("gloo")
mesh = init_device_mesh(args.device, (world,))

config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
torch.manual_seed(0)  # the same initial weights on every rank; fully_shard keeps each rank's shard
model = transformers.LlamaForCausalLM(config).to(args.device)
mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
for layer in model.model.layers:  # one all-gather per layer, overlapped with the previous layer's compute
    fully_shard(layer, mesh=mesh, mp_policy=mp)
fully_shard(model, mesh=mesh, mp_policy=mp)  # embeddings, final norm and lm_head
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)


def batch(step: int, size: int = 8, length: int = 32) -> torch.Tensor:
    """Counting sequences (start + k * stride mod vocab): learnable, so the loss visibly falls.
    Each rank takes its own slice of the global batch."""
    g = torch.Generator().manual_seed(step)
    start = torch.randint(0, 128, (size, 1), generator=g)
    stride = torch.randint(1, 4, (size, 1), generator=g)
    ids = (start + stride * torch.arange(length)) % 128
    return ids.chunk(world)[rank].to(args.device)


for step in range(1, args.steps + 1):
    ids = batch(step)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    if step == 1 or step % 5 == 0:
        mean = loss.detach().clone()
        dist.all_reduce(mean, op=dist.ReduceOp.AVG)  # this rank's loss is over its half of the batch
        if rank == 0:
            print(f"step {step:3d}  loss {mean.item():.3f}", flush=True)

shard = model.model.layers[0].mlp.up_proj.weight
if rank == 0:
    print(f"trained with FSDP2 on {world} ranks of {args.device}: each holds {tuple(shard.to_local().shape)} "
          f"of up_proj's {tuple(shard.shape)}", flush=True)
dist.destroy_process_group()
