"""Fine-tune a Hugging Face model on neuron with the stock Trainer: bf16, default optimizer,
gradient clipping, a checkpoint, then resume from it. `python examples/trainer_finetune.py`"""
import tempfile

import torch
import transformers
from transformers import Trainer, TrainingArguments

from _tiny import text_windows, tiny_llama_checkpoint

with tempfile.TemporaryDirectory() as work:
    path = tiny_llama_checkpoint(f"{work}/model")
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(path, device_map="neuron", dtype=torch.bfloat16)
    args = TrainingArguments(output_dir=f"{work}/out", max_steps=40, per_device_train_batch_size=8, bf16=True,
                             learning_rate=3e-3, max_grad_norm=1.0, save_steps=20, logging_steps=10, report_to=[])
    trainer = Trainer(model=model, args=args, train_dataset=text_windows(tokenizer),
                      data_collator=transformers.default_data_collator)
    trainer.train()
    trainer.train(resume_from_checkpoint=f"{work}/out/checkpoint-20")  # picks up at step 20
    print("device:", trainer.args.device, "optimizer:", args.optim.value)
