"""Tiny configs for every transformers CausalLM architecture (tests/hf/matrix.py): the config
class's defaults with every size-like field shrunk, sub-configs too, plus the few fields an
architecture needs set by hand."""
from __future__ import annotations

import dataclasses

import transformers
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

H, HEADS, KV, HEAD_DIM, FF, LAYERS, VOCAB, POS = 64, 4, 2, 16, 128, 2, 256, 128
EXPERTS, TOPK, MOE_FF = 4, 2, 32
LAYER_FIELDS = ("num_hidden_layers n_layer n_layers num_layers decoder_layers encoder_layers num_layers_per_stack "
                "depth num_blocks")


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
    for n_heads, d_head, expand in (("mamba_n_heads", "mamba_d_head", "mamba_expand"),
                                    ("num_heads", "head_dim", "expand"),
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
