"""NKI tensors at trace time: a storage (an HBM tensor, or an SBUF/PSUM tile the kernel allocated)
and views of it. Nothing here holds values — a kernel is traced on shapes and dtypes, and its
program runs later on real memory — so Python control flow on a tile's values is an error that
names the kernel's line.

On-chip tensors are Trainium-shaped: dimension 0 is the partition dimension (at most 128), the
rest are free dimensions laid out inside each partition. A view's strides and offset are counted
in elements (of the view's dtype) of the storage's dense [P, free...] layout, which is what an
NKI access pattern (`ap`) states; the tracer maps them to arena addresses once its allocator has
placed the tile (`_trace.Trace.operand`)."""
from __future__ import annotations

import itertools
import math

import torch

from ._errors import NkiTraceError, NkiValidationError, fail, kernel_line

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
    __slots__ = ("storage", "dtype", "shape", "strides", "offset", "dynamic", "invalid", "vector")

    def __init__(self, storage, shape=None, strides=None, offset=0, dtype=None, dynamic=None, invalid=None):
        self.storage = storage
        self.dtype = dtype or storage.dtype
        self.shape = tuple(storage.shape if shape is None else shape)
        self.strides = tuple(_dense_strides(self.shape) if strides is None else strides)
        self.offset = offset
        # (index tile, step): the view moves by step x the integer the tile holds when the program
        # runs (`ap(scalar_offset=)`); None for a view fixed at trace time.
        self.dynamic = dynamic
        # The broken rule of an access pattern that reaches outside its tensor: building one is allowed
        # (kernels build a pattern per loop step and skip the instruction where it would overrun, as
        # output_projection_tkg does); an instruction that reads or writes it raises this (Trace.emit).
        self.invalid = invalid
        # (index tile, step, dim): `ap(vector_offset=)`: index i of dim `dim` lands `step` x the
        # tile's i-th integer elements on (read when the program runs); None for other views.
        self.vector = None

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
        self._no_vector("indexing")
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
        return NkiTensor(self.storage, [shape[d] for d in keep], [strides[d] for d in keep], offset, self.dtype,
                         invalid=self.invalid)

    # --- NKI's view methods ---------------------------------------------------------------------
    # Each returns a new (shape, strides, offset, dtype) over the same storage; nothing is copied.
    # Strides and offset count elements of the view's own dtype in the storage's bytes, so a view
    # that reinterprets the dtype (`ap(dtype=)`, `view(dtype)`) is a view like any other.

    def _view(self, shape, strides, offset=None, dtype=None) -> "NkiTensor":
        self._no_vector("a view")
        if self.dynamic is not None and dtype not in (None, self.dtype):
            raise NotImplementedError(f"nki: reinterpreting {self}, whose offset is read at run time, as {dtype} is "
                                      f"not supported yet (the offset counts elements of {self.dtype})")
        return NkiTensor(self.storage, shape, strides, self.offset if offset is None else offset,
                         dtype or self.dtype, self.dynamic, self.invalid)

    def _dim(self, dim, what, ndim=None) -> int:
        ndim = self.ndim if ndim is None else ndim
        if isinstance(dim, bool) or not isinstance(dim, int) or not -ndim <= dim < ndim:
            fail(what, f"dimension {dim!r} is out of range for {self}")
        return dim % ndim

    def _not_partition(self, dim, what):
        # The partition dim of an on-chip tile is the hardware's 128 lanes, not an address: no view
        # may split, merge, drop or insert it (NKI's rule for every view method).
        if self.on_chip and dim == 0:
            fail(what, f"{what} on dimension 0 of on-chip {self} would change its partition dimension")

    def get_pattern(self) -> list:
        """The view as an access pattern, [[stride, count], ...] (its offset is `.offset`)."""
        return [[s, n] for s, n in zip(self.strides, self.shape)]

    pattern = property(get_pattern)  # `t.pattern`, as NKI's language guide reads it

    def ap(self, pattern, offset=0, scalar_offset=None, vector_offset=None, indirect_dim=0, dtype=None):
        """NKI's access pattern: the elements at `offset + sum(i_d * step_d)` for each index
        `i_d < num_d` of `pattern = [[step, num], ...]`, counted in elements of `dtype` (the
        tensor's own dtype by default) from this view's first element, as if the storage were
        flattened. The result's shape is the nums. On chip the first pair is the partition dim."""
        rule = "access pattern"
        self._no_vector(rule)
        pairs = [tuple(p) if isinstance(p, (list, tuple)) else p for p in pattern]
        if not pairs or any(not (isinstance(p, tuple) and len(p) == 2 and all(
                isinstance(v, int) and not isinstance(v, bool) for v in p)) for p in pairs):
            fail(rule, f"pattern must be a non-empty list of [step, num] pairs of ints, got {pattern!r}")
        if vector_offset is not None:  # the indirect dim's place comes from the index tile, not its step
            if scalar_offset is not None:
                fail(rule, "scalar_offset and vector_offset: an access pattern takes one run-time offset")
            if self.on_chip:
                raise NotImplementedError(f"nki: a vector_offset into on-chip {self} is not supported yet: only "
                                          f"HBM access patterns take one")
            at = self._dim(indirect_dim, rule, len(pairs))
            pairs[at] = (0, pairs[at][1])
        if any(n < 1 for _, n in pairs):
            fail(rule, f"every num of {pattern!r} must be at least 1")
        if any(s < 0 for s, _ in pairs):
            raise NotImplementedError(f"nki: a negative step in access pattern {pattern!r} is not supported yet: the "
                                      f"program executor takes views with non-negative strides only")
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise NotImplementedError(f"nki: ap(offset={type(offset).__name__}) is not supported yet: the offset "
                                      f"must be an int known when the kernel is traced")
        dtype = dtype or self.dtype
        if not isinstance(dtype, torch.dtype):
            fail(rule, f"dtype must be an nl dtype, got {dtype!r}")
        start_bytes = self.offset * self.dtype.itemsize
        if start_bytes % dtype.itemsize:
            fail(rule, f"{self} starts at byte {start_bytes}, not a multiple of {dtype}'s {dtype.itemsize} bytes")
        base = start_bytes // dtype.itemsize + offset
        steps, nums = [s for s, _ in pairs], [n for _, n in pairs]
        invalid = None
        if self.on_chip:
            invalid = self._check_on_chip_pattern(steps, nums, base, dtype, pattern)
        else:
            total = self.storage.partition_bytes * self.storage.shape[0] // dtype.itemsize \
                if self.storage.shape else 1
            last = base + sum(s * (n - 1) for s, n in zip(steps, nums))  # steps are >= 0
            if base < 0 or last >= total:
                invalid = (f"pattern {pattern!r} at offset {offset} reaches element {base if base < 0 else last} "
                           f"of {self}, which holds {total} elements of {dtype}")
        view = self._view(nums, steps, base, dtype)
        if invalid:
            view.invalid = f"{rule}: {invalid}\n  (the pattern built at {kernel_line()})"
        if vector_offset is not None:
            return view._vector_offsets(vector_offset, at, self, dtype)
        return view if scalar_offset is None else view._offset_by(scalar_offset, indirect_dim, pattern)

    def _vector_offsets(self, index, dim, tensor, dtype) -> "NkiTensor":
        """`ap(vector_offset=index, indirect_dim=dim)`: entry i of the view's dim `dim` at the i-th
        integer of the SBUF tile `index` times the tensor's own step along `dim` (as the DMA engine
        scales it), read when the program runs (nki-library's scatter of top-k affinities, KV-cache
        writes by token index). Only nisa.dma_copy takes such a view."""
        rule = "access pattern"
        if self.dynamic is not None:
            fail(rule, f"{self} already has a run-time offset; an access pattern takes one")
        if not isinstance(index, NkiTensor) or not index.on_chip or index.dtype.is_floating_point:
            fail(rule, f"vector_offset must be an integer SBUF tile, got {index!r}")
        if index.size != self.shape[dim]:
            fail(rule, f"vector_offset holds {index.size} offsets for the {self.shape[dim]} entries of dim {dim}")
        step = tensor.strides[tensor._dim(dim, rule)] * tensor.dtype.itemsize // dtype.itemsize \
            if dim < tensor.ndim else 1
        view = self._view(self.shape, self.strides)
        view.vector = (index, step, dim)
        return view

    def _no_vector(self, what):
        if self.vector is not None:
            raise NotImplementedError(f"nki: {what} of an access pattern with vector_offset is not supported yet: "
                                      f"give it to nisa.dma_copy as it is")

    def _offset_by(self, index, dim, pattern) -> "NkiTensor":
        """`ap(scalar_offset=index, indirect_dim=dim)`: the view moved by `index` steps of its dim
        `dim`, `index` an integer tile read when the program runs (a gather by a token or expert id)."""
        rule = "access pattern"
        if isinstance(index, int) and not isinstance(index, bool):  # known now: a plain offset
            return self._view(self.shape, self.strides, self.offset + index * self.strides[self._dim(dim, rule)])
        if not isinstance(index, NkiTensor):
            raise NotImplementedError(f"nki: ap(scalar_offset={type(index).__name__}) is not supported yet: give the "
                                      f"offset as an integer SBUF tile of one element")
        if self.on_chip:
            raise NotImplementedError(f"nki: a run-time offset into on-chip {self} is not supported yet: only HBM "
                                      f"access patterns take scalar_offset")
        if self.dynamic is not None:
            fail(rule, f"{self} already has a run-time offset; an access pattern takes one")
        if not index.on_chip or index.size != 1 or index.dtype.is_floating_point or index.dtype == torch.bool:
            fail(rule, f"scalar_offset must be one integer element in SBUF, got {index}")
        dim = self._dim(dim, rule)
        return NkiTensor(self.storage, self.shape, self.strides, self.offset, self.dtype, (index, self.strides[dim]),
                         self.invalid)

    def _check_on_chip_pattern(self, steps, nums, base, dtype, pattern):
        rule, st = "access pattern", self.storage
        free = st.partition_bytes // dtype.itemsize  # elements of `dtype` in one partition's row
        if len(steps) > 5:
            fail(rule, f"{len(steps) - 1} free dimensions in {pattern!r}: a NeuronCore reads at most 4 free "
                       f"dimensions of an on-chip tensor (the first pair is the partition dim)")
        if nums[0] > 1 and steps[0] != free:
            fail(rule, f"the partition step of {pattern!r} is {steps[0]}, but partitions must be read contiguously: "
                       f"on-chip {self} needs step {free} (the elements of its whole free dimension) in the "
                       f"first pair")
        p0, f0 = divmod(base, free)
        if p0 + nums[0] > st.shape[0]:
            return (f"pattern {pattern!r} reads partitions {p0}..{p0 + nums[0] - 1} of {self}, which has "
                    f"{st.shape[0]} partitions")
        last = f0 + sum(s * (n - 1) for s, n in zip(steps[1:], nums[1:]))
        if base < 0 or last >= free:  # the caller defers this one to the instruction using the view
            return (f"pattern {pattern!r} reaches element {f0 if base < 0 else last} of a partition of {self}, "
                    f"whose partitions hold {free} elements of {dtype}")
        return None

    def slice(self, dim, start, end, step=1) -> "NkiTensor":
        """Elements start:end:step of dimension `dim` (as `t[..., start:end:step, ...]`)."""
        dim = self._dim(dim, "slice")
        return self[(slice(None),) * dim + (slice(start, end, step),)]

    def select(self, dim, index) -> "NkiTensor":
        """Element `index` of dimension `dim`; the dimension is dropped."""
        dim = self._dim(dim, "select")
        if isinstance(index, NkiTensor):
            raise NotImplementedError("nki: select(dim, index) with a tensor index (a dynamic select) is not "
                                      "supported yet: the program executor has no indirect addressing")
        self._not_partition(dim, "select")
        if isinstance(index, bool) or not isinstance(index, int) or not -self.shape[dim] <= index < self.shape[dim]:
            fail("select", f"index {index!r} is out of range for dimension {dim} of size {self.shape[dim]} of {self}")
        if self.on_chip and self.ndim == 2:
            fail("select", f"selecting from the only free dimension of on-chip {self} would leave it 1-D; "
                           f"on-chip tensors are at least 2-D (use slice to keep a size-1 dimension)")
        offset = self.offset + (index % self.shape[dim]) * self.strides[dim]
        return self._view(self.shape[:dim] + self.shape[dim + 1:], self.strides[:dim] + self.strides[dim + 1:], offset)

    def expand_dim(self, dim) -> "NkiTensor":
        """A new dimension of size 1 at position `dim` (0..ndim)."""
        dim = self._dim(dim, "expand_dim", self.ndim + 1)
        self._not_partition(dim, "expand_dim")
        return self._view(self.shape[:dim] + (1,) + self.shape[dim:], self.strides[:dim] + (0,) + self.strides[dim:])

    def squeeze_dim(self, dim) -> "NkiTensor":
        """Drops dimension `dim`, which must have size 1."""
        dim = self._dim(dim, "squeeze_dim")
        if self.shape[dim] != 1:
            fail("squeeze_dim", f"dimension {dim} of {self} has size {self.shape[dim]}, not 1")
        return self.select(dim, 0)

    def reshape_dim(self, dim, shape) -> "NkiTensor":
        """Splits dimension `dim` into `shape` (one entry may be -1)."""
        dim = self._dim(dim, "reshape_dim")
        self._not_partition(dim, "reshape_dim")
        shape = _infer(tuple(shape), self.shape[dim], f"dimension {dim} of {self}", "reshape_dim")
        inner = _dense_strides(shape)
        strides = tuple(self.strides[dim] * s for s in inner)
        return self._view(self.shape[:dim] + shape + self.shape[dim + 1:],
                          self.strides[:dim] + strides + self.strides[dim + 1:])

    def flatten_dims(self, start_dim, end_dim) -> "NkiTensor":
        """Merges dimensions start_dim..end_dim (inclusive) into one; they must be laid out
        one inside the next (a view's strides cannot express any other merge)."""
        start_dim, end_dim = self._dim(start_dim, "flatten_dims"), self._dim(end_dim, "flatten_dims")
        if start_dim > end_dim:
            fail("flatten_dims", f"start_dim {start_dim} is after end_dim {end_dim}")
        if end_dim > start_dim:
            self._not_partition(start_dim, "flatten_dims")
        for d in range(start_dim, end_dim):
            if self.shape[d] != 1 and self.shape[d + 1] != 1 and \
                    self.strides[d] != self.strides[d + 1] * self.shape[d + 1]:
                fail("flatten_dims", f"dimensions {d} and {d + 1} of {self} (strides {self.strides}) are not "
                                     f"contiguous with each other; copy the view first")
        inner = [d for d in range(start_dim, end_dim + 1) if self.shape[d] != 1]
        stride = self.strides[inner[-1]] if inner else 1
        n = math.prod(self.shape[start_dim:end_dim + 1])
        return self._view(self.shape[:start_dim] + (n,) + self.shape[end_dim + 1:],
                          self.strides[:start_dim] + (stride,) + self.strides[end_dim + 1:])

    def rearrange(self, src_pattern, dst_pattern, fixed_sizes=None) -> "NkiTensor":
        """einops-style: `src_pattern` names each dimension (a tuple of names splits one),
        `dst_pattern` orders the names (a tuple merges them), e.g.
        rearrange(('p', ('h', 'w'), 'c'), ('p', 'c', 'h', 'w'), {'h': 4})."""
        return _rearrange(self, tuple(src_pattern), tuple(dst_pattern), dict(fixed_sizes or {}))

    def reshape(self, shape) -> "NkiTensor":
        """The same elements in a new shape (the view must be contiguous); on chip the partition
        dim stays."""
        shape = _infer(tuple(shape), self.size, str(self), "reshape")
        if not self.is_contiguous():
            fail("reshape", f"cannot reshape {self}: it is not contiguous")
        if self.on_chip and shape[0] != self.shape[0]:
            fail("reshape", f"reshaping on-chip {self} to {shape} would change its partition dimension")
        if self.on_chip:
            free_strides = _dense_strides(shape[1:])
            return self._view(shape, (self.strides[0],) + free_strides)
        return self._view(shape, _dense_strides(shape))

    def view(self, dtype_or_shape) -> "NkiTensor":
        """`view(dtype)` reinterprets the bytes (the last dim scales by the itemsizes' ratio);
        `view(shape)` is reshape."""
        if not isinstance(dtype_or_shape, torch.dtype):
            return self.reshape(dtype_or_shape)
        dtype, old = dtype_or_shape, self.dtype.itemsize
        new = dtype.itemsize
        if self.ndim == 0 or self.strides[-1] != 1 and self.shape[-1] != 1:
            fail("view", f"view({dtype}) needs {self} to be contiguous in its last dimension")
        if (self.shape[-1] * old) % new or (self.offset * old) % new or any(
                (s * old) % new for s in self.strides[:-1]):
            fail("view", f"{self} cannot be reinterpreted as {dtype}: its rows are not whole {new}-byte elements")
        shape = self.shape[:-1] + (self.shape[-1] * old // new,)
        strides = tuple(s * old // new for s in self.strides[:-1]) + (1,)
        return self._view(shape, strides, self.offset * old // new, dtype)

    def reinterpret_cast(self, dtype) -> "NkiTensor":
        """The bytes as `dtype` (view(dtype) by its C++ name, as nki-library's TensorView has it)."""
        if not isinstance(dtype, torch.dtype):
            fail("reinterpret_cast", f"{dtype!r} is not an nl dtype")
        return self.view(dtype)

    def indirect(self, *args, **kwargs):
        raise NotImplementedError("nki: NkiTensor.indirect (tensor indirection, addresses read from SBUF) is not "
                                  "supported yet: the program executor has no indirect addressing")

    vector_select = indirect

    def is_indirect(self) -> bool:
        return self.vector is not None  # ap(vector_offset=); indirect() is not supported yet

    def permute(self, dims):
        dims = tuple(dims)
        if sorted(dims) != list(range(self.ndim)):
            fail("permute", f"{dims} is not a permutation of {self.ndim} dimensions")
        if self.on_chip and dims[0] != 0:
            fail("permute", f"permuting on-chip {self} would move its partition dimension")
        return NkiTensor(self.storage, [self.shape[d] for d in dims], [self.strides[d] for d in dims], self.offset,
                         self.dtype, invalid=self.invalid)

    def broadcast(self, dim, size):
        if self.shape[dim] != 1:
            fail("broadcast", f"dimension {dim} of {self} has size {self.shape[dim]}, not 1")
        if self.on_chip and dim == 0:
            fail("broadcast", f"cannot broadcast the partition dimension of on-chip {self}; load it into each "
                              f"partition (broadcast the HBM tensor)")
        shape, strides = list(self.shape), list(self.strides)
        shape[dim], strides[dim] = size, 0
        return NkiTensor(self.storage, shape, strides, self.offset, self.dtype, invalid=self.invalid)

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


def _infer(shape, total, what, rule) -> tuple:
    """`shape` with its one -1 filled in so that it holds `total` elements."""
    if any(isinstance(n, bool) or not isinstance(n, int) or (n < 1 and n != -1) for n in shape) or shape.count(-1) > 1:
        fail(rule, f"{shape} is not a shape (positive ints, at most one -1)")
    known = math.prod(n for n in shape if n != -1)
    if -1 in shape:
        if total % known:
            fail(rule, f"cannot fit {what} ({total} elements) into {shape}")
        shape = tuple(total // known if n == -1 else n for n in shape)
    if math.prod(shape) != total:
        fail(rule, f"cannot view {what} ({total} elements) as {shape}: element counts differ")
    return shape


def _rearrange(t, src, dst, sizes):
    """rearrange as reshape_dim (split src groups), permute, flatten_dims (merge dst groups)."""
    rule = "rearrange"
    if len(src) != t.ndim:
        fail(rule, f"src_pattern {src} names {len(src)} dimensions; {t} has {t.ndim}")
    groups = [(e,) if isinstance(e, str) else tuple(e) for e in src]
    names = [n for g in groups for n in g]
    out = [(e,) if isinstance(e, str) else tuple(e) for e in dst]
    order = [n for g in out for n in g]
    if len(set(names)) != len(names) or sorted(order) != sorted(names) or not all(isinstance(n, str) for n in names):
        fail(rule, f"dst_pattern {dst} must use each name of src_pattern {src} exactly once")
    for d in reversed(range(len(groups))):  # split from the last so earlier dims keep their index
        if len(groups[d]) > 1:
            t = t.reshape_dim(d, tuple(sizes.get(n, -1) for n in groups[d]))
        elif groups[d][0] in sizes and sizes[groups[d][0]] != t.shape[d]:
            fail(rule, f"{groups[d][0]}={sizes[groups[d][0]]} but dimension {d} of {t} has size {t.shape[d]}")
    t = t.permute(tuple(names.index(n) for n in order))
    at = [sum(len(g) for g in out[:i]) for i in range(len(out))]
    for i in reversed(range(len(out))):  # merge from the last for the same reason
        if len(out[i]) > 1:
            t = t.flatten_dims(at[i], at[i] + len(out[i]) - 1)
    return t


__all__ = ["NkiTensor", "Storage", "Index", "NkiTraceError", "NkiValidationError"]
