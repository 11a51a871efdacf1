"""The main job: a small causal language model trained on the neuron device, then sampled.

Runs on the software NeuronCore on any Linux machine: the model is built from a config with
random init (no download), trained on a tiny bundled text with AdamW, and sampled greedily.
`python -m torch_neuronx.demo --steps 300`
"""
from __future__ import annotations

import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm import tqdm

import torch_neuronx

TEXT = """\
It is a truth universally acknowledged, that a single man in possession of a good fortune, must be
in want of a wife. However little known the feelings or views of such a man may be on his first
entering a neighbourhood, this truth is so well fixed in the minds of the surrounding families,
that he is considered the rightful property of some one or other of their daughters.
To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer the slings
and arrows of outrageous fortune, or to take arms against a sea of troubles and by opposing end
them. To die, to sleep; no more; and by a sleep to say we end the heart-ache and the thousand
natural shocks that flesh is heir to.
"""


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.RMSNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.norm2 = nn.RMSNorm(dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.norm2(x)), approximate="tanh"))


class TinyLM(nn.Module):
    """A GPT-style decoder: token + position embeddings, pre-norm blocks, tied output."""

    def __init__(self, vocab: int, dim: int = 128, layers: int = 2, heads: int = 4, context: int = 64):
        super().__init__()
        self.context = context
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(context, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = nn.RMSNorm(dim)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x) @ self.tok.weight.t() * self.tok.weight.shape[1] ** -0.5


def batches(data: torch.Tensor, batch: int, context: int, gen: torch.Generator):
    while True:
        starts = torch.randint(0, data.numel() - context - 1, (batch,), generator=gen)
        x = torch.stack([data[s:s + context] for s in starts])
        y = torch.stack([data[s + 1:s + 1 + context] for s in starts])
        yield x, y


@torch.no_grad()
def sample(model, prompt: torch.Tensor, n: int) -> torch.Tensor:
    idx = prompt
    for _ in range(n):
        logits = model(idx[:, -model.context:])[:, -1]
        idx = torch.cat([idx, logits.argmax(-1, keepdim=True)], 1)
    return idx


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--device", default="neuron")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    chars = sorted(set(TEXT))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in TEXT])
    model = TinyLM(len(chars)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01, foreach=True)
    gen = torch.Generator().manual_seed(args.seed)
    stream = batches(data, args.batch, model.context, gen)
    params = sum(p.numel() for p in model.parameters())
    print(f"TinyLM: {params / 1e6:.2f}M parameters, vocab {len(chars)}, on {device}"
          + (f" ({torch.neuron.get_device_name(device)})" if device.type == "neuron" else ""))
    if device.type == "neuron":
        torch_neuronx.reset_op_counts()

    tokens = 0
    t0 = time.perf_counter()
    bar = tqdm(range(args.steps), desc="train", unit="step")
    loss_val = math.nan
    for step in bar:
        x, y = next(stream)
        x, y = x.to(device), y.to(device)
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        tokens += x.numel()
        if step % 10 == 0 or step == args.steps - 1:
            loss_val = loss.item()
            bar.set_postfix(loss=f"{loss_val:.3f}", tok_s=f"{tokens / (time.perf_counter() - t0):,.0f}")
    elapsed = time.perf_counter() - t0
    print(f"final loss {loss_val:.3f} after {args.steps} steps; {tokens / elapsed:,.0f} tokens/s")

    model.eval()
    prompt = torch.tensor([[stoi[c] for c in "To be, or "]], device=device)
    out = sample(model, prompt, 80)[0].tolist()
    print("sample:", repr("".join(chars[i] for i in out)))

    if device.type == "neuron":
        torch.neuron.synchronize()
        print(torch.neuron.memory_summary(device))
        counts = torch_neuronx.op_counts(reasons=True)
        total = {m: sum(c[m] for c in counts.values()) for m in ("async", "sync", "copy")}
        print(f"op calls on the device: {total['async']} async, {total['sync']} sync, {total['copy']} CPU fallbacks "
              f"(copies), over {len(counts)} ops")
        for name, c in counts.items():
            if c["sync"] or c["copy"]:
                print(f"  {name}: {c}")
        return loss_val, counts
    return loss_val, {}


if __name__ == "__main__":
    main()
