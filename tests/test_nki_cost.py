"""The NKI cost model (nki.estimate) ranks kernels as the hardware does: the four steps of AWS's
matmul tutorial in the order of its published table, DMA split over the queues and overlapped with
compute, the row-size efficiency of a transfer, data loaded once costing once. The kernels of the
tutorial's steps (tests/nki_matmul_steps.py) are checked against torch as well."""
import pytest
import torch

import torch_neuronx  # noqa: F401
import torch_neuronx.nki as nki
import torch_neuronx.nki.isa as nisa
import torch_neuronx.nki.language as nl
from nki_matmul_steps import PUBLISHED_MS, STEPS
from torch_neuronx.nki import _cost

N = "neuron"
BF16 = torch.bfloat16
# Small blocks for the small shapes the correctness test runs (the defaults need M % 2048 == 0).
SMALL = {"tiled": {}, "hoisted": {}, "block_free": {"bm": 2, "bn": 1}, "block_all": {"bm": 2, "bn": 1, "bk": 2}}


@pytest.mark.parametrize("name", sorted(STEPS))
def test_each_tutorial_step_computes_lhsT_transposed_times_rhs(name):
    k, m, n = 512, 256, 1024
    lhsT, rhs = torch.randn(k, m).to(BF16), torch.randn(k, n).to(BF16)
    want = (lhsT.double().T @ rhs.double())
    got = nki.simulate(STEPS[name])(lhsT, rhs, **SMALL[name])
    torch.testing.assert_close(got.double(), want, atol=0.25, rtol=2e-2)  # one bf16 rounding of a 512-term sum
    on_neuron = STEPS[name](lhsT.to(N), rhs.to(N), **SMALL[name])
    assert torch.equal(on_neuron.cpu(), got), "the device and the host simulator run the same program"


def _table(profile, k, m, n):
    return {name: nki.estimate(kernel, profile=profile)(nki.Spec((k, m), BF16), nki.Spec((k, n), BF16))
            for name, kernel in STEPS.items()}


@pytest.mark.parametrize("profile", ["trn2", "trn3"])
def test_the_tutorial_steps_rank_in_the_order_of_its_published_table(profile):
    # [4096, 1024] @ [1024, 2048] (the tutorial's test shape; its table's shape, [4096, 8192] @
    # [8192, 8192], traces for a minute: benchmarks/nki.py prints that one)
    est = _table(profile, 1024, 4096, 2048)
    base, pub = est["tiled"].latency_us, PUBLISHED_MS["tiled"]
    rows = "\n".join(f"  {name:<11}{e.latency_us:9.1f} us  {e.dma_bytes / 1e6:7.1f} MB  "
                     f"speedup {base / e.latency_us:5.2f}x (published {pub / PUBLISHED_MS[name]:5.2f}x)"
                     for name, e in est.items())
    lat = [e.latency_us for e in est.values()]
    # each step of the tutorial is faster on the hardware: 1.21x the smallest (hoisting the loads)
    assert all(b < a / 1.1 for a, b in zip(lat, lat[1:])), f"{profile}:\n{rows}"
    moved = [e.dma_bytes for e in est.values()]
    assert moved == sorted(moved, reverse=True), rows
    flops = 2 * 4096 * 1024 * 2048
    assert all(e.flops == flops for e in est.values())  # the same work, only its data movement differs
    # the last step is bound by the PE array, the others by DMA
    assert est["block_all"].latency_us < 2 * est["block_all"].busy_us["tensor"], rows
    assert est["tiled"].latency_us > 5 * est["tiled"].busy_us["tensor"], rows


def load_kernel(x, tiles):
    # `tiles` loads of the same [P, F] block of x, each into a fresh SBUF tile, summed on the Vector Engine
    acc = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(acc, 0.0)
    for _ in range(tiles):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=acc)
    return out


def estimate(kernel, *args):
    return nki.estimate(nki.jit(kernel), profile="trn2")(*args)


def test_a_transfer_spreads_over_the_dma_queues_by_partition_groups():
    # the same 512 KiB as 128 partitions of 4 KiB and as 8 partitions of 64 KiB: the first moves
    # on all 16 queues at once, the second on 8 (one packet per partition here)
    wide = estimate(load_kernel, nki.Spec((128, 1024), torch.float32), 1)
    narrow = estimate(load_kernel, nki.Spec((8, 16384), torch.float32), 1)
    assert wide.dma_bytes == narrow.dma_bytes
    assert narrow.latency_us > 1.5 * wide.latency_us, (wide, narrow)


def test_dma_overlaps_compute_on_other_engines():
    est = estimate(load_kernel, nki.Spec((128, 2048), torch.float32), 32)
    dma_alone = est.busy_us["dma"] / 16
    vector = est.busy_us["vector"]
    # loads run ahead on the queues while the Vector Engine adds: the latency is near the larger
    # of the two, not their sum
    assert max(dma_alone, vector) <= est.latency_us < 0.8 * (dma_alone + vector), est


def row_kernel(x, rows, cols):
    # one dma_copy of x[:rows, :cols] (a [rows, cols] view of rows of x.shape[1] elements)
    t = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[0:rows, 0:cols])
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_dma_rate_follows_the_row_size_as_the_tutorial_and_the_dma_guide_report():
    eff = _cost._dma_efficiency
    # 4 KiB rows saturate the engines; 1 KiB rows get a quarter of the rate, and 256-byte rows the
    # same (the tutorial's tiled and hoisted loads run at one rate); rows of one element are far slower
    assert eff(4096) == eff(8192) == 1.0
    assert eff(2048) == 0.5 and eff(1024) == 0.25
    assert eff(256) == pytest.approx(eff(1024), rel=0.25)
    assert eff(2) < eff(1024) / 10
    # and in a kernel: the same bytes in rows of one bf16 element take far longer than in 1 KiB rows
    rows_of = {c: estimate(row_kernel, nki.Spec((128, 8192), BF16), 128, c) for c in (1, 512)}
    per_byte = {c: e.busy_us["dma"] / e.dma_bytes for c, e in rows_of.items()}
    assert per_byte[1] > 4 * per_byte[512], rows_of


def test_data_loaded_once_and_reused_costs_once():
    @nki.jit
    def reuse(x, loads):
        a = nl.ndarray((128, 128), dtype=x.dtype, buffer=nl.sbuf)
        out = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.shared_hbm)
        b = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x[:, 0:128])
        nisa.dma_copy(dst=b, src=x)
        for i in range(8):
            if loads == "each":  # reload the stationary tile for every matmul
                a = nl.ndarray((128, 128), dtype=x.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=x[:, 0:128])
            acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=acc, stationary=a, moving=b)
            res = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out, src=res)
        return out

    x = nki.Spec((128, 512), BF16)
    once = nki.estimate(reuse, profile="trn2")(x, "once")
    each = nki.estimate(reuse, profile="trn2")(x, "each")
    assert each.instructions["dma"] - once.instructions["dma"] == 8
    assert each.dma_bytes - once.dma_bytes == 8 * 128 * 128 * 2
    assert once.latency_us < each.latency_us


@nki.jit
def spmd_scale(x):
    # Each program scales its own block of rows: no data shared, so programs on two cores overlap.
    rows = x.shape[0] // nl.num_programs(0)
    r0 = nl.program_id(0) * rows
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for r in range(r0, r0 + rows, 128):
        t = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[r:r + 128])
        nisa.activation(dst=t, op=nl.exp, data=t)
        nisa.dma_copy(dst=out[r:r + 128], src=t)
    return out


def test_programs_on_the_cores_nl_nc_names_run_concurrently():
    x = nki.Spec((1024, 2048), BF16)
    one_core = nki.estimate(spmd_scale[2])(x)
    two_cores = nki.estimate(spmd_scale[nl.nc(2)])(x)
    assert one_core.cores == 1 and two_cores.cores == 2
    # The same instructions, the same work, on twice the engines and queues.
    assert two_cores.busy_us == pytest.approx(one_core.busy_us)
    assert 0.45 < two_cores.latency_us / one_core.latency_us < 0.6, (one_core, two_cores)
    assert "2 physical NeuronCores" in str(two_cores)
    # A plain grid shares out under LNC=2 as nki-library's kernel[2] does.
    assert nki.estimate(spmd_scale[2], lnc=2)(x).latency_us == pytest.approx(two_cores.latency_us)
    # Both spmd_dim placements use both cores (blocked or interleaved), four programs on two.
    four = [nki.estimate(spmd_scale[g])(x).latency_us
            for g in (nl.spmd_dim(nl.nc(2), 2), nl.spmd_dim(2, nl.nc(2)))]
    assert four[0] == pytest.approx(four[1], rel=0.05)
    assert four[0] < 0.6 * nki.estimate(spmd_scale[4])(x).latency_us
    with pytest.raises(ValueError, match="lnc"):
        nki.estimate(spmd_scale[2], lnc=3)


def test_which_core_each_program_of_a_grid_runs_on():
    assert [nl.core_of((nl.nc(2),), (i,)) for i in range(2)] == [0, 1]
    assert [nl.core_of((nl.spmd_dim(nl.nc(2), 2),), (i,)) for i in range(4)] == [0, 0, 1, 1]
    assert [nl.core_of((nl.spmd_dim(2, nl.nc(2)),), (i,)) for i in range(4)] == [0, 1, 0, 1]
    assert [nl.core_of((2, nl.nc(2)), (i, j)) for i in range(2) for j in range(2)] == [0, 1, 0, 1]
    assert [nl.core_of((4,), (i,)) for i in range(4)] == [0, 0, 0, 0]
    assert [nl.core_of((4,), (i,), lnc=2) for i in range(4)] == [0, 1, 0, 1]


def pe_kernel(a, b, mode):
    # 64 accumulating [128, 128] x [128, 512] matmuls on operands loaded once
    s = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=a)
    m = nl.ndarray((128, 512), dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=m, src=b)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    for _ in range(64):
        nisa.nc_matmul(dst=acc, stationary=s, moving=m, perf_mode=mode)
    res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=res)
    return out


@pytest.mark.parametrize("profile", ["trn2", "trn3"])
@pytest.mark.parametrize("dtype,mode", [(torch.bfloat16, None), (torch.float32, None),
                                        (torch.float8_e4m3fn, nisa.matmul_perf_mode.double_row)])
def test_the_pe_array_runs_at_the_rate_the_aten_model_prices_a_matmul_at(profile, dtype, mode):
    """One Tensor Engine model: nc_matmul's cycles give the FLOP/s the aten cost model divides a
    matmul's FLOPs by (per physical core); fp8 doubles it in double_row mode only."""
    from torch_neuronx.cost_model import AWS_CHIP_FLOPS, PHYSICAL_CORES, ROOFLINES

    a, b = torch.zeros(128, 128, dtype=dtype), torch.zeros(128, 512, dtype=dtype)
    est = nki.estimate(pe_kernel, profile=profile)(a, b, mode)
    rate = est.flops / (est.busy_us["tensor"] * 1e-6)
    per_core = ROOFLINES[profile].tensor_flops[dtype] / PHYSICAL_CORES
    assert rate == pytest.approx(per_core)
    # AWS's chip figures are a little above the PE array's rates (clock rounding)
    if dtype in AWS_CHIP_FLOPS[profile]:
        assert 0.85 < per_core / (AWS_CHIP_FLOPS[profile][dtype] / PHYSICAL_CORES) <= 1.0
    if mode is not None:
        plain = nki.estimate(pe_kernel, profile=profile)(a, b, None)
        assert plain.busy_us["tensor"] == pytest.approx(2 * est.busy_us["tensor"])
        with pytest.raises(nki.NkiValidationError, match="double_row multiplies fp8"):
            nki.estimate(pe_kernel, profile=profile)(a.bfloat16(), b.bfloat16(), mode)
