"""`python -m torch_neuronx.report MODEL_DIR`: will a Hugging Face causal LM run on Trainium, how much
memory does it need, and how fast would a training or generation step be on trn2 and trn3.

The model is built from its `config.json` on the meta device (no weights are read or allocated),
and one step runs there: its ATen ops give the plan of each on neuron (`explain`), the tensors the
backward keeps (activation memory) and the cost model's estimate (`cost_model.py`). Printed as
text, with `--json PATH` as JSON with the keys `will_run`, `fallbacks`, `sync_ops`,
`graph_breaks`, `parameters`, `memory`, `min_devices`, `estimate`, `layouts` (report_layouts.py: the
best TP x DP splits, each with its bounding term) and `breakdown` (µs per op name),
and with `--html PATH` as a page with the time by op and the memory bars (report_html.py).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys

import torch

from . import _C, cost_constants, report_layouts
from .cost_model import ROOFLINES, estimate

GIB = 1 << 30
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# Device memory of one logical core (LNC=2) and the largest instance's logical cores.
_CORE_HBM = {"trn2": 96 * GIB // 4, "trn3": 144 * GIB // 4, "trn1": 32 * GIB // 2}
_MAX_DEVICES = 64
_DEGREES = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # --devices: up to four instances (EFA between them)


class ReportError(Exception):
    """Bad input: the message says what, and the command exits non-zero."""


def _load(model_dir: str, dtype: torch.dtype):
    import transformers

    if not os.path.isfile(os.path.join(model_dir, "config.json")):
        raise ReportError(f"{model_dir}: no config.json (a Hugging Face model folder has one)")
    try:
        config = transformers.AutoConfig.from_pretrained(model_dir)
    except (ValueError, KeyError) as e:
        raise ReportError(f"{model_dir}: transformers cannot read this config: {e}") from None
    return config, _build(model_dir, config, dtype)


def _build(model_dir: str, config, dtype: torch.dtype):
    import transformers

    try:
        with torch.device("meta"):
            return transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    except ValueError as e:
        raise ReportError(f"{model_dir}: {type(config).__name__} is not a causal LM transformers knows: {e}") from None


def _pad_heads(config, tp: int | None):
    """`config` with its query heads padded to a multiple of `tp`, or None where they divide (or no
    padding keeps each KV head's group whole). Neuron's libraries shard attention by heads and pad
    them so (transformers-neuronx's decoder.py, NxD Inference's GQA sharding): Llama-2-13B's 40
    heads on TP=32 run as 64, two per core, and cost that."""
    heads = getattr(config, "num_attention_heads", None)
    if not tp or not heads or heads % tp == 0:
        return None
    kv = getattr(config, "num_key_value_heads", None) or heads
    target = -(-heads // tp) * tp
    if kv != heads and (target - heads) % kv:
        return None
    padded = copy.deepcopy(config)
    padded.head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    padded.num_attention_heads = target
    if kv == heads:  # multi-head attention: each query head keeps its own KV head
        padded.num_key_value_heads = target
    return padded


def _plans(op_names) -> tuple[list, list]:
    """The ops that would copy to the host (fallbacks) or wait for the device (sync), with why."""
    fallbacks, syncs = [], []
    for name in sorted(op_names):
        line = next((ln for ln in _C._explain(name).splitlines() if ln.startswith(name + ":")), "")
        mode = line[len(name) + 2:].split(" ", 1)[0].rstrip(",")
        if mode in ("copy", "sync"):
            (fallbacks if mode == "copy" else syncs).append({"op": name, "why": line.split(": ", 2)[-1][:200]})
    return fallbacks, syncs


def graph_breaks(fn, **kwargs) -> list:
    """Where torch.compile would break `fn(**kwargs)` into several graphs, and why (Dynamo's explain,
    on whatever device the inputs are; meta works)."""
    import torch._dynamo

    torch._dynamo.reset()
    try:
        explained = torch._dynamo.explain(fn)(**kwargs)
    except Exception as e:  # Dynamo could not trace it at all: the whole call would run eager
        first = (str(e).strip().splitlines() or [""])[0]
        return [{"reason": f"torch.compile cannot trace it: {type(e).__name__}: {first[:300]}", "where": ""}]
    finally:
        torch._dynamo.reset()
    return [{"reason": str(b.reason).strip()[:300],
             "where": f"{b.user_stack[-1].filename}:{b.user_stack[-1].lineno}" if b.user_stack else ""}
            for b in explained.break_reasons]


def assess(model_dir: str, batch: int = 1, seq: int = 512, train: bool = False, generate: int = 0,
           dtype: str = "bf16", devices: int | None = None, profiles=tuple(ROOFLINES),
           check_compile: bool = True, tp: int | None = None) -> dict:
    """The report of the model in `model_dir` (see the module's doc). `devices` estimates the speed on
    that many logical cores instead of the fewest that fit. The headline estimate is the fastest
    layout that fits them; `tp` prices that tensor-parallel degree instead (data parallel across the
    rest), as a deployment that has chosen its layout runs. `profiles` may name
    the validation-only trn1 (benchmarks/cost_model_vs_aws.py); `check_compile=False` skips the
    graph-break trace, the slow part, for callers that only want the estimates."""
    if dtype not in _DTYPES:
        raise ReportError(f"--dtype {dtype}: expected one of {', '.join(_DTYPES)}")
    if batch < 1 or seq < 1 or generate < 0:
        raise ReportError("--batch and --seq must be positive, --generate non-negative")
    if devices is not None and devices not in _DEGREES:
        raise ReportError(f"--devices {devices}: expected a power of two from 1 to {_DEGREES[-1]}")
    if tp is not None and (tp not in _DEGREES or devices is None or devices % tp):
        raise ReportError(f"--tp {tp}: expected a power of two that divides --devices ({devices})")
    if tp is not None and tp > min(cost_constants.instance_cores(p) for p in profiles):
        raise ReportError(f"--tp {tp}: more logical cores than one instance has (tensor parallelism stays "
                          "within an instance; EFA carries data parallelism)")
    torch_dtype = _DTYPES[dtype]
    config, model = _load(model_dir, torch_dtype)
    params = sum(p.numel() for p in model.parameters())
    own_heads = config.num_attention_heads
    shape = {"batch": batch, "seq": seq, "train": train, "generate": generate}
    traces = {}

    def traced(t: int) -> dict:
        """What TP=t runs: the model, with its heads padded to a multiple of t where t does not
        divide them (priced and stored as sharded: the padded heads compute on zeros), traced once
        per head count."""
        grown = _pad_heads(config, t)
        heads = own_heads if grown is None else grown.num_attention_heads
        if heads not in traces:
            traces[heads] = (_trace(config, model, torch_dtype, shape, profiles) if grown is None else
                             _trace(grown, _build(model_dir, grown, torch_dtype), torch_dtype, shape, profiles))
        return traces[heads]

    def layout(profile: str, t: int, d: int) -> dict:
        run = traced(t)
        out = report_layouts.price(profile, t, d, run["estimates"][profile], run["decodes"].get(profile), run["cfg"])
        if run["cfg"]["heads"] != own_heads:
            out["heads"] = f"{own_heads} query heads padded to {run['cfg']['heads']} for TP={t}"
            out["layout"] += f", heads padded {own_heads} -> {run['cfg']['heads']}"
        return out

    base = traced(tp or 1)  # the headline's model: as a pinned --tp runs it
    estimates, memory = base["estimates"], base["memory"]
    fallbacks, syncs = _plans({n for n in base["ops"] if n.startswith("aten::")})
    total = memory["total"]
    min_devices, result, layouts = {}, {}, {}
    for profile in estimates:
        min_devices[profile] = next((d for d in _DEGREES[:7] if total / d <= 0.9 * _CORE_HBM[profile]), None)
    # Both profiles at one count of logical cores (LNC=2: four per chip on Trn2 and Trn3), so they
    # compare at equal chips: `devices`, or the most either needs.
    fitting = [d for d in min_devices.values() if d is not None]
    degree = devices if devices is not None else (max(fitting) if fitting else None)
    for profile in estimates:
        if degree is None or min_devices[profile] is None or min_devices[profile] > degree:
            result[profile] = None
            continue
        cap = _CORE_HBM[profile]
        options = [layout(profile, t, d) for t, d in report_layouts.candidates(
            degree, lambda t, d: report_layouts.fits(traced(t)["memory"], cap, train)(t, d), profile)]
        layouts[profile] = sorted(options, key=lambda r: -r["tokens_per_second"])[:3]
        if tp is None and layouts[profile]:
            result[profile] = layouts[profile][0]
        else:  # a pinned degree, or no layout whose activations fit: all TP within an instance
            t = tp or min(degree, cost_constants.instance_cores(profile))
            result[profile] = layout(profile, t, degree // t)
    if all(v is None for v in min_devices.values()):
        raise ReportError(f"{total / GIB:,.1f} GiB does not fit {_MAX_DEVICES} logical cores of trn2 or trn3")
    if all(v is None for v in result.values()):
        raise ReportError(f"{total / GIB:,.1f} GiB does not fit {devices} logical cores of trn2 or trn3")
    per_chip = cost_constants.PHYSICAL_CORES_PER_CHIP[profiles[0]] // cost_constants.LNC[profiles[0]]
    unsupported = sorted(d for d in base["dtypes"] if d in ("torch.float64", "torch.complex64", "torch.complex128"))
    return {"model": os.path.abspath(model_dir), "architecture": type(model).__name__,
            "will_run": not fallbacks and not unsupported, "fallbacks": fallbacks, "sync_ops": syncs,
            "unsupported_dtypes": unsupported,
            # the forward as torch.compile(model) traces it (without a KV cache)
            "graph_breaks": (graph_breaks(model, input_ids=torch.zeros(batch, seq, dtype=torch.long, device="meta"),
                                          use_cache=False) if check_compile else None),
            "parameters": params, "memory": memory, "min_devices": min_devices, "estimate": result,
            "layouts": layouts,
            "breakdown": {p: [list(row) for row in (base["decodes"] or estimates)[p].by_op()[:30]]
                          for p in estimates},
            "assumptions": {"batch": batch, "seq": seq, "train": train, "generate": generate, "dtype": dtype,
                            "lnc": cost_constants.LNC[profiles[0]],
                            "heads": next((r["heads"] for r in result.values() if r and "heads" in r), None),
                            "optimizer": "AdamW, states in the parameter dtype" if train else None,
                            "compared at": f"{degree} logical cores on each profile "
                                           f"({(degree or 0) / per_chip:g} chips)"}}


def _trace(config, model, torch_dtype, shape: dict, profiles) -> dict:
    """One step of `model` (`shape`: batch, seq, train, generate) on the meta device, priced on each
    profile: its estimates, the decode token's, the ops and dtypes it ran, its memory and what
    report_layouts prices a layout from (`cfg`)."""
    batch, seq, train, generate = shape["batch"], shape["seq"], shape["train"], shape["generate"]
    stored = sum(p.numel() for p in model.parameters())
    item = torch_dtype.itemsize
    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    saved = [0]

    def pack(t):
        saved[0] += t.numel() * t.element_size()
        return t

    cache = [None]

    def step():
        if generate:  # a cache as long as the decode steps' mean context: the token below is their mean
            cache[0] = _static_cache(config, batch, seq + (generate + 1) // 2, torch_dtype)
            with torch.no_grad():  # the prompt, into a KV cache the decode steps below read
                model(input_ids=ids, past_key_values=cache[0], use_cache=cache[0] is not None)
        elif train:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
        else:
            with torch.no_grad():
                model(input_ids=ids)

    ops, dtypes = set(), set()
    estimates, decodes = {}, {}
    for profile in profiles:
        saved[0] = 0
        lnc = cost_constants.LNC[profile]
        est = estimate(step, profile=profile, lnc=lnc)
        estimates[profile] = est
        if generate:  # then one token per step, each reading every weight and the prompt's KV cache
            one = torch.zeros(batch, 1, dtype=torch.long, device="meta")
            position = torch.tensor([seq + (generate - 1) // 2], device="meta")
            at = {"past_key_values": cache[0], "cache_position": position} if cache[0] else {}
            with torch.no_grad():
                decodes[profile] = estimate(lambda: model(input_ids=one, **at), profile=profile, lnc=lnc)
        ops |= {o.name for o in est.ops}
        dtypes |= {o.dtype for o in est.ops}
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    memory = {"weights": stored * item, "gradients": stored * item if train else 0,
              "optimizer_states": 2 * stored * item if train else 0, "activations": saved[0] if train else 0,
              "kv_cache": (2 * config.num_hidden_layers * kv_heads * head_dim * (seq + generate) * batch * item
                           if generate else 0)}
    memory["total"] = sum(memory.values())
    cfg = {"layers": config.num_hidden_layers, "hidden": config.hidden_size, "item": item, "batch": batch,
           "seq": seq, "train": train, "generate": generate, "params": stored, "fsdp": train, "kv_heads": kv_heads,
           "heads": config.num_attention_heads}
    return {"estimates": estimates, "decodes": decodes, "ops": ops, "dtypes": dtypes, "memory": memory, "cfg": cfg}


def _static_cache(config, batch: int, length: int, dtype):
    """A static KV cache on the meta device (written in place, as Neuron's serving stacks keep it);
    None where the architecture has no static cache (then decode is priced without one)."""
    import transformers

    try:
        return transformers.StaticCache(config=config, max_cache_len=length)
    except Exception:
        return None


def _text(r: dict) -> str:
    lines = [f"{r['architecture']}: {r['parameters'] / 1e9:.2f}B parameters; will run on neuron: {r['will_run']}"]
    for key in ("fallbacks", "sync_ops"):
        if r[key]:
            lines.append(f"  {key}: " + ", ".join(e["op"] for e in r[key]))
    lines.append("  memory (GiB): " + ", ".join(f"{k} {v / GIB:.2f}" for k, v in r["memory"].items()))
    lines.append(f"  compared at {r['assumptions']['compared at']} (cost-model estimates, not measurements)")
    if r["assumptions"]["heads"]:
        lines.append(f"  {r['assumptions']['heads']}, as Neuron's libraries shard attention")
    for profile, est in r["estimate"].items():
        if est is None:
            lines.append(f"  {profile}: does not fit")
            continue
        lines.append(f"  {profile}: fits {r['min_devices'][profile]} logical core(s); "
                     f"on {est['devices']}, {est['layout']}: step {est['step_seconds']:.3f} s, "
                     f"{est['tokens_per_second']:,.0f} tokens/s, bound by {est['bound']}")
        for i, lay in enumerate(r["layouts"].get(profile, []), 1):
            lines.append(f"    layout {i}: {lay['layout']}: step {lay['step_seconds']:.3f} s, "
                         f"{lay['tokens_per_second']:,.0f} tokens/s, bound by {lay['bound']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m torch_neuronx.report", description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--train", action="store_true")
    p.add_argument("--generate", type=int, default=0, metavar="N")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--devices", type=int, metavar="N", help="logical cores to estimate the speed on; "
                   "default: the fewest that fit")
    p.add_argument("--tp", type=int, metavar="N", help="the tensor-parallel degree to price (data parallel across the "
                   "rest of --devices); default: the fastest layout that fits")
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--html", metavar="PATH", help="a page with the per-op time breakdown and the memory bars")
    args = p.parse_args(argv)
    try:
        r = assess(args.model_dir, args.batch, args.seq, args.train, args.generate, args.dtype, args.devices,
                   tp=args.tp)
    except ReportError as e:
        print(f"torch_neuronx.report: {e}", file=sys.stderr)
        return 2
    print(_text(r))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=2)
    if args.html:
        from . import report_html

        report_html.write(r, {p: _CORE_HBM[p] for p in ROOFLINES}, args.html)
    return 0


if __name__ == "__main__":
    sys.exit(main())
