"""A plain training loop with Accelerate: Accelerator() picks the neuron device by itself.
`python examples/accelerate_loop.py`"""
import tempfile

import torch
import transformers
from accelerate import Accelerator

from _tiny import text_windows, tiny_llama_checkpoint

with tempfile.TemporaryDirectory() as work:
    path = tiny_llama_checkpoint(work)
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(path)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)  # made before prepare(), as usual
    loader = torch.utils.data.DataLoader(text_windows(tokenizer), batch_size=8, shuffle=True,
                                         collate_fn=transformers.default_data_collator)
    accelerator = Accelerator(mixed_precision="bf16")
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for epoch in range(5):
        for batch in loader:
            loss = model(**batch).loss
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        print(f"epoch {epoch}: loss {loss.item():.3f} on {accelerator.device}")
