"""Every Hugging Face transformers CausalLM architecture on neuron, against the same code on CPU.

Each architecture of MODEL_FOR_CAUSAL_LM_MAPPING_NAMES gets a tiny config (the config class's
defaults with every size-like field shrunk, sub-configs too) and random weights made on CPU with a
fixed seed; a deep copy of that model goes to neuron. Then, on both devices:
  forward    logits of a 2x8 batch; assert_close with rtol=atol=1e-3 (float32 on both sides, the
             same CPU kernels run on neuron: only reduction order may differ)
  dynamic    greedy generate, 8 new tokens, default dynamic cache; tokens must be equal
  static     the same with cache_implementation="static" (transformers compiles the decode step
             with backend "neuron" on neuron); n/a where CPU cannot run it either
  backward   LM loss (labels=input_ids, see LOSSES) and its backward; the loss and the gradients of
             the first, middle and last parameters, same tolerance
plus the op counts (async / sync / copy, and the ops that synced or copied, with reasons), the
compile counts of the static decode step and the wall time. Models stay in eval mode throughout:
dropout would draw different random numbers on each device.

Statuses: pass, fail (a mismatch: first failing step and line), error (neuron raised where CPU did
not), cpu-error (CPU cannot build or run the forward: nothing to compare), skipped-too-large (still
over MAX_PARAMS after shrinking), crash (the worker died), timeout.

A parent runs the architectures in a worker process and restarts it after a crash or a timeout, as
tests/conformance/harness.py does for ops; DIR gets hf-matrix.md (the table), hf-matrix.json (all
results, with each failure's Python location) and worker.log (the workers' stderr):
  python -P tests/hf/matrix.py [--archs llama,gpt2] [--sample 12] [--timeout 300] [--out DIR]
"""
from __future__ import annotations

import argparse
import collections
import copy
import dataclasses
import gc
import json
import os
import selectors
import subprocess
import sys
import time
import traceback
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before huggingface_hub reads it: nothing is downloaded
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402
from transformers.models.auto.configuration_auto import CONFIG_MAPPING  # noqa: E402
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES  # noqa: E402

import torch_neuronx  # noqa: E402

MAX_PARAMS = 20_000_000
TOL = dict(rtol=1e-3, atol=1e-3)
BATCH, SEQ, NEW_TOKENS = 2, 8, 8
STEPS = ("forward", "dynamic", "static", "backward")
# The CI sample: the common families first, then a spread of MoE, MLA, hybrid/SSM, encoder-style,
# multimodal-wrapper and older architectures.
SAMPLE = ("llama", "qwen2", "mixtral", "gpt2", "gemma", "phi", "qwen3_moe", "deepseek_v3", "mistral", "gemma2",
          "falcon", "bloom", "opt", "gpt_neox", "mamba", "jamba", "bert", "bart", "qwen3_next", "gemma3",
          "phi3", "olmoe", "granitemoe", "cohere", "starcoder2", "gptj", "llama4_text", "gpt_oss")

# ---- tiny configs ------------------------------------------------------------------------------

H, HEADS, KV, HEAD_DIM, FF, LAYERS, VOCAB, POS = 64, 4, 2, 16, 128, 2, 256, 128
EXPERTS, TOPK, MOE_FF = 4, 2, 32
LAYER_FIELDS = "num_hidden_layers n_layer n_layers num_layers decoder_layers encoder_layers num_layers_per_stack depth " \
               "num_blocks"


def _names(*groups):
    return {name: value for names, value in groups for name in names.split()}


# Size-like fields and their tiny values, by the names configs use for them. A value already
# smaller stays (a single KV head stays one); None stays None (off: no q_lora_rank).
SIZES = _names(
    ("hidden_size d_model n_embd n_embed embed_dim emb_dim embedding_dim word_embed_proj_dim hidden_size_global "
     "input_embedding_size output_embedding_size lru_width backbone_hidden_size "
     "out_hidden_size projector_input_dim projector_output_dim vision_output_dim", H),
    ("num_attention_heads n_head n_heads num_heads attention_heads decoder_attention_heads encoder_attention_heads "
     "num_decoder_attention_heads num_encoder_attention_heads swa_num_attention_heads linear_num_heads", HEADS),
    ("num_key_value_heads num_kv_heads n_kv_heads multi_query_group_num swa_num_key_value_heads num_query_groups "
     "linear_num_key_heads", KV),
    ("linear_num_value_heads", HEADS),
    ("head_dim kv_channels attention_head_dim d_head dim_head d_kv attention_head_size swa_head_dim linear_head_dim "
     "linear_key_head_dim linear_value_head_dim mamba_d_head mamba_headdim mamba_head_dim v_head_dim "
     "qk_nope_head_dim index_head_dim", HEAD_DIM),
    ("qk_rope_head_dim rotary_dim d_rel", 8),
    ("qk_head_dim", HEAD_DIM + 8),
    ("intermediate_size ffn_dim d_ff dff d_inner dim_ff ffn_hidden_size decoder_ffn_dim encoder_ffn_dim n_inner "
     "intermediate_size_mlp feed_forward_size mlp_dim dense_intermediate_size mamba_d_ssm", FF),
    ("moe_intermediate_size shared_expert_intermediate_size shared_experts_intermediate_size expert_ffn_hidden_size "
     "moe_shared_expert_intermediate_size shared_intermediate_size router_hidden_size", MOE_FF),
    (LAYER_FIELDS, LAYERS),
    ("num_local_experts num_experts n_routed_experts moe_num_experts zero_expert_num num_centroids", EXPERTS),
    ("num_experts_per_tok num_experts_per_token moe_k moe_topk top_k centroid_intermediate_top_k", TOPK),
    ("n_group topk_group n_shared_experts num_shared_experts first_k_dense_replace num_dense_layers", 1),
    ("max_position_embeddings n_positions n_ctx max_seq_len max_target_positions max_source_positions context_length "
     "original_max_position_embeddings model_max_length position_bias_max_distance rel_extent", POS),
    ("vocab_size decoder_vocab_size audio_vocab_size codebook_size vocab_size_per_layer_input pronunciation_vocab_size "
     "shape_vocab_size unpadded_vocab_size encoder_hash_byte_group_vocab", VOCAB),
    ("q_lora_rank kv_lora_rank o_lora_rank adapter_rank laurel_rank hc_lowrank gated_norm_rank ple_embed_dim "
     "hidden_size_per_layer_input", 32),
    ("sliding_window sliding_window_size attention_window_size local_attention local_attention_window_len "
     "window_size attention_chunk_size keep_window_size", 12),
    ("index_topk index_n_heads", 4),
    ("mamba_d_state state_size ssm_state_size chunk_size mamba_chunk_size time_step_rank mamba_dt_rank "
     "mamba_n_heads mamba_num_heads", 16),
    ("moe_layer_end_index max_window_layers", 1),
    ("image_size", 64), ("patch_size", 16),
)
LAYER_FIELDS = LAYER_FIELDS.split()
# What the rules above cannot know: fields an architecture's default config leaves unset though
# its model needs them, and validators that want one particular value.
EXTRA = {
    "lfm2_moe": {"layer_types": ["conv", "full_attention"]},
    "qwen4_exp_text": {"indexer_n_heads": 2, "indexer_kv_heads": 1, "indexer_head_dim": 16, "indexer_budget": 4,
                       "indexer_compress_ratio": 2},
    "gemma3n_text": {"num_hidden_layers": 4, "num_kv_shared_layers": 2},
    "gemma4_unified_assistant": {"text_config": {"num_hidden_layers": 4, "num_kv_shared_layers": 2}},
    "blt": {"num_hidden_layers": 8},  # its cache is sized by a field BltConfig lacks
    "zaya": {"num_experts_per_tok": 1},
    "reformer": {"is_decoder": True, "axial_pos_embds_dim": [32, 32], "axial_pos_shape": [8, 16],
                 "local_attn_chunk_length": 4, "lsh_attn_chunk_length": 4, "num_buckets": 4},
    "bamba": {"attn_layer_indices": [1]},
    "granitemoehybrid": {"layer_types": ["mamba", "attention"]},
    "zamba": {"num_hidden_layers": 3, "layers_block_type": ["mamba", "hybrid", "hybrid"]},
    "dbrx": {"attn_config": {"rope_theta": 10000.0, "clip_qkv": 8.0}},
    "cohere_compass_text": {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 10000.0}}},
    "hrm_text": {"num_layers_per_stack": 1, "num_hidden_layers": 8},  # 8 = H_cycles * (L_cycles + 1) stacks
    "xlstm": {"qk_dim_factor": 1.0},  # its recurrent state is sized for qk heads as wide as v heads
    "dots3_note_text": {"swa_num_attention_heads": 4, "swa_num_key_value_heads": 4, "swa_q_lora_rank": 32,
                        "swa_kv_lora_rank": 32, "swa_head_dim": 24, "swa_qk_nope_head_dim": 16},  # popped kwargs
    "musicgen": {"num_codebooks": 1},
    "musicgen_melody": {"num_codebooks": 1},
}
EXTRA["qwen4_exp"], EXTRA["dots3_note"] = EXTRA["qwen4_exp_text"], EXTRA["dots3_note_text"]
TOKEN_ID_SUFFIXES = ("_token_id", "_token_index", "_token_ids")


def _field_defaults(cfg_cls):
    missing = dataclasses.MISSING
    return {f.name: f.default if f.default is not missing else f.default_factory() for f in dataclasses.fields(cfg_cls)
            if f.default is not missing or f.default_factory is not missing}


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _kind_list(name, value):
    """Whether the field lists the kind of each layer (attention, linear attention, mamba, moe)."""
    return isinstance(value, (list, tuple)) and ("layer_types" in name or "block_type" in name)


def _one_of_each(values, n):
    """`n` or more per-layer entries that keep every distinct kind of the original (hybrid layer_types)."""
    kinds = list(dict.fromkeys(values))
    return type(values)((kinds * n)[:max(n, len(kinds))])


def _shrink_value(name, value, old_layers, new_layers):
    """The tiny value of one field, or `value` where the field is not size-like."""
    if name in SIZES and _is_int(value):
        return SIZES[name] if value > SIZES[name] else value
    if not isinstance(value, (list, tuple)) or not value or not old_layers:
        return value
    per_layer = len(value) == old_layers
    if name in SIZES and per_layer:
        return type(value)([SIZES[name]] * new_layers)  # a size per layer (gemma3n's intermediate_size)
    if all(_is_int(v) for v in value) and ("layer" in name or "idx" in name) and max(value) < old_layers \
            and len(value) < old_layers:
        return type(value)([v for v in value if v < new_layers] or [new_layers - 1])  # layer indices
    if per_layer:
        return _one_of_each(value, new_layers) if _kind_list(name, value) else type(value)(value[:new_layers])
    return value


def _spec_kwargs(parent_cls, key):
    spec = (getattr(parent_cls, "sub_configs_defaults", None) or {}).get(key)
    return dict(getattr(spec, "init_kwargs", None) or {})


def _inherited(parent_cls, key, sub):
    """What a composite config gave its sub-config: its spec's kwargs and the values that differ
    from the sub-config class's own defaults."""
    out = _spec_kwargs(parent_cls, key)
    try:
        fresh = type(sub)()
    except Exception:  # noqa: BLE001
        return out
    defaults = _field_defaults(type(sub))
    for name, value in sub.__dict__.items():
        if name in defaults and defaults[name] is not None and fresh.__dict__.get(name) != value:
            out.setdefault(name, value)
    return out


def tiny_kwargs(cfg, base=None, extra=None):
    """Keyword arguments that build a tiny version of the config instance `cfg`; `base`: what
    its composite config gave it; `extra`: the architecture's own values (EXTRA)."""
    defaults = _field_defaults(type(cfg))
    kw = dict(base or {})
    values = {n: v for n, v in cfg.__dict__.items() if not n.startswith("_")}
    old_layers = next((values[n] for n in LAYER_FIELDS if _is_int(values.get(n))), None)
    kinds = max((len(set(v)) for n, v in values.items() if _kind_list(n, v)), default=1)
    patterns = [len(v) for n, v in values.items() if _kind_list(n, v) and old_layers and len(v) < old_layers]
    new_layers = max([LAYERS, min(kinds, 4)] + patterns)  # a hybrid model keeps one layer of each kind
    new_layers = next((extra[n] for n in LAYER_FIELDS if n in (extra or {})), new_layers)
    special = {}
    for name, value in values.items():
        if isinstance(value, transformers.PretrainedConfig):
            sub_extra = (extra or {}).pop(name, None) if isinstance((extra or {}).get(name), dict) else None
            kw[name] = type(value)(**tiny_kwargs(value, _inherited(type(cfg), name, value), sub_extra))
            continue
        if name not in defaults or (defaults[name] is None and name not in kw and name not in SIZES
                                    and not _kind_list(name, value)):
            continue  # computed from other fields in __post_init__: it follows the tiny ones
        if name.endswith(TOKEN_ID_SUFFIXES) or name in ("bos_token_id", "eos_token_id", "pad_token_id"):
            new = _token_ids(value, special)
        elif name in LAYER_FIELDS and _is_int(value):
            new = new_layers
        else:
            new = _shrink_value(name, value, old_layers, new_layers)
        if new != value:
            kw[name] = new
    _consistent(kw, values, defaults)
    kw.update(extra or {})
    return kw


def _token_ids(value, special):
    """Special token ids moved into the tiny vocabulary, at its top, where inputs never reach; one
    id stays one id (eos listed twice)."""
    def move(v):
        return special.setdefault(v, VOCAB - 1 - len(special)) if _is_int(v) and v >= VOCAB - 16 else v
    return type(value)(map(move, value)) if isinstance(value, (list, tuple)) else move(value)


def _consistent(kw, values, defaults):
    """Fixes what shrinking fields one by one can break."""
    get = lambda n: kw.get(n, values.get(n))  # noqa: E731
    heads = get("num_attention_heads")
    moe = any(_is_int(get(n)) for n in ("moe_intermediate_size", "first_k_dense_replace"))
    for name, tiny, needed in (("num_key_value_heads", KV, True), ("head_dim", HEAD_DIM, True),
                               ("n_routed_experts", EXPERTS, moe), ("num_experts_per_tok", TOPK, moe),
                               ("n_shared_experts", 1, moe)):
        if name in defaults and values.get(name, 0) is None and _is_int(heads) and needed:
            kw[name] = tiny  # the model reads it without a fallback
    if _is_int(get("kv_lora_rank")) and _is_int(heads) and "num_key_value_heads" in values:
        kw["num_key_value_heads"] = heads  # MLA attends with as many KV heads as query heads
        if "head_dim" in defaults:
            kw["head_dim"] = get("qk_rope_head_dim")  # and its RoPE covers the rope part only
    elif _is_int(heads) and _is_int(get("num_key_value_heads")) and heads % get("num_key_value_heads"):
        kw["num_key_value_heads"] = 1
    # A Mamba mixer's heads * head size is expand * hidden size.
    for n_heads, d_head, expand in (("mamba_n_heads", "mamba_d_head", "mamba_expand"), ("num_heads", "head_dim", "expand"),
                                    ("mamba_num_heads", "mamba_head_dim", "mamba_expand"),
                                    ("n_mamba_heads", "mamba_headdim", "mamba_expand")):
        if all(_is_int(get(n)) for n in (n_heads, expand, "hidden_size")):
            width = get(expand) * get("hidden_size")
            d = get(d_head) if _is_int(get(d_head)) else HEAD_DIM
            kw[n_heads] = max(1, width // d)
            if _is_int(get(d_head)):
                kw[d_head] = width // kw[n_heads]
    for name in values:  # one period of layers (jamba: attention every 8th layer, from the 4th)
        if name.endswith("_layer_period") and _is_int(get(name)) and get(name) > 2:
            kw[name], kw[name.replace("period", "offset")] = 2, 1
    if isinstance(values.get("attention_types"), list):  # gpt_neo: [[kinds, repeats]]
        kinds = values["attention_types"][0][0]
        kw["attention_types"] = [[kinds, max(1, get("num_layers") // len(kinds))]]
    rope = get("rope_parameters")
    if isinstance(rope, dict):
        new = _tiny_rope(rope, (get("head_dim") or HEAD_DIM) // 2)
        if new != rope:
            kw["rope_parameters"] = new


def _tiny_rope(rope, half):
    """RoPE parameters sized for the tiny head (and the same for each layer type's own)."""
    out = {}
    for key, value in rope.items():
        if isinstance(value, dict):
            value = _tiny_rope(value, half)
        elif key == "mrope_section" and isinstance(value, (list, tuple)):
            scaled = [max(1, v * half // sum(value)) for v in value]
            scaled[0] += half - sum(scaled)
            value = type(value)(scaled)
        elif key in ("short_factor", "long_factor") and isinstance(value, (list, tuple)):
            value = type(value)(list(value)[:half] + [1.0] * (half - len(value)))
        elif key == "original_max_position_embeddings" and _is_int(value):
            value = POS // 2
        out[key] = value
    return out


def config_and_model_class(arch):
    """The config class to shrink and the model class: the mapping's model, with its own config
    class where the architecture's config is a composite it does not take (musicgen's decoder)."""
    model_cls = getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[arch])
    cfg_cls = CONFIG_MAPPING[arch]
    if not issubclass(cfg_cls, model_cls.config_class):
        cfg_cls = model_cls.config_class
    return cfg_cls, model_cls


def tiny_config(arch):
    cfg_cls, _ = config_and_model_class(arch)
    extra = {k: dict(v) if isinstance(v, dict) else v for k, v in EXTRA.get(arch, {}).items()}
    try:
        default = cfg_cls()
    except Exception:  # noqa: BLE001  (some defaults do not validate; with EXTRA they do)
        default = cfg_cls(**{k: {**_spec_kwargs(cfg_cls, k), **v} if isinstance(v, dict) and k.endswith("config")
                             else v for k, v in extra.items()})
    return cfg_cls(**tiny_kwargs(default, extra=extra))


# ---- worker side ---------------------------------------------------------------------------------


def _first_line(e: BaseException) -> str:
    """The exception's first line; for a mismatch, with assert_close's counts and greatest differences."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return f"{type(e).__name__}: {'; '.join(lines[:4 if isinstance(e, AssertionError) else 1])}"[:400]


def _where(e: BaseException) -> str:
    """The innermost frames outside torch's own dispatch: where a model's Python path failed."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if "/torch/_" not in f.filename][-3:]
    return " <- ".join(f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in reversed(frames))


def _input_ids(model):
    """A BATCH x SEQ batch of ordinary tokens: below the ids _token_ids moved to the vocabulary's top."""
    cfg = model.config.get_text_config(decoder=True)
    vocab = min(getattr(cfg, "vocab_size", None) or VOCAB, VOCAB)
    return torch.randint(3, max(4, vocab - 16), (BATCH, SEQ), generator=torch.Generator().manual_seed(1))


def _set_pad_token(model):
    """generate wants a pad id, MusicGen a decoder start id too (it reads them from the generation
    config, not from arguments; decoder-only models ignore the start id)."""
    gen = model.generation_config
    if gen.pad_token_id is None:
        eos = gen.eos_token_id
        gen.pad_token_id = (eos[0] if isinstance(eos, list) else eos) if eos is not None else 0
    if gen.decoder_start_token_id is None:
        gen.decoder_start_token_id = gen.pad_token_id


def _forward(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


def _generate(model, ids, **kw):
    with torch.no_grad():
        return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, do_sample=False,
                              num_beams=1, num_return_sequences=1, **kw)  # MusicGen has no default for it


# How the loss is computed, tried in this order on CPU; neuron then uses the first that worked:
# without the cache (training does not use it; RWKV's cached state is updated in place), as
# forwards that lack use_cache take it, and as a plain shifted cross-entropy of the logits where
# the model's own loss wants other inputs (GIT's image tokens, MusicGen's codebooks).
LOSSES = ("labels, use_cache=False", "labels", "cross-entropy of the logits")


def _backward(model, ids, how):
    """The loss and the gradients of a few parameters (first, middle, last that get one)."""
    model.zero_grad(set_to_none=True)
    if how == LOSSES[2]:
        logits = model(input_ids=ids, use_cache=False).logits
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
    else:
        loss = model(input_ids=ids, labels=ids, **({"use_cache": False} if how == LOSSES[0] else {})).loss
    loss.backward()
    named = [(n, p.grad) for n, p in model.named_parameters() if p.grad is not None]
    return {"loss": loss.detach(), **{"grad " + named[i][0]: named[i][1]
                                      for i in sorted({0, len(named) // 2, len(named) - 1}) if named}}


def _loss_and_grads(result, model, ids, device):
    for how in LOSSES if device == "cpu" else [result["loss"]]:
        try:
            result["loss"] = how
            return _backward(model, ids, how)
        except Exception:  # noqa: BLE001
            if how == LOSSES[-1] or device != "cpu":
                raise


def _compare(actual, expected, what=""):
    """Token ids must be equal; floating-point tensors close within TOL; dicts entry by entry."""
    if isinstance(expected, dict):
        for key, value in expected.items():
            assert actual.get(key) is not None, f"no {key} on neuron"
            _compare(actual[key], value, f"{key}: ")
    elif expected.dtype.is_floating_point:
        torch.testing.assert_close(actual.cpu(), expected, **TOL, msg=lambda m: what + m)
    else:
        assert torch.equal(actual.cpu(), expected), f"{what}{actual.cpu().tolist()} != CPU {expected.tolist()}"


def _step(result, name, run):
    """Runs one step on CPU, then on neuron, and records pass / fail / error / n/a (CPU raised)."""
    t0 = time.time()
    try:
        expected = run("cpu")
    except Exception as e:  # noqa: BLE001
        result["steps"][name], result["cpu_errors"][name] = "n/a", _first_line(e)
        return False
    outcome = "pass"
    try:
        actual = run("neuron")
        torch.neuron.synchronize()  # a queued kernel's error belongs to this step
    except Exception as e:  # noqa: BLE001
        outcome, why = "error", e
        try:
            torch.neuron.synchronize()
        except Exception:  # noqa: BLE001  (the same error, raised again by the queue)
            pass
    if outcome == "pass":
        try:
            _compare(actual, expected)
        except Exception as e:  # noqa: BLE001
            outcome, why = "fail", e
    result["steps"][name], result["step_seconds"][name] = outcome, round(time.time() - t0, 2)
    if outcome != "pass":
        result["errors"][name] = {"error": _first_line(why), "where": _where(why)}
    return True


def run_arch(arch: str) -> dict:
    result = {"arch": arch, "params": None, "status": "pass", "steps": dict.fromkeys(STEPS, "-"), "detail": "",
              "errors": {}, "cpu_errors": {}, "step_seconds": {}}
    torch_neuronx.reset_op_counts()
    try:
        _, model_cls = config_and_model_class(arch)
        cfg = tiny_config(arch)
        torch.manual_seed(0)
        model = model_cls._from_config(cfg).eval()  # eval: dropout would draw different numbers on each device
    except Exception as e:  # noqa: BLE001
        return {**result, "status": "cpu-error", "detail": "build: " + _first_line(e), "where": _where(e)}
    result["params"] = sum(p.numel() for p in model.parameters())
    if result["params"] > MAX_PARAMS:
        return {**result, "status": "skipped-too-large", "detail": f"{result['params'] / 1e6:.1f}M parameters"}
    if hasattr(model, "set_default_language"):  # xmod routes through per-language adapters
        model.set_default_language(cfg.languages[0])
    _set_pad_token(model)
    ids = {"cpu": _input_ids(model)}
    try:
        models = {"cpu": model, "neuron": copy.deepcopy(model).to("neuron")}
        ids["neuron"] = ids["cpu"].to("neuron")
    except Exception as e:  # noqa: BLE001
        return {**result, "status": "error", "detail": "to neuron: " + _first_line(e), "where": _where(e)}
    if not _step(result, "forward", lambda d: _forward(models[d], ids[d])):
        return {**result, "status": "cpu-error", "detail": "forward: " + result["cpu_errors"]["forward"]}
    _step(result, "dynamic", lambda d: _generate(models[d], ids[d]))
    _step(result, "static", lambda d: _generate(models[d], ids[d], cache_implementation="static"))
    stats = torch_neuronx.compile_stats()  # of the static decode step: it should compile once
    result["compile"] = {k: v for k, v in stats.items() if k != "recompile_reasons"}
    if stats["recompile_reasons"]:
        result["compile"]["first_recompile"] = str(stats["recompile_reasons"][0]).splitlines()[0][:200]
    _step(result, "backward", lambda d: _loss_and_grads(result, models[d], ids[d], d))
    bad = next((s for s in STEPS if result["steps"][s] in ("fail", "error")), None)
    if bad:
        result["status"] = result["steps"][bad]
        result["detail"] = f"{bad}: {result['errors'][bad]['error']}"
    return result


def _finish(result: dict, elapsed: float) -> dict:
    """Waits for the architecture's queued work, so its late errors count against it, and records
    how its ops ran."""
    try:
        torch.neuron.synchronize()
    except Exception as e:  # noqa: BLE001
        if result["status"] == "pass":
            result["status"], result["detail"] = "error", "late asynchronous error: " + _first_line(e)
    counts = torch_neuronx.op_counts(reasons=True)
    result["calls"] = {m: sum(c[m] for c in counts.values()) for m in ("async", "sync", "copy")}
    result["not_async"] = {op: c for op, c in counts.items() if c["sync"] or c["copy"]}
    result["seconds"] = round(elapsed, 1)
    return result


def worker(archs: list) -> None:
    warnings.simplefilter("ignore")
    transformers.logging.set_verbosity_error()
    for arch in archs:
        print("START", arch, flush=True)
        t0 = time.time()
        try:
            result = run_arch(arch)
        except Exception as e:  # noqa: BLE001  (a harness bug must not hide the other architectures)
            result = {"arch": arch, "status": "error", "steps": dict.fromkeys(STEPS, "-"),
                      "detail": "harness: " + _first_line(e), "where": _where(e)}
        result = _finish(result, time.time() - t0)
        print("RESULT", json.dumps(result, default=str), flush=True)
        torch._dynamo.reset()
        torch_neuronx.reset_compile_stats()
        gc.collect()


# ---- parent side ---------------------------------------------------------------------------------


def all_archs() -> list:
    return list(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def sample(archs: list, n: int) -> list:
    """SAMPLE first, then every k-th other architecture: the same N on every run."""
    chosen = [a for a in SAMPLE if a in archs][:n]
    rest = [a for a in archs if a not in chosen]
    k = n - len(chosen)
    chosen += [rest[i * len(rest) // k] for i in range(k)] if k > 0 and rest else []
    return [a for a in archs if a in chosen]


def _tail(path: str, n: int = 3) -> str:
    with open(path, errors="replace") as f:
        return " / ".join(ln.strip() for ln in f.readlines()[-n:] if ln.strip())[-300:]


def _worker_results(archs: list, timeout: float, log: str):
    """Yields the results of one worker over `archs`, and a timeout or crash result for the
    architecture it was running when it stopped (the caller restarts it after that one)."""
    env = dict(os.environ, TORCH_NEURONX_FALLBACK="silent", PYTHONWARNINGS="ignore", HF_HUB_OFFLINE="1")
    with open(log, "a") as err:
        # Its own session: a timeout kills the worker and the compile workers it started.
        proc = subprocess.Popen([sys.executable, "-P", os.path.abspath(__file__), "--worker", "--archs", ",".join(archs)],
                                stdout=subprocess.PIPE, stderr=err, env=env, start_new_session=True)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    current, started, buf, reported = None, time.time(), b"", set()
    try:
        while True:
            if not sel.select(None if current is None else max(0.0, started + timeout - time.time())):
                os.killpg(proc.pid, 9)
                yield {"arch": current, "status": "timeout", "detail": f"over {timeout:.0f} s", "seconds": timeout}
                return
            chunk = os.read(proc.stdout.fileno(), 1 << 16)
            if not chunk:
                proc.wait()
                unreported = [a for a in archs if a not in reported]
                if current is None and not unreported:
                    return
                yield {"arch": current or unreported[0], "status": "crash", "seconds": round(time.time() - started, 1),
                       "detail": f"worker exited with {proc.returncode}: {_tail(log)}"}
                return
            *lines, buf = (buf + chunk).split(b"\n")
            for line in map(bytes.decode, lines):
                if line.startswith("START "):
                    current, started = line[6:].strip(), time.time()
                elif line.startswith("RESULT "):
                    current = None
                    result = json.loads(line[7:])
                    reported.add(result["arch"])
                    yield result
    finally:
        proc.wait()
        sel.close()
        proc.stdout.close()


def run(archs: list, timeout: float, out_dir: str, progress=print) -> list:
    """A result per architecture, in `archs` order; the report is rewritten after each one."""
    results, t0 = {}, time.time()
    while len(results) < len(archs):
        for r in _worker_results([a for a in archs if a not in results], timeout, os.path.join(out_dir, "worker.log")):
            r.setdefault("steps", dict.fromkeys(STEPS, "-"))
            results[r["arch"]] = r
            progress(f"[{len(results)}/{len(archs)} {time.time() - t0:5.0f}s] {r['arch']:<26} {r['status']:<18} "
                     f"{r.get('seconds', 0):6.1f}s  {r.get('detail', '')[:90]}")
            write_report([results[a] for a in archs if a in results], out_dir)
    return [results[a] for a in archs]


def summarize(results: list) -> dict:
    counts = dict(collections.Counter(r["status"] for r in results))
    ran = [r for r in results if r["status"] not in ("cpu-error", "skipped-too-large")]
    passed = sum(r["status"] == "pass" for r in ran)
    calls = {m: sum((r.get("calls") or {}).get(m, 0) for r in results) for m in ("async", "sync", "copy")}
    return {"architectures": len(results), "run_on_cpu": len(ran), "pass": passed, "counts": counts,
            "pass_rate": passed / max(1, len(ran)), "calls": calls}


def _cell(text) -> str:
    return str(text).replace("|", "/").replace("\n", " ")


def write_report(results: list, out_dir: str) -> tuple:
    summary = summarize(results)
    with open(os.path.join(out_dir, "hf-matrix.json"), "w") as f:
        json.dump({"summary": summary, "tolerance": TOL, "results": results}, f, indent=1, default=str)
    lines = ["| architecture | params | status | forward | generate dynamic | generate static | backward | "
             "async/sync/copy | seconds | detail |", "| --- | ---: | --- | --- | --- | --- | --- | --- | ---: | --- |"]
    for r in results:
        steps, calls = r.get("steps", {}), r.get("calls")
        params = f"{r['params'] / 1e6:.2f}M" if r.get("params") else ""
        calls = f"{calls['async']}/{calls['sync']}/{calls['copy']}" if calls else ""
        lines.append(f"| {r['arch']} | {params} | {r['status']} | " + " | ".join(steps.get(s, "-") for s in STEPS) +
                     f" | {calls} | {r.get('seconds', '')} | {_cell(r.get('detail', ''))[:160]} |")
    lines += ["", f"**{summary['pass']} pass of {summary['run_on_cpu']} that run on CPU "
              f"({summary['pass_rate']:.1%})**; {summary['architectures']} architectures: " +
              ", ".join(f"{k} {v}" for k, v in sorted(summary["counts"].items())) +
              f"; op calls: {summary['calls']['async']} async, {summary['calls']['sync']} sync, "
              f"{summary['calls']['copy']} CPU fallbacks", "",
              f"Tolerance (float32 on both devices): rtol={TOL['rtol']}, atol={TOL['atol']}.", "",
              "## Ops that did not run async", ""]
    notes = []
    for r in results:
        for op, c in sorted(r.get("not_async", {}).items()):
            why = "; ".join(f"{m}: {w}" for m, ws in c.get("reasons", {}).items() for w in ws)
            lines.append(f"- {r['arch']}: {op} sync {c['sync']} copy {c['copy']} ({_cell(why)[:200]})")
        c = r.get("compile") or {}
        if r["steps"].get("static") == "pass" and (c.get("graphs_compiled") != 1 or c.get("graph_breaks")):
            notes.append(f"- {r['arch']}: {c.get('graphs_compiled')} graphs, {c.get('recompiles')} recompiles, "
                         f"{c.get('graph_breaks')} graph breaks {_cell(c.get('first_recompile', ''))}")
    lines += ["", "## Static-cache decode steps not compiled as one graph (0: transformers ran them eagerly)", ""]
    lines += notes
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out_dir, "hf-matrix.md"), "w") as f:
        f.write("# Hugging Face CausalLM architectures on neuron against CPU\n\n" + text)
    return summary, text


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--archs", help="comma-separated model types (default: all)")
    p.add_argument("--sample", type=int, help="a fixed sample of N architectures (CI)")
    p.add_argument("--timeout", type=float, default=300, help="seconds per architecture")
    p.add_argument("--out", default="conformance-report/hf-matrix")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args.archs.split(","))
        return
    archs = all_archs()
    if args.archs:
        unknown = set(args.archs.split(",")) - set(archs)
        if unknown:
            p.error(f"not CausalLM architectures: {', '.join(sorted(unknown))}")
        archs = [a for a in archs if a in args.archs.split(",")]
    if args.sample:
        archs = sample(archs, args.sample)
    os.makedirs(args.out, exist_ok=True)
    results = run(archs, args.timeout, args.out)
    summary, text = write_report(results, args.out)
    print(text)
    print(f"report: {args.out}/hf-matrix.md, {args.out}/hf-matrix.json")


if __name__ == "__main__":
    main()
