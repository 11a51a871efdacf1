"""Supervised fine-tuning with TRL's SFTTrainer and its defaults on neuron.
`python examples/trl_sft.py`"""
import tempfile

import transformers
from datasets import Dataset
from trl import SFTConfig, SFTTrainer

from _tiny import tiny_llama_checkpoint
from torch_neuronx.demo import TEXT

with tempfile.TemporaryDirectory() as work:
    path = tiny_llama_checkpoint(f"{work}/model")
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(path)
    dataset = Dataset.from_dict({"text": [line for line in TEXT.splitlines() if line]})
    args = SFTConfig(output_dir=f"{work}/out", max_steps=20, per_device_train_batch_size=4, logging_steps=5,
                     report_to=[])
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
    trainer.train()
    print("trained on", trainer.args.device)
