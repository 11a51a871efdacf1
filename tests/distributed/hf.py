"""Scenario group "hf", a worker of its own: Accelerate sets up the process group (as it does for a
user's `accelerate launch` or `torchrun` script), then the Trainer trains with DDP, then
transformers loads a checkpoint tensor-parallel (`from_pretrained(distributed_config=...)`) and
generates, and loads it again with `tp_plan="auto"` and trains it with the default AdamW. pytest
saves the checkpoint first and compares the generation and the training with one process.

`python hf.py --device {neuron,cpu} --out DIR --model-dir CHECKPOINT`, one per rank.
"""
import math
import os

import torch

import common
import workloads as W
from train import same_on_all_ranks

TRAIN_STEPS = 3


def accelerate_state(ctx, check):
    from accelerate import PartialState
    from accelerate.utils import DistributedType
    state = PartialState()
    expected = DistributedType.MULTI_NEURON if ctx.device.type == "neuron" else DistributedType.MULTI_CPU
    check.equal("distributed_type", state.distributed_type, expected)
    check.equal("backend", state.backend, ctx.backend)
    check.equal("process index", (state.process_index, state.num_processes), (ctx.rank, ctx.world))
    check.equal("device", (state.device.type, state.device.index if ctx.device.type != "cpu" else None),
                (ctx.device.type, ctx.device.index))


def trainer(ctx, check):
    import transformers
    from accelerate.utils import DistributedType
    model = W.tiny_llama().train()
    before = W.full_state(model)
    rows = W.tokens(100, batch=16)
    data = [{"input_ids": t, "labels": t} for t in rows]
    args = transformers.TrainingArguments(
        output_dir=os.path.join(ctx.out, "trainer"), max_steps=TRAIN_STEPS, per_device_train_batch_size=2,
        learning_rate=1e-2, logging_steps=1, report_to="none", save_strategy="no", disable_tqdm=True, seed=0,
        use_cpu=ctx.device.type == "cpu", dataloader_num_workers=0, ddp_find_unused_parameters=False)
    tr = transformers.Trainer(model=model, args=args, train_dataset=data,
                              data_collator=transformers.default_data_collator)
    result = tr.train()
    expected = DistributedType.MULTI_NEURON if ctx.device.type == "neuron" else DistributedType.MULTI_CPU
    check.equal("accelerator distributed_type", tr.accelerator.state.distributed_type, expected)
    check.equal("parallel mode", str(args.parallel_mode), "ParallelMode.DISTRIBUTED")
    check.equal("world size", args.world_size, ctx.world)
    check.equal("wrapped in DDP", type(tr.model_wrapped).__name__, "DistributedDataParallel")
    check.equal("model device", next(model.parameters()).device.type, ctx.device.type)
    check.equal("global_step", tr.state.global_step, TRAIN_STEPS)
    losses = [h["loss"] for h in tr.state.log_history if "loss" in h]
    check.true("a finite loss logged per step", len(losses) == TRAIN_STEPS and all(map(math.isfinite, losses)),
               f"logged losses {losses}")
    check.true("train_loss finite", math.isfinite(result.training_loss))
    after = W.full_state(model)
    moved = max((after[k] - before[k]).abs().max().item() for k in before)
    check.true("parameters moved", moved > 1e-4, f"largest change {moved:g}")
    same_on_all_ranks(ctx, check, after)


def tp_from_pretrained(ctx, check):
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(
        ctx.args.model_dir, distributed_config=transformers.DistributedConfig(tp_size=ctx.world))
    q = model.model.layers[0].self_attn.q_proj.weight
    check.true("q_proj is a DTensor", hasattr(q, "to_local"), type(q).__name__)
    if hasattr(q, "to_local"):
        check.equal("q_proj local shape", tuple(q.to_local().shape), (64 // ctx.world, 64))
        check.equal("q_proj device", q.to_local().device.type, ctx.device.type)
    ids = W.tokens(5, batch=2, seq=8).to(next(model.parameters()).device)
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    tokens = model.generate(ids, max_new_tokens=8, do_sample=False)
    ctx.save("hf/tp_generate", {"logits": logits, "tokens": tokens})
    check.true("generated new tokens", tokens.shape[1] > ids.shape[1])


def tp_adamw(ctx, check):
    """`from_pretrained(tp_plan="auto")` then the default AdamW, as a user trains: the plan makes the
    projections DTensors and leaves embeddings, norms and lm_head plain tensors, so the optimizer's
    lists mix both. Every rank feeds the same batch; pytest compares with one process."""
    import transformers
    from torch.distributed.tensor import DTensor
    from torch.optim.optimizer import _default_to_fused_or_foreach
    model = transformers.AutoModelForCausalLM.from_pretrained(
        ctx.args.model_dir, distributed_config=transformers.DistributedConfig(tp_plan="auto")).train()
    params = list(model.parameters())
    check.equal("DTensor and plain parameters", sorted({isinstance(p, DTensor) for p in params}), [False, True])
    # the default on an accelerator, as on CUDA: foreach kernels (cpu: the per-tensor loop)
    check.equal("AdamW defaults to foreach", _default_to_fused_or_foreach(params, False)[1],
                ctx.device.type != "cpu")
    opt = torch.optim.AdamW(params)
    losses = []
    for step in range(W.ADAMW_STEPS):
        ids = W.tokens(step).to(ctx.device)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    state = W.full_state(model)
    same_on_all_ranks(ctx, check, state)
    ctx.save("hf_train/tp_adamw", {"losses": losses, "params": state})


def main():
    args = common.parse_args(lambda p: p.add_argument("--model-dir", required=True))
    device = common.bind_device(args)
    from accelerate import PartialState
    PartialState(cpu=args.device == "cpu")  # initializes the process group, as accelerate does for users
    ctx = common.Context(args, device)
    common.run(ctx, [("hf/accelerate_state", accelerate_state), ("hf/trainer", trainer),
                     ("hf/tp_from_pretrained", tp_from_pretrained), ("hf_train/tp_adamw", tp_adamw)])
    common.finish()


if __name__ == "__main__":
    main()
