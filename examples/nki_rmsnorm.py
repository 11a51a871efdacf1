"""Replace a Hugging Face Llama's RMSNorm with an NKI kernel, as a PyTorch custom op with its own
backward, and train the model on neuron: the kernel runs as one task per call on the device's
stream, and the loss follows the unmodified model's."""
import copy
import tempfile

import _tiny
import torch
import transformers

import torch_neuronx
from torch_neuronx.nki import kernels


@torch_neuronx.nki_op("examples::rmsnorm")
def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return kernels.rmsnorm(x.reshape(-1, x.shape[-1]), weight, eps).reshape(x.shape)


def setup_context(ctx, inputs, output):
    x, weight, eps = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps = eps


def backward(ctx, grad):
    x, weight = ctx.saved_tensors
    xf, gw = x.float(), grad.float() * weight.float()
    r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + ctx.eps)
    dx = r * gw - xf * r.pow(3) * (gw * xf).mean(-1, keepdim=True)
    dw = (grad.float() * xf * r).reshape(-1, x.shape[-1]).sum(0)
    return dx.to(x.dtype), dw.to(weight.dtype), None


rmsnorm.register_autograd(backward, setup_context=setup_context)


class NkiRMSNorm(torch.nn.Module):
    def __init__(self, norm):
        super().__init__()
        self.weight, self.eps = norm.weight, norm.variance_epsilon

    def forward(self, x):
        return rmsnorm(x, self.weight, self.eps)


def use_nki_rmsnorm(model):
    norms = [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
             if type(child).__name__.endswith("RMSNorm")]
    for parent, name, child in norms:
        setattr(parent, name, NkiRMSNorm(child))
    return len(norms)


def train(model, batches, steps=4):
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for step in range(steps):
        ids = batches[step % len(batches)].to("neuron")
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def main():
    with tempfile.TemporaryDirectory() as path:
        _tiny.tiny_llama_checkpoint(path)
        tokenizer = transformers.AutoTokenizer.from_pretrained(path)
        reference = transformers.AutoModelForCausalLM.from_pretrained(path).to("neuron")
    model = copy.deepcopy(reference)
    swapped = use_nki_rmsnorm(model)
    windows = _tiny.text_windows(tokenizer, context=32)
    batches = [torch.tensor([w["input_ids"] for w in windows[i:i + 4]]) for i in range(0, 16, 4)]
    torch_neuronx.reset_op_counts()
    nki_losses = train(model, batches)
    kernel_calls = torch_neuronx.op_counts()["neuron::nki_kernel"]["async"]
    ref_losses = train(reference, batches)
    print(f"{swapped} RMSNorm modules run the NKI kernel ({kernel_calls} kernel tasks in 4 steps)")
    for step, (a, b) in enumerate(zip(nki_losses, ref_losses)):
        print(f"step {step}: loss {a:.5f} (NKI RMSNorm), {b:.5f} (torch RMSNorm)")
    assert max(abs(a - b) for a, b in zip(nki_losses, ref_losses)) < 1e-3
    print("trained on neuron with the NKI RMSNorm")


if __name__ == "__main__":
    main()
