"""Conformance of neuron ops against CPU over PyTorch's OpInfo database.

For every OpInfo and every dtype of DTYPES the op supports on CPU, the op's sample inputs run on
CPU and on neuron and the outputs are compared (values, dtype, shape, and strides of dense
outputs) with assert_close's per-dtype defaults (where neuron takes an output's dtype from CUDA,
CUDA_DTYPES, the CPU's values in that dtype). The OpInfo's in-place variant (result and the
mutated input) and its out= variant (result and the out tensors, resized from empty) are
compared the same way; for float32 ops with autograd, the input gradients are compared too.
Every sample also runs the checks of semantics.py: again non-contiguous after warm-up, out= on
the CPU, out= resize warnings, variants the CPU rejects; and once per float32 op, the OpInfo's
error inputs and samples with one non-tensor argument changed, each right after a clean call
of the sample as it was.
Each (op, dtype) gets one status:
  pass       neuron matches CPU
  fail       a mismatch (the first one is recorded)
  error      neuron raised where CPU did not
  cpu-error  CPU itself raised on the samples: nothing to compare (not counted as a pass)
  crash      the process died (segfault, abort) while running it
and `fallback` says whether any CPU fallback (copy to host and back) was used.

Runs as a parent that starts a worker process and restarts it after a crash, so one crashing
op cannot end the run: `python tests/conformance/harness.py --mode ci|full --out DIR`.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import semantics

DTYPES = ["float32", "bfloat16", "float16", "int64", "int32", "int8", "uint8", "bool"]
CI_DTYPES = ["float32", "int64"]


def op_key(op) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


# ---- worker side -----------------------------------------------------------------------------


# Their values are random or uninitialised: only shape, dtype and device are compared.
VALUE_FREE_OPS = ("rand", "randn", "bernoulli", "cauchy", "exponential", "geometric", "log_normal", "normal", "uniform",
                  "multinomial", "randint", "rand_like", "randn_like", "randint_like", "nn.functional.dropout",
                  "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout", "nn.functional.rrelu",
                  "nn.functional.multi_head_attention_forward",  # its samples train with dropout
                  "nn.functional.dropout2d", "nn.functional.dropout3d", "nn.functional.fractional_max_pool2d",
                  "nn.functional.fractional_max_pool3d", "svd_lowrank", "pca_lowrank",
                  # they view the input's storage, whose layout the CPU copy does not keep
                  "as_strided", "as_strided_scatter",
                  "empty", "empty_like", "new_empty", "empty_strided", "empty_permuted", "new_empty_strided")


def _float_stats(out):
    import torch

    y, *stats = out
    return (y, *(t.float() for t in stats)) if y.dtype in (torch.half, torch.bfloat16) else out


# Outputs whose dtype neuron takes from CUDA (and PyTorch's meta kernels) where the CPU's differs:
# the CPU's result in that dtype is the reference.
CUDA_DTYPES = {
    "native_layer_norm": _float_stats,  # mean and rstd of half and bfloat16 inputs are float
}


# Out of scope for Trainium (issue #3): FFT and complex types, and sparse layouts.
OUT_OF_SCOPE_PREFIXES = ("fft.", "sparse.", "to_sparse", "_refs.fft")


def in_scope(op) -> bool:
    return not op.name.startswith(OUT_OF_SCOPE_PREFIXES)


def _random_sample(sample) -> bool:
    return float(sample.kwargs.get("dropout_p", 0) or 0) > 0  # SDPA's samples with dropout


def _value_free(op) -> bool:
    return any(op.name == n or op.name.startswith(n + ".") or op.name.startswith(n + "_") for n in VALUE_FREE_OPS)


def _to(x, device):
    """A sample (or part of one) with its tensors, and its device arguments, on `device`."""
    import copy

    import torch
    from torch.testing._internal.opinfo.core import SampleInput

    if isinstance(x, SampleInput):
        s = copy.copy(x)
        s.input = _to(x.input, device)
        s.args = _to(x.args, device)
        s.kwargs = {k: (device if k == "device" else _to(v, device)) for k, v in x.kwargs.items()}
        return s
    if isinstance(x, torch.device) or x in ("cpu", "neuron"):
        return torch.device(device)
    if isinstance(x, torch.Tensor):
        return x.detach().to(device).requires_grad_(x.requires_grad)
    if isinstance(x, (list, tuple)):
        return type(x)(_to(v, device) for v in x)
    if isinstance(x, dict):
        return {k: _to(v, device) for k, v in x.items()}
    return x


def _fresh(sample):
    """The sample with new leaf tensors on the same devices: samples share tensors, and their
    gradients must not accumulate from one sample into the next."""
    import copy

    import torch

    def leaf(t):
        if isinstance(t, torch.Tensor):
            return t.detach().clone().requires_grad_(t.requires_grad)
        if isinstance(t, (list, tuple)):
            return type(t)(leaf(v) for v in t)
        if isinstance(t, dict):
            return {k: leaf(v) for k, v in t.items()}
        return t

    s = copy.copy(sample)
    s.input, s.args, s.kwargs = leaf(sample.input), leaf(sample.args), leaf(sample.kwargs)
    return s


def _targets_neuron(sample) -> bool:
    """Whether the call should produce neuron outputs: it names the neuron device, or (naming
    none) takes a neuron tensor. arange(2) without a device is a CPU op on any machine."""
    if "device" in sample.kwargs:
        return str(sample.kwargs["device"]).startswith("neuron")
    return any(t.device.type == "neuron" for t in _tensors((sample.input, sample.args, sample.kwargs)))


def _tensors(x):
    import torch

    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _tensors(v)]
    return []


def _strides_of_sized_dims(t):
    return [st for sz, st in zip(t.shape, t.stride()) if sz > 1]


def _compare(actual, expected, values=True, device="neuron"):
    import torch
    from torch._prims_common import is_non_overlapping_and_dense_or_false as is_non_overlapping_and_dense

    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"expected a tensor, got {type(actual).__name__}"
        assert actual.device.type == device, f"output on {actual.device}, expected {device}"
        if values:
            torch.testing.assert_close(actual.cpu(), expected, equal_nan=True)
            # A dense CPU result's layout is the op's (a view's is its input's, which the copy
            # to the CPU does not keep); strides of size-1 dimensions carry no meaning.
            if expected.layout == torch.strided and is_non_overlapping_and_dense(expected) and \
                    expected._base is None and expected.numel() > 1:
                assert _strides_of_sized_dims(actual) == _strides_of_sized_dims(expected), \
                    f"strides {actual.stride()} != {expected.stride()} for shape {tuple(expected.shape)}"
        else:
            assert (actual.shape, actual.dtype) == (expected.shape, expected.dtype), \
                f"{actual.shape}/{actual.dtype} != {expected.shape}/{expected.dtype}"
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), f"{len(actual)} outputs, expected {len(expected)}"
        for a, e in zip(actual, expected):
            _compare(a, e, values, device)
    elif isinstance(expected, float) and expected != expected:
        assert actual != actual
    else:
        assert actual == expected, f"{actual!r} != {expected!r}"


def _compare_as_cuda(op):
    """_compare, with the CPU's result in the dtypes neuron takes from CUDA (CUDA_DTYPES)."""
    adjust = CUDA_DTYPES.get(op_key(op))
    return _compare if adjust is None else lambda a, e, *rest: _compare(a, adjust(e), *rest)


def _variants(op):
    """(name, call) for the OpInfo's in-place and out= variants; call(sample, device) returns what
    is compared: the result and the tensors the variant wrote."""
    import torch

    variants = []
    if op.inplace_variant is not None:
        def inplace(s, device):
            target = s.input.clone()
            return op.inplace_variant(target, *s.args, **s.kwargs), target
        variants.append(("in-place", inplace))
    if op.supports_out:
        def out(s, device, like):
            outs = semantics.out_tensors(like, lambda e: torch.empty(0, dtype=e.dtype, device=device))
            return op(s.input, *s.args, **s.kwargs, out=outs), outs
        variants.append(("out=", out))
    return variants


def _only_tensors(x) -> bool:
    import torch

    if isinstance(x, torch.Tensor):
        return True
    return isinstance(x, (list, tuple)) and len(x) > 0 and all(isinstance(v, torch.Tensor) for v in x)


def _compare_variants(op, ns, sample, expected, values, device):
    """None, or (status, detail) for the first variant that disagrees with the CPU."""
    import torch

    import torch_neuronx  # noqa: F401

    for name, call in _variants(op):
        if name == "out=":
            if not _only_tensors(expected):
                continue
            run = lambda s, dev: call(s, dev, expected)  # noqa: E731
        else:
            if not isinstance(sample.input, torch.Tensor):
                continue
            run = call
        try:
            want = run(sample, "cpu")
        except Exception as e:  # noqa: BLE001  (the CPU rejects this variant for this sample: neuron must too)
            problem = semantics.raises_at_call(lambda: run(_fresh(ns), device),
                                               f"{name} where the CPU raised {type(e).__name__}: {e}")
            if problem:
                return "fail", problem
            continue
        try:
            got = run(_fresh(ns), device)
            torch.neuron.synchronize()
        except Exception as e:  # noqa: BLE001
            return "error", f"{name}: {type(e).__name__}: {e}"
        try:
            _compare(got, want, values, device)
        except Exception as e:  # noqa: BLE001
            return "fail", f"{name}: {type(e).__name__}: {e}"
        if name == "out=" and device == "neuron":
            problem = semantics.out_checks(op, ns, sample, expected, _fresh)
            if problem:
                return "fail", problem
    return None


def _grads(op, sample, device):
    import torch

    s = _fresh(sample) if device == "neuron" else _to(sample, device)  # neuron samples are made there
    out = op(s.input, *s.args, **s.kwargs)
    outs = [t for t in _tensors(out) if t.requires_grad and t.dtype.is_floating_point]
    if not outs:
        return None
    torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])
    ins = [t for t in _tensors((s.input, s.args, s.kwargs)) if t.requires_grad]
    return [t.grad for t in ins]


def _copied() -> bool:
    import torch_neuronx

    return any(c["copy"] for c in torch_neuronx.op_counts().values())


def run_one(op, dtype_name: str, max_samples: int) -> dict:
    import torch

    import torch_neuronx

    dtype = getattr(torch, dtype_name)
    result = {"op": op_key(op), "dtype": dtype_name, "status": "pass", "fallback": False, "detail": ""}
    torch_neuronx.reset_op_counts()
    compared = 0
    compare = _compare_as_cuda(op)
    try:
        # Made on neuron, as PyTorch's device-generic tests make them (tensors an op wants on the
        # CPU stay there), then copied to the CPU for the reference.
        all_samples = list(op.sample_inputs("neuron", dtype, requires_grad=False))
        samples = all_samples[:max_samples]
    except Exception as e:  # noqa: BLE001
        return {**result, "status": "error", "detail": f"sample_inputs on neuron: {type(e).__name__}: {e}"[:300]}
    for ns in samples:
        sample = _to(ns, "cpu")
        try:
            expected = op(sample.input, *sample.args, **sample.kwargs)
        except Exception:  # noqa: BLE001  (the op rejects this sample on CPU too)
            continue
        try:
            actual = op(ns.input, *ns.args, **ns.kwargs)
            torch.neuron.synchronize()
        except Exception as e:  # noqa: BLE001
            return {**result, "status": "error", "detail": f"{type(e).__name__}: {e}"[:300],
                    "fallback": _copied()}
        values = not (_value_free(op) or _random_sample(ns))
        device = "neuron" if _targets_neuron(ns) else "cpu"
        try:
            compare(actual, expected, values, device)
        except Exception as e:  # noqa: BLE001
            return {**result, "status": "fail", "detail": f"{type(e).__name__}: {e}"[:300],
                    "fallback": _copied()}
        problem = _compare_variants(op, ns, sample, expected, values, device)
        if problem is None:
            detail = semantics.noncontiguous(op, ns, sample, values, device, compare, _fresh)
            problem = None if detail is None else ("fail", detail)
        if problem is not None:
            return {**result, "status": problem[0], "detail": problem[1][:300],
                    "fallback": _copied()}
        compared += 1
    if dtype_name == "float32":
        detail = semantics.error_inputs(op)
        if detail is None and compared:
            detail = semantics.other_arguments(op, [s for s in all_samples if _targets_neuron(s)],
                                               lambda s: not (_value_free(op) or _random_sample(s)),
                                               compare, _fresh, lambda s: _to(s, "cpu"),
                                               max_pairs=8 if max_samples == 1 else 20 * max_samples)
        if detail is not None:
            return {**result, "status": "fail", "detail": detail[:300], "fallback": _copied()}
    if dtype_name == "float32" and op.supports_autograd and samples and not _value_free(op):
        try:
            gsamples = list(op.sample_inputs("neuron", dtype, requires_grad=True))[:max_samples]
            for sample in gsamples:
                if _random_sample(sample):
                    continue
                try:
                    expected = _grads(op, sample, "cpu")
                except Exception:  # noqa: BLE001
                    continue
                actual = _grads(op, sample, "neuron")
                if expected is not None:
                    for a, e in zip(actual, expected):
                        if e is None:
                            assert a is None, "gradient where CPU has none"
                        else:
                            torch.testing.assert_close(a.cpu(), e, equal_nan=True)
        except Exception as e:  # noqa: BLE001
            return {**result, "status": "fail", "detail": f"gradient: {type(e).__name__}: {e}"[:300],
                    "fallback": _copied()}
    # How the ATen ops it reached ran: async (queued) or sync (the caller waited).
    counts = torch_neuronx.op_counts()
    result["sync_ops"] = {k: c["sync"] for k, c in counts.items() if c["sync"]}
    result["async_ops"] = {k: c["async"] for k, c in counts.items() if c["async"]}
    if compared == 0:
        result["status"] = "cpu-error"
        result["detail"] = "every sample raised on CPU"
    result["fallback"] = _copied()
    if result["status"] == "pass" and _value_free(op):
        result["detail"] = "shape and dtype only (random or uninitialised values)"
    return result


def worker(mode: str, start: int) -> None:
    import warnings

    import torch

    import torch_neuronx  # noqa: F401
    from torch.testing._internal.common_methods_invocations import op_db

    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    dtypes = CI_DTYPES if mode == "ci" else DTYPES
    max_samples = 1 if mode == "ci" else 1000
    for i, op in enumerate(op_db):
        if i < start or not in_scope(op):
            continue
        supported = {str(d).replace("torch.", "") for d in op.supported_dtypes("cpu")}
        for dt in dtypes:
            if dt not in supported:
                continue
            print("START", i, dt, flush=True)
            res = run_one(op, dt, max_samples)
            print("RESULT", json.dumps(res), flush=True)


# ---- parent side -----------------------------------------------------------------------------


def run(mode: str, progress: bool = True) -> list:
    """All results; restarts the worker after a crash and records the crash."""
    from torch.testing._internal.common_methods_invocations import op_db

    results, start, n_ops = [], 0, len(op_db)
    env = dict(os.environ, TORCH_NEURONX_FALLBACK="silent", PYTHONWARNINGS="ignore")
    t0 = time.time()
    while start < n_ops:
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker",
                                 "--mode", mode, "--start", str(start)], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, env=env)
        current = None
        for line in proc.stdout:
            if line.startswith("START "):
                _, idx, dt = line.split()
                current = (int(idx), dt)
            elif line.startswith("RESULT "):
                results.append(json.loads(line[7:]))
                if progress:
                    done = current[0] + 1
                    bar = "#" * (30 * done // n_ops)
                    print(f"\r[{bar:<30}] {done}/{n_ops} ops  {time.time() - t0:5.0f}s  {results[-1]['op'][:30]:<30}",
                          end="", file=sys.stderr, flush=True)
                current = None
        proc.wait()
        if current is None:
            break
        idx, dt = current
        results.append({"op": op_key(op_db[idx]), "dtype": dt, "status": "crash", "fallback": False,
                        "detail": f"worker exited with {proc.returncode}"})
        start = idx + 1
    if progress:
        print(file=sys.stderr)
    return results


def summarize(results: list) -> dict:
    comparable = [r for r in results if r["status"] != "cpu-error"]
    native = [r for r in comparable if r["status"] == "pass" and not r["fallback"]]
    passed = [r for r in comparable if r["status"] == "pass"]
    counts = {}
    for r in results:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    n = max(1, len(comparable))
    sync, queued = {}, {}
    for r in results:
        for name, c in r.get("sync_ops", {}).items():
            sync[name] = sync.get(name, 0) + c
        for name, c in r.get("async_ops", {}).items():
            queued[name] = queued.get(name, 0) + c
    return {"pairs": len(results), "comparable": len(comparable), "counts": counts,
            "pass_rate_native": len(native) / n, "pass_rate_with_fallback": len(passed) / n,
            "fallback_ops": sorted({r["op"] for r in results if r["fallback"]}),
            "aten_calls": {"async": sum(queued.values()), "sync": sum(sync.values())},
            "synchronous_aten_ops": sorted(k for k in sync if k not in queued)}


def write_report(results: list, out_dir: str) -> dict:
    os.makedirs(out_dir, exist_ok=True)
    summary = summarize(results)
    with open(os.path.join(out_dir, "conformance.json"), "w") as f:
        json.dump({"summary": summary, "results": results}, f, indent=1)
    lines = ["# neuron op conformance against CPU", "",
             f"(op, dtype) pairs: {summary['pairs']}, comparable (CPU runs the samples): {summary['comparable']}", "",
             "| status | pairs |", "| --- | --- |"]
    lines += [f"| {k} | {v} |" for k, v in sorted(summary["counts"].items())]
    lines += ["", f"pass rate without fallback: {summary['pass_rate_native']:.2%}",
              f"pass rate with fallback: {summary['pass_rate_with_fallback']:.2%}", "",
              f"OpInfos that used the CPU fallback: {', '.join(summary['fallback_ops']) or 'none'}", "",
              "ATen calls: {async} async (queued), {sync} sync (the caller waited for the kernel)".format(
                  **summary["aten_calls"]), "",
              "ATen ops that only ran synchronously: " + (", ".join(summary["synchronous_aten_ops"]) or "none"), "",
              "## Not passing", "", "| op | dtype | status | detail |", "| --- | --- | --- | --- |"]
    for r in results:
        if r["status"] not in ("pass", "cpu-error"):
            detail = r["detail"].replace("|", "/").replace("\n", " ")[:160]
            lines.append(f"| {r['op']} | {r['dtype']} | {r['status']} | {detail} |")
    with open(os.path.join(out_dir, "conformance.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return summary


def expected_failures_path() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "expected_failures.json")


def check_against_expected(results: list, mode: str) -> list:
    """Problems: a pair that regressed (not passing, not listed) or an expected failure that now
    passes (remove it from the list, so the list only shrinks). Entries say in which mode they
    fail: the CI sample runs fewer samples, so a full-run failure may pass there."""
    with open(expected_failures_path()) as f:
        expected = json.load(f)
    problems = []
    for r in results:
        key = f"{r['op']}|{r['dtype']}"
        bad = r["status"] not in ("pass", "cpu-error")
        entry = expected.get(key)
        if bad and entry is None:
            problems.append(f"regression: {key} {r['status']}: {r['detail'][:200]}")
        if not bad and entry is not None and (mode == "full" or entry["mode"] == "ci"):
            problems.append(f"now passes, remove from expected_failures.json: {key}")
    return problems


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["ci", "full"], default="full")
    p.add_argument("--worker", action="store_true")
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--out", default="conformance-report")
    p.add_argument("--check", action="store_true", help="exit 1 on a regression or a stale expected failure")
    args = p.parse_args(argv)
    if args.worker:
        worker(args.mode, args.start)
        return
    results = run(args.mode)
    summary = write_report(results, args.out)
    print(json.dumps({k: v for k, v in summary.items() if k not in ("fallback_ops", "synchronous_aten_ops")}, indent=1))
    print(f"report: {args.out}/conformance.md")
    if args.check:
        problems = check_against_expected(results, args.mode)
        for line in problems:
            print(line)
        sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
