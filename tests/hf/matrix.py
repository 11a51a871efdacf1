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
  python tests/hf/matrix.py [--archs llama,gpt2] [--sample 12] [--timeout 300] [--out DIR]
"""
from __future__ import annotations

import argparse
import collections
import copy
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

from tiny_configs import VOCAB, config_and_model_class, tiny_config  # noqa: E402


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
        worker = [sys.executable, os.path.abspath(__file__), "--worker", "--archs", ",".join(archs)]
        proc = subprocess.Popen(worker, stdout=subprocess.PIPE, stderr=err, env=env, start_new_session=True)
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
