"""python -m torch_neuronx.report: a Hugging Face model folder (or its config.json alone) assessed on
the meta device: will it run, its memory, the smallest device count it fits, its estimated speed."""
import json

import transformers

from conftest import run_python
from torch_neuronx import report

KEYS = {"will_run", "fallbacks", "sync_ops", "graph_breaks", "parameters", "memory", "min_devices", "estimate"}
LLAMA_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
            "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
            "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192}


def tiny_model(path):
    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2)
    transformers.LlamaForCausalLM(cfg).save_pretrained(path)
    return str(path)


def test_a_saved_tiny_model_runs_without_fallbacks_and_fits_one_core(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert report.main([tiny_model(tmp_path / "m"), "--train", "--seq", "32", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert KEYS <= set(r)
    assert r["will_run"] is True and r["fallbacks"] == [] and r["min_devices"] == {"trn2": 1, "trn3": 1}
    assert r["graph_breaks"] == []  # Llama's forward traces whole
    assert r["parameters"] == sum(p.numel() for p in transformers.LlamaForCausalLM.from_pretrained(
        tmp_path / "m").parameters())
    assert r["memory"]["gradients"] == r["memory"]["weights"] and r["memory"]["activations"] > 0
    assert r["estimate"]["trn2"]["tokens_per_second"] > 0
    assert "will run on neuron: True" in capsys.readouterr().out


def test_an_8b_config_alone_is_assessed_on_the_meta_device(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_8B))
    train = report.assess(str(tmp_path), batch=1, seq=2048, train=True)
    assert 8.0e9 < train["parameters"] < 8.1e9
    assert train["min_devices"]["trn2"] > 1  # weights, gradients, AdamW states and activations: > 24 GiB
    decode = report.assess(str(tmp_path), batch=1, seq=512, generate=16)
    assert decode["min_devices"]["trn2"] == 1 and decode["memory"]["kv_cache"] > 0
    # decoding reads every weight per token: bounded by the logical core's share of HBM
    bound = 725e9 / (decode["memory"]["weights"])
    assert decode["estimate"]["trn2"]["tokens_per_second"] < bound
    assert decode["estimate"]["trn3"]["tokens_per_second"] > decode["estimate"]["trn2"]["tokens_per_second"]


def test_bad_input_is_refused_with_a_message_and_a_nonzero_exit(tmp_path):
    r = run_python(f"import sys; from torch_neuronx import report; sys.exit(report.main([{str(tmp_path)!r}]))")
    assert r.returncode == 2 and "no config.json" in r.stderr
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "no_such_architecture"}))
    assert report.main([str(tmp_path)]) == 2
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_8B))
    assert report.main([str(tmp_path), "--dtype", "fp64"]) == 2


def test_the_html_page_has_the_time_by_op_and_the_memory_bars(tmp_path):
    import base64
    import re

    page, out = tmp_path / "r.html", tmp_path / "r.json"
    assert report.main([tiny_model(tmp_path / "m"), "--train", "--seq", "32", "--json", str(out),
                        "--html", str(page)]) == 0
    text = page.read_text()
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', text)
    assert len(images) == 2 and all(base64.b64decode(i).startswith(b"\x89PNG") for i in images)
    assert "LlamaForCausalLM" in text
    r = json.loads(out.read_text())
    rows = r["breakdown"]["trn2"]
    assert rows[0][2] == max(row[2] for row in rows)  # the costliest op first
    assert abs(sum(row[3] for row in rows) - 1.0) < 1e-6 or len(rows) == 30


def test_graph_breaks_are_found_by_tracing_the_forward():
    import torch

    from torch_neuronx.report import graph_breaks

    def forward(x):
        y = x * 2
        print("a side effect torch.compile cannot trace")
        return y + 1

    (brk,) = graph_breaks(forward, x=torch.zeros(4, device="meta"))
    assert "print" in brk["reason"] and brk["where"].endswith(f":{forward.__code__.co_firstlineno + 2}")
    assert graph_breaks(lambda x: x.sin() + 1, x=torch.zeros(4, device="meta")) == []


LLAMA_70B = dict(LLAMA_8B, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64)
SMOLLM_135M = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576,
               "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
               "num_key_value_heads": 3, "vocab_size": 49152, "max_position_embeddings": 2048,
               "tie_word_embeddings": True}


def test_activations_are_the_fused_attention_kernels_not_the_score_matrices(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(SMOLLM_135M))
    r = report.assess(str(tmp_path), batch=1, seq=2048, train=True)
    half = report.assess(str(tmp_path), batch=1, seq=1024, train=True)
    # linear in the sequence: the math path's score matrices (and their softmax) would grow 4x
    assert r["memory"]["activations"] <= 2.05 * half["memory"]["activations"]
    assert r["min_devices"]["trn2"] == 1
    names = {row[0] for row in r["breakdown"]["trn2"]}
    assert "aten::_scaled_dot_product_fused_attention_overrideable_backward" in names
    assert "aten::bmm" not in names


def test_the_layouts_for_an_8b_and_a_70b_config(tmp_path):
    (tmp_path / "8b").mkdir()
    (tmp_path / "8b" / "config.json").write_text(json.dumps(LLAMA_8B))
    r = report.assess(str(tmp_path / "8b"), batch=1, seq=2048, train=True, devices=16)
    assert r["assumptions"]["compared at"].startswith("16 logical cores")
    for profile in ("trn2", "trn3"):
        lays = r["layouts"][profile]
        assert 1 <= len(lays) <= 3 and all(lay["tp"] * lay["dp"] == 16 for lay in lays)
        assert lays == sorted(lays, key=lambda x: -x["tokens_per_second"])
        assert all(lay["bound"] in ("compute", "HBM", "collectives", "latency") for lay in lays)
        m = r["memory"]
        states = m["weights"] + m["gradients"] + m["optimizer_states"]
        cap = report._CORE_HBM[profile]
        assert all(states / 16 + m["activations"] / lay["tp"] <= 0.9 * cap for lay in lays)  # each fits
        assert all(abs(sum(lay["terms"].values()) - lay["step_seconds"]) < 1e-9 for lay in lays)
        assert "LNC=2" in lays[0]["layout"] and ("FSDP" in lays[0]["layout"] or lays[0]["dp"] == 1)
    # the headline is the fastest layout; --tp prices a chosen one (AWS's TP=64 x DP=2 is slower here)
    wide = report.assess(str(tmp_path / "8b"), batch=1, seq=2048, train=True, devices=128, check_compile=False)
    assert wide["estimate"]["trn2"] == wide["layouts"]["trn2"][0]
    pinned = report.assess(str(tmp_path / "8b"), batch=1, seq=2048, train=True, devices=128, tp=64,
                           check_compile=False)["estimate"]["trn2"]
    assert (pinned["tp"], pinned["dp"]) == (64, 2)
    assert pinned["tokens_per_second"] < wide["estimate"]["trn2"]["tokens_per_second"]
    for bad in ("3", "128"):  # not a power of two dividing --devices; more than one instance
        assert report.main([str(tmp_path / "8b"), "--devices", "128", "--tp", bad]) == 2
    (tmp_path / "70b").mkdir()
    (tmp_path / "70b" / "config.json").write_text(json.dumps(LLAMA_70B))
    r = report.assess(str(tmp_path / "70b"), batch=1, seq=4096, generate=16)
    # 70B's weights need 8 logical cores (2 chips); both profiles are compared at the same count
    assert r["estimate"]["trn2"]["devices"] == r["estimate"]["trn3"]["devices"] == max(r["min_devices"].values())
    assert r["estimate"]["trn3"]["tokens_per_second"] > r["estimate"]["trn2"]["tokens_per_second"]
    top = r["layouts"]["trn2"][0]
    assert top["tp"] >= r["min_devices"]["trn2"] and top["token_seconds"] > 0
    text = report._text(r)
    assert "layout 1: TP=" in text and "bound by" in text and "compared at" in text


def test_a_pinned_tp_prices_the_heads_as_neuron_pads_them(tmp_path):
    """40 heads on TP=32 run as 64 on Neuron (two per core): with --tp the report prices and stores
    the padded projections and KV cache, and still counts the model's own parameters."""
    cfg = dict(LLAMA_8B, hidden_size=1280, intermediate_size=3456, num_hidden_layers=2, num_attention_heads=10,
               num_key_value_heads=10, vocab_size=1024)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    plain = report.assess(str(tmp_path), seq=256, generate=8, devices=8, tp=2, check_compile=False)
    padded = report.assess(str(tmp_path), seq=256, generate=8, devices=8, tp=8, check_compile=False)
    assert plain["assumptions"]["heads"] is None
    assert padded["assumptions"]["heads"] == "10 query heads padded to 16 for TP=8"
    assert padded["parameters"] == plain["parameters"]
    qkvo = 2 * 4 * 1280 * 128 * 6  # two layers' q, k, v and o projections of the 6 padded heads
    assert padded["memory"]["weights"] - plain["memory"]["weights"] == qkvo * 2  # bf16
    assert padded["memory"]["kv_cache"] == plain["memory"]["kv_cache"] * 16 / 10
    assert "padded to 16" in report._text(padded)
    # the automatic search prices each TP degree as Neuron runs it: TP=4 (10 heads as 12) as a pinned
    # --tp 4 prices it, the degrees that divide the heads with the model's own
    auto = report.assess(str(tmp_path), seq=256, generate=8, devices=8, check_compile=False)
    pinned = report.assess(str(tmp_path), seq=256, generate=8, devices=8, tp=4, check_compile=False)
    by_tp = {lay["tp"]: lay for lay in auto["layouts"]["trn2"]}
    assert 4 in by_tp, by_tp.keys()
    assert by_tp[4]["heads"] == pinned["assumptions"]["heads"] == "10 query heads padded to 12 for TP=4"
    assert "heads padded 10 -> 12" in by_tp[4]["layout"]
    assert abs(by_tp[4]["step_seconds"] - pinned["estimate"]["trn2"]["step_seconds"]) < 1e-12
    assert all("heads" not in lay for t, lay in by_tp.items() if 10 % t == 0)
    assert auto["memory"] == plain["memory"]  # the model's own; each padded layout fits with its own
