"""Memory formats and output strides on neuron: channels-last vision layers as CUDA lays them out,
and each op's output strides against its reference (CUDA's layout where it is known and differs
from the CPU's, else the CPU's)."""
import pytest
import torch
import torch.nn.functional as F

N = "neuron"
CL = torch.channels_last


def _channels_last(*shape):
    return torch.randn(*shape).to(memory_format=CL if len(shape) == 4 else torch.channels_last_3d)


@pytest.mark.parametrize("make", [lambda: torch.nn.Conv2d(3, 4, 3), lambda: torch.nn.ConvTranspose2d(3, 4, 3),
                                  lambda: torch.nn.LazyConv2d(4, 3), lambda: torch.nn.Conv3d(3, 4, 3)],
                         ids=["Conv2d", "ConvTranspose2d", "LazyConv2d", "Conv3d"])
def test_convolutions_keep_channels_last_forward_and_backward(make):
    torch.manual_seed(0)
    cpu_module = make()
    x = _channels_last(2, 3, 8, 8) if not isinstance(cpu_module, torch.nn.Conv3d) else _channels_last(2, 3, 6, 6, 6)
    fmt = CL if x.dim() == 4 else torch.channels_last_3d
    cpu_module(x)  # materialises a lazy module's parameters
    module = make()
    module.load_state_dict(cpu_module.state_dict())
    module = module.to(N)
    xn = x.to(N).requires_grad_()
    y = module(xn)
    assert y.is_contiguous(memory_format=fmt), y.stride()
    y.square().sum().backward()
    assert xn.grad.is_contiguous(memory_format=fmt), xn.grad.stride()
    xc = x.clone().requires_grad_()
    want = cpu_module(xc)
    want.square().sum().backward()
    torch.testing.assert_close(y.cpu(), want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(xn.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(module.weight.grad.cpu(), cpu_module.weight.grad, rtol=1e-4, atol=1e-4)


def test_float64_convolutions_follow_the_cpus_kernels():
    # neither cuDNN nor oneDNN takes float64; the CPU's own kernels give channels-last in 2d only
    for m, x, want in ((torch.nn.Conv2d(3, 4, 3).double(), _channels_last(2, 3, 8, 8).double(), CL),
                       (torch.nn.Conv3d(3, 4, 3).double(), _channels_last(2, 3, 5, 5, 5).double(),
                        torch.contiguous_format)):
        y = m.to(N)(x.to(N))
        assert y.is_contiguous(memory_format=want), y.stride()
        want_y = m.cpu()(x)
        assert y.stride() == want_y.stride()
        torch.testing.assert_close(y.cpu(), want_y)


def test_group_norm_keeps_channels_last_and_takes_non_contiguous_input():
    m = torch.nn.GroupNorm(2, 4)
    x = _channels_last(2, 4, 8, 8)
    y = m.to(N)(x.to(N))
    assert y.stride() == m.cpu()(x).stride()
    torch.testing.assert_close(y.cpu(), m.cpu()(x))
    t = torch.randn(2, 4, 6, 5).transpose(2, 3)
    torch.testing.assert_close(F.group_norm(t.to(N), 2).cpu(), F.group_norm(t, 2))


@pytest.mark.parametrize("pad", [torch.nn.ReflectionPad2d(2), torch.nn.ReplicationPad2d(2),
                                 torch.nn.ReflectionPad3d(1), torch.nn.ReplicationPad3d(1)],
                         ids=["ReflectionPad2d", "ReplicationPad2d", "ReflectionPad3d", "ReplicationPad3d"])
def test_pads_of_channels_last_input_give_cudas_contiguous_output(pad):
    x = _channels_last(2, 3, 6, 6) if "2d" in type(pad).__name__ else _channels_last(2, 3, 4, 4, 4)
    xn = x.to(N).requires_grad_()
    y = pad(xn)
    assert y.is_contiguous()  # CUDA's layout (PyTorch's module tests skip the memory-format check there)
    y.square().sum().backward()
    xc = x.clone().requires_grad_()
    pad(xc).square().sum().backward()
    torch.testing.assert_close(y.cpu(), pad(x))
    torch.testing.assert_close(xn.grad.cpu(), xc.grad)


@pytest.mark.parametrize("op", [torch.abs, torch.logical_not, torch.isinf, torch.neg, torch.exp],
                         ids=["abs", "logical_not", "isinf", "neg", "exp"])
def test_unary_ops_keep_a_transposed_inputs_layout_as_on_cpu(op):
    x = torch.randn(4, 6).t()
    got = op(x.to(N))
    assert got.stride() == op(x).stride()
    torch.testing.assert_close(got.cpu(), op(x))


def test_a_resized_out_tensor_of_a_pointwise_op_takes_the_inputs_layout_as_on_cpu():
    x = torch.randn(4, 6).t()
    out_cpu, out = torch.empty(0), torch.empty(0, device=N)
    torch.acos(x, out=out_cpu)
    torch.acos(x.to(N), out=out)
    assert out.stride() == out_cpu.stride()
    torch.testing.assert_close(out.cpu(), out_cpu, equal_nan=True)


def test_the_angle_of_a_complex_input_is_contiguous_as_on_cpu():
    z = torch.randn(4, 6, dtype=torch.complex64).t()
    got = torch.angle(z.to(N))
    assert got.stride() == torch.angle(z).stride()
    torch.testing.assert_close(got.cpu(), torch.angle(z))


@pytest.mark.parametrize("fn,shape,kwargs", [
    (torch.fft.rfftn, (2, 8, 8), {}), (torch.fft.rfftn, (2, 8, 8), {"dim": (0, 1)}),
    (torch.fft.fftn, (2, 3, 4, 5), {}), (torch.fft.irfftn, (2, 8, 5), {}),
], ids=["rfftn", "rfftn-dims01", "fftn-4d", "irfftn"])
def test_fft_output_strides_follow_the_cpu(fn, shape, kwargs):
    x = torch.randn(*shape, dtype=torch.complex64 if fn is torch.fft.irfftn else torch.float32)
    got = fn(x.to(N), **kwargs)
    assert got.stride() == fn(x, **kwargs).stride()
    torch.testing.assert_close(got.cpu(), fn(x, **kwargs), rtol=1e-4, atol=1e-4)
