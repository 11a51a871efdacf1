"""The report's layouts: how a model is split over logical cores (tensor parallel within a group,
data parallel or FSDP across groups), what a step costs in each, and which term bounds it.

AWS's practice (NxD Training and Inference guides): LNC=2 on Trn2/Trn3, tensor parallelism within
a chip first and over the instance's NeuronLink torus when the model needs it, data parallelism
(FSDP when the states do not fit) across the rest, EFA only between instances. Every layout here is
TP x DP with TP a power of two of at most one instance; the collectives are priced by
cost_constants.collective_seconds, each in the topology its ranks span.
"""
from __future__ import annotations

from . import cost_constants
from .cost_model import Estimate, roofline


def _where(ranks: int, profile: str) -> str:
    where = cost_constants.topology(ranks, cost_constants.LNC[profile], profile)
    return {"chip": "within a chip", "neuronlink": "over NeuronLink", "efa": "over EFA"}[where]


def describe(tp: int, dp: int, fsdp: bool, profile: str = "trn2") -> str:
    text = f"TP={tp} ({_where(tp, profile)})" if tp > 1 else "one core per replica"
    if dp > 1:
        text += f" x {'FSDP' if fsdp else 'DP'}={dp} ({_where(tp * dp, profile)})"
    return text + f", LNC={cost_constants.LNC[profile]}"


def _pass(est: Estimate, tp: int, profile: str, tokens: int, passes: int, cfg: dict) -> dict:
    """One forward (passes=1) or forward+backward (2) on TP=tp, by term, in seconds."""
    parts = est.parts()
    terms = {"compute": (parts["compute"] / tp + parts["attention"] / min(tp, cfg["heads"])) * 1e-6,
             "HBM": (parts["memory"] / tp + parts["kv"] / min(tp, cfg["kv_heads"])) * 1e-6,
             "collectives": parts["collective"] * 1e-6, "latency": parts["fixed"] * 1e-6}
    # what the fitted constants multiply (benchmarks/cost_model_vs_aws.py --fit reprices with them)
    counts = {"ops": parts["ops"], "steps": 1, "ring_bytes": 0.0, "requests": 0, "hops": 0}
    if tp > 1:  # two all-reduces of the hidden state per layer and pass
        lnc = cost_constants.LNC[profile]
        n = 2 * passes * cfg["layers"]
        size = cfg["batch"] * tokens * cfg["hidden"] * cfg["item"]
        seconds, _ = cost_constants.collective_seconds("all_reduce", size, tp, profile, lnc)
        latency, _ = cost_constants.collective_seconds("all_reduce", 0, tp, profile, lnc)
        terms["collectives"] += n * (seconds - latency)
        terms["latency"] += n * (latency + roofline(profile).fixed_us * 1e-6)  # each a kernel too
        counts["ops"] += n
        counts["hops"] = n * cost_constants.hops("all_reduce", tp, profile, lnc).get("neuronlink", 0)
        if cost_constants.topology(tp, lnc, profile) == "neuronlink":
            counts["ring_bytes"] = n * 2 * (tp - 1) / tp * size
    terms["latency"] += cost_constants.value(profile, "step_overhead_us") * 1e-6
    if cfg["generate"] and tokens > 1:  # a served request's first step: its admission too
        terms["latency"] += cost_constants.value(profile, "request_overhead_us") * 1e-6
        counts["requests"] = 1
    return {"terms": terms, "counts": counts}


def price(profile: str, tp: int, dp: int, step: Estimate, decode: Estimate | None, cfg: dict) -> dict:
    """A layout's step: the prompt or training step, then `generate` decode tokens; with data
    parallel training, the gradients' reduce-scatter and the weights' all-gather (FSDP) or the
    gradients' all-reduce (DP) among the dp replicas."""
    train, generate = cfg["train"], cfg["generate"]
    first = _pass(step, tp, profile, cfg["seq"], 2 if train else 1, cfg)
    terms = dict(first["terms"])
    if train and dp > 1:
        shard = cfg["params"] * cfg["item"] / tp
        lnc = cost_constants.LNC[profile]
        # a replica's rank talks to the same rank of each other replica: tp cores apart
        if cfg["fsdp"]:
            grads = cost_constants.collective_seconds("reduce_scatter", shard, dp, profile, lnc, tp)[0]
            weights = 2 * cost_constants.collective_seconds("all_gather", shard, dp, profile, lnc, tp)[0]
        else:
            grads, weights = cost_constants.collective_seconds("all_reduce", shard, dp, profile, lnc, tp)[0], 0.0
        terms["collectives"] += grads + weights
    token = None
    if generate and decode is not None:
        one = _pass(decode, tp, profile, 1, 1, cfg)
        token = sum(one["terms"].values())
        for k, v in one["terms"].items():
            terms[k] += generate * v
    seconds = sum(terms.values())
    tokens = dp * cfg["batch"] * (generate if generate else cfg["seq"])
    out = {"layout": describe(tp, dp, cfg["fsdp"] and train, profile), "tp": tp, "dp": dp, "devices": tp * dp,
           "step_seconds": seconds, "tokens_per_second": tokens / seconds,
           "bound": max(terms, key=terms.get), "terms": terms, "first_seconds": sum(first["terms"].values()),
           "counts": {"prompt": first["counts"]}}
    if token is not None:
        out["token_seconds"] = token
        out["counts"]["token"] = one["counts"]
    return out


def candidates(devices: int, fits, profile: str = "trn2") -> list:
    """TP x DP splits of `devices` logical cores whose memory per core `fits(tp, dp)`: TP up to one
    instance, the rest data parallel (FSDP shards the training states across it too)."""
    out, tp = [], 1
    while tp <= min(devices, cost_constants.instance_cores(profile)):
        if fits(tp, devices // tp):
            out.append((tp, devices // tp))
        tp *= 2
    return out


def fits(memory: dict, capacity: float, train: bool):
    """Whether a TP x DP layout fits `capacity` bytes per logical core: the training states shard
    over all its cores (FSDP), the weights of an inference replica over its TP group, activations
    and the KV cache over the TP group."""
    def check(tp: int, dp: int) -> bool:
        states = memory["weights"] + memory["gradients"] + memory["optimizer_states"]
        per_core = states / (tp * dp if train else tp) + (memory["activations"] + memory["kv_cache"]) / tp
        return per_core <= 0.9 * capacity
    return check
