"""Steps that compute straight into their destination (csrc/nki/step_direct.cpp, flagged by the
tracer's `_apart`): the same bits as an engine computing in fp32 and rounding once, for every dtype
mix and broadcast they take, and the general path's read-then-write order kept wherever the
destination overlaps an input, on the host simulator and on neuron alike."""
import pytest
import torch

import torch_neuronx  # noqa: F401
import torch_neuronx.nki as nki
import torch_neuronx.nki.isa as nisa
import torch_neuronx.nki.language as nl

OPS = {"add": torch.add, "subtract": torch.sub, "multiply": torch.mul, "divide": torch.div,
       "maximum": torch.maximum, "minimum": torch.minimum}
F32, BF16 = torch.float32, torch.bfloat16


@nki.jit
def mixed_kernel(a, b, col, op, out_dtype):
    """dst(out_dtype) = a op b, = a op column (broadcast along the free dim), = a op 0.75."""
    p, f = a.shape
    out = nl.ndarray((3, p, f), dtype=out_dtype, buffer=nl.shared_hbm)
    ta, tb = nl.load(a), nl.load(b)
    tc = nl.ndarray((p, 1), dtype=col.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tc, src=col)
    for i, (second, scalar) in enumerate(((tb, None), (tc.broadcast(1, f), None), (None, 0.75))):
        y = nl.ndarray((p, f), dtype=out_dtype, buffer=nl.sbuf)
        if scalar is None:
            nisa.tensor_tensor(dst=y, data1=ta, data2=second, op=op)
        else:
            nisa.tensor_scalar(dst=y, data=ta, op0=op, operand0=scalar)
        nl.store(out[i], y)
    return out


@pytest.mark.parametrize("dtypes", [(F32, F32, F32), (BF16, BF16, BF16), (BF16, F32, BF16), (F32, BF16, F32),
                                    (F32, BF16, BF16), (BF16, BF16, F32)])
@pytest.mark.parametrize("name", sorted(OPS))
def test_alu_ops_round_once_for_every_dtype_mix(name, dtypes):
    a_dtype, b_dtype, out_dtype = dtypes
    a = (torch.randn(128, 200).abs() + 0.5).to(a_dtype)
    b, col = torch.randn(128, 200).to(b_dtype), torch.randn(128, 1).to(b_dtype)
    fn = OPS[name]
    want = torch.stack([fn(a.float(), b.float()), fn(a.float(), col.float().expand(128, 200)),
                        fn(a.float(), torch.full_like(a.float(), 0.75))]).to(out_dtype)
    got = nki.simulate(mixed_kernel)(a, b, col, getattr(nl, name), out_dtype)
    assert torch.equal(got, want)
    dev = mixed_kernel(a.to("neuron"), b.to("neuron"), col.to("neuron"), getattr(nl, name), out_dtype)
    assert torch.equal(dev.cpu(), want)


@nki.jit
def shifted_kernel(x, activation):
    """Each instruction's destination overlaps its input one column further on, in one tile."""
    p, f = x.shape
    out = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    if activation:
        nisa.activation(dst=t[:, 1:f], op=nl.copy, data=t[:, 0:f - 1], bias=None, scale=2.0)
    else:
        nisa.tensor_scalar(dst=t[:, 1:f], data=t[:, 0:f - 1], op0=nl.add, operand0=1.0)
    nl.store(out, t)
    return out


@pytest.mark.parametrize("activation", [False, True])
def test_a_destination_overlapping_its_input_reads_the_input_first(activation):
    x = torch.randn(128, 64)
    want = x.clone()
    want[:, 1:] = x[:, :-1] * 2.0 if activation else x[:, :-1] + 1.0
    assert torch.equal(nki.simulate(shifted_kernel)(x, activation), want)
    assert torch.equal(shifted_kernel(x.to("neuron"), activation).cpu(), want)


@nki.jit
def same_view_kernel(x, col):
    """In place: dst is the very view each instruction reads."""
    p, f = x.shape
    out = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    c = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=c, src=col)
    nisa.activation(dst=t, op=nl.tanh, data=t, bias=c, scale=0.5)
    nisa.tensor_tensor(dst=t, data1=t, data2=t, op=nl.multiply)
    nl.store(out, t)
    return out


def test_in_place_instructions_equal_torch():
    x, col = torch.randn(128, 96), torch.randn(128, 1)
    want = torch.tanh(x * 0.5 + col) ** 2
    got = nki.simulate(same_view_kernel)(x, col)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
    assert torch.equal(same_view_kernel(x.to("neuron"), col.to("neuron")).cpu(), got)


@nki.jit
def scan_kernel(x, in_place):
    p, f = x.shape
    out = nl.ndarray((p, f), dtype=nl.float32, buffer=nl.shared_hbm)
    ones = nl.ndarray((p, f), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(ones, 1.0)
    t = nl.load(x)
    acc = t if in_place else nl.ndarray((p, f), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor_scan(dst=acc, data0=ones, data1=t, initial=0.5, op0=nl.multiply, op1=nl.add)
    nl.store(out, acc)
    return out


@pytest.mark.parametrize("in_place", [False, True])
def test_a_scan_into_its_own_input_or_a_tile_apart_is_a_cumsum(in_place):
    x = torch.randn(128, 3000)  # past the size where a team of threads takes blocks of partitions
    want = torch.cumsum(x.double(), 1) + 0.5
    got = nki.simulate(scan_kernel)(x, in_place)
    torch.testing.assert_close(got.double(), want, atol=1e-3, rtol=1e-4)
    assert torch.equal(scan_kernel(x.to("neuron"), in_place).cpu(), got)


# --- the arenas, kept between runs -------------------------------------------------------------
@nki.jit
def fill_arena(x):
    """Leaves x's values in the first bytes of every partition's row."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def every_other_column(x):
    """The tile's first write reaches its last byte but skips every other column."""
    p, f = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t.ap([[f, p], [2, (f + 1) // 2]]), src=x.ap([[f, p], [2, (f + 1) // 2]]))
    nisa.dma_copy(dst=out, src=t)
    return out


@pytest.mark.parametrize("device", ["simulate", "neuron"])
def test_a_tile_written_in_part_reads_zeros_elsewhere_whatever_an_earlier_run_left(device):
    junk, x = torch.full((128, 512), 7.0), torch.randn(128, 33)
    want = torch.zeros_like(x)
    want[:, 0::2] = x[:, 0::2]
    for _ in range(2):
        if device == "simulate":
            nki.simulate(fill_arena)(junk)
            got = nki.simulate(every_other_column)(x)
        else:
            fill_arena(junk.to("neuron"))
            got = every_other_column(x.to("neuron")).cpu()
        assert torch.equal(got, want)


# --- nl.device_print ----------------------------------------------------------------------------
@nki.jit
def printing_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.device_print("loaded:", t)
    u = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=u, data=t, op0=nl.multiply, operand0=-3.0)
    nl.device_print("scaled:", u)
    nl.store(out, u)
    return out


@pytest.mark.parametrize("device", ["simulate", "neuron"])
def test_device_print_shows_each_tile_when_the_program_reaches_it(device, capfd):
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    got = nki.simulate(printing_kernel)(x) if device == "simulate" else printing_kernel(x.to("neuron")).cpu()
    torch.neuron.synchronize()
    assert torch.equal(got, x * -3.0)
    lines = [line.split() for line in capfd.readouterr().out.strip().splitlines()]
    assert lines == [["loaded:"], ["1", "2", "3"], ["4", "5", "6"],
                     ["scaled:"], ["-3", "-6", "-9"], ["-12", "-15", "-18"]]


def test_device_print_checks_its_arguments():
    @nki.jit
    def bad(x):
        nl.device_print(42, nl.load(x))

    with pytest.raises(Exception, match="prefix is a str"):
        nki.simulate(bad)(torch.ones(2, 2))


# --- copies in wide words ----------------------------------------------------------------------
@nki.jit
def spread_copy(x):
    """[N, H] read as [128, N, H/128] and written back the same way (nki-library's norm layout):
    runs of H/128 elements on both sides."""
    n, h = x.shape
    h1 = h // 128
    out = nl.ndarray((n, h), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, n, h1), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x.ap([[h1, 128], [h, n], [1, h1]]))
    nisa.dma_copy(dst=out.ap([[h1, 128], [h, n], [1, h1]]), src=t)
    return out


@pytest.mark.parametrize("h", [128 * 8, 128 * 4, 128 * 3, 128])
def test_a_copy_keeps_every_bit_whatever_words_it_moves(h):
    bits = torch.randint(-(1 << 15), 1 << 15, (64, h), dtype=torch.int16)
    bits[::3, ::5] = 0x7F81  # bfloat16 NaNs with a payload, and -0
    bits[1::3, ::7] = -(1 << 15)
    x = bits.view(torch.bfloat16)
    assert torch.equal(nki.simulate(spread_copy)(x).view(torch.int16), bits)
    assert torch.equal(spread_copy(x.to("neuron")).cpu().view(torch.int16), bits)


# --- forwarded DMAs (a tile read once takes its HBM source in place) -----------------------------
@nki.jit
def source_rewritten(x):
    """t's source in HBM is overwritten before t is read: t must hold what the DMA moved."""
    p, f = x.shape
    scratch = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=scratch, src=x)
    t = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=scratch)
    zeros = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(zeros, 0.0)
    nisa.dma_copy(dst=scratch, src=zeros)
    y = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=y, data=t, op0=nl.add, operand0=1.0)
    nisa.dma_copy(dst=out, src=y)
    return out


def read_once(x):
    """Each loaded tile is read by one instruction: every load is forwarded."""
    p, f = x.shape
    out = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    y = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.sbuf)
    nisa.activation(dst=y, op=nl.exp, data=t, scale=0.5)
    nisa.dma_copy(dst=out, src=y)
    return out


def test_a_forwarded_dma_gives_its_reader_what_it_moved(monkeypatch):
    from torch_neuronx.nki import _fuse

    x = torch.randn(128, 64)
    assert torch.equal(nki.simulate(source_rewritten)(x), x + 1.0)
    assert torch.equal(source_rewritten(x.to("neuron")).cpu(), x + 1.0)
    # The forwarding is what runs for read_once: its load moves nothing.
    seen, original = [], _fuse.forwarded_copies
    monkeypatch.setattr(_fuse, "forwarded_copies", lambda instrs, skip: seen.append(original(instrs, skip)) or seen[-1])
    kernel = nki.jit(read_once)
    got = nki.simulate(kernel)(x)
    torch.testing.assert_close(got, torch.exp(x * 0.5))
    assert torch.equal(kernel(x.to("neuron")).cpu(), got)
    assert seen and any(steps == [] for steps in seen[0].values())
