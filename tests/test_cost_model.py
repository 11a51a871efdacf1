"""torch_neuronx.estimate: Trainium time per op from the profile's rooflines (issue #25's cost
model): a large matmul sits on the Tensor Engine's roofline, a large add on HBM's, a small op on
the fixed cost; models are priced on the meta device without memory."""
import pytest
import torch
import transformers

import torch_neuronx
from torch_neuronx.cost_model import PHYSICAL_CORES, ROOFLINES


@pytest.mark.parametrize("profile", ["trn2", "trn3"])
@pytest.mark.parametrize("lnc", [1, 2])
def test_a_large_matmul_sits_on_the_tensor_engine_roofline(profile, lnc):
    a = torch.empty(8192, 8192, dtype=torch.bfloat16, device="meta")
    est = torch_neuronx.estimate(torch.mm, a, a, profile=profile, lnc=lnc)
    (op,) = est.ops
    peak = ROOFLINES[profile].tensor_flops[torch.bfloat16] * lnc / PHYSICAL_CORES
    assert op.engine == "tensor" and op.bound == "compute" and op.flops == 2 * 8192 ** 3
    assert op.us == pytest.approx(op.flops / peak * 1e6 + ROOFLINES[profile].fixed_us)


@pytest.mark.parametrize("profile", ["trn2", "trn3"])
def test_a_large_add_sits_on_the_memory_roofline(profile):
    x = torch.empty(64 << 20, dtype=torch.float32, device="meta")
    (op,) = torch_neuronx.estimate(torch.add, x, x, profile=profile, lnc=2).ops
    bandwidth = ROOFLINES[profile].hbm_bytes_per_s * 2 / PHYSICAL_CORES
    assert op.engine == "vector" and op.bound == "memory" and op.bytes == 3 * x.numel() * 4
    assert op.us == pytest.approx(op.bytes / bandwidth * 1e6 + ROOFLINES[profile].fixed_us)


def test_small_ops_are_bound_by_the_fixed_cost_and_views_cost_nothing():
    x = torch.randn(16, 16, device="neuron")
    est = torch_neuronx.estimate(lambda t: t.view(256).exp(), x)
    assert [o.name for o in est.ops] == ["aten::exp"]
    assert est.ops[0].bound == "overhead" and est.ops[0].engine == "scalar"


def test_trn3_is_faster_where_its_hbm_is():
    x = torch.empty(1 << 24, device="meta")
    trn2 = torch_neuronx.estimate(torch.mul, x, x, profile="trn2").total_us
    trn3 = torch_neuronx.estimate(torch.mul, x, x, profile="trn3").total_us
    assert trn3 < trn2


def test_a_model_on_the_meta_device_is_priced_op_by_op(capsys):
    cfg = transformers.LlamaConfig(vocab_size=1000, hidden_size=512, intermediate_size=1536, num_hidden_layers=4,
                                   num_attention_heads=8, num_key_value_heads=4)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(cfg)
    ids = torch.zeros(2, 256, dtype=torch.long, device="meta")

    def step():
        model(input_ids=ids, labels=ids).loss.backward()

    est = torch_neuronx.estimate(step, profile="trn2")
    names = {o.name for o in est.ops}
    assert {"aten::mm", "aten::embedding_dense_backward"} <= names
    assert est.total_us == pytest.approx(sum(o.us for o in est.ops))
    top = est.by_op()[0]
    assert top[0] == "aten::mm"  # the matmuls dominate a transformer step
    print(est)
    assert "analytic rooflines, not a measurement" in capsys.readouterr().out


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="unknown profile 'trn9'"):
        torch_neuronx.estimate(torch.zeros, 2, profile="trn9")
    with pytest.raises(ValueError, match="lnc must be 1 or 2"):
        torch_neuronx.estimate(torch.zeros, 2, lnc=4)


def test_a_collective_is_priced_at_the_neuronlink_share():
    x = torch.empty(1 << 26, dtype=torch.bfloat16, device="meta")
    (op,) = torch_neuronx.estimate(lambda t: torch.ops._c10d_functional.all_reduce(t, "sum", "default"), x,
                                   profile="trn2", lnc=2).ops
    link = ROOFLINES["trn2"].link_bytes_per_s * 2 / PHYSICAL_CORES
    assert op.engine == "collective"
    assert op.us == pytest.approx(2 * x.numel() * 2 / link * 1e6 + ROOFLINES["trn2"].fixed_us)


def test_an_nki_op_is_priced_by_its_kernels_instruction_model():
    from torch_neuronx.nki import estimate as nki_estimate
    from torch_neuronx.nki import kernels

    @torch_neuronx.nki_op("cost_test::rmsnorm")
    def rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return kernels.rmsnorm(x, w, 1e-6)

    x, w = torch.randn(512, 256, device="neuron"), torch.randn(256, device="neuron")
    est = torch_neuronx.estimate(lambda: rmsnorm(x, w) * 2, profile="trn3")
    assert [o.name for o in est.ops] == ["nki::rmsnorm", "aten::mul"]
    want = nki_estimate(kernels.rmsnorm, profile="trn3")(x, w, 1e-6)
    assert est.ops[0].engine == "nki" and est.ops[0].us == pytest.approx(want.latency_us)
    meta = torch.empty(512, 256, device="meta"), torch.empty(256, device="meta")  # shapes only
    assert torch_neuronx.estimate(rmsnorm, *meta, profile="trn3").ops[0].us == pytest.approx(want.latency_us)
