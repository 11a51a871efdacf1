"""TORCH_NEURONX_KERNELS=nki: a second kernel source for eager ops. Calls of aten::mm, aten::bmm,
aten::_softmax, aten::native_layer_norm and SDPA's fused forward whose shapes and dtypes fit the
NKI library kernels run those kernels' programs inside the op's own task (csrc/nki/kernel_source.h): the op's meta,
outputs, stream order and counts stay the op's; other calls run the CPU kernel. Each answer is
traced once per signature (nki.Kernel's cache); `torch_neuronx.explain("aten::mm")` shows the
choice and how many calls took it.
"""
from __future__ import annotations

import torch

from .. import _C
from . import Spec, _profile, kernels

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_MAX_K = 4096  # the matmul kernel keeps a 512-wide block of B (K rows) in SBUF
_MAX_SOFTMAX = 16384  # a row, its fp32 exponentials and the result fit one partition


def _same_dtype(*tensors) -> bool:
    return tensors[0].dtype in _DTYPES and all(t.dtype == tensors[0].dtype for t in tensors)


def _program(kernel, *args):
    """The kernel's program for these arguments (tensors as shapes and dtypes)."""
    traced, _ = kernel._traced(args, {}, _profile.current())
    return traced.program


def _shape(t, shape=None):
    """A tensor argument as the kernel sees it, `shape` where the op's tensor is viewed so."""
    return Spec(tuple(shape if shape is not None else t.shape), t.dtype)


def mm(a, b):
    if a.dim() != 2 or b.dim() != 2 or not _same_dtype(a, b) or a.shape[1] > _MAX_K or 0 in a.shape + b.shape:
        return None
    return _program(kernels.matmul, _shape(a), _shape(b))


def bmm(a, b):
    if a.dim() != 3 or b.dim() != 3 or not _same_dtype(a, b) or a.shape[2] > _MAX_K or 0 in a.shape + b.shape:
        return None
    return _program(kernels.bmm, _shape(a), _shape(b))


def softmax(x, dim, half_to_float):
    if half_to_float or x.dim() == 0 or dim % x.dim() != x.dim() - 1 or not _same_dtype(x) or x.numel() == 0:
        return None
    n = x.shape[-1]
    if n > _MAX_SOFTMAX:
        return None
    return _program(kernels.softmax, _shape(x, (x.numel() // n, n)))


def sdpa(q, k, v, attn_bias, dropout_p, is_causal, return_debug_mask, scale):
    if attn_bias is not None or dropout_p != 0 or q.dim() != 4 or not _same_dtype(q, k, v):
        return None
    if q.shape[-1] > 128 or v.shape[-1] != q.shape[-1] or q.shape[1] % k.shape[1] != 0:
        return None
    if is_causal and q.shape[2] != k.shape[2]:
        return None
    if k.shape[2] * k.element_size() * (1 + q.shape[-1] / 128) > 96 * 1024:  # K and V stay in SBUF
        return None
    return _program(kernels.flash_attention_fwd, _shape(q), _shape(k), _shape(v), bool(is_causal), scale, True)


def layer_norm(x, normalized_shape, weight, bias, eps):
    hidden = 1
    for n in normalized_shape:
        hidden *= n
    if not _same_dtype(x, *(t for t in (weight, bias) if t is not None)) or x.numel() == 0 or hidden > 8192:
        return None
    rows = x.numel() // hidden
    return _program(kernels.layernorm, _shape(x, (rows, hidden)), weight if weight is None else _shape(weight),
                    bias if bias is None else _shape(bias), float(eps), True)


SOURCES = {
    "aten::mm": (mm, "kernels.matmul (2-D, one float dtype, K <= 4096)"),
    "aten::bmm": (bmm, "kernels.bmm (3-D, one float dtype, K <= 4096)"),
    "aten::_softmax": (softmax, "kernels.softmax (last dim <= 16384, not half_to_float)"),
    "aten::native_layer_norm": (layer_norm, "kernels.layernorm (one float dtype, normalized size <= 8192)"),
    "aten::_scaled_dot_product_fused_attention_overrideable": (
        sdpa, "kernels.flash_attention_fwd (no mask or dropout, head size <= 128, causal only when square, "
              "K and V within 96 KiB per partition)"),
}


def _source(op, args):
    return SOURCES[op][0](*args)


def install() -> None:
    kind = _C._config_text("TORCH_NEURONX_KERNELS") or "cpu"
    if kind not in ("cpu", "nki"):
        raise ValueError(f"TORCH_NEURONX_KERNELS={kind!r}: expected cpu or nki")
    if kind == "nki":
        _C._set_nki_kernel_source(_source, {op: what for op, (_, what) in SOURCES.items()})
