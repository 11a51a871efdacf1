"""The hardware's rules of torch_neuronx.nki, each broken once (the message names the rule, the
instruction and the kernel's line), strict mode, and bad input."""
import numpy as np
import pytest
import torch

import torch_neuronx.nki as nki
import torch_neuronx.nki.isa as nisa
import torch_neuronx.nki.language as nl
from test_nki_isa import binary_kernel, unary_kernel
from torch_neuronx.nki import NkiTraceError, NkiValidationError

N = "neuron"


def run_rule(body, *shapes, dtype=torch.float32):
    kernel = nki.jit(body)
    return nki.simulate(kernel)(*(torch.zeros(s, dtype=dtype) for s in shapes))


def expect_rule(match, body, *shapes, dtype=torch.float32):
    with pytest.raises(NkiValidationError, match=match) as info:
        run_rule(body, *shapes, dtype=dtype)
    assert "test_nki_rules.py:" in str(info.value), "the message names the kernel's line"
    return str(info.value)


def test_rule_partition_dimension_at_most_128():
    def k(x):
        nl.ndarray((256, 4), dtype=nl.float32, buffer=nl.sbuf)
    expect_rule("partition dimension 256 exceeds", k, (1, 1))


def test_rule_sbuf_capacity_per_partition_counts_live_tiles():
    def k(x):
        tiles = [nl.ndarray((128, 16384), dtype=nl.float32, buffer=nl.sbuf) for _ in range(4)]
        for t in tiles:
            nisa.memset(t, 0.0)
        acc = nl.ndarray((128, 16384), dtype=nl.float32, buffer=nl.sbuf)
        for t in tiles:  # all four stay live until here: 4 x 64 KiB > 224 KiB
            nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
    expect_rule("sbuf capacity", k, (1, 1))

    def fits(x):  # the same tiles, each dead before the next: the allocator reuses the space
        for _ in range(8):
            t = nl.ndarray((128, 16384), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(t, 0.0)
    run_rule(fits, (1, 1))


def test_rule_a_tile_larger_than_a_partition():
    def k(x):
        nl.ndarray((128, 70000), dtype=nl.float32, buffer=nl.sbuf)
    expect_rule("bytes each SBUF partition has", k, (1, 1))


def test_rule_psum_has_eight_banks():
    def k(x):
        tiles = [nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum) for _ in range(9)]
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        for t in tiles:
            nisa.tensor_tensor(dst=out, data1=out, data2=t, op=nl.add)
    expect_rule(r"psum capacity.*8 banks", k, (1, 1))


@pytest.mark.parametrize("case,match", [
    ("moving_psum", "moving is in psum"), ("dst_sbuf", "dst is in sbuf"), ("wide_moving", "moving free size 640"),
    ("wide_stationary", "stationary free size 200"), ("k_mismatch", "contracts 64 partitions, moving 32"),
    ("bf16_dst", "PSUM tiles on trn2"), ("mixed_fp32", "fp32 operands multiply only with fp32"),
    ("accumulate_fresh", "no matmul has written"), ("accumulate_memset", "another instruction wrote")])
def test_rules_of_nc_matmul(case, match):
    def k(x):
        st = nl.zeros((64, 128), dtype=nl.bfloat16)
        mv = nl.zeros((64, 512), dtype=nl.bfloat16)
        dst = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        if case == "moving_psum":
            nisa.nc_matmul(dst, st, nl.zeros((64, 512), dtype=nl.bfloat16, buffer=nl.psum))
        elif case == "dst_sbuf":
            nisa.nc_matmul(nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf), st, mv)
        elif case == "wide_moving":
            nisa.nc_matmul(nl.ndarray((128, 640), dtype=nl.float32, buffer=nl.psum), st,
                           nl.zeros((64, 640), dtype=nl.bfloat16))
        elif case == "wide_stationary":
            nisa.nc_matmul(dst, nl.zeros((64, 200), dtype=nl.bfloat16), mv)
        elif case == "k_mismatch":
            nisa.nc_matmul(dst, st, nl.zeros((32, 512), dtype=nl.bfloat16))
        elif case == "bf16_dst":
            nisa.nc_matmul(nl.ndarray((128, 512), dtype=nl.bfloat16, buffer=nl.psum), st, mv)
        elif case == "mixed_fp32":
            nisa.nc_matmul(dst, st, nl.zeros((64, 512), dtype=nl.float32))
        elif case == "accumulate_fresh":
            nisa.nc_matmul(dst, st, mv, accumulate=True)
        else:
            nisa.memset(dst, 0.0)
            nisa.nc_matmul(dst, st, mv, accumulate=True)
    message = expect_rule(match, k, (1, 1))
    assert "nc_matmul" in message


@pytest.mark.parametrize("case,match", [
    ("gpsimd_psum", "GpSimd engine cannot access PSUM"), ("dma_psum", "DMA cannot read PSUM"),
    ("both_psum", "cannot both be in PSUM"), ("bitwise_float", "bitwise op"), ("axis0", "axis 0 is the partition"),
    ("bn_stats", "at most 512 elements"), ("max8", "8 to 16384"), ("vector_transpose", "at most \\[32, 32\\]"),
    ("shape", "same partitions and elements"), ("scalar_operand", "scalar or a \\[128, 1\\] tile"),
    ("not_activation", "not an activation function"), ("int_memset", "integer value")])
def test_rules_of_engines_memories_and_shapes(case, match):
    def k(x):
        a = nl.zeros((128, 64), dtype=nl.float32)
        p = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.psum)
        if case == "gpsimd_psum":
            nisa.tensor_copy(dst=a, src=p, engine=nisa.engine.gpsimd)
        elif case == "dma_psum":
            nisa.dma_copy(dst=a, src=p)
        elif case == "both_psum":
            nisa.tensor_tensor(dst=a, data1=p, data2=p, op=nl.add)
        elif case == "bitwise_float":
            nisa.tensor_tensor(dst=a, data1=a, data2=a, op=nl.bitwise_and)
        elif case == "axis0":
            nisa.tensor_reduce(dst=nl.ndarray((1, 64), dtype=nl.float32), op=nl.add, data=a, axis=0)
        elif case == "bn_stats":
            nisa.bn_stats(dst=nl.ndarray((128, 6), dtype=nl.float32), data=nl.zeros((128, 600), dtype=nl.float32))
        elif case == "max8":
            nisa.max8(dst=nl.ndarray((128, 8), dtype=nl.float32), src=a[:, 0:4])
        elif case == "vector_transpose":
            nisa.nc_transpose(dst=nl.ndarray((64, 128), dtype=nl.float32), data=a, engine=nisa.engine.vector)
        elif case == "shape":
            nisa.tensor_copy(dst=nl.ndarray((128, 32), dtype=nl.float32), src=a)
        elif case == "scalar_operand":
            nisa.tensor_scalar(dst=a, data=a, op0=nl.add, operand0=a)
        elif case == "not_activation":
            nisa.activation(dst=a, op=nl.add, data=a)
        else:
            nisa.memset(nl.ndarray((128, 4), dtype=nl.int32), 0.5)
    expect_rule(match, k, (1, 1))


# --- strict mode, bad input -----------------------------------------------------------------
@nki.jit
def unwritten_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)  # never written
    nl.store(out, t)
    return out


def test_strict_mode_poisons_fresh_tiles(monkeypatch):
    x = torch.ones(8, 8, device=N)
    assert not unwritten_kernel(x).cpu().isnan().any()
    monkeypatch.setenv("TORCH_NEURONX_STRICT", "1")
    assert unwritten_kernel(x).cpu().isnan().all()


def test_a_kernel_that_fails_its_checks_writes_nothing():
    @nki.jit
    def writes_then_fails(x):
        t = nl.full((4, 4), 5.0, dtype=nl.float32)
        nisa.dma_copy(dst=x, src=t)  # a valid write, traced before the invalid instruction
        nisa.dma_copy(dst=x, src=nl.zeros((4, 4), dtype=nl.float32, buffer=nl.psum))

    x = torch.zeros(4, 4, device=N)
    with pytest.raises(NkiValidationError, match="DMA cannot read PSUM"):
        writes_then_fails(x)
    assert torch.equal(x.cpu(), torch.zeros(4, 4))


def test_python_control_flow_on_a_tile_names_the_line():
    @nki.jit
    def branches(x):
        t = nl.load(x)
        if t:
            pass

    with pytest.raises(NkiTraceError, match=r"control flow.*\n.*test_nki_rules.py:\d+: if t:"):
        nki.simulate(branches)(np.zeros((4, 4), np.float32))


def test_bad_calls_are_refused_clearly():
    x = np.zeros((4, 4), np.float32)
    with pytest.raises(TypeError, match="both NumPy arrays and torch tensors"):
        binary_kernel(x, torch.zeros(4, 4, device=N), nl.add)
    with pytest.raises(RuntimeError, match=r"neuron tensors or NumPy arrays, got cpu.*nki.simulate"):
        binary_kernel(torch.zeros(4, 4), torch.zeros(4, 4), nl.add)
    if torch.neuron.device_count() > 1:
        with pytest.raises(RuntimeError, match="several devices"):
            binary_kernel(torch.zeros(4, 4, device="neuron:0"), torch.zeros(4, 4, device="neuron:1"), nl.add)
    with pytest.raises(TypeError, match="must be hashable"):
        nki.simulate(unary_kernel)(x, [1], 1.0, False, torch.float32)
    with pytest.raises(TypeError, match="mode= was removed"):
        nki.jit(lambda a: a, mode="simulation")
    with pytest.raises(NkiTraceError, match="only inside a kernel"):
        nl.zeros((4, 4), dtype=nl.float32)
    with pytest.raises(NkiValidationError, match="returns whole HBM tensors"):
        nki.simulate(lambda a: nl.load(a))(x)


def test_a_view_that_would_move_the_partition_dim_is_refused():
    def k(x):
        nl.zeros((128, 8), dtype=nl.float32).permute((1, 0))
    expect_rule("would move its partition dimension", k, (1, 1))
