"""The main job: the Hugging Face flow on a neuron device, end to end, with no download.

1. Train a byte-level BPE tokenizer on a bundled text and build a small Llama-style model from a
   config (random weights); save both with save_pretrained.
2. Load them back: AutoModelForCausalLM.from_pretrained(path, device_map="neuron",
   dtype=torch.bfloat16).
3. Fine-tune with transformers' Trainer (bf16, its default fused AdamW) until the model has
   learnt the text.
4. Generate with a static KV cache: transformers compiles the decode step with torch.compile's
   "neuron" backend.
Every op runs on the device: CPU fallbacks are set to raise, and the run ends with the op counts
(async / sync / copy) and the device memory summary.
`python -m torch_neuronx.demo` (about a minute on the software NeuronCore; `--help` for options)
"""
from __future__ import annotations

import argparse
import os
import time

import torch

import torch_neuronx

TEXT = """\
It is a truth universally acknowledged, that a single man in possession of a good fortune, must be
in want of a wife. However little known the feelings or views of such a man may be on his first
entering a neighbourhood, this truth is so well fixed in the minds of the surrounding families,
that he is considered the rightful property of some one or other of their daughters.
To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer the slings
and arrows of outrageous fortune, or to take arms against a sea of troubles and by opposing end
them. To die, to sleep; no more; and by a sleep to say we end the heart-ache and the thousand
natural shocks that flesh is heir to.
"""

PROMPT = "To be, or not to be,"


def train_tokenizer(text: str, vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(text.splitlines(), trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>")


def build(path: str, vocab_size: int, seed: int) -> None:
    """Tokenizer and model from scratch, saved as a Hugging Face checkpoint."""
    import transformers

    tokenizer = train_tokenizer(TEXT, vocab_size)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=128, intermediate_size=384, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(seed)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(path)
    tokenizer.save_pretrained(path)


def dataset(tokenizer, context: int, copies: int):
    """Every window of the text, so the model can learn all of it."""
    ids = tokenizer(TEXT)["input_ids"]
    windows = [ids[i:i + context] for i in range(0, max(1, len(ids) - context), 4)]
    return [{"input_ids": w, "labels": w} for w in windows] * copies


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=150, help="Trainer steps")
    p.add_argument("--out", default=os.path.join(os.getcwd(), ".demo"), help="where the checkpoints go")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--new-tokens", type=int, default=48)
    args = p.parse_args(argv)

    import transformers
    from transformers import Trainer, TrainingArguments

    transformers.logging.set_verbosity_error()
    start = time.perf_counter()
    base = os.path.join(args.out, "base")
    print(f"1. tokenizer and Llama-style model from a config -> {base}")
    build(base, vocab_size=400, seed=args.seed)

    print("2. from_pretrained(device_map='neuron', dtype=torch.bfloat16)")
    tokenizer = transformers.AutoTokenizer.from_pretrained(base)
    model = transformers.AutoModelForCausalLM.from_pretrained(base, device_map="neuron", dtype=torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    print(f"   {params / 1e6:.2f}M parameters on {next(model.parameters()).device} "
          f"({torch.neuron.get_device_name()}), {torch.neuron.memory_allocated() / 2**20:.1f} MiB of device memory")

    torch_neuronx.reset_op_counts()
    print(f"3. Trainer fine-tuning: bf16, default optimizer, {args.steps} steps")
    targs = TrainingArguments(output_dir=os.path.join(args.out, "trainer"), max_steps=args.steps,
                              per_device_train_batch_size=8, learning_rate=3e-3, lr_scheduler_type="constant",
                              warmup_steps=10, bf16=True, logging_steps=min(25, args.steps), save_strategy="no",
                              report_to=[],
                              seed=args.seed, disable_tqdm=False)
    trainer = Trainer(model=model, args=targs, train_dataset=dataset(tokenizer, context=64, copies=8),
                      data_collator=transformers.default_data_collator)
    t0 = time.perf_counter()
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    tokens = args.steps * 8 * 64
    print(f"   loss {losses[0]:.3f} -> {losses[-1]:.3f}; {tokens / (time.perf_counter() - t0):,.0f} tokens/s")

    print("4. generate(cache_implementation='static'): the decode step is compiled with backend='neuron'")
    model.eval()
    prompt = tokenizer(PROMPT, return_tensors="pt").to("neuron")
    t0 = time.perf_counter()
    out = model.generate(**prompt, max_new_tokens=args.new_tokens, do_sample=False, cache_implementation="static")
    text = tokenizer.decode(out[0], skip_special_tokens=True)
    stats = torch_neuronx.compile_stats()
    print(f"   {args.new_tokens} tokens in {time.perf_counter() - t0:.1f} s (compiled {stats['graphs_compiled']} "
          f"graph(s): {stats['cache_hits']} from the disk cache, {stats['recompiles']} recompiles)")
    print(f"\n   {text!r}\n")

    torch.neuron.synchronize()
    counts = torch_neuronx.op_counts(reasons=True)
    total = {m: sum(c[m] for c in counts.values()) for m in ("async", "sync", "copy")}
    print(f"op calls on the device: {total['async']} async, {total['sync']} sync, {total['copy']} CPU fallbacks "
          f"(copies), over {len(counts)} ops")
    for name, c in counts.items():
        if c["sync"] or c["copy"]:
            print(f"  {name}: {c}")
    print(torch.neuron.memory_summary(abbreviated=True))
    from . import report  # the same training step on Trainium, from the cost model

    r = report.assess(base, batch=8, seq=64, train=True)
    est = r["estimate"]["trn2"]
    print(f"Trainium estimate (python -m torch_neuronx.report {base} --batch 8 --seq 64 --train): a training step "
          f"on {est['devices']} trn2 logical core(s) in {est['step_seconds'] * 1e3:.3f} ms, "
          f"{est['tokens_per_second']:,.0f} tokens/s (cost model, not a measurement)")
    print(f"done in {time.perf_counter() - start:.0f} s")
    return losses[-1], counts, text


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is built here; nothing is downloaded
    os.environ.setdefault("TORCH_NEURONX_FALLBACK", "error")  # zero CPU fallbacks, or the demo stops
    main()
