"""What the NKI tests share: the check each makes (one kernel through nki.simulate and on neuron
tensors, the two results equal to the bit: one traced program ran on both, NaNs and fp8 bytes
included), running a kernel traced for another profile, and a trace-time rule's expected error."""
import os

import pytest
import torch

import torch_neuronx.nki as nki
import torch_neuronx.nki.language as nl
from torch_neuronx.nki import NkiValidationError, _profile

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


def on_profile(profile, kernel, *args):
    """The kernel traced for `profile` (trn3's instructions on a trn2 runtime) and run on the host."""
    traced, tensors = nki.jit(kernel)._traced(args, {}, _profile.current(profile))
    outs = [torch.empty(s, dtype=d) for s, d in traced.outputs]
    scratch = [torch.empty(s, dtype=d) for s, d in traced.scratch]
    traced.program.run([t.contiguous() for t in tensors] + outs + scratch)
    return outs if len(outs) > 1 else outs[0]


def expect_rule(match, body, *shapes, profile=None):
    with pytest.raises(NkiValidationError, match=match) as info:
        if profile:
            nki.estimate(nki.jit(body), profile=profile)(*(torch.zeros(s) for s in shapes))
        else:
            nki.simulate(nki.jit(body))(*(torch.zeros(s) for s in shapes))
    here = os.path.basename(body.__code__.co_filename)
    assert f"{here}:" in str(info.value), "the message names the kernel's line"


def _tiles(n, shape=(8, 16), buffer=None, dtype=nl.float32):
    return [nl.ndarray(shape, dtype=dtype, buffer=buffer or nl.sbuf) for _ in range(n)]
