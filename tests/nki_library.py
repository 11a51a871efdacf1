"""Runs AWS's nki-library kernels, as AWS ships them, on the software NeuronCore (`make nki-library
NKILIB=/path/to/nki-library`). Nothing is fetched and nothing of AWS's is copied here: the kernels and
their PyTorch references are imported from the checkout, with `nki`, `nki.language`, `nki.isa`,
`nki.typing` and `nki.collectives` mapped to torch_neuronx.nki (the only change a user makes).

Each case builds inputs the way the kernel's own integration test does (its shapes, dtypes, seed
and tolerance), runs the kernel on neuron tensors and through `nki.simulate`, and compares both
with the kernel's PyTorch reference evaluated in float64. A case passes when every element is within
the test's `atol + rtol * |ref|`; where only a norm-wise check holds (`|d| <= atol + rtol * max|ref|`,
which is what a kernel keeping bf16/fp16 intermediates can promise near zero) the row says so.

    python tests/nki_library.py /path/to/nki-library [-k NAME] [--json FILE]
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import traceback
import types
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch


@dataclass
class Case:
    name: str
    kernel: object         # module.attr under nkilib_src.nkilib, or a wrapper kernel written here
    ref: object            # the kernel's PyTorch reference, same forms
    inputs: callable       # () -> dict of keyword arguments (CPU tensors and plain values)
    lnc: int = 1
    rtol: float = 1e-3        # or one per compared output
    atol: float = 1e-3
    ref_args: callable = None   # kwargs -> kwargs for the reference, when it takes other names
    outputs: list = field(default_factory=list)  # which reference outputs to compare, in order
    # (outs, refs, kwargs) -> (outs, refs): what the kernel's test compares where that is not the
    # raw outputs (a top-k's values sorted, its indices through the input they pick)
    post: callable = None
    # float64 unless the reference cannot run in it (conv1d's builds a float32 torch.nn.Conv1d)
    ref_dtype: torch.dtype = torch.float64


def _seeded(fn):
    def build():
        np.random.seed(42)
        torch.manual_seed(0)
        return fn()
    return build


def _randn(*shape, dtype=torch.float32):
    return torch.from_numpy(np.random.randn(*shape).astype(np.float32)).to(dtype)


def _norm(b, s, h, dtype, beta=False):
    d = {"input": _randn(b, s, h, dtype=dtype), "gamma": _randn(1, h, dtype=dtype),
         "output": torch.zeros(128, b * s, h // 128, dtype=dtype)}
    if beta:
        d["beta"] = _randn(1, h, dtype=dtype)
    return d


def _attention(bs, sq, skv, d, dtype, causal):
    return {"q": torch.randn(bs, sq, d).to(dtype), "k": torch.randn(bs, d, skv).to(dtype),
            "v": torch.randn(bs, skv, d).to(dtype), "scale": 1.0 / d ** 0.5, "causal_mask": causal, "tp_q": True}


def _cases() -> list[Case]:
    cases = []
    for shape, dtype, rtol in [((1, 256), torch.float32, 1e-3), ((64, 4, 1024), torch.bfloat16, 1e-2),
                               ((128, 2048), torch.float32, 1e-3)]:
        cases.append(Case(f"cumsum {shape} {str(dtype)[6:]}", "core.cumsum.cumsum.cumsum",
                          "core.cumsum.cumsum_torch.cumsum_torch_ref",
                          _seeded(lambda s=shape, d=dtype: {"x": _randn(*s, dtype=d)}), rtol=rtol, atol=1e-3))
    for lnc, b, s, h in [(1, 1, 1, 8192), (1, 1, 8, 8192), (2, 2, 8, 8192), (2, 128, 5, 3072)]:
        suffix = "" if lnc == 2 else "_lnc1"
        cases.append(Case(f"rmsnorm_tkg lnc{lnc} b{b} s{s} h{h} fp16", "core.subkernels.rmsnorm_tkg.rmsnorm_tkg",
                          "core.subkernels.rmsnorm_torch.rmsnorm_tkg_torch_ref" + suffix,
                          _seeded(lambda b=b, s=s, h=h: _norm(b, s, h, torch.float16)), lnc, 2e-2, 1e-5))
        cases.append(Case(f"layernorm_tkg lnc{lnc} b{b} s{s} h{h} fp16",
                          "core.subkernels.layernorm_tkg.layernorm_tkg",
                          "core.subkernels.layernorm_torch.layernorm_tkg_torch_ref" + suffix,
                          _seeded(lambda b=b, s=s, h=h: _norm(b, s, h, torch.float16, beta=True)), lnc, 2e-2, 1e-5))
    for lnc, bs, sq, skv, d, causal in [(1, 1, 256, 256, 64, True), (1, 2, 512, 512, 128, False),
                                        (2, 2, 512, 512, 64, True)]:
        cases.append(Case(f"attention_cte lnc{lnc} bs{bs} q{sq} kv{skv} d{d} causal={causal} bf16",
                          "core.attention.attention_cte.attention_cte",
                          "core.attention.attention_cte_torch.attention_cte_torch_ref",
                          _seeded(lambda a=(bs, sq, skv, d, torch.bfloat16, causal): _attention(*a)), lnc,
                          2e-2, 1e-2))
    for lnc, b, qh, kvh, s, dh in [(1, 1, 2, 1, 256, 64), (1, 1, 4, 2, 512, 128)]:
        cases.append(Case(f"attention_bwd lnc{lnc} b{b} qh{qh} kvh{kvh} s{s} d{dh} causal bf16",
                          "core.attention.attention_bwd.attention_bwd",
                          "core.attention.attention_bwd_torch.attention_bwd_torch_ref",
                          _seeded(lambda a=(b, qh, kvh, s, dh): _attention_bwd(*a)), lnc, 2e-2, 1e-5))
    for lnc, positions, vocab, dtype in [(1, 4, 32128, torch.bfloat16), (2, 64, 4096, torch.float32)]:
        cases.append(Case(f"cross_entropy_forward lnc{lnc} n{positions} v{vocab} {str(dtype)[6:]}",
                          "experimental.loss.cross_entropy.cross_entropy_forward",
                          "experimental.loss.cross_entropy_torch.cross_entropy_forward_torch_ref",
                          _seeded(lambda a=(positions, vocab, dtype): _cross_entropy(*a)), lnc, 1e-2, 1e-2,
                          ref_args=lambda kw: {"logits": kw["logits_hbm"], "targets": kw["targets_hbm"].long()}))
    for lnc, positions, vocab, dtype in [(1, 4, 32128, torch.bfloat16), (2, 64, 4096, torch.float32)]:
        cases.append(Case(f"cross_entropy_backward lnc{lnc} n{positions} v{vocab} {str(dtype)[6:]}",
                          "experimental.loss.cross_entropy.cross_entropy_backward",
                          "experimental.loss.cross_entropy_torch.cross_entropy_backward_torch_ref",
                          _seeded(lambda a=(positions, vocab, dtype): _cross_entropy(*a, backward=True)), lnc,
                          1e-2, 1e-2,
                          ref_args=lambda kw: {"logits": kw["logits_hbm"], "targets": kw["targets_hbm"].long()}))
    for lnc, b, s, v in [(1, 8, 5, 4058), (2, 8, 5, 4058), (1, 4, 5, 8192)]:
        cases.append(Case(f"cascaded_max lnc{lnc} b{b} s{s} v{v} fp32", "core.max.cascaded_max.cascaded_max",
                          "core.max.cascaded_max_torch.cascaded_max_torch_ref",
                          _seeded(lambda a=(b, s, v): {"input_tensor": _randn(*a)}), lnc, 1e-5, 1e-5))
    for d, b, h, s, contiguous in [(128, 1, 1, 8192, True), (128, 2, 8, 256, True), (64, 32, 4, 64, False)]:
        cases.append(Case(f"rope d{d} b{b} h{h} s{s} contiguous={contiguous} bf16", "core.embeddings.rope.RoPE",
                          "core.embeddings.rope_torch.rope_torch_ref",
                          _seeded(lambda a=(d, b, h, s, contiguous): _rope(*a)), 1, 2 ** -7, 1e-3))
    from nki_library_more import more_cases

    return cases + more_cases()


def _attention_bwd(b, qh, kvh, s, dh):
    compute_o_lse = _load("core.attention.attention_bwd_torch.compute_o_lse")
    q, dy = (torch.randn(b, qh, dh, s).to(torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(b, kvh, dh, s).to(torch.bfloat16) for _ in range(2))
    o, lse, _ = compute_o_lse(q, k, v, True, True)
    return {"q_ref": q, "k_ref": k, "v_ref": v, "o_ref": o.float().to(torch.bfloat16), "dy_ref": dy,
            "lse_ref": lse.float(), "use_causal_mask": True, "mixed_precision": True}


def _cross_entropy(positions, vocab, dtype, backward=False):
    d = {"logits_hbm": _randn(positions, vocab, dtype=dtype),
         "targets_hbm": torch.from_numpy(np.random.randint(0, vocab, size=(positions,), dtype=np.int32)),
         "positions_per_batch": 1 if positions < 32 else 32, "chunk_size": min(vocab, 16384 if backward else 32768),
         "dtype": dtype}
    if backward:  # the forward pass's log-sum-exp, which the backward kernel takes as its state
        d["lse_state_hbm"] = torch.logsumexp(d["logits_hbm"].float(), -1).to(dtype)
    return d


def _rope(d, b, h, s, contiguous):
    return {"x_in": torch.randn(d, b, h, s).to(torch.bfloat16), "cos": torch.randn(d // 2, b, s).to(torch.bfloat16),
            "sin": torch.randn(d // 2, b, s).to(torch.bfloat16), "contiguous_layout": contiguous}


class _Absent(types.ModuleType):
    """A module nki-library imports for paths these cases do not take; using it says what is missing."""

    def __getattr__(self, name):
        if name.startswith("__"):  # what inspect and importlib probe for
            raise AttributeError(name)
        raise ImportError(f"{self.__name__}.{name}: {self.__name__} (AWS's package) is not installed here; "
                          f"only nki-library's MX-format references use it")


def install_aliases(checkout: Path):
    """What a user does to run nki-library unchanged: `import nki` resolves to torch_neuronx.nki."""
    import torch_neuronx.nki  # noqa: F401

    for sub in ("", ".language", ".isa", ".isa.constants", ".typing", ".collectives"):
        importlib.import_module("torch_neuronx.nki" + sub)
        sys.modules["nki" + sub] = sys.modules["torch_neuronx.nki" + sub]
        # the compiler package's spelling, which router_topk still imports (neuronxcc.nki.typing)
        sys.modules["neuronxcc.nki" + sub] = sys.modules["torch_neuronx.nki" + sub]
    sys.modules.setdefault("neuronxcc", types.ModuleType("neuronxcc")).nki = sys.modules["torch_neuronx.nki"]
    try:
        importlib.import_module("neuron_dtypes")
    except ImportError:  # AWS's numpy dtype package: only the MX references call it, at import it need not be
        sys.modules["neuron_dtypes"] = _Absent("neuron_dtypes")
    sys.path.insert(0, str(checkout / "src"))
    # qkv_tkg's reference imports its norms from the checkout's test tree (test.integration...), which
    # must win over the standard library's `test` package
    sys.path.insert(0, str(checkout))


def _load(path, lnc: int = 1):
    if not isinstance(path, str):
        return path
    module, attr = path.rsplit(".", 1)
    obj = getattr(importlib.import_module("nkilib_src.nkilib." + module), attr)
    # nki-library's LncSubscriptable references are called as ref[lnc](...)
    return obj[lnc] if type(obj).__name__ == "LncSubscriptable" else obj


def _as_list(result):
    if isinstance(result, dict):
        return list(result.values())
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _compare(got, ref, rtol, atol) -> tuple[str, float]:
    got, ref = got.detach().cpu().double(), ref.detach().cpu().double()
    if got.shape != ref.shape:
        return f"shape {tuple(got.shape)} != reference {tuple(ref.shape)}", float("inf")
    diff = (got - ref).abs()
    worst = diff.max().item() if diff.numel() else 0.0
    if torch.isnan(got).any() and not torch.isnan(ref).any():
        return "NaN in output", float("nan")
    if bool((diff <= atol + rtol * ref.abs()).all()):
        return "ok", worst
    if bool((diff <= atol + rtol * ref.abs().max()).all()):
        return "ok (norm-wise)", worst
    return f"outside tolerance ({int((diff > atol + rtol * ref.abs()).sum())} elements)", worst


def run_case(case: Case, where: str) -> dict:
    import torch_neuronx.nki as nki

    row = {"case": case.name, "where": where}
    start = time.perf_counter()
    try:
        kernel = nki.jit(_load(case.kernel))
        kernel = kernel[case.lnc] if case.lnc > 1 else kernel
        kwargs = case.inputs()
        ref_kwargs = {k: v.to(case.ref_dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                      for k, v in kwargs.items()}
        refs = _as_list(_load(case.ref, case.lnc)(**(case.ref_args(ref_kwargs) if case.ref_args else ref_kwargs)))
        if where == "neuron":
            args = {k: v.to("neuron") if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
            outs = _as_list(kernel(**args))
        else:
            outs = _as_list(nki.simulate(kernel)(**kwargs))
        if case.post:
            outs, refs = case.post(outs, refs, kwargs)
        rtols = case.rtol if isinstance(case.rtol, (list, tuple)) else [case.rtol] * len(outs)  # per output
        verdicts = [_compare(o, r, rt, case.atol) for o, r, rt in zip(outs, refs, rtols)]
        row["result"] = "; ".join(v for v, _ in verdicts)
        row["max_abs_err"] = max(e for _, e in verdicts)
        row["passed"] = all(v.startswith("ok") for v, _ in verdicts)
    except Exception as e:  # a case that fails is a row, not the end of the run
        frames = [f"{Path(f.filename).name}:{f.lineno}" for f in traceback.extract_tb(e.__traceback__)[-3:]]
        row["result"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]} ({' <- '.join(reversed(frames))})"
        row["passed"] = False
    row["seconds"] = round(time.perf_counter() - start, 2)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkout", nargs="?", help="an nki-library checkout (git clone of aws-neuron/nki-library)")
    parser.add_argument("-k", default="", help="run only cases whose name contains this")
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--where", default="neuron,simulate")
    args = parser.parse_args(argv)
    if not args.checkout or not (Path(args.checkout) / "src" / "nkilib_src").is_dir():
        print(f"nki-library: skipped: no checkout given or found at {args.checkout!r} (make nki-library "
              f"NKILIB=/path/to/nki-library; this target fetches nothing)")
        return 0
    install_aliases(Path(args.checkout))
    rows = []
    for case in _cases():
        if args.k not in case.name:
            continue
        for where in args.where.split(","):
            row = run_case(case, where)
            rows.append(row)
            err = f"  max|err| {row['max_abs_err']:.3g}" if "max_abs_err" in row else ""
            print(f"{'PASS' if row['passed'] else 'FAIL'}  {case.name:<48} {where:<9} {row['seconds']:>6.1f}s  "
                  f"{row['result']}{err}", flush=True)
    passed = sum(r["passed"] for r in rows)
    print(f"nki-library: {passed} of {len(rows)} runs pass")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0 if passed == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
