"""NKI 2.33's names beyond the instructions: nki.typing, nki.dtype, nl.NKIObject, the fp8 and MX
types, nl.tile_size per profile, nl.broadcast_to, SPMD grids over logical cores (nl.nc,
nl.spmd_dim), nl.matmul of mixed operands, and the documented-API coverage (the README's table).
Each kernel runs through nki.simulate on the host and through nki.jit on neuron tensors."""
import dataclasses
import pathlib

import pytest
import torch

import torch_neuronx  # noqa: F401
import torch_neuronx.nki as nki
import torch_neuronx.nki.isa as nisa
import torch_neuronx.nki.language as nl
import torch_neuronx.nki.typing as nt
from torch_neuronx.nki import NkiTraceError, NkiValidationError, _api
from nki_both import both

N = "neuron"


# --- nki.typing, nki.dtype, nl.NKIObject -----------------------------------------------------------
@nki.jit
def typed_kernel(x: nt.tensor[128, 64], acc: nt.mutable_tensor, scale):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, nl.multiply(t, scale))
    nl.store(acc, nl.add(nl.load(acc), t))  # in place: acc is declared mutable
    return out


def test_typing_annotations_declare_and_check_argument_shapes():
    x, acc = torch.randn(128, 64), torch.ones(128, 64)
    out = nki.simulate(typed_kernel)(x, acc, 2.0)
    assert torch.equal(out, x * 2) and torch.equal(acc, 1 + x)
    accn = torch.ones(128, 64).to(N)
    assert torch.equal(typed_kernel(x.to(N), accn, 2.0).cpu(), x * 2) and torch.equal(accn.cpu(), 1 + x)
    with pytest.raises(NkiTraceError, match=r"argument 'x' is declared nt.tensor\[128, 64\] but has shape \(64, 64\)"):
        nki.simulate(typed_kernel)(torch.randn(64, 64), torch.ones(64, 64), 2.0)
    assert repr(nt.tensor[(4, 8), nl.bfloat16]) == "nt.tensor[4, 8, torch.bfloat16]"
    assert nt.mutable_tensor.mutable and not nt.tensor.mutable and nt.Tensor is nt.tensor

    def bf16_only(x: nt.tensor[(2, 2), nl.bfloat16]):
        return None

    with pytest.raises(NkiTraceError, match=r"argument 'x' is declared nt.tensor\[2, 2, torch.bfloat16\] but is "
                                            r"torch.float32"):
        nki.simulate(bf16_only)(torch.zeros(2, 2))


def test_nki_dtype_is_the_type_of_the_nl_dtypes():
    assert nki.dtype is nl.dtype
    assert all(isinstance(d, nl.dtype) for d in (nl.float32, nl.bfloat16, nl.float8_e4m3, nl.float8_e5m2, nl.int32))


@dataclasses.dataclass
class ScaleConfig(nl.NKIObject):  # how nki-library declares a kernel's configuration
    scale: float = 1.0
    shift: float = 0.0


@dataclasses.dataclass
class ListConfig(nl.NKIObject):
    scales: list
    shift: float

    @property
    def scale(self):
        return self.scales[0]


@nki.jit
def config_kernel(x, cfg):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.multiply(nl.load(x), cfg.scale), cfg.shift))
    return out


def test_nkiobject_config_dataclass_is_a_kernel_argument_keyed_by_its_fields():
    x = torch.randn(128, 32)
    assert torch.equal(both(config_kernel, x, ScaleConfig(2.0, 1.0)), x * 2 + 1)
    assert torch.equal(both(config_kernel, x, ScaleConfig(3.0, 0.0)), x * 3)  # not the first trace again
    assert torch.equal(both(config_kernel, x, ListConfig([2.0], 0.5)), x * 2 + 0.5)  # a list field keys too
    assert nl.NKIObject(a=1).a == 1


# --- fp8 and MX types --------------------------------------------------------------------------------
@nki.jit
def fp8_kernel(x, f8):
    """fp32 HBM -> fp32 tile -> fp8 tile (cast) -> fp8 HBM, and the fp8 tile widened to bf16 and fp32."""
    q = nl.ndarray(x.shape, dtype=f8, buffer=nl.shared_hbm)
    wide = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    half = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    t8 = nl.ndarray(x.shape, dtype=f8, buffer=nl.sbuf)
    nisa.tensor_copy(t8, nl.load(x))
    nl.store(q, t8)
    nl.store(wide, nl.copy(t8, dtype=nl.float32))
    nl.store(half, nl.copy(t8, dtype=nl.bfloat16))
    return q, wide, half


@pytest.mark.parametrize("name,torch_dtype,limit", [("float8_e4m3", torch.float8_e4m3fn, 240.0),
                                                     ("float8_e4m3fn", torch.float8_e4m3fn, 448.0),
                                                     ("float8_e5m2", torch.float8_e5m2, 57344.0)])
def test_fp8_tiles_cast_store_and_widen_as_torch_converts(name, torch_dtype, limit):
    f8 = getattr(nl, name)
    x = (torch.randn(128, 64) * limit / 4).clamp(-limit, limit)
    x[0, :4] = torch.tensor([0.0, -0.0, limit, -limit])
    q, wide, half = both(fp8_kernel, x, f8)
    want = x.to(torch_dtype)
    assert q.dtype == torch_dtype and torch.equal(q.view(torch.uint8), want.view(torch.uint8))
    assert torch.equal(wide, want.float()) and torch.equal(half, want.to(torch.bfloat16))


@nki.jit
def fp8_load_kernel(q):
    """fp8 HBM -> fp32 tile by a casting DMA (nl.load(dtype=)) -> fp32 HBM."""
    out = nl.ndarray(q.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nl.load(q, dtype=nl.float32))
    return out


def test_fp8_hbm_inputs_load_with_a_cast():
    q = torch.randn(128, 32).to(torch.float8_e5m2)
    assert torch.equal(both(fp8_load_kernel, q), q.float())


@nki.jit
def fp8_matmul_kernel(x, y, f8):
    out = nl.ndarray((x.shape[1], y.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nl.matmul(nl.load(x, dtype=f8), nl.load(y, dtype=f8), transpose_x=True))
    return out


def test_fp8_matmul_operands_equal_a_float64_product_of_the_rounded_values():
    x, y = torch.randn(128, 64), torch.randn(128, 96)
    got = both(fp8_matmul_kernel, x, y, nl.float8_e4m3)
    xr, yr = x.to(torch.float8_e4m3fn).double(), y.to(torch.float8_e4m3fn).double()
    torch.testing.assert_close(got.double(), xr.t() @ yr, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("name", ["float8_e5m2_x4", "float8_e4m3fn_x4", "float4_e2m1fn_x4"])
def test_mx_types_name_fine_and_refuse_a_tile(name):
    dt = getattr(nl, name)  # naming it, as nki-library's helpers do at import, works
    assert str(dt) == name and dt in (nl.float8_e5m2_x4, nl.float8_e4m3fn_x4, nl.float4_e2m1fn_x4)

    def k(x):
        nl.ndarray((128, 4), dtype=dt, buffer=nl.sbuf)

    with pytest.raises(NkiTraceError, match=f"nl.{name} is not supported yet"):
        nki.simulate(nki.jit(k))(torch.zeros(1))


def test_dtypes_by_string_and_numpy_and_bad_dtypes():
    import numpy as np

    seen = []

    def k(x):
        seen.append(nl.ndarray((4, 4), dtype="bfloat16").dtype)
        seen.append(nl.ndarray((4, 4), dtype=np.float16).dtype)
        nl.ndarray((4, 4), dtype=torch.float64)

    with pytest.raises(NkiTraceError, match="torch.float64 is not an NKI dtype"):
        nki.simulate(nki.jit(k))(torch.zeros(1))
    assert seen == [torch.bfloat16, torch.float16]


# --- nl.tile_size ----------------------------------------------------------------------------------
TILE_SIZE_FIELDS = ("pmax psum_fmax psum_bank_fmax psum_bank_fmax_bytes psum_fmax_bytes psum_num_banks "
                    "sbuf_size_bytes sbuf_fmax sbuf_fmax_bytes gemm_stationary_fmax gemm_moving_fmax bn_stats_fmax "
                    "psum_min_align sbuf_min_align total_available_sbuf_size").split()


@pytest.mark.parametrize("profile,sbuf_partition,moving", [("trn2", 224 * 1024, 512), ("trn3", 256 * 1024, 4096)])
def test_tile_size_has_every_documented_field_per_profile(profile, sbuf_partition, moving):
    seen = {}

    def k(x):
        seen.update({f: getattr(nl.tile_size, f) for f in TILE_SIZE_FIELDS})

    nki.estimate(nki.jit(k), profile=profile)(nki.Spec((1,), torch.float32))
    assert seen["total_available_sbuf_size"] == seen["sbuf_fmax_bytes"] == sbuf_partition
    assert seen["sbuf_size_bytes"] == 128 * sbuf_partition and seen["sbuf_fmax"] == sbuf_partition // 4
    assert seen["gemm_moving_fmax"] == moving
    assert (seen["pmax"], seen["psum_bank_fmax"], seen["psum_bank_fmax_bytes"], seen["psum_num_banks"],
            seen["gemm_stationary_fmax"], seen["bn_stats_fmax"]) == (128, 512, 2048, 8, 128, 512)


def test_a_tile_of_total_available_sbuf_fits_and_one_more_byte_does_not():
    def k(x, extra):
        nl.ndarray((128, nl.tile_size.total_available_sbuf_size + extra), dtype=nl.uint8, buffer=nl.sbuf)

    nki.estimate(nki.jit(k), profile="trn2")(nki.Spec((1,), torch.float32), 0)
    with pytest.raises(NkiValidationError, match="sbuf"):
        nki.estimate(nki.jit(k), profile="trn2")(nki.Spec((1,), torch.float32), 1)


# --- nl.broadcast_to -----------------------------------------------------------------------------
@nki.jit
def broadcast_kernel(x, shape, dtype):
    out = nl.ndarray(shape, dtype=dtype or x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.broadcast_to(nl.load(x), shape=shape, dtype=dtype))
    return out


@pytest.mark.parametrize("src,dst", [((128, 1), (128, 64)), ((1, 64), (128, 64)), ((1, 1), (96, 40)),
                                     ((1, 8, 1), (64, 8, 5))])
def test_broadcast_to_follows_numpy_rules_along_free_and_partition_dims(src, dst):
    x = torch.randn(src)
    assert torch.equal(both(broadcast_kernel, x, dst, None), x.expand(dst))
    assert torch.equal(both(broadcast_kernel, x, dst, nl.bfloat16), x.expand(dst).bfloat16())


def test_broadcast_to_refuses_shapes_numpy_would():
    with pytest.raises(NkiValidationError, match=r"broadcast_to: shape: cannot broadcast \(128, 2\) to \(128, 4\)"):
        nki.simulate(broadcast_kernel)(torch.zeros(128, 2), (128, 4), None)
    with pytest.raises(NkiValidationError, match="cannot broadcast"):
        nki.simulate(broadcast_kernel)(torch.zeros(128, 1), (128, 4, 2), None)


# --- SPMD grids over logical cores -----------------------------------------------------------------
@nki.jit
def spmd_kernel(a):
    b = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i, j = nl.program_id(0), nl.program_id(1)
    tag = float(i * 100 + j * 10 + nl.num_programs(0) + nl.num_programs() / 100)
    nl.store(b[i, j], nl.add(nl.load(a[i, j]), tag))
    return b


def loop_over_programs(a, g0, g1):
    want = a.clone()
    for i in range(g0):
        for j in range(g1):
            want[i, j] += i * 100 + j * 10 + g0 + g0 * g1 / 100
    return want


@pytest.mark.parametrize("grid", [(nl.spmd_dim(nl.nc(2), 2), 2), (nl.spmd_dim(2, nl.nc(2)), 2),
                                  (nl.nc(2), 3), (4, 2)], ids=["nc-major", "nc-minor", "nc", "plain"])
def test_spmd_grid_over_logical_cores_equals_a_loop_over_programs(grid):
    g0 = nl.grid_size(grid[0])
    a = torch.randn(g0, grid[1], 128, 16)
    got = both(spmd_kernel[grid], a)
    torch.testing.assert_close(got, loop_over_programs(a, g0, grid[1]), rtol=0, atol=1e-5)


def test_spmd_launch_grid_rules():
    with pytest.raises(ValueError, match="groups 1 or 2 physical cores"):
        nl.nc(3)
    with pytest.raises(ValueError, match="at most one nl.nc"):
        nl.spmd_dim(nl.nc(2), nl.nc(2))
    with pytest.raises(ValueError, match="positive int, nl.nc"):
        spmd_kernel[0, 2]
    assert nl.spmd_dim(nl.nc(2), 3).size == 6 and repr(nl.spmd_dim(2, nl.nc(2))) == "nl.spmd_dim(2, nl.nc(2))"


# --- nl.matmul of mixed operands ---------------------------------------------------------------------
@nki.jit
def mixed_matmul_kernel(x, y):
    out = nl.ndarray((x.shape[1], y.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nl.matmul(nl.load(x), nl.load(y), transpose_x=True))
    return out


@pytest.mark.parametrize("dx,dy", [(torch.float32, torch.bfloat16), (torch.bfloat16, torch.float32),
                                   (torch.float16, torch.float32)])
def test_nl_matmul_of_fp32_and_a_narrow_type_multiplies_in_fp32(dx, dy):
    """fp32 scores × bf16 values (attention's P·V): the narrow operand widens exactly, as NKI's type
    promotion says, so the product equals a float64 product of the operands' values."""
    x, y = torch.randn(128, 64).to(dx), torch.randn(128, 256).to(dy)
    got = both(mixed_matmul_kernel, x, y)
    torch.testing.assert_close(got.double(), x.double().t() @ y.double(), atol=1e-4, rtol=1e-5)


def test_nc_matmul_itself_still_refuses_mixed_fp32_operands():
    def k(x, y):
        dst = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst, nl.load(x), nl.load(y))

    with pytest.raises(NkiValidationError, match="fp32 operands multiply only with fp32 operands"):
        nki.simulate(nki.jit(k))(torch.zeros(128, 64), torch.zeros(128, 32, dtype=torch.bfloat16))


# --- creation and loop helpers -----------------------------------------------------------------------
@nki.jit
def identity_kernel(x, n, dtype):
    eye = nl.ndarray((n, n), dtype=dtype, buffer=nl.shared_hbm)
    notx = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(eye, nl.shared_identity_matrix(n, dtype=dtype))
    nl.store(notx, nl.logical_not(nl.load(x)))
    acc = nl.zeros((x.shape[0], 1), dtype=nl.float32)
    for i in nl.dynamic_range(0, x.shape[1], 2):  # trip count known at trace time: unrolled
        acc = nl.add(acc, nl.load(x[:, i:i + 1]))
    total = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(total, acc)
    return eye, notx, total


@pytest.mark.parametrize("n,dtype", [(128, nl.float32), (40, nl.uint8), (64, nl.bfloat16)])
def test_identity_matrix_logical_not_and_dynamic_range(n, dtype):
    x = torch.randint(0, 3, (32, 8)).float()
    eye, notx, total = both(identity_kernel, x, n, dtype)
    assert torch.equal(eye, torch.eye(n, dtype=dtype))
    assert torch.equal(notx, (x == 0).float())
    assert torch.equal(total, x[:, ::2].sum(1, keepdim=True))


def test_dynamic_range_over_a_runtime_value_says_not_supported_yet():
    with pytest.raises(NkiTraceError, match="dynamic_range over a runtime register .* not supported yet"):
        nl.dynamic_range(0, object())


# --- the documented API ------------------------------------------------------------------------------
@pytest.mark.parametrize("module,mod", [("nki.language", nl), ("nki.isa", nisa)])
def test_every_documented_name_resolves_and_a_missing_one_says_not_supported_yet(module, mod):
    short = "nl" if mod is nl else "nisa"
    for name in _api.documented(module):
        value = getattr(mod, name)  # never AttributeError: a kernel module naming it imports
        if isinstance(value, _api.NotSupportedYet):
            with pytest.raises(NkiTraceError, match=f"{short}.{name} is documented NKI 2.33 API .* not support yet"):
                value(1)
    with pytest.raises(AttributeError):
        getattr(mod, "no_such_nki_name")


def test_from_import_of_a_missing_documented_name_works():
    from torch_neuronx.nki.isa import core_barrier  # noqa: F401
    from torch_neuronx.nki.language import device_print  # noqa: F401  (documented, not implemented)


def test_collectives_import_and_say_not_supported_yet():
    import torch_neuronx.nki.collectives as ncc
    from torch_neuronx.nki.collectives import ReplicaGroup

    with pytest.raises(NkiTraceError, match="nki.collectives.all_gather is documented NKI 2.33 API"):
        ncc.all_gather(None)
    with pytest.raises(NkiTraceError, match="not support yet"):
        ReplicaGroup([[0, 1]])


def test_jit_takes_the_options_nki_library_passes():
    @nki.jit(mode="trace")
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(x))
        return out

    x = torch.randn(8, 4)
    assert torch.equal(nki.simulate(k)(x), x)
    assert nki.jit(compile_config=None, specialization_config=None)(k.fn) is not None
    with pytest.raises(TypeError, match="mode= was removed"):
        nki.jit(lambda a: a, mode="baremetal")


def test_isa_constants_module_holds_the_enums_as_nki_library_imports_them():
    from torch_neuronx.nki.isa.constants import dge_mode, oob_mode

    assert dge_mode is nisa.dge_mode and oob_mode is nisa.oob_mode and nisa.constants.engine is nisa.engine


def test_readme_carries_the_current_coverage_table():
    readme = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()
    readme = "\n".join(line.strip() for line in readme.splitlines())  # the table sits in a list item
    assert _api.table() in readme, "README's NKI coverage table is stale: print(_api.table())"
