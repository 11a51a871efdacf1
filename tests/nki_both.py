"""The check every NKI test makes: one kernel through nki.simulate and on neuron tensors, the two
results equal to the bit (one traced program ran on both; NaNs and fp8 bytes included)."""
import torch

import torch_neuronx.nki as nki

N = "neuron"


def bits(t):
    """The bytes of `t`: torch.equal calls NaNs unequal, and a reinterpreted view may hold them."""
    return t.contiguous().flatten().view(torch.uint8)


def both(kernel, *args, **kwargs):
    """Runs `kernel` through nki.simulate and on neuron (tensor arguments moved there); returns the
    host's result (a tuple for several outputs) after checking the device's equals it bit for bit."""
    host = nki.simulate(kernel)(*args, **kwargs)
    to_n = lambda a: a.to(N) if isinstance(a, torch.Tensor) else a  # noqa: E731
    dev = kernel(*map(to_n, args), **{k: to_n(v) for k, v in kwargs.items()})
    pairs = zip(host, dev) if isinstance(host, tuple) else [(host, dev)]
    for h, d in pairs:
        assert d.device.type == N, f"the kernel returned a {d.device} tensor for neuron arguments"
        assert torch.equal(bits(h), bits(d.cpu())), "nki.simulate and the device ran one program: results differ"
    return host
