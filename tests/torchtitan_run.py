"""Trains TorchTitan's Llama 3 debug model on neuron and on the CPU and compares the losses it logs
(`make torchtitan TITAN=/path/to/torchtitan`). Nothing is fetched and nothing of TorchTitan's is
copied here: the trainer runs from the checkout you give, unchanged, as `torchtitan.train` with its
`llama3_debugmodel` config, its test tokenizer and its `c4_test` dataset.

On neuron TorchTitan needs no help: it finds the device through `torch._utils` like any
accelerator and takes the `neuron` process-group backend from PyTorch's backend map. TorchTitan has
no CPU mode (it falls back to "cuda"), so the CPU reference (autoload off: nothing of ours loaded;
gloo) answers its device lookup with "cpu" and changes three things PyTorch refuses on the CPU:
`torch.cpu` gets the memory-statistics calls TorchTitan's monitor makes; TorchTitan's compiled
FlexAttention runs through `aot_eager` (the op's dense implementation, forward and backward:
PyTorch refuses FlexAttention's backward on CPU tensors and Inductor's CPU template has none; on
neuron Inductor lowers it); FSDP2 divides gradients by SUM then divide (gloo has no PREMUL_SUM,
which neuron's group runs as TorchTitan asks).

Same weights, data and steps on both sides: neuron's generator is its own (as CUDA's is), so every
run starts from one seed checkpoint made first on the CPU, the way TorchTitan makes the start of
differently parallelised runs equal (`--checkpoint.create_seed_checkpoint`, loaded through
`--checkpoint.initial_load_path`; on neuron that is a DCP load into neuron tensors). If the
checkout lacks `tests/assets/c4_test` (a partial mirror), a c4-shaped stand-in is written.

    python tests/torchtitan_run.py /path/to/torchtitan [--steps N] [--only NAME] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

COMMIT = "2e962a1"  # the newest TorchTitan whose APIs torch 2.13 has
# What TorchTitan imports that torch 2.13's environment lacks (triton: an expert-parallel kernel
# module imported unconditionally, even on machines without a GPU).
DEPS = {"torchdata": "torchdata", "tyro": "tyro", "spmd_types": "spmd_types==0.2.1", "tensorboard": "tensorboard",
        "triton": "triton"}
# Absolute per-step loss difference allowed between neuron and the CPU run of the same layout.
# Step 1 (same weights, same batch) agrees to the last logged digit. After it, both compute in
# float32 with reductions in other orders, and AdamW's first updates are ~lr * sign(grad) even
# for gradients near zero, so rounding there moves weights by whole lr-sized steps: measured
# 1e-5..4.6e-4 over ten steps. A wrong kernel or a lost gradient shows at steps 1-2 by far more
# (steps change the loss by 0.2-1.0), so 1e-3 separates the two.
TOLERANCE = 1e-3

# A compiled neuron run is compared with the eager CPU run (Inductor's CPU FlexAttention template,
# which the compiled blocks would inline, has no backward): fused kernels (RMSNorm, SwiGLU, the loss)
# reduce in other orders than eager ones, which shows at step 1 already (3e-5) and measured 8.9e-4
# at most over ten steps, so compiled runs get twice the eager bound.
COMPILED_TOLERANCE = 2e-3

# name, processes, TorchTitan arguments of both runs, of the neuron run only
RUNS = [
    ("1 process", 1, [], []),
    ("FSDP 2", 2, ["--parallelism.data_parallel_shard_degree", "2"], []),
    ("TP 2", 2, ["--parallelism.tensor_parallel_degree", "2"], []),
    # each TransformerBlock and the loss through Inductor, against the eager CPU run
    ("compile", 1, [], ["--compile.enable"]),
]

_STEP = re.compile(r"step:\s*(\d+)\s+loss:\s*([-+0-9.eE]+)")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _usage() -> str:
    return ("  To get one:  git clone https://github.com/pytorch/torchtitan && git -C torchtitan checkout "
            f"{COMMIT}\n  Its dependencies torch 2.13 lacks:  pip install -c <(echo torch==2.13.0) "
            f"{' '.join(DEPS.values())}")


def _stand_in_dataset(where: Path) -> Path:
    """A c4-shaped json dataset ({"text": ...} per line), for checkouts whose tests/assets/c4_test is
    missing (a partial mirror): deterministic English text from this interpreter's own docstrings."""
    import inspect
    import importlib

    texts = []
    for name in ["collections", "json", "argparse", "pathlib", "subprocess", "functools", "itertools",
                 "re", "os", "typing", "dataclasses", "logging", "unittest", "textwrap", "string"]:
        mod = importlib.import_module(name)
        with warnings.catch_warnings():  # typing.io and typing.re warn when read
            warnings.simplefilter("ignore", DeprecationWarning)
            objs = [mod] + [getattr(mod, a) for a in sorted(dir(mod)) if not a.startswith("_")]
            texts += [d for d in map(inspect.getdoc, objs) if d and len(d) > 200]
    path = where / "c4_stand_in"
    path.mkdir(parents=True, exist_ok=True)
    with open(path / "data.json", "w") as f:
        for t in dict.fromkeys(texts):
            f.write(json.dumps({"text": t}) + "\n")
    return path


def _titan_args(steps: int, seq_len: int, batch: int, dataset: Path | None, dump: Path,
                seed: Path | None) -> list[str]:
    args = ["--module", "llama3", "--config", "llama3_debugmodel", "--training.steps", str(steps),
            "--training.seq_len", str(seq_len), "--training.local_batch_size", str(batch),
            "--debug.seed", "42", "--dump_folder", str(dump), "--checkpoint.enable"]
    if seed is None:
        args += ["--checkpoint.create_seed_checkpoint"]
    else:
        args += ["--checkpoint.initial_load_path", str(seed), "--checkpoint.interval", str(steps + 1)]
    if dataset is not None:
        args += ["--dataloader.dataset_path", str(dataset)]
    return args


def _run(checkout: Path, device: str, nproc: int, args: list[str], log: Path) -> tuple[dict, str]:
    env = dict(os.environ, PYTHONPATH=f"{checkout}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               PYTHONUNBUFFERED="1")
    if device == "cpu":
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           "--local-ranks-filter", "0", "--role", "rank", "--tee", "3",
           str(Path(__file__).resolve()), "--worker", device, "--", *args]
    with open(log, "w") as out:
        rc = subprocess.run(cmd, cwd=checkout, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    text = _ANSI.sub("", log.read_text())
    losses = {int(s): float(v) for s, v in _STEP.findall(text)}
    return (losses if rc == 0 else {**losses, "rc": rc}), text


def _warnings(text: str) -> list[str]:
    seen = []
    for line in text.splitlines():
        if re.search(r"Warning|WARNING|warn\(", line) and line not in seen:
            seen.append(line.strip())
    return seen


def _worker(device: str, titan_args: list[str]) -> None:
    """One rank of a run, inside torchrun: TorchTitan's own entry point, with the CPU stand-in."""
    import runpy

    import torch
    import torch._utils

    if device == "cpu":
        torch._utils._get_available_device_type = lambda: "cpu"
        cpu = torch.cpu
        # TorchTitan's memory monitor asks the device module for CUDA's statistics calls.
        cpu.get_device_name = lambda *a: "cpu"
        cpu.get_device_properties = lambda *a: type("props", (), {"name": "cpu", "total_memory": 1 << 40})()
        cpu.current_device = lambda: 0  # an index, as barrier(device_ids=...) wants
        cpu.memory_stats = lambda *a: {}
        cpu.reset_peak_memory_stats = lambda *a: None
        cpu.empty_cache = lambda *a: None
        # PyTorch refuses FlexAttention's backward on CPU tensors before the op runs; past that
        # check eager mode runs the op's dense implementation (what neuron runs), which has one.
        import torch.nn.attention.flex_attention as flex

        flex._validate_device = lambda *a: None
        # TorchTitan compiles FlexAttention with Inductor, whose CPU template has no backward
        # either; the CPU reference traces the same op and runs it through AOTAutograd's eager
        # backend instead (the dense implementation, forward and backward).
        from torchtitan.models.common.attention import FlexAttention

        FlexAttention._compiled_flex_attn = torch.compile(flex.flex_attention, backend="aot_eager")
        # FSDP2 reduce-scatters gradients with PREMUL_SUM(1/factor), which gloo lacks; its own
        # SUM-then-divide form (what it does for MTIA) gives the same mean.
        import torch.distributed.fsdp._fully_shard._fsdp_collectives as fsdp_collectives

        divide_factors = fsdp_collectives._get_gradient_divide_factors

        def sum_then_divide(rs_group, ar_group, dtype, device_type="", factor=None, *_):
            return divide_factors(rs_group, ar_group, dtype, device_type, factor, True)

        fsdp_collectives._get_gradient_divide_factors = sum_then_divide
    sys.argv = ["torchtitan.train", *titan_args]
    runpy.run_module("torchtitan.train", run_name="__main__", alter_sys=True)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        _worker(argv[1], argv[3:] if argv[2:3] == ["--"] else argv[2:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkout", nargs="?", help="a TorchTitan checkout (git clone of pytorch/torchtitan)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--only", action="append", help="run only these layouts (by name)")
    parser.add_argument("--json", help="write the losses here")
    args = parser.parse_args(argv)
    if not args.checkout:
        print(f"torchtitan: skipped: no TorchTitan checkout given (make torchtitan TITAN=/path/to/torchtitan).\n"
              f"{_usage()}")
        return 0
    if not (Path(args.checkout) / "torchtitan" / "train.py").is_file():
        print(f"torchtitan: {args.checkout} is not a TorchTitan checkout (no torchtitan/train.py)\n{_usage()}")
        return 1
    import importlib.util

    missing = [pin for mod, pin in DEPS.items() if importlib.util.find_spec(mod) is None]
    if missing:
        print(f"torchtitan: TorchTitan needs {', '.join(missing)}: pip install -c <(echo torch==2.13.0) "
              f"{' '.join(missing)}")
        return 1
    checkout = Path(args.checkout).resolve()
    work = Path(tempfile.mkdtemp(prefix="torchtitan-"))
    dataset = None
    if not (checkout / "tests" / "assets" / "c4_test" / "data.json").is_file():
        dataset = _stand_in_dataset(work)
        print(f"torchtitan: {checkout}/tests/assets/c4_test/data.json is missing; using a stand-in at {dataset}")
    seed_dump = work / "seed"
    seed = seed_dump / "checkpoint" / "step-0"
    _, text = _run(checkout, "cpu", 1, _titan_args(1, args.seq_len, args.batch, dataset, seed_dump, None),
                   work / "seed.log")
    if not seed.is_dir():
        print(f"torchtitan: making the seed checkpoint failed, log: {work / 'seed.log'}")
        return 1
    rows, ok, done = [], True, {}
    device = "neuron"
    for name, nproc, extra, neuron_only in RUNS:
        if args.only and name not in args.only:
            continue
        result = {"name": name, "processes": nproc}
        for dev, dev_args in (("cpu", extra), (device, extra + neuron_only)):
            key = (dev, nproc, tuple(dev_args))
            if key not in done:  # the compiled layout's CPU reference is the eager one's
                dump = work / f"{name.replace(' ', '_')}-{dev}"
                t0 = time.time()
                titan_args = _titan_args(args.steps, args.seq_len, args.batch, dataset, dump, seed) + dev_args
                losses, text = _run(checkout, dev, nproc, titan_args, Path(f"{dump}.log"))
                done[key] = {dev: losses, f"{dev}_seconds": round(time.time() - t0, 1),
                             f"{dev}_warnings": _warnings(text), f"{dev}_log": f"{dump}.log"}
            result.update(done[key])
        cpu, neu = result["cpu"], result[device]
        steps = [s for s in range(1, args.steps + 1)]
        diffs = [abs(cpu[s] - neu[s]) if s in cpu and s in neu else float("inf") for s in steps]
        result["max_diff"] = max(diffs)
        bound = COMPILED_TOLERANCE if neuron_only else TOLERANCE
        result["passed"] = "rc" not in cpu and "rc" not in neu and result["max_diff"] <= bound
        ok &= result["passed"]
        rows.append(result)
        print(f"\n{name} ({nproc} process{'es' if nproc > 1 else ''}): "
              f"{'PASS' if result['passed'] else 'FAIL'}  max |cpu - neuron| = {result['max_diff']:.2e}")
        print("| step | cpu (gloo) | neuron | abs diff |\n|---|---|---|---|")
        for s, d in zip(steps, diffs):
            print(f"| {s} | {cpu.get(s, float('nan')):.5f} | {neu.get(s, float('nan')):.5f} | {d:.1e} |")
        for dev in ("cpu", device):
            if "rc" in result[dev]:
                print(f"{dev} run failed (exit {result[dev]['rc']}), log: {result[f'{dev}_log']}")
            for w in result[f"{dev}_warnings"]:
                print(f"  {dev} warning: {w}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print(f"\ntorchtitan: {sum(r['passed'] for r in rows)} of {len(rows)} layouts match the CPU")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
