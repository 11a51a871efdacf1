"""`nki.typing` (import as `nt`): annotations of a kernel's tensor arguments.

    @nki.jit
    def kernel(x: nt.tensor[128, 512], out: nt.mutable_tensor): ...

`nt.tensor` is an input the kernel reads, `nt.mutable_tensor` one it may also write in place.
Subscripted with a shape (and optionally a dtype: `nt.tensor[(128, 512), nl.bfloat16]`) it declares
what the kernel expects: nki.jit checks each annotated argument against its declaration when it
traces, and a mismatch is a trace-time error naming the argument. Bare, an annotation only
documents."""
from __future__ import annotations

import torch

from . import _dtypes
from ._errors import NkiTraceError


class TensorType:
    """An argument's declared kind (read-only or mutable), shape and dtype; None means any."""

    def __init__(self, mutable: bool, shape=None, dtype=None):
        self.mutable, self.shape, self.dtype = mutable, shape, dtype

    def __getitem__(self, spec):
        if self.shape is not None:
            raise TypeError(f"{self!r} already declares a shape")
        spec = spec if isinstance(spec, tuple) else (spec,)
        dtype = None
        if len(spec) == 2 and isinstance(spec[0], (tuple, list)):  # [(shape), dtype]
            spec, dtype = tuple(spec[0]), _dtypes.resolve(spec[1])
        elif spec and not isinstance(spec[-1], int):  # [128, 512, dtype]
            spec, dtype = spec[:-1], _dtypes.resolve(spec[-1])
        if not all(isinstance(n, int) and n > 0 for n in spec):
            raise TypeError(f"nki.typing: a declared shape is positive ints, got {spec}")
        return TensorType(self.mutable, tuple(spec), dtype)

    def __repr__(self):
        name = "nt.mutable_tensor" if self.mutable else "nt.tensor"
        if self.shape is None:
            return name
        return f"{name}[{', '.join(map(str, self.shape))}{', ' + str(self.dtype) if self.dtype else ''}]"

    def check(self, arg_name: str, shape, dtype: torch.dtype):
        """Raises at trace time when an argument is not what its annotation declares."""
        if self.shape is not None and tuple(shape) != self.shape:
            raise NkiTraceError(f"argument {arg_name!r} is declared {self!r} but has shape {tuple(shape)}")
        if self.dtype is not None and dtype != self.dtype:
            raise NkiTraceError(f"argument {arg_name!r} is declared {self!r} but is {dtype}")


tensor = TensorType(False)
mutable_tensor = TensorType(True)
Tensor = tensor  # the capitalised spelling of newer NKI front ends
