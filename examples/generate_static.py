"""Greedy generation with a static KV cache: transformers compiles the decode step with
torch.compile's "neuron" backend, once. The model is untrained here (its text is noise); see
`make demo` for one that learns a text first. `python examples/generate_static.py`"""
import tempfile

import torch
import transformers

import torch_neuronx
from _tiny import tiny_llama_checkpoint

with tempfile.TemporaryDirectory() as work:
    path = tiny_llama_checkpoint(work)
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(path, device_map="neuron", dtype=torch.bfloat16)
    for prompt in ("To be, or not", "It is a truth"):
        ids = tokenizer(prompt, return_tensors="pt").to("neuron")
        out = model.generate(**ids, max_new_tokens=16, do_sample=False, cache_implementation="static")
        print(repr(tokenizer.decode(out[0], skip_special_tokens=True)))
    print(torch_neuronx.compile_stats())
