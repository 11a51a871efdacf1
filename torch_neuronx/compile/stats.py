"""What the neuron backend compiled, and why: torch_neuronx.compile_stats()."""
from __future__ import annotations

import hashlib
import sys
import threading

from .. import _C

_lock = threading.Lock()


def _fresh() -> dict:
    return {"graphs_compiled": 0, "cache_hits": 0, "cache_misses": 0, "recompiles": 0, "recompile_reasons": [],
            "graph_breaks": 0, "compile_seconds": 0.0}


_stats = _fresh()
_graph_break_baseline = 0


def _counters():
    from torch._dynamo.utils import counters

    return counters


def _cache_counts() -> tuple:
    # A program is a cache hit when every graph of it was loaded rather than generated and compiled.
    c = _counters()
    return c["inductor"]["fxgraph_cache_hit"], c["inductor"]["fxgraph_cache_miss"]


def _graph_breaks() -> int:
    return sum(_counters()["graph_break"].values())


def _logging(area: str) -> bool:
    return area in (_C._config_text("TORCH_NEURONX_LOG") or "").split(",")


def begin_compile(gm) -> dict:
    """Notes a graph entering the backend: its id, size, and whether Dynamo recompiles its frame."""
    from torch._guards import CompileContext

    record = {"graph": hashlib.sha256(gm.code.encode()).hexdigest()[:12],
              "nodes": sum(1 for n in gm.graph.nodes if n.op == "call_function"),
              "cache": _cache_counts(), "recompile": None}
    compile_id = CompileContext.current_compile_id()
    if compile_id is not None and (compile_id.frame_compile_id or 0) > 0:
        reason = None
        try:
            from torch._dynamo.utils import get_metrics_context

            reason = getattr(get_metrics_context(), "_metrics", {}).get("recompile_reason")
        except Exception:  # noqa: BLE001  (an internal of Dynamo's; the count stands without it)
            pass
        record["recompile"] = reason or "unknown (set TORCH_LOGS=recompiles)"
    return record


def end_compile(record: dict, seconds: float) -> None:
    hits0, misses0 = record["cache"]
    hits1, misses1 = _cache_counts()
    hit = hits1 > hits0 and misses1 == misses0
    with _lock:
        _stats["graphs_compiled"] += 1
        _stats["compile_seconds"] += seconds
        _stats["cache_hits" if hit else "cache_misses"] += 1
        if record["recompile"] is not None:
            _stats["recompiles"] += 1
            _stats["recompile_reasons"].append(record["recompile"])
    if _logging("compile"):
        how = "cache hit" if hit else "compiled"
        extra = f", recompile: {record['recompile']}" if record["recompile"] else ""
        print(f"neuron compile: graph {record['graph']} ({record['nodes']} nodes): {how} in {seconds:.2f} s{extra}",
              file=sys.stderr)


def compile_stats() -> dict:
    """{"graphs_compiled", "cache_hits", "cache_misses", "recompiles", "recompile_reasons",
    "graph_breaks", "compile_seconds"} since the process started or the last reset."""
    with _lock:
        out = dict(_stats, recompile_reasons=list(_stats["recompile_reasons"]))
    out["graph_breaks"] = _graph_breaks() - _graph_break_baseline if "torch._dynamo" in sys.modules else 0
    return out


def reset_compile_stats() -> None:
    global _stats, _graph_break_baseline
    with _lock:
        _stats = _fresh()
        _graph_break_baseline = _graph_breaks() if "torch._dynamo" in sys.modules else 0
