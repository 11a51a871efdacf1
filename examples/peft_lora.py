"""LoRA fine-tuning with PEFT on neuron, then merge the adapters into the base weights.
`python examples/peft_lora.py`"""
import tempfile

import torch
import transformers
from peft import LoraConfig, get_peft_model

from _tiny import text_windows, tiny_llama_checkpoint

with tempfile.TemporaryDirectory() as work:
    path = tiny_llama_checkpoint(work)
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(path, device_map="neuron")
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"]))
    model.print_trainable_parameters()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    batch = transformers.default_data_collator(text_windows(tokenizer)[:8])
    for step in range(30):
        loss = model(**{k: v.to("neuron") for k, v in batch.items()}).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    print(f"loss after LoRA: {loss.item():.3f}")
    merged = model.merge_and_unload()
    print("merged model on", next(merged.parameters()).device)
