"""Models train on neuron with AdamW and follow the CPU's loss curve."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_neuronx.demo import TinyLM


def train(model_fn, data_fn, device, steps=15):
    torch.manual_seed(0)
    model = model_fn().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
    losses = []
    for step in range(steps):
        x, y = data_fn(step)
        loss = F.cross_entropy(model(x.to(device)).flatten(0, -2), y.to(device).flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_mlp_matches_cpu():
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(32, 20, generator=g) for _ in range(15)]
    ys = [torch.randint(0, 5, (32,), generator=g) for _ in range(15)]
    mlp = lambda: nn.Sequential(nn.Linear(20, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 5))  # noqa: E731
    cpu = train(mlp, lambda i: (xs[i % 2], ys[i % 2]), "cpu")
    neuron = train(mlp, lambda i: (xs[i % 2], ys[i % 2]), "neuron")
    torch.testing.assert_close(neuron, cpu, rtol=1e-4, atol=1e-4)
    assert neuron[-1] < neuron[0]


def test_transformer_matches_cpu():
    g = torch.Generator().manual_seed(2)
    seqs = [torch.randint(0, 30, (4, 17), generator=g) for _ in range(10)]
    lm = lambda: TinyLM(30, dim=32, layers=2, heads=2, context=16)  # noqa: E731
    data = lambda i: (seqs[i][:, :-1], seqs[i][:, 1:])  # noqa: E731
    cpu = train(lm, data, "cpu", steps=10)
    neuron = train(lm, data, "neuron", steps=10)
    torch.testing.assert_close(neuron, cpu, rtol=1e-4, atol=1e-4)
    assert neuron[-1] < neuron[0]
