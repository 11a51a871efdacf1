"""Models train on neuron with AdamW and follow the CPU's loss curve."""
import torch
import torch.nn as nn
import torch.nn.functional as F


# A GPT-style decoder (token + position embeddings, pre-norm blocks, tied output), trained here on
# both devices.
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


FP16_RECIPE = """
import json, sys, torch
device = sys.argv[1]
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 16, growth_interval=2)
x, y = torch.randn(32, 16), torch.randn(32, 4)
out = {"losses": [], "scales": []}
for step in range(6):
    with torch.autocast(device, dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(model(x.to(device)).float(), y.to(device))
    opt.zero_grad()
    scaler.scale(loss * (float("inf") if step == 2 else 1.0)).backward()  # step 2 overflows: skipped
    scaler.unscale_(opt)
    out["grad"] = model[0].weight.grad.float().cpu().tolist()
    scaler.step(opt)
    scaler.update()
    out["losses"].append(loss.item())
    out["scales"].append(scaler.get_scale())
print(json.dumps(out))
"""


def test_fp16_grad_scaler_runs_in_strict_mode_like_cpu():
    """GradScaler.unscale_ took the scale's reciprocal in float64, which Trainium lacks (an error
    under TORCH_NEURONX_STRICT=1)."""
    import json

    from conftest import run_python

    runs = {}
    for device in ("cpu", "neuron"):
        r = run_python(FP16_RECIPE.replace("sys.argv[1]", repr(device)), {"TORCH_NEURONX_STRICT": "1"})
        assert r.returncode == 0, r.stderr[-3000:]
        runs[device] = json.loads(r.stdout.strip().splitlines()[-1])
    cpu, neuron = runs["cpu"], runs["neuron"]
    assert neuron["scales"] == cpu["scales"]  # the overflow halved it, the growth interval doubled it
    assert cpu["scales"][2] == cpu["scales"][1] / 2
    torch.testing.assert_close(neuron["losses"], cpu["losses"], rtol=2e-3, atol=2e-3)
    torch.testing.assert_close(torch.tensor(neuron["grad"]), torch.tensor(cpu["grad"]), rtol=2e-3, atol=2e-3)


def test_sparse_adam_on_a_sparse_embedding_matches_cpu_and_counts_its_host_kernels():
    import torch_neuronx

    torch.manual_seed(0)
    cpu = nn.Embedding(10, 4, sparse=True)
    dev = nn.Embedding(10, 4, sparse=True)
    dev.load_state_dict(cpu.state_dict())
    dev = dev.to("neuron")
    runs = [(cpu, torch.optim.SparseAdam(cpu.parameters(), lr=0.1), "cpu"),
            (dev, torch.optim.SparseAdam(dev.parameters(), lr=0.1), "neuron")]
    idx = torch.tensor([[1, 2, 2], [3, 1, 9]])
    torch_neuronx.reset_op_counts()
    for _ in range(3):
        for model, opt, device in runs:
            opt.zero_grad()
            model(idx.to(device)).square().sum().backward()
            opt.step()
    torch.testing.assert_close(dev.weight.cpu(), cpu.weight)
    # Sparse kernels run on the host (README: sparse tensors): counted as copies, with the reason.
    counts = torch_neuronx.op_counts(reasons=True)
    for op in ("aten::_coalesce", "aten::sparse_mask"):
        assert counts[op]["copy"] > 0
        assert all(why.startswith("a sparse tensor") for why in counts[op]["reasons"]["copy"])
