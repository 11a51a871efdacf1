"""What the examples share: a tiny Llama built from a config and a tokenizer trained on a few
lines, saved as a Hugging Face checkpoint (nothing is downloaded)."""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

from torch_neuronx.demo import TEXT, train_tokenizer  # noqa: E402


def tiny_llama_checkpoint(path: str) -> str:
    tokenizer = train_tokenizer(TEXT, vocab_size=300)
    config = transformers.LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=128, pad_token_id=tokenizer.pad_token_id,
                                      bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def text_windows(tokenizer, context: int = 32):
    ids = tokenizer(TEXT)["input_ids"]
    return [{"input_ids": ids[i:i + context], "labels": ids[i:i + context]}
            for i in range(0, len(ids) - context, 4)]
