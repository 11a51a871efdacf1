"""What nki-library's kernels needed beyond the tutorials, each in a small kernel written as they
write it: DMA transposes that move the partition dimension (attention_cte's score tiles), kernels
that return the output buffer they were given or a reshaped output (rmsnorm_tkg, cascaded_max),
config classes declared with plain class attributes (attention_cte's SectionParams), fp32 literals
just past fp32's range (attention_cte's mask value), and the engines under their older names. Each
result is compared with torch on the CPU, through nki.simulate and on neuron tensors.

tests/nki_library.py runs AWS's kernels themselves from a checkout (`make nki-library`)."""
import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import torch_neuronx.nki as nki
import torch_neuronx.nki.isa as nisa
import torch_neuronx.nki.language as nl
from torch_neuronx.nki import NkiValidationError
from nki_both import both

N = "neuron"
ROOT = Path(__file__).resolve().parents[1]


@nki.jit
def transpose_to_sbuf(x):
    # HBM [n, d] -> SBUF [d, n]: the DMA writes partitions from a free dim of the source.
    n, d = x.shape
    t = nl.ndarray((d, n), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=t, src=x)
    out = nl.ndarray((d, n), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def transpose_blocks(x):
    # attention_cte's pattern: an SBUF tile [p, g * 128] read as p x (g blocks of 128) and written
    # block-transposed, [128, g, p], with 4-d access patterns on both sides.
    p, f = x.shape
    g = f // 128
    src = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=src, src=x)
    dst = nl.ndarray((128, g * p), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=dst.ap([[g * p, 128], [1, 1], [p, g], [1, p]]),
                       src=src.ap([[f, p], [1, 1], [128, g], [1, 128]]))
    out = nl.ndarray((128, g * p), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=dst)
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_dma_transpose_moves_the_partition_dimension(dtype):
    x = torch.randn(96, 64).to(dtype)
    assert torch.equal(both(transpose_to_sbuf, x), x.t())


def test_dma_transpose_with_four_dim_access_patterns_equals_a_permute():
    x = torch.randn(100, 384).to(torch.bfloat16)
    want = x.view(100, 3, 128).permute(2, 1, 0).reshape(128, 300)
    assert torch.equal(both(transpose_blocks, x), want)


@nki.jit
def transpose_bad(x, axes, dst_dtype):
    t = nl.ndarray(x.shape[::-1], dtype=dst_dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=t, src=x, axes=axes)
    return t


@pytest.mark.parametrize("axes,dtype,rule", [((0, 1), nl.float32, "axes"), (None, nl.bfloat16, "dtype")])
def test_dma_transpose_rules(axes, dtype, rule):
    with pytest.raises(NkiValidationError, match=rule) as e:
        nki.simulate(transpose_bad)(torch.randn(8, 16), axes, dtype)
    assert "test_nki_library_constructs.py" in str(e.value)  # the kernel's own line


@nki.jit
def scale_into(x, out):
    # rmsnorm_tkg's convention: the output buffer is an argument, written and returned.
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=3.0)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_a_kernel_returns_the_output_buffer_it_was_given_written_in_place():
    x = torch.randn(16, 32)
    out = torch.zeros(16, 32, device=N)
    got = scale_into(x.to(N), out)
    assert got is out and torch.equal(out.cpu(), x * 3)
    host_out = np.zeros((16, 32), np.float32)
    assert nki.simulate(scale_into)(x.numpy(), host_out) is host_out
    np.testing.assert_array_equal(host_out, (x * 3).numpy())


@nki.jit
def row_max(x):
    # cascaded_max's convention: outputs allocated flat and returned reshaped; one in nl.hbm.
    b, s, v = x.shape
    t = nl.ndarray((b * s, v), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x.reshape((b * s, v)))
    m = nl.ndarray((b * s, 1), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=m, op=nl.maximum, data=t, axis=1)
    flat = nl.ndarray((b * s, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    private = nl.ndarray((b * s, 1), dtype=x.dtype, buffer=nl.hbm)
    nisa.dma_copy(dst=flat, src=m)
    nisa.dma_copy(dst=private, src=m)
    return flat.reshape((b, s, 1)), private


def test_a_kernel_returns_reshaped_and_private_hbm_outputs():
    x = torch.randn(4, 5, 300)
    reshaped, private = both(row_max, x)
    want = x.amax(-1, keepdim=True)
    assert reshaped.shape == (4, 5, 1) and torch.equal(reshaped, want)
    assert torch.equal(private, want.view(20, 1))


@nki.jit
def returns_a_slice(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=out, src=t)
    return out[0:4]


def test_returning_part_of_a_tensor_is_refused():
    with pytest.raises(NkiValidationError, match="whole"):
        nki.simulate(returns_a_slice)(torch.randn(8, 8))


@dataclasses.dataclass
class Section(nl.NKIObject):
    start = None  # no annotation: NKI makes it a field all the same
    length = 0
    scale: float = 1.0


@nki.jit
def section_scale(x, section):
    t = nl.ndarray((x.shape[0], section.length), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[:, section.start:section.start + section.length])
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=section.scale)
    out = nl.ndarray(t.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_a_config_class_with_plain_attributes_takes_them_as_fields():
    assert [f.name for f in dataclasses.fields(Section)] == ["start", "length", "scale"]
    x = torch.randn(8, 64)
    got = both(section_scale, x, Section(start=8, length=16, scale=2.0))
    assert torch.equal(got, x[:, 8:24] * 2)
    assert torch.equal(both(section_scale, x, Section(start=0, length=4)), x[:, :4])


@nki.jit
def fill(shape, value):
    t = nl.ndarray(shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=t, value=value)
    out = nl.ndarray(shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_an_fp32_literal_just_past_its_range_rounds_as_the_compiler_rounds_it():
    lowest = torch.finfo(torch.float32).min
    # -3.4028235e38 as a double is past fp32's lowest, by less than half an ulp: it rounds to it.
    assert -3.4028235e38 < lowest
    assert torch.all(nki.simulate(fill)((4, 8), -3.4028235e38) == lowest)
    out = nki.simulate(fill)((4, 8), 1e39)
    assert torch.all(out == float("inf")), "a literal beyond rounding range is inf, as fp32 conversion gives"
    assert float(torch.tensor(-3.4028235e38, dtype=torch.float64).to(torch.float32)) == lowest


def test_the_engines_keep_their_older_names():
    assert nisa.scalar_engine is nisa.engine.scalar and nisa.vector_engine is nisa.engine.vector
    assert nisa.gpsimd_engine is nisa.engine.gpsimd and nisa.tensor_engine is nisa.engine.tensor


def test_make_nki_library_without_a_checkout_skips_cleanly():
    run = subprocess.run([sys.executable, str(ROOT / "tests" / "nki_library.py")], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert "skipped: no checkout" in run.stdout


@nki.jit
def gather_rows(table, ids):
    # cross_entropy's pattern: each row of `table` picked by an id the kernel reads into SBUF, the
    # DMA's offset taken from that tile when the program runs.
    n = ids.shape[0]
    v = table.shape[1]
    ids_sb = nl.ndarray((1, n), dtype=ids.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=ids_sb, src=ids.reshape((1, n)))
    rows = nl.ndarray((n, v), dtype=table.dtype, buffer=nl.sbuf)
    for i in range(n):
        nisa.dma_copy(dst=rows[i:i + 1, :],
                      src=table.ap([[v, 1], [1, v]], offset=0,
                                   scalar_offset=ids_sb.ap([[n, 1], [1, 1]], offset=i), indirect_dim=0))
    out = nl.ndarray((n, v), dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=rows)
    return out


@nki.jit
def scatter_rows(rows, ids, out, oob=None):
    # The other side: each row written where an id read at run time says (oob_mode=skip: an id past
    # the table writes nothing, as indexed_flatten pads its row offsets).
    n, v = rows.shape
    ids_sb = nl.ndarray((1, n), dtype=ids.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=ids_sb, src=ids.reshape((1, n)))
    t = nl.ndarray((n, v), dtype=rows.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=rows)
    for i in range(n):
        nisa.dma_copy(dst=out.ap([[v, 1], [1, v]], scalar_offset=ids_sb.ap([[n, 1], [1, 1]], offset=i),
                                 indirect_dim=0), src=t[i:i + 1, :], oob_mode=oob)
    return out


def test_a_dma_offset_read_at_run_time_gathers_rows():
    table = torch.randn(50, 24)
    ids = torch.tensor([7, 0, 49, 7, 13], dtype=torch.int32)
    assert torch.equal(both(gather_rows, table, ids), table[ids.long()])
    # One trace serves every id: the offset is data, not part of the signature.
    ids2 = torch.tensor([1, 2, 3, 4, 5], dtype=torch.int32)
    assert torch.equal(both(gather_rows, table, ids2), table[ids2.long()])


def test_a_dma_offset_read_at_run_time_scatters_rows():
    rows, ids = torch.randn(3, 16), torch.tensor([4, 1, 9], dtype=torch.int32)
    want = torch.zeros(10, 16)
    want[ids.long()] = rows
    assert torch.equal(nki.simulate(scatter_rows)(rows, ids, torch.zeros(10, 16)), want)
    out = torch.zeros(10, 16, device=N)
    assert torch.equal(scatter_rows(rows.to(N), ids.to(N), out).cpu(), want)


def test_oob_mode_skip_drops_a_dma_whose_run_time_offset_leaves_the_tensor():
    rows, ids = torch.randn(3, 16), torch.tensor([4, -1000000, 12], dtype=torch.int32)
    want = torch.zeros(10, 16)
    want[4] = rows[0]
    got = both(scatter_rows, rows, ids, torch.zeros(10, 16), nisa.oob_mode.skip)
    assert torch.equal(got, want)
    with pytest.raises(RuntimeError, match="read -1000000"):
        nki.simulate(scatter_rows)(rows, ids, torch.zeros(10, 16), nisa.oob_mode.error)


def test_a_run_time_offset_past_the_tensor_is_an_error():
    table, ids = torch.randn(10, 8), torch.tensor([3, 10], dtype=torch.int32)
    with pytest.raises(RuntimeError, match=r"run-time offset .* read 10 .* 0\.\.9"):
        nki.simulate(gather_rows)(table, ids)
    with pytest.raises(RuntimeError, match="read 10"):
        gather_rows(table.to(N), ids.to(N)).cpu()
    assert torch.equal(gather_rows(table.to(N), ids[:1].to(N)).cpu(), table[3:4]), "the device works on after it"


@nki.jit
def dynamic_into_an_engine(table, ids):
    ids_sb = nl.ndarray((1, 1), dtype=ids.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=ids_sb, src=ids.reshape((1, 1)))
    t = nl.ndarray((8, 1), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=t, src=table.ap([[8, 1], [1, 8]], scalar_offset=ids_sb, indirect_dim=0))
    return t


def test_run_time_offsets_are_for_dma_only_and_one_per_access():
    with pytest.raises(nki.NkiTraceError, match="dma_transpose on an access pattern with a run-time offset"):
        nki.simulate(dynamic_into_an_engine)(torch.randn(4, 8), torch.tensor([1], dtype=torch.int32))
    with pytest.raises(nki.NkiTraceError, match="dma_transpose on an access pattern with a run-time offset"):
        nki.simulate(vector_offset_kernel)(torch.randn(4, 8))


@nki.jit
def vector_offset_kernel(x):
    idx = nl.ndarray((4, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=idx, value=0)
    t = nl.ndarray((8, 4), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=t, src=x.ap([[8, 4], [1, 8]], vector_offset=idx, indirect_dim=0))
    return x


@nki.jit
def strided_columns(x, groups_of, use_every_pattern):
    # output_projection_tkg's loop: patterns are built for whole groups of columns, and the instruction
    # is skipped for the padding of the last group, whose pattern runs past the tile.
    p, f = x.shape
    n = f // 8
    t = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    out = nl.ndarray((p, n, 8), dtype=x.dtype, buffer=nl.sbuf)
    for group in nl.affine_range(-(-n // groups_of)):
        for j in nl.affine_range(groups_of):
            col = group * groups_of + j
            column = t.ap([[f, p], [n, 8]], offset=col)  # elements col, col + n, ... of each partition
            if col < n or use_every_pattern:
                nisa.tensor_copy(dst=out[:, col % n, :], src=column)
    res = nl.ndarray((p, n, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=res, src=out)
    return res


def test_a_pattern_past_the_tile_may_be_built_and_not_used():
    x = torch.randn(16, 24)
    got = both(strided_columns, x, 2, False)
    assert torch.equal(got, x.reshape(16, 8, 3).permute(0, 2, 1))


def test_an_instruction_on_a_pattern_past_the_tile_names_both_lines():
    with pytest.raises(NkiValidationError, match=r"nisa.tensor_copy: access pattern: .*reaches element 24 .*"
                                                 r"\n  \(the pattern built at .*column = t.ap.*\n  at .*tensor_copy"):
        nki.simulate(strided_columns)(torch.randn(16, 24), 2, True)


@nki.jit
def row_absmax(x):
    # rmsnorm_quant's row scale: |x| through the Vector Engine's ALU (op0=nl.abs with operand 0.0),
    # reduced by max in the same instruction.
    p, f = x.shape
    t = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    mag = nl.ndarray((p, f), dtype=nl.float32, buffer=nl.sbuf)
    peak = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_reduce(dst=mag, data=t, op0=nl.abs, operand0=0.0, reduce_op=nl.maximum, reduce_res=peak)
    scaled = nl.ndarray((p, f), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=scaled, data=t, op0=nl.abs, operand0=0.0, op1=nl.multiply, operand1=2.0)
    out = nl.ndarray((p, f + 1), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[:, :f], src=scaled)
    nisa.dma_copy(dst=out[:, f:], src=peak)
    return out


def test_abs_is_an_alu_op_of_tensor_scalar_with_operand_zero():
    x = torch.randn(8, 40, dtype=torch.bfloat16)
    got = both(row_absmax, x)
    ref = x.float().abs()
    assert torch.equal(got[:, :40], ref * 2) and torch.equal(got[:, 40:], ref.amax(1, keepdim=True))


@nki.jit
def abs_elsewhere(x, where):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    if where == "operand":
        nisa.tensor_scalar(dst=t, data=t, op0=nl.abs, operand0=1.0)
    else:
        nisa.tensor_tensor(dst=t, data1=t, data2=t, op=nl.abs)
    return t


def test_abs_as_an_alu_op_elsewhere_says_why():
    x = torch.randn(4, 8)
    with pytest.raises(NotImplementedError, match="nl.abs and operand 1.0 is not supported yet"):
        nki.simulate(abs_elsewhere)(x, "operand")
    with pytest.raises(NkiValidationError, match="tensor_tensor: op: nl.abs is an ALU op of tensor_scalar"):
        nki.simulate(abs_elsewhere)(x, "tensor_tensor")


@nki.jit
def nonzero_rows(x, offset):
    # find_nonzero_indices' layout: a [128, tiles, 128] tile (T = tiles x 128 per partition, past the
    # old 1024-element limit), compacted on each GpSimd core's partition into [128, 1, T + 1].
    p, t = x.shape
    src = nl.ndarray((p, t // 128, 128), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=src, src=x.reshape((p, t // 128, 128)))
    dst = nl.ndarray((p, 1, t + 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=dst, value=7)
    nisa.nonzero_with_count(dst=dst, src=src, index_offset=offset, padding_val=-1)
    out = nl.ndarray((p, t + 1), dtype=nl.int32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=dst.reshape((p, t + 1)))
    return out


def test_nonzero_with_count_takes_free_dims_and_long_rows():
    torch.manual_seed(0)
    x = (torch.rand(128, 4096) < 0.05).float() * torch.randn(128, 4096)
    x[32] = 0.0
    got = both(nonzero_rows, x, 10)
    want = torch.full((128, 4097), 7, dtype=torch.int32)
    for p in range(0, 128, 16):
        hits = (x[p] != 0).nonzero().view(-1)
        want[p] = -1
        want[p, :hits.numel()] = hits.int() + 10
        want[p, 4096] = hits.numel()
    assert torch.equal(got, want)


@dataclasses.dataclass(frozen=True, eq=True)
class RotationConfig(nl.NKIObject):
    # rotational_topk's config: a frozen dataclass whose dict of constant files is left out of its own
    # __hash__/__eq__, and the file a kernel reads with nl.shared_constant(path).
    rows: int
    files: dict

    def __hash__(self):
        return hash(self.rows)

    def __eq__(self, other):
        return isinstance(other, RotationConfig) and self.rows == other.rows


@nki.jit
def gather_by_constant(x, config):
    # nc_n_gather of uint32 data by uint32 indices read from a .npy constant; the older-generation
    # branch is chosen by comparing generations, as rotational_topk does.
    idx_hbm = nl.shared_constant(config.files["idx"])
    p, f = x.shape
    data = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=data, src=x)
    idx = nl.ndarray((p, f), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=idx_hbm)
    out = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.sbuf)
    if nisa.get_nc_version() <= nisa.nc_version.gen2:
        nisa.tensor_copy(dst=out, src=data)
    else:
        nisa.nc_n_gather(dst=out, data=data, indices=idx)
    res = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=res, src=out)
    return res


def test_a_config_with_its_own_hash_a_constant_file_and_uint32_gathers(tmp_path):
    x = torch.randint(0, 2 ** 31, (4, 16), dtype=torch.int64).to(torch.uint32)
    perm = torch.stack([torch.randperm(16) for _ in range(4)]).to(torch.int32)
    np.save(tmp_path / "idx.npy", perm.numpy().astype(np.uint32))
    config = RotationConfig(4, {"idx": str(tmp_path / "idx.npy")})
    got = both(gather_by_constant, x, config)
    assert torch.equal(got.long(), torch.gather(x.long(), 1, perm.long()))
    assert nisa.nc_version.gen2 < nisa.nc_version.gen3 <= nisa.get_nc_version()
    with pytest.raises(NkiValidationError, match="not a readable .npy file"):
        nki.simulate(gather_by_constant)(x, RotationConfig(5, {"idx": str(tmp_path / "absent.npy")}))


@nki.jit
def halves_meet(x):
    # rmsnorm_tkg/indexed_flatten under LNC 2: each program works on its half of the rows; sendrecv
    # swaps the halves' SBUF tiles, and after a core_barrier each reads what the other wrote to HBM.
    rank, h = nl.program_id(0), x.shape[0] // 2
    mine = nl.ndarray((h, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=mine, src=x[rank * h:(rank + 1) * h, :])
    theirs = nl.ndarray((h, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - rank, recv_from_rank=1 - rank, pipe_id=0)
    both_halves = nl.ndarray((h, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=both_halves, data1=mine, data2=theirs, op=nl.subtract)
    swapped = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=swapped[rank * h:(rank + 1) * h, :], src=both_halves)
    nisa.core_barrier(swapped, cores=[0, 1])
    other = nl.ndarray((h, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=other, src=swapped[(1 - rank) * h:(2 - rank) * h, :])
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[rank * h:(rank + 1) * h, :], src=other)
    return swapped, out


def test_programs_meet_by_sendrecv_and_core_barrier():
    x = torch.randn(16, 8)
    swapped, out = both(halves_meet[2], x)
    top, bottom = x[:8], x[8:]
    assert torch.equal(swapped, torch.cat([top - bottom, bottom - top]))
    assert torch.equal(out, torch.cat([bottom - top, top - bottom]))


@nki.jit
def one_waits(x):
    if nl.program_id(0) == 0:
        nisa.core_barrier(x, cores=[0, 1])
    return x


def test_a_barrier_only_one_program_reaches_is_an_error():
    with pytest.raises(NkiValidationError, match=r"pass \[1, 0\] barriers"):
        nki.simulate(one_waits[2])(torch.zeros(2, 2))


@nki.jit
def scatter_by_vector(vals, flat_ids, out, oob=None):
    # router_topk's indirect scatter: value i of an SBUF column lands at element flat_ids[i] of the
    # flattened HBM output (each offset scaled by the tensor's step along the indirect dim, 1 here).
    n = vals.shape[0]
    v = nl.ndarray((n, 1), dtype=vals.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=v, src=vals.reshape((n, 1)))
    ids = nl.ndarray((n, 1), dtype=flat_ids.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=ids, src=flat_ids.reshape((n, 1)))
    flat = out.reshape((out.shape[0] * out.shape[1],))
    nisa.dma_copy(dst=flat.ap([[7, n], [1, 1]], offset=0, vector_offset=ids, indirect_dim=0), src=v, oob_mode=oob)
    return out


@nki.jit
def gather_by_vector(table, ids):
    # topk_reduce's gather: row ids[i] of a [rows, h] table into partition i (offsets scaled by h).
    n, h = ids.shape[0], table.shape[1]
    idx = nl.ndarray((n, 1), dtype=ids.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=ids.reshape((n, 1)))
    rows = nl.ndarray((n, h), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=rows, src=table.ap([[h, n], [1, h]], offset=0, vector_offset=idx, indirect_dim=0))
    out = nl.ndarray((n, h), dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=rows)
    return out


def test_vector_offsets_scatter_and_gather_by_indices_read_at_run_time():
    vals, ids = torch.randn(5), torch.tensor([3, 17, 0, 8, 31], dtype=torch.int32)
    want = torch.zeros(4, 8)
    want.view(-1)[ids.long()] = vals
    assert torch.equal(both(scatter_by_vector, vals, ids, torch.zeros(4, 8)), want)
    table, rows = torch.randn(12, 6), torch.tensor([11, 0, 4, 4], dtype=torch.int32)
    assert torch.equal(both(gather_by_vector, table, rows), table[rows.long()])
    bad = torch.tensor([3, 32, 0, 8, 31], dtype=torch.int32)
    with pytest.raises(RuntimeError, match="vector_offset entry 1 read 32 .* 0..31"):
        nki.simulate(scatter_by_vector)(vals, bad, torch.zeros(4, 8))
    want.view(-1)[17] = 0.0
    assert torch.equal(nki.simulate(scatter_by_vector)(vals, bad, torch.zeros(4, 8), nisa.oob_mode.skip), want)


@nki.jit
def sum_of_squares(x):
    # qkv_cte's RMS norm: only activation_reduce's sum is wanted, so its dst is one element per
    # partition stepped 0 along the row ([[1, p], [0, f]]): written f times over, the last stays.
    p, f = x.shape
    t = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    scratch = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
    total = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation_reduce(dst=scratch.ap(pattern=[[1, p], [0, f]]), op=nl.square, data=t, reduce_op=nl.add,
                           reduce_res=total)
    out = nl.ndarray((p, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[:, 0:1], src=total)
    nisa.dma_copy(dst=out[:, 1:2], src=scratch)
    return out


def test_a_destination_stepping_zero_keeps_the_last_element_written():
    x = torch.randn(8, 32)
    got = both(sum_of_squares, x)
    assert torch.allclose(got[:, 0], x.square().sum(1), rtol=1e-6, atol=1e-6)
    assert torch.equal(got[:, 1], x[:, -1].square())


@nki.jit
def shaped_apart(x, y):
    # attention_tkg's softmax step: a [P, 2, 56] tile and a [P, 112] one combined element by element.
    p = x.shape[0]
    a = nl.ndarray((p, 112), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x)
    b = nl.ndarray((p, 2, 56), dtype=y.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=b, src=y)
    d = nl.ndarray((p, 112), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=d, data1=a, data2=b, op=nl.subtract)
    out = nl.ndarray((p, 112), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=d)
    return out


def test_tensor_tensor_takes_tiles_whose_free_dims_are_shaped_apart():
    x, y = torch.randn(16, 112), torch.randn(16, 2, 56)
    assert torch.equal(both(shaped_apart, x, y), x - y.reshape(16, 112))


@nki.jit
def read_a_fresh_tile_after_another_died(x):
    # Tile a dies after its copy out; tile b, allocated after, gets a's bytes from the allocator
    # and is read before anything writes it: it must read as a fresh tile does (zeros).
    out = nl.ndarray((2,) + x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x)
    nisa.dma_copy(dst=out[0], src=a)
    b = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    c = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=c, data1=b, data2=b, op=nl.add)
    nisa.dma_copy(dst=out[1], src=c)
    return out


def test_a_tile_given_a_dead_tiles_bytes_reads_as_a_fresh_tile():
    x = torch.randn(64, 32) + 5
    got = both(read_a_fresh_tile_after_another_died, x)
    assert torch.equal(got[0], x)
    assert torch.equal(got[1], torch.zeros_like(x))
