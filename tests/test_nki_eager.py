"""TORCH_NEURONX_KERNELS=nki: eager mm, bmm, _softmax, native_layer_norm and SDPA forward run the NKI library kernels
where they fit (the CPU kernels elsewhere), shown by explain(); a Hugging Face tiny-Llama training
step matches the CPU. The setting is read when torch_neuronx loads, so each case runs in a fresh
interpreter."""
import json
import textwrap

from conftest import run_python

SCRIPT = textwrap.dedent("""
    import json, torch, torch_neuronx, transformers
    import torch.nn.functional as F

    torch.manual_seed(0)
    out = {}
    a, b = torch.randn(300, 200), torch.randn(200, 700)
    out["mm"] = (a.to("neuron") @ b.to("neuron")).cpu().sub(a @ b).abs().max().item()
    big = torch.randn(8, 5000)  # K > 4096: the CPU kernel
    out["mm_big"] = (big.to("neuron") @ big.t().to("neuron")).cpu().sub(big @ big.t()).abs().max().item()
    x, y = torch.randn(3, 40, 50), torch.randn(3, 50, 60)
    out["bmm"] = torch.bmm(x.to("neuron"), y.to("neuron")).cpu().sub(torch.bmm(x, y)).abs().max().item()
    s = torch.randn(4, 33, 70, dtype=torch.bfloat16)
    out["softmax"] = s.to("neuron").softmax(-1).cpu().float().sub(s.float().softmax(-1)).abs().max().item()
    out["softmax_dim0"] = s.to("neuron").softmax(0).cpu().float().sub(s.float().softmax(0)).abs().max().item()
    ln = torch.nn.LayerNorm((33, 70))
    out["layer_norm"] = ln.to("neuron")(s.float().to("neuron")).cpu().sub(ln.cpu()(s.float())).abs().max().item()
    res = torch.ops.aten.native_layer_norm(s.to("neuron"), [70], None, None, 1e-5)
    ref = torch.ops.aten.native_layer_norm(s, [70], None, None, 1e-5)
    out["layer_norm_stats"] = max((a.cpu().float() - b.float()).abs().max().item() for a, b in zip(res, ref))

    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    cpu_model = transformers.LlamaForCausalLM(cfg)
    dev_model = transformers.LlamaForCausalLM(cfg)
    dev_model.load_state_dict(cpu_model.state_dict())
    dev_model.to("neuron")
    ids = torch.randint(0, 96, (2, 24))
    losses = {}
    for name, model, dev in (("cpu", cpu_model, "cpu"), ("neuron", dev_model, "neuron")):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        seq = []
        for _ in range(3):
            loss = model(input_ids=ids.to(dev), labels=ids.to(dev)).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            seq.append(loss.item())
        losses[name] = seq
    out["losses"] = losses
    out["explain"] = {op: torch_neuronx.explain(op) for op in
                      ("aten::mm", "aten::bmm", "aten::_softmax", "aten::native_layer_norm",
                       "aten::_scaled_dot_product_fused_attention_overrideable")}
    print(json.dumps(out))
""")


def run(kernels):
    r = run_python(SCRIPT, env={"TORCH_NEURONX_KERNELS": kernels, "HF_HUB_OFFLINE": "1"}, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_nki_kernel_source_serves_eager_ops_and_trains_like_the_cpu():
    out = run("nki")
    for key in ("mm", "mm_big", "bmm"):
        assert out[key] < 1e-3, (key, out[key])
    assert out["softmax"] < 1e-2 and out["softmax_dim0"] < 1e-2
    assert out["layer_norm"] < 1e-4 and out["layer_norm_stats"] < 5e-2
    for cpu, dev in zip(out["losses"]["cpu"], out["losses"]["neuron"]):
        assert abs(cpu - dev) < 1e-3 * max(1.0, abs(cpu)), out["losses"]
    text = out["explain"]
    for op in ("aten::mm", "aten::bmm", "aten::_softmax", "aten::native_layer_norm",
               "aten::_scaled_dot_product_fused_attention_overrideable"):
        assert "TORCH_NEURONX_KERNELS=nki" in text[op] and "did)" in text[op]
    # mm: the matmuls of the tiny Llama and the first case ran the NKI kernel; K > 4096 did not.
    did = int(text["aten::mm"].split("instead of the CPU kernel (")[1].split(" did")[0])
    calls = int(text["aten::mm"].split("aten::mm: async, typed kernel")[1].split("Calls: async ")[1].split(",")[0])
    assert 10 < did < calls
    assert "(0 did)" not in text["aten::_scaled_dot_product_fused_attention_overrideable"]


def test_the_default_kernel_source_is_the_cpu_and_a_bad_setting_is_refused():
    out = run("cpu")
    assert all("TORCH_NEURONX_KERNELS" not in t for t in out["explain"].values())
    r = run_python("import torch, torch_neuronx", env={"TORCH_NEURONX_KERNELS": "fast"})
    assert r.returncode != 0 and "TORCH_NEURONX_KERNELS='fast': expected cpu or nki" in r.stderr
