"""What torch.compile compiled for neuron, and why: torch_neuronx.compile_stats(). Both backends
count (the "neuron" backend and Inductor on neuron tensors): every graph compile, its cache hit or
miss, recompiles and their reasons, graph breaks, functions Dynamo's recompile limit sent back to
eager, and the wall time of every compile of a frame with a neuron graph (Dynamo's trace,
AOTAutograd and the backend)."""
from __future__ import annotations

import hashlib
import logging
import sys
import threading
import time
import warnings

from .. import _C

_lock = threading.Lock()


def _fresh() -> dict:
    return {"graphs_compiled": 0, "programs": 0, "cache_hits": 0, "cache_misses": 0, "recompiles": 0,
            "recompile_reasons": [], "graph_breaks": 0, "recompile_limit_hits": 0, "compile_seconds": 0.0,
            "nki_traces": 0, "nki_cache_hits": 0, "graph_fallbacks": {}, "graph_recaptures": 0}


_stats = _fresh()
_graph_break_baseline = 0
_warned_fallbacks: set = set()  # once per process, not per reset: a warning says what to look at
# The frame compile Dynamo is running on this thread: when it started, whether it compiled a neuron
# graph (its time is neuron's), and whether this process has compiled any neuron graph yet.
_frame = threading.local()
_any_neuron_compile = False


def _frame_started(_args) -> None:
    _frame.start, _frame.neuron = time.perf_counter(), False


def _frame_ended(_args) -> None:
    start = getattr(_frame, "start", None)
    if start is not None and _frame.neuron:
        with _lock:
            _stats["compile_seconds"] += time.perf_counter() - start
    _frame.start = None


class _RecompileLimit(logging.Filter):
    """Dynamo says it stopped compiling a function only in its log ("torch._dynamo hit
    config.recompile_limit"): counted, and said again as a warning of what to do on neuron."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _any_neuron_compile and str(record.msg).startswith("torch._dynamo hit config."):
            with _lock:
                _stats["recompile_limit_hits"] += 1
            function = record.args[2] if isinstance(record.args, tuple) and len(record.args) > 2 else "a function"
            warnings.warn(f"neuron: Dynamo hit its recompile limit for {function} and runs it eagerly from now on. "
                          "For inputs whose lengths vary, keep automatic dynamic shapes on (the default) or "
                          "torch._dynamo.mark_dynamic the varying dimension: neuron builds a static program per shape "
                          "from one trace. Otherwise raise torch._dynamo.config.recompile_limit. Counted in "
                          "torch_neuronx.compile_stats()['recompile_limit_hits'].", stacklevel=2)
        return True


def watch_dynamo(_module=None) -> None:
    """Times Dynamo's frame compiles and watches its recompile limit, from when Dynamo loads (and
    again after each torch._dynamo.reset(), which clears Dynamo's compile callbacks)."""
    from torch._dynamo.callback import callback_handler

    from .. import _patches

    if _frame_started not in callback_handler.start_callbacks:
        callback_handler.register_start_callback(_frame_started)
        callback_handler.register_end_callback(_frame_ended)
    logger = logging.getLogger("torch._dynamo.convert_frame")
    if not any(isinstance(f, _RecompileLimit) for f in logger.filters):
        logger.addFilter(_RecompileLimit())
    _patches.dynamo_reset_calls_again(watch_dynamo)


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
    return area in _C._log_areas()


def begin_compile(gm, graph: bool = True) -> dict:
    """Notes a neuron graph entering Inductor: its id, size, and whether Dynamo recompiles its frame.
    `graph` is False for a program specialized from a symbolic graph, which is not a new Dynamo graph."""
    global _any_neuron_compile
    from torch._guards import CompileContext

    _any_neuron_compile = True
    _frame.neuron = True
    record = {"graph": hashlib.sha256(gm.code.encode()).hexdigest()[:12],
              "nodes": sum(1 for n in gm.graph.nodes if n.op == "call_function"),
              "cache": _cache_counts(), "recompile": None, "start": time.perf_counter(),
              "in_frame": getattr(_frame, "start", None) is not None, "new_graph": graph}
    compile_id = CompileContext.current_compile_id()
    if compile_id is not None and (compile_id.frame_compile_id or 0) > 0:
        reason = None
        try:
            from torch._dynamo.utils import get_metrics_context

            reason = getattr(get_metrics_context(), "_metrics", {}).get("recompile_reason")
        except Exception:  # noqa: BLE001  (an internal of Dynamo's; the count stands without it)
            pass
        # the guard that failed, without the user stack trace Dynamo appends (TORCH_LOGS=recompiles has it)
        record["recompile"] = (reason.split("\nUser stack trace:")[0] if reason
                               else "unknown (set TORCH_LOGS=recompiles)")
    return record


def graph_received(gm) -> None:
    """A symbolic graph reached the neuron backend: a Dynamo graph (and maybe a recompile), whose
    static programs are counted as they compile."""
    _finish(begin_compile(gm), program=False)


def end_compile(record: dict) -> None:
    _finish(record, program=True)


def _finish(record: dict, program: bool) -> None:
    seconds = time.perf_counter() - record["start"]
    hits0, misses0 = record["cache"]
    hits1, misses1 = _cache_counts()
    hit = hits1 > hits0 and misses1 == misses0
    with _lock:
        _stats["graphs_compiled"] += record["new_graph"]
        _stats["programs"] += program
        if program:
            _stats["cache_hits" if hit else "cache_misses"] += 1
        if not record["in_frame"]:  # compile_fx called directly; a frame's time is counted whole when it ends
            _stats["compile_seconds"] += seconds
        if record["recompile"] is not None:
            _stats["recompiles"] += 1
            _stats["recompile_reasons"].append(record["recompile"])
    if _logging("compile"):
        how = ("a static program: cache hit" if hit else "a static program: compiled") if program else \
            "symbolic: a static program per input signature"
        what = "graph" if record["new_graph"] else "specialized graph"
        extra = f", recompile: {record['recompile']}" if record["recompile"] else ""
        print(f"neuron compile: {what} {record['graph']} ({record['nodes']} nodes): {how} in {seconds:.2f} s{extra}",
              file=sys.stderr)


def count_nki_call(traced: bool) -> None:
    """An NKI kernel call: traced anew (a new signature), or its program taken from the cache."""
    with _lock:
        _stats["nki_traces" if traced else "nki_cache_hits"] += 1


def graph_fallback(reason: str) -> None:
    """A mode="reduce-overhead" call that ran its program without a graph (compile/graphed.py)."""
    with _lock:
        _stats["graph_fallbacks"][reason] = _stats["graph_fallbacks"].get(reason, 0) + 1
        first = reason not in _warned_fallbacks
        _warned_fallbacks.add(reason)
    if first:
        warnings.warn(f"neuron: mode='reduce-overhead' runs a program without a graph: {reason}. Counted in "
                      "torch_neuronx.compile_stats()['graph_fallbacks'].", stacklevel=3)


def graph_recaptured() -> None:
    """A parameter or static buffer of a graphed program moved, so its graph was captured again."""
    with _lock:
        _stats["graph_recaptures"] += 1


def compile_stats() -> dict:
    """{"graphs_compiled", "programs", "cache_hits", "cache_misses", "recompiles", "recompile_reasons",
    "graph_breaks", "recompile_limit_hits", "compile_seconds", "nki_traces", "nki_cache_hits",
    "graph_fallbacks", "graph_recaptures", "concat_segments_built", "concat_segments_hit",
    "concat_ops"} since the process started or the last reset.
    graphs_compiled counts the graphs Dynamo traced; programs the static programs built from them
    (one per graph, or one per input signature of a symbolic graph); cache_hits and cache_misses are
    per program. nki_traces counts NKI kernels traced into a program (once per signature),
    nki_cache_hits the calls that reused one. graph_fallbacks maps each reason a
    mode="reduce-overhead" call ran without a graph to its calls; graph_recaptures counts graphs
    captured again because a parameter moved (compile/graphed.py). The concat_ counts are eager op
    concatenation's (torch_neuronx.set_concatenation): segments of two or more ops seen for the first
    time (run op by op), segments seen again (each run as one queue task), and the ops those ran."""
    with _lock:
        out = dict(_stats, recompile_reasons=list(_stats["recompile_reasons"]),
                   graph_fallbacks=dict(_stats["graph_fallbacks"]))
    out["graph_breaks"] = _graph_breaks() - _graph_break_baseline if "torch._dynamo" in sys.modules else 0
    out["concat_segments_built"], out["concat_segments_hit"], out["concat_ops"] = _C._concat_stats()
    return out


def reset_compile_stats() -> None:
    global _stats, _graph_break_baseline
    with _lock:
        _stats = _fresh()
        _graph_break_baseline = _graph_breaks() if "torch._dynamo" in sys.modules else 0
    _C._reset_concat_stats()
