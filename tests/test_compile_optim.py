"""Compiled optimizer steps on neuron: the step inside a compiled function, in each of the
optimizers' forms, gives the parameters and state of the same steps run eagerly. Non-capturable
optimizers keep their step counters as CPU scalar tensors (on CUDA too): compiled kernels over CPU
tensors run on the host, as CUDA's Inductor runs them."""
import pytest
import torch

import torch_neuronx

N = "neuron"

FORMS = {
    "AdamW-foreach": (torch.optim.AdamW, {"foreach": True}),
    "AdamW-fused": (torch.optim.AdamW, {"fused": True}),
    "AdamW-capturable": (torch.optim.AdamW, {"foreach": True, "capturable": True}),
    "Adam-foreach": (torch.optim.Adam, {"foreach": True}),
    "SGD-momentum": (torch.optim.SGD, {"momentum": 0.9, "foreach": True}),
}


def _train(opt_cls, kwargs, compiled, steps=3):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4)).to(N)
    opt = opt_cls(model.parameters(), lr=0.05, **kwargs)
    x = torch.randn(6, 8, generator=torch.Generator().manual_seed(1)).to(N)

    def opt_step():
        opt.step()

    step = torch.compile(opt_step, backend="neuron") if compiled else opt_step
    for _ in range(steps):
        model(x).square().mean().backward()
        step()
        opt.zero_grad()
    state = [{k: v.detach().cpu() if torch.is_tensor(v) else v for k, v in s.items()} for s in opt.state.values()]
    return [p.detach().cpu() for p in model.parameters()], state


@pytest.mark.parametrize("form", list(FORMS))
def test_a_compiled_optimizer_step_matches_eager(form):
    torch._dynamo.reset()
    torch_neuronx.reset_compile_stats()
    opt_cls, kwargs = FORMS[form]
    params, state = _train(opt_cls, kwargs, compiled=True)
    want_params, want_state = _train(opt_cls, kwargs, compiled=False)
    for got, want in zip(params, want_params):
        torch.testing.assert_close(got, want)  # compiled kernels fuse and reorder float math
    for got, want in zip(state, want_state):
        assert got.keys() == want.keys()
        for key in got:
            torch.testing.assert_close(got[key], want[key])
    stats = torch_neuronx.compile_stats()
    if kwargs.get("fused"):
        # PyTorch never traces into a fused optimizer's kernel (torch.compiler.disable, on every
        # device): the step around it is compiled, the kernel runs as a neuron op.
        assert stats["graph_breaks"] >= 1
    else:
        assert stats["graphs_compiled"] >= 1
