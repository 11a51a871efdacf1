"""NKI access patterns (`NkiTensor.ap`) and NkiTensor's view methods, in small kernels written as
NKI kernels are: each result equals torch's on the CPU (`torch.as_strided` over the flattened
tensor is what an access pattern means), through nki.simulate and on neuron tensors; and each
rule of the hardware raises at trace time naming the rule and the kernel's line."""
import pytest
import torch

import torch_neuronx.nki as nki
import torch_neuronx.nki.isa as nisa
import torch_neuronx.nki.language as nl
from torch_neuronx.nki import NkiValidationError
from nki_both import bits, both

N = "neuron"


def apply(t, recipe):
    """`recipe`: ((method, args), ...) applied in order to an NkiTensor."""
    for name, args in recipe:
        t = getattr(t, name)(*args)
    return t


@nki.jit
def hbm_view_kernel(x, recipe):
    # The view is of the kernel's HBM argument: a DMA reads it into SBUF as one access pattern.
    v = apply(x, recipe)
    tile = nl.ndarray(v.shape, dtype=v.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=v)
    out = nl.ndarray(v.shape, dtype=v.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out


@nki.jit
def sbuf_view_kernel(x, recipe):
    # The view is of an SBUF tile: an engine reads it (tensor_copy) with the pattern.
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    v = apply(t, recipe)
    r = nl.ndarray(v.shape, dtype=v.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=r, src=v)
    out = nl.ndarray(v.shape, dtype=v.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=r)
    return out


def pattern(x, pairs, offset=0, dtype=None):
    """What `x.ap(pairs, offset, dtype=dtype)` reads, by torch: element offset + sum(i_d * step_d)
    of the flattened tensor (an index tensor, as as_strided takes no negative steps)."""
    flat = (x.view(dtype) if dtype is not None else x).flatten()
    index = torch.tensor(offset)
    for d, (step, num) in enumerate(pairs):
        index = index.unsqueeze(-1) + step * torch.arange(num)
    return flat[index]


# --- access patterns ---------------------------------------------------------------------------
HBM_PATTERNS = [
    ("transpose", (64, 32), [[1, 32], [32, 64]], 0),          # x.T: partitions walk x's columns
    ("block", (16, 16), [[16, 8], [1, 8]], 4 * 16 + 8),      # rows 4..11, columns 8..15
    ("broadcast_row", (4, 24), [[0, 128], [1, 24]], 2 * 24),  # row 2 into every partition
    ("every_other", (8, 40), [[40, 8], [2, 20]], 1),          # odd columns
    ("three_free", (6, 60), [[60, 6], [1, 5], [5, 3], [15, 4]], 0),
]


@pytest.mark.parametrize("name,shape,pairs,offset", HBM_PATTERNS, ids=[p[0] for p in HBM_PATTERNS])
def test_access_pattern_on_hbm_equals_as_strided(name, shape, pairs, offset):
    x = torch.randn(shape)
    recipe = (("ap", (tuple(map(tuple, pairs)), offset)),)
    assert torch.equal(both(hbm_view_kernel, x, recipe), pattern(x, pairs, offset))


SBUF_PATTERNS = [
    ("strided_free", (16, 4 * 6), [[24, 16], [1, 6], [6, 4]], 0),  # (16, 6, 4): free dims swapped
    ("partition_block", (32, 16), [[16, 8], [1, 8]], 4 * 16 + 8),   # partitions 4..11, columns 8..15
    ("four_free", (4, 16), [[16, 4], [8, 2], [4, 2], [2, 2], [1, 2]], 0),
]


@pytest.mark.parametrize("name,shape,pairs,offset", SBUF_PATTERNS, ids=[p[0] for p in SBUF_PATTERNS])
def test_access_pattern_on_sbuf_equals_as_strided(name, shape, pairs, offset):
    x = torch.randn(shape)
    recipe = (("ap", (tuple(map(tuple, pairs)), offset)),)
    assert torch.equal(both(sbuf_view_kernel, x, recipe), pattern(x, pairs, offset))


def test_access_pattern_dtype_reinterprets_the_bytes():
    # The docs' example: an int32 tile read as bf16 has twice the elements in each partition.
    x = torch.randint(-2 ** 31, 2 ** 31 - 1, (16, 8), dtype=torch.int32)
    pairs = ((16, 16), (1, 16))
    for kernel in (hbm_view_kernel, sbuf_view_kernel):
        got = both(kernel, x, (("ap", (pairs, 0, None, None, 0, nl.bfloat16)),))
        assert got.dtype == torch.bfloat16
        assert torch.equal(got.view(torch.int16), pattern(x, pairs, dtype=torch.int16))


def test_access_pattern_of_a_sliced_view_counts_from_the_view():
    # nki-library slices an HBM tensor, then gives the pattern from the slice's first element.
    x = torch.randn(4, 8, 16)
    recipe = (("slice", (0, 2, 3)), ("ap", (((16, 8), (2, 8)), 1)))
    assert torch.equal(both(hbm_view_kernel, x, recipe), pattern(x[2], [[16, 8], [2, 8]], 1))


@nki.jit
def pool_kernel(x):
    # 2x2 average pooling of (C, H, W) the way the average_pool2d tutorial walks its input: one
    # pattern over the 3-D tile makes (C, H/2, W/2, 2, 2) windows, nl.sum folds the last two axes.
    c, h, w = x.shape
    t = nl.ndarray((c, h, w), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    windows = t.ap([[h * w, c], [2 * w, h // 2], [2, w // 2], [w, 2], [1, 2]])
    s = nl.sum(windows, axis=[3, 4])
    r = nl.ndarray((c, h // 2, w // 2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=r, data=s, op0=nl.multiply, operand0=0.25)
    out = nl.ndarray((c, h // 2, w // 2), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=r)
    return out


def test_average_pool_through_a_four_free_dim_pattern():
    x = torch.randn(64, 12, 10)
    want = torch.nn.functional.avg_pool2d(x.double().unsqueeze(0), 2).squeeze(0)
    torch.testing.assert_close(both(pool_kernel, x).double(), want, atol=1e-6, rtol=1e-6)


def test_get_pattern_and_offset_describe_a_view():
    def k(x):
        t = nl.ndarray((16, 4, 8), dtype=nl.float32, buffer=nl.sbuf)
        v = t[2:6, 1, 0:8:2]
        assert v.get_pattern() == v.pattern == [[32, 4], [2, 4]] and v.offset == 2 * 32 + 8
        assert x.ap([[8, 2], [1, 8]], 8).get_pattern() == [[8, 2], [1, 8]]
        out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=x[0:1, 0:1])
        return out

    nki.simulate(nki.jit(k))(torch.zeros(4, 8))


# --- view methods -------------------------------------------------------------------------------
X3 = (8, 6, 10)
VIEWS = [
    # (id, recipe, what torch does); rearrange's fixed_sizes travel as pairs (arguments are hashed)
    ("slice", (("slice", (2, 1, 9, 3)),), lambda t: t[:, :, 1:9:3]),
    ("select", (("select", (1, 4)),), lambda t: t.select(1, 4)),
    ("expand_dim", (("expand_dim", (2,)),), lambda t: t.unsqueeze(2)),
    ("squeeze_dim", (("slice", (1, 2, 3)), ("squeeze_dim", (1,))), lambda t: t[:, 2]),
    ("reshape_dim", (("reshape_dim", (2, (2, -1))),), lambda t: t.unflatten(2, (2, 5))),
    ("flatten_dims", (("flatten_dims", (1, 2)),), lambda t: t.flatten(1, 2)),
    ("permute", (("permute", ((0, 2, 1),)),), lambda t: t.permute(0, 2, 1)),
    ("broadcast", (("slice", (1, 0, 1)), ("broadcast", (1, 3))), lambda t: t[:, 0:1].expand(8, 3, 10)),
    ("reshape", (("reshape", ((8, 60),)),), lambda t: t.reshape(8, 60)),
    ("view_shape", (("view", ((8, 3, 20),)),), lambda t: t.view(8, 3, 20)),
    ("rearrange", (("rearrange", (("p", "a", ("h", "w")), ("p", "w", ("a", "h")), (("h", 2),))),),
     lambda t: t.unflatten(2, (2, 5)).permute(0, 3, 1, 2).flatten(2, 3)),
    ("chained", (("reshape_dim", (2, (5, 2))), ("select", (3, 1)), ("permute", ((0, 2, 1),))),
     lambda t: t.unflatten(2, (5, 2))[..., 1].permute(0, 2, 1)),
]


@pytest.mark.parametrize("where", ["hbm", "sbuf"])
@pytest.mark.parametrize("name,recipe,fn", VIEWS, ids=[v[0] for v in VIEWS])
def test_view_method_equals_torch(where, name, recipe, fn):
    x = torch.randn(X3)
    kernel = hbm_view_kernel if where == "hbm" else sbuf_view_kernel
    assert torch.equal(both(kernel, x, recipe), fn(x).contiguous())


@pytest.mark.parametrize("where", ["hbm", "sbuf"])
def test_view_dtype_reinterprets_in_place(where):
    x = torch.randn(8, 12)
    kernel = hbm_view_kernel if where == "hbm" else sbuf_view_kernel
    got = both(kernel, x, (("slice", (1, 2, 10)), ("view", (nl.bfloat16,))))
    assert got.dtype == torch.bfloat16 and torch.equal(bits(got), bits(x[:, 2:10].contiguous()))
    got = both(kernel, x, (("reinterpret_cast", (nl.int32,)),))
    assert torch.equal(got, x.view(torch.int32))


# --- the rules ----------------------------------------------------------------------------------
def expect_rule(match, body, shape=(16, 32)):
    with pytest.raises(NkiValidationError, match=match) as info:
        nki.simulate(nki.jit(body))(torch.zeros(shape))
    assert "test_nki_access.py:" in str(info.value), "the message names the kernel's line"


def _read(view):
    """An instruction reading `view` (where an access pattern's bounds are checked)."""
    tile = nl.ndarray(view.shape, dtype=view.dtype, buffer=nl.sbuf)
    (nisa.tensor_copy if view.on_chip else nisa.dma_copy)(dst=tile, src=view)


def sbuf(shape=(16, 32)):
    return nl.ndarray(shape, dtype=nl.float32, buffer=nl.sbuf)


@pytest.mark.parametrize("body,match", [
    # the docs' own illegal example: every other partition
    (lambda x: sbuf().ap([[64, 8], [1, 32]], 0), r"access pattern: .*partitions must be read contiguously"),
    (lambda x: sbuf((16, 64)).ap([[64, 16], [32, 2], [16, 2], [8, 2], [4, 2], [1, 4]], 0),
     r"5 free dimensions .* at most 4"),
    # a pattern past its tensor's end breaks the rule where an instruction uses it (building one is allowed)
    (lambda x: _read(sbuf().ap([[32, 8], [1, 32]], 9 * 32)),
     r"tensor_copy: .*reads partitions 9..16 of .* 16 partitions"),
    (lambda x: _read(sbuf().ap([[32, 16], [1, 32]], 1)), r"reaches element 32 of a partition"),
    (lambda x: _read(x.ap([[32, 16], [1, 32]], 1)), r"dma_copy: .*reaches element 512 of .* 512 elements"),
    (lambda x: _read(x.slice(0, 1, 2).ap([[32, 1], [1, 8]], -33)), r"reaches element -1 of .* 512 elements"),
    (lambda x: x.ap([[32, 16], [1, 0]], 0), r"every num .* at least 1"),
    (lambda x: x.ap([32, 16], 0), r"pairs of ints"),
    (lambda x: nl.ndarray((16, 3), dtype=nl.bfloat16, buffer=nl.sbuf).view(nl.float32),
     r"view: .*not whole 4-byte elements"),
    (lambda x: sbuf().select(0, 3), r"select: .*would change its partition dimension"),
    (lambda x: sbuf().select(1, 3), r"at least 2-D"),
    (lambda x: sbuf().reshape_dim(0, (4, 4)), r"reshape_dim: .*partition dimension"),
    (lambda x: sbuf().expand_dim(0), r"expand_dim: .*partition dimension"),
    (lambda x: sbuf((16, 4, 8)).flatten_dims(0, 1), r"flatten_dims: .*partition dimension"),
    (lambda x: x.permute((1, 0)).flatten_dims(0, 1), r"flatten_dims: .*not contiguous"),
    (lambda x: x.squeeze_dim(1), r"squeeze_dim: dimension 1 .* has size 32, not 1"),
    (lambda x: x.reshape_dim(1, (5, -1)), r"reshape_dim: cannot fit"),
    (lambda x: x.slice(1, 4, 40), r"index: slice 4:40:1 is out of range"),
    (lambda x: x.rearrange(("a", "b"), ("b", "c")), r"rearrange: .*exactly once"),
    (lambda x: x.select(2, 0), r"select: dimension 2 is out of range"),
], ids=["partition_stride", "free_dims", "partitions", "row_end", "hbm_bounds", "hbm_before", "num", "format",
        "view_dtype", "select_partition", "select_2d", "reshape_dim_partition", "expand_partition",
        "flatten_partition", "flatten_strided", "squeeze", "reshape_dim_fit", "slice", "rearrange", "dim"])
def test_rules_of_access_patterns_and_views(body, match):
    expect_rule(match, body)


def test_what_is_not_supported_yet_says_so():
    # Indirection and run-time offsets other than one per HBM access (test_nki_library_constructs
    # covers that one) read addresses from SBUF at run time: not supported yet.
    t = torch.zeros(16, 32)
    for body in (lambda x: sbuf((16, 32)).ap([[32, 16], [1, 32]], 0, scalar_offset=sbuf((1, 1))),
                 lambda x: sbuf((16, 32)).ap([[32, 16], [1, 32]], 0, vector_offset=sbuf((16, 1))),
                 lambda x: x.ap([[32, 16], [-1, 32]], 31),
                 lambda x: x.indirect(sbuf((16, 1))), lambda x: x.vector_select(0, sbuf((16, 1))),
                 lambda x: x.select(0, sbuf((1, 1)))):
        with pytest.raises(NotImplementedError, match="not supported yet"):
            nki.simulate(nki.jit(body))(t)
    nki.simulate(nki.jit(lambda x: _no_indirect(x)))(t)


def _no_indirect(x):
    assert not x.is_indirect() and not x.ap([[32, 16], [1, 32]], 0).is_indirect()
    out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=x[0:1, 0:1])
    return out
