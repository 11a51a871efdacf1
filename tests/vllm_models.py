"""The tiny random models tests/test_vllm.py serves with vLLM and compares with Hugging Face on the
CPU: one config per architecture (or per variant vLLM implements separately), 2 layers, hidden
size 128, the tests' own 512-token tokenizer."""

import torch
import transformers

T = transformers

CHAT_TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"

# The architectures test_greedy_batch_of_more_architectures_equals_hf_cpu runs, one engine after
# another in one interpreter.
MORE_ARCHS = [
    "cohere", "falcon", "falcon-parallel", "gemma", "gemma2", "gemma3", "glm", "gpt2", "gpt-neox", "gptj", "granite",
    "nemotron", "olmo", "olmo2", "opt", "phi", "phi3", "qwen3", "stablelm", "starcoder2",
]


def configs(tokenizer) -> dict:
    ids = dict(pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
               eos_token_id=tokenizer.eos_token_id)
    vocab = len(tokenizer)
    common = dict(vocab_size=vocab, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, **ids)
    # At the default 0.02 most of these models repeat one token (or the prompt's last) for all 12
    # steps, which checks little; at 0.2 their greedy tokens vary.
    wide = dict(initializer_range=0.2)
    return {
        "llama": T.LlamaConfig(**common),
        "qwen2": T.Qwen2Config(**common, tie_word_embeddings=True),
        # A window shorter than the prompts: every layer attends to its last 8 tokens only.
        "mistral-window": T.MistralConfig(**common, sliding_window=8),
        # MoE through vLLM's fused-MoE layer: 4 experts, 2 per token.
        "mixtral": T.MixtralConfig(**common, num_local_experts=4, num_experts_per_tok=2),
        "qwen3-moe": T.Qwen3MoeConfig(**common, num_experts=4, num_experts_per_tok=2, head_dim=32,
                                      moe_intermediate_size=64, norm_topk_prob=True),
        # A shared expert beside 8 routed ones, whose top-2 weights are not renormalised.
        "qwen2-moe": T.Qwen2MoeConfig(**common, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=64,
                                      shared_expert_intermediate_size=128, norm_topk_prob=False),
        # DeepSeek-V3's routing as GLM-4.5 uses it: sigmoid scores, 8 experts in 4 groups of which each
        # token keeps 2, a score-correction bias (random: see save), a routed scaling factor, a shared
        # expert, and a dense first layer.
        "glm4-moe": T.Glm4MoeConfig(**common, head_dim=32, n_routed_experts=8, num_experts_per_tok=2, n_group=4,
                                    topk_group=2, routed_scaling_factor=2.5, n_shared_experts=1,
                                    moe_intermediate_size=64, first_k_dense_replace=1, norm_topk_prob=True),
        # ALiBi instead of positions; a wider initialisation keeps its greedy tokens from repeating one.
        "bloom": T.BloomConfig(vocab_size=vocab, hidden_size=128, n_layer=2, n_head=4, **wide, **ids),
        # Gemma-2's attention soft-capping, with a cap small enough to bend this model's scores (the
        # default 50 leaves a randomly initialised model's unchanged), and its default final cap.
        "gemma2-softcap": T.Gemma2Config(**common, head_dim=32, attn_logit_softcapping=0.02),
        "cohere": T.CohereConfig(**common, **wide),
        # Falcon's two layouts, separate paths in vLLM: grouped KV heads with a norm for each
        # branch (new_decoder_architecture), and the 7B's one shared KV head with parallel attention.
        "falcon": T.FalconConfig(vocab_size=vocab, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                                 num_kv_heads=2, new_decoder_architecture=True, max_position_embeddings=256,
                                 **wide, **ids),
        "falcon-parallel": T.FalconConfig(vocab_size=vocab, hidden_size=128, num_hidden_layers=2,
                                          num_attention_heads=4, new_decoder_architecture=False,
                                          parallel_attn=True, multi_query=True, max_position_embeddings=256,
                                          initializer_range=0.07, **ids),
        "gemma": T.GemmaConfig(**common, head_dim=32, **wide),
        # Without soft-capping; vLLM's Gemma-2 always ties the embeddings, and tied to embeddings
        # scaled by sqrt(hidden) a wider initialisation only repeats the prompt's last token.
        "gemma2": T.Gemma2Config(**common, head_dim=32, attn_logit_softcapping=None, final_logit_softcapping=None),
        "gemma3": T.Gemma3TextConfig(**common, head_dim=32),
        "glm": T.GlmConfig(**common, head_dim=32, **wide),
        "gpt2": T.GPT2Config(vocab_size=vocab, n_embd=128, n_layer=2, n_head=4, n_positions=256, **wide, **ids),
        "gpt-neox": T.GPTNeoXConfig(vocab_size=vocab, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                    num_attention_heads=4, max_position_embeddings=256, **wide, **ids),
        "gptj": T.GPTJConfig(vocab_size=vocab, n_embd=128, n_layer=2, n_head=4, rotary_dim=16, n_positions=256,
                             **wide, **ids),
        # Granite's four scales away from 1 (the attention one is the score scale the backend takes).
        "granite": T.GraniteConfig(**common, embedding_multiplier=12.0, residual_multiplier=0.22,
                                   attention_multiplier=0.05, logits_scaling=8.0, **wide),
        "nemotron": T.NemotronConfig(**common, **wide),
        "olmo": T.OlmoConfig(**common, **wide),
        "olmo2": T.Olmo2Config(**common, **wide),
        "opt": T.OPTConfig(vocab_size=vocab, hidden_size=128, ffn_dim=256, num_hidden_layers=2, num_attention_heads=4,
                           word_embed_proj_dim=128, max_position_embeddings=256, init_std=0.2, **ids),
        # vLLM's Phi has as many KV heads as query heads and an MLP 4 * hidden wide (it reads
        # n_inner, which PhiConfig lacks, not intermediate_size).
        "phi": T.PhiConfig(**{**common, "num_key_value_heads": 4, "intermediate_size": 512}, **wide),
        "phi3": T.Phi3Config(**common, **wide),
        "qwen3": T.Qwen3Config(**common, head_dim=32, **wide),
        "stablelm": T.StableLmConfig(**common, **wide),
        "starcoder2": T.Starcoder2Config(**common, **wide),
    }


def save(path, config, tokenizer):
    torch.manual_seed(0)
    model = T.AutoModelForCausalLM.from_config(config)
    for name, bias in model.named_buffers():
        if name.endswith("e_score_correction_bias"):  # zeros in a fresh model: the routing would ignore it
            bias.copy_(torch.randn(bias.shape) * 0.5)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)


def build(root) -> dict:
    """Every model of configs() saved under `root` with the tests' tokenizer: name -> folder."""
    from torch_neuronx import demo

    tokenizer = demo.train_tokenizer(demo.TEXT, 512)
    tokenizer.chat_template = CHAT_TEMPLATE
    paths = {}
    for name, config in configs(tokenizer).items():
        paths[name] = str(root / name)
        save(paths[name], config, tokenizer)
    return paths
