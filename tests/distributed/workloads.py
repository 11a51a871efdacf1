"""Models, data and single-process references shared by the training workers (train.py, hf.py) and
by pytest, which computes the references in its own process (no torch.distributed there).

Everything is built on CPU from a seed and only then moved to a device, so every rank and the
reference start from the same bits whatever the device's generator does. Training uses SGD: with
equal per-rank batches and a mean loss, the average of the ranks' gradients is the full-batch
gradient, so a data-parallel run must follow the single-process run closely (Adam would amplify
rounding in near-zero gradients into sign flips).
"""
import copy

import torch

SEED = 1234
LR = 0.1
VOCAB, SEQ, BATCH = 128, 16, 4


def tiny_llama_config():
    import transformers
    return transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                    tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def tiny_llama(seed: int = SEED):
    import transformers
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(tiny_llama_config()).eval()


def tokens(step: int, batch: int = BATCH, seq: int = SEQ) -> torch.Tensor:
    g = torch.Generator().manual_seed(SEED + 17 * step)
    return torch.randint(3, VOCAB, (batch, seq), generator=g)


def mlp(seed: int = SEED):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))


def mlp_batch(step: int, batch: int = 8):
    g = torch.Generator().manual_seed(SEED + 31 * step)
    return torch.randn(batch, 8, generator=g), torch.randn(batch, 4, generator=g)


# Transformers' own plan for Llama (config.base_model_tp_plan), relative to one decoder layer.
LAYER_TP_PLAN = {"self_attn.q_proj": "colwise", "self_attn.k_proj": "colwise", "self_attn.v_proj": "colwise",
                 "self_attn.o_proj": "rowwise", "mlp.gate_proj": "colwise", "mlp.up_proj": "colwise",
                 "mlp.down_proj": "rowwise"}


def full_state(model) -> dict:
    """Parameters as plain CPU tensors, gathered when they are DTensors (FSDP2, TP)."""
    out = {}
    for n, p in model.named_parameters():
        t = p.full_tensor() if hasattr(p, "full_tensor") else p
        out[n] = t.detach().cpu().clone()
    return out


# ---- references (single process, CPU) --------------------------------------------------------

def ddp_reference(steps: int):
    """Full-batch SGD on the MLP: per step the loss, then the final parameters."""
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for step in range(steps):
        x, y = mlp_batch(step)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, full_state(model)


def llama_sgd_reference(steps: int, world: int, param_dtype=None):
    """What data parallelism over `world` ranks computes, one rank's batch after the other: rank r's
    loss per step and the final parameters. With `param_dtype`, forward and backward run on a copy
    whose parameters (not buffers) are cast to it and gradients are averaged in fp32, as FSDP2's
    MixedPrecisionPolicy(param_dtype, reduce_dtype=float32) does; the update is on fp32 parameters."""
    model = tiny_llama().train()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = [[] for _ in range(world)]
    for step in range(steps):
        grads = [torch.zeros_like(p) for p in model.parameters()]
        for r, ids in enumerate(tokens(step).chunk(world)):
            work = model
            if param_dtype is not None:
                work = copy.deepcopy(model)
                for p in work.parameters():
                    p.data = p.data.to(param_dtype)
            loss = work(input_ids=ids, labels=ids).loss
            loss.backward()
            for acc, p in zip(grads, work.parameters()):
                acc += p.grad.float()
                p.grad = None
            losses[r].append(loss.item())
        for p, g in zip(model.parameters(), grads):
            p.grad = g / world
        opt.step()
        opt.zero_grad()
    return losses, full_state(model)


PP_STEPS, PP_MICROBATCHES = 3, 4


def pp_reference():
    """What the pipeline computes in one process: each step's loss per microbatch (the schedule
    averages their gradients: scale_grads) and the final parameters."""
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for step in range(PP_STEPS):
        x, y = mlp_batch(step)
        per = [torch.nn.functional.mse_loss(model(a), b) for a, b in zip(x.chunk(PP_MICROBATCHES),
                                                                          y.chunk(PP_MICROBATCHES))]
        (sum(per) / PP_MICROBATCHES).backward()
        opt.step()
        opt.zero_grad()
        losses.append([loss.item() for loss in per])
    return losses, full_state(model)


def tp_reference():
    """Logits of one forward, then the parameters after one SGD step on the same batch."""
    model = tiny_llama().train()
    ids = tokens(0)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    torch.optim.SGD(model.parameters(), lr=LR).step()
    return out.logits.detach(), out.loss.item(), full_state(model)


ADAMW_STEPS = 3


def adamw_reference(steps: int):
    """The default AdamW on one process, the same batch every step as every TP rank feeds: per
    step the loss, then the final parameters."""
    model = tiny_llama().train()
    opt = torch.optim.AdamW(model.parameters())
    losses = []
    for step in range(steps):
        ids = tokens(step)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, full_state(model)
