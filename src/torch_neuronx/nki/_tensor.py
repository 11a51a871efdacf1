"""NKI tensors at trace time: a storage (an HBM tensor, or an SBUF/PSUM tile the kernel allocated)
and views of it. Nothing here holds values — a kernel is traced on shapes and dtypes, and its
program runs later on real memory — so Python control flow on a tile's values is an error that
names the kernel's line.

On-chip tensors are Trainium-shaped: dimension 0 is the partition dimension (at most 128), the
rest are free dimensions laid out inside each partition. A view's strides and offset are counted
in elements of a dense [P, free...] layout; the tracer maps them to arena addresses once its
allocator has placed the tile (`_trace.Trace.operand`)."""
from __future__ import annotations

import itertools
import math

from ._errors import NkiTraceError, NkiValidationError, fail

SBUF, PSUM, HBM, SHARED_HBM = "sbuf", "psum", "hbm", "shared_hbm"
ON_CHIP = (SBUF, PSUM)

_ids = itertools.count()


def _dense_strides(shape) -> tuple:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return tuple(reversed(strides))


class Storage:
    """One allocation. `role` of an HBM storage: ("arg", i), ("out", i) or ("scratch", i)."""

    __slots__ = ("id", "buffer", "shape", "dtype", "name", "role", "first", "last", "address", "line")

    def __init__(self, buffer, shape, dtype, name="", role=None, line=None):
        self.id = next(_ids)
        self.buffer, self.shape, self.dtype, self.name, self.role = buffer, tuple(shape), dtype, name, role
        self.first = self.last = None  # the first and last instruction using it (for the allocator)
        self.address = None  # bytes into each partition's row, once allocated (on-chip)
        self.line = line

    @property
    def free_elements(self) -> int:
        return math.prod(self.shape[1:])

    @property
    def partition_bytes(self) -> int:
        return self.free_elements * self.dtype.itemsize


def no_masks():
    raise NkiTraceError("masks (mask=) are not supported; slice the ragged edge instead (x[i * 128:i * 128 + p]) "
                        "as the NKI 0.3+ API does")


class Index:
    """`nl.arange(n)` and affine expressions of it (`i * 128 + nl.arange(128)[:, None]`): a run of
    `size` indices from `start` by `step`; `axis` is where `[:, None]` / `[None, :]` put it."""

    __slots__ = ("start", "size", "step", "axis", "ndim")

    def __init__(self, start, size, step=1, axis=0, ndim=1):
        self.start, self.size, self.step, self.axis, self.ndim = start, size, step, axis, ndim

    def _with(self, **kw):
        out = Index(self.start, self.size, self.step, self.axis, self.ndim)
        for k, v in kw.items():
            setattr(out, k, v)
        return out

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        if sum(k is not None for k in key) != 1 or any(k is not None and k != slice(None) for k in key):
            raise NkiTraceError("an nl.arange index takes [:, None] or [None, :] (one ':' and Nones)")
        return self._with(axis=[i for i, k in enumerate(key) if k is not None][0], ndim=len(key))

    def _affine(self, other, mul):
        if not isinstance(other, int):
            raise NkiTraceError(f"an index expression may add or multiply integers, not {type(other).__name__}")
        return self._with(start=self.start * other, step=self.step * other) if mul else \
            self._with(start=self.start + other)

    def __add__(self, other):
        return self._affine(other, False)

    __radd__ = __add__

    def __sub__(self, other):
        return self._affine(-other, False)

    def __mul__(self, other):
        return self._affine(other, True)

    __rmul__ = __mul__

    def __lt__(self, other):
        no_masks()

    __le__ = __gt__ = __ge__ = __lt__


class NkiTensor:
    __slots__ = ("storage", "dtype", "shape", "strides", "offset")

    def __init__(self, storage, shape=None, strides=None, offset=0, dtype=None):
        self.storage = storage
        self.dtype = dtype or storage.dtype
        self.shape = tuple(storage.shape if shape is None else shape)
        self.strides = tuple(_dense_strides(self.shape) if strides is None else strides)
        self.offset = offset

    # --- what kernels read -------------------------------------------------------------------
    buffer = property(lambda self: self.storage.buffer)
    name = property(lambda self: self.storage.name)
    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: math.prod(self.shape))
    on_chip = property(lambda self: self.storage.buffer in ON_CHIP)

    @property
    def free_size(self) -> int:
        """Elements per partition (on-chip) or per row (HBM): what instruction costs count."""
        return math.prod(self.shape[1:]) if self.ndim > 1 else 1

    def __repr__(self):
        return f"NkiTensor({self.storage.name or self.storage.buffer}, shape={self.shape}, dtype={self.dtype})"

    def is_contiguous(self) -> bool:
        return all(s == d for s, d, n in zip(self.strides, _dense_strides(self.shape), self.shape) if n != 1)

    # --- views --------------------------------------------------------------------------------
    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        if any(k is Ellipsis for k in key):
            at = key.index(Ellipsis)
            fill = self.ndim - (len(key) - 1)
            key = key[:at] + (slice(None),) * fill + key[at + 1:]
        if len(key) > self.ndim:
            fail("index", f"{len(key)} indices for a {self.ndim}-D tensor {self}")
        key = key + (slice(None),) * (self.ndim - len(key))
        shape, strides, offset, dropped = [], [], self.offset, []
        for dim, (k, n, s) in enumerate(zip(key, self.shape, self.strides)):
            if isinstance(k, Index):
                k = slice(k.start, k.start + k.size * k.step, k.step)
            if isinstance(k, slice):
                start, stop, step = k.start, k.stop, k.step
                start = 0 if start is None else start
                stop = n if stop is None else stop
                step = 1 if step is None else step
                for v in (start, stop, step):
                    if not isinstance(v, int):
                        raise NkiTraceError(f"a slice bound must be an int known when the kernel is traced, "
                                            f"not {type(v).__name__}")
                if step <= 0 or start < 0 or stop > n or start > stop:
                    fail("index", f"slice {start}:{stop}:{step} is out of range for dimension {dim} of size {n} "
                                  f"of {self}")
                offset += start * s
                shape.append(max(0, -(-(stop - start) // step)))
                strides.append(s * step)
            elif isinstance(k, int) and not isinstance(k, bool):
                if not -n <= k < n:
                    fail("index", f"index {k} is out of range for dimension {dim} of size {n} of {self}")
                offset += (k % n) * s
                shape.append(1)
                strides.append(s)
                dropped.append(dim)
            else:
                raise NkiTraceError(f"cannot index an NKI tensor with {type(k).__name__}; use ints, slices or "
                                    f"nl.arange expressions")
        # An on-chip tensor keeps its partition dim and stays at least 2-D (NKI's rule).
        keep = [d for d in range(len(shape)) if d not in dropped or (self.on_chip and d == 0)]
        if self.on_chip and len(keep) < 2:
            keep = sorted(set(keep) | {len(shape) - 1})
        return NkiTensor(self.storage, [shape[d] for d in keep], [strides[d] for d in keep], offset, self.dtype)

    def reshape(self, shape):
        shape = tuple(shape)
        if -1 in shape:
            known = math.prod(n for n in shape if n != -1)
            shape = tuple(self.size // known if n == -1 else n for n in shape)
        if math.prod(shape) != self.size:
            fail("reshape", f"cannot reshape {self} to {shape}: element counts differ")
        if not self.is_contiguous():
            fail("reshape", f"cannot reshape {self}: it is not contiguous")
        if self.on_chip and shape[0] != self.shape[0]:
            fail("reshape", f"reshaping on-chip {self} to {shape} would change its partition dimension")
        if self.on_chip:
            free_strides = _dense_strides(shape[1:])
            return NkiTensor(self.storage, shape, (self.strides[0],) + free_strides, self.offset, self.dtype)
        return NkiTensor(self.storage, shape, None, self.offset, self.dtype)

    view = reshape

    def permute(self, dims):
        dims = tuple(dims)
        if sorted(dims) != list(range(self.ndim)):
            fail("permute", f"{dims} is not a permutation of {self.ndim} dimensions")
        if self.on_chip and dims[0] != 0:
            fail("permute", f"permuting on-chip {self} would move its partition dimension")
        return NkiTensor(self.storage, [self.shape[d] for d in dims], [self.strides[d] for d in dims], self.offset,
                         self.dtype)

    def broadcast(self, dim, size):
        if self.shape[dim] != 1:
            fail("broadcast", f"dimension {dim} of {self} has size {self.shape[dim]}, not 1")
        if self.on_chip and dim == 0:
            fail("broadcast", f"cannot broadcast the partition dimension of on-chip {self}; load it into each "
                              f"partition (broadcast the HBM tensor)")
        shape, strides = list(self.shape), list(self.strides)
        shape[dim], strides[dim] = size, 0
        return NkiTensor(self.storage, shape, strides, self.offset, self.dtype)

    def broadcast_to(self, shape):
        out = self
        for d, (have, want) in enumerate(zip(self.shape, shape)):
            if have != want:
                out = out.broadcast(d, want)
        return out

    # --- operators, lowered through nl --------------------------------------------------------
    def _nl(self, name, *args):
        from . import language as nl

        return getattr(nl, name)(*args)

    def __add__(self, o): return self._nl("add", self, o)  # noqa: E704
    def __radd__(self, o): return self._nl("add", o, self)  # noqa: E704
    def __sub__(self, o): return self._nl("subtract", self, o)  # noqa: E704
    def __rsub__(self, o): return self._nl("subtract", o, self)  # noqa: E704
    def __mul__(self, o): return self._nl("multiply", self, o)  # noqa: E704
    def __rmul__(self, o): return self._nl("multiply", o, self)  # noqa: E704
    def __truediv__(self, o): return self._nl("divide", self, o)  # noqa: E704
    def __rtruediv__(self, o): return self._nl("divide", o, self)  # noqa: E704
    def __neg__(self): return self._nl("negative", self)  # noqa: E704
    def __pow__(self, o): return self._nl("power", self, o)  # noqa: E704

    def __setitem__(self, key, value):
        from . import language as nl

        nl.copy(value, out=self[key])

    # --- what a traced kernel may not do ------------------------------------------------------
    def _no_value(self, *_):
        raise NkiTraceError(f"{self} has no value while the kernel is traced: Python control flow or conversion "
                            f"on tile values is not allowed (compute with nl/nisa ops, or branch on shapes)")

    __bool__ = __int__ = __float__ = __index__ = __iter__ = __len__ = __array__ = _no_value

    def __hash__(self):
        return id(self)


__all__ = ["NkiTensor", "Storage", "Index", "NkiTraceError", "NkiValidationError"]
