"""Trains TorchTitan's Llama 3 debug model on neuron and on the CPU and compares the losses it logs
(`make torchtitan TITAN=/path/to/torchtitan`). Nothing is fetched and nothing of TorchTitan's is
copied here: the trainer runs from the checkout you give, unchanged, as `torchtitan.train` with its
`llama3_debugmodel` config, its test tokenizer and its `c4_test` dataset. Layouts: 1 process,
FSDP2 over 2 ranks, TP 2, compiled, each activation-checkpointing policy (the config's selective
one in every other row, full, none), and a DCP save at step 5 resumed by a second invocation, whose
losses must be the uninterrupted neuron run's to the last logged digit.

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
import shutil
import warnings
from dataclasses import dataclass
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



@dataclass(frozen=True)
class Run:
    """One layout: TorchTitan arguments of both runs and of the neuron run only; `resume_at` k
    makes the neuron side a DCP save/resume check (see `_resume_problems`)."""

    name: str
    processes: int
    args: tuple[str, ...] = ()
    neuron_args: tuple[str, ...] = ()
    resume_at: int | None = None
    log_rank: int = 0  # whose log holds the loss: the last pipeline stage's rank with PP


FSDP2 = ("--parallelism.data_parallel_shard_degree", "2")
# llama3_debugmodel's own activation checkpointing is SelectiveAC (per op: saves matmuls and
# attention, recomputes the rest), so every row without a policy argument runs it; TorchTitan picks
# another with a tyro subcommand ("activation-checkpoint:full"), which must come last.
RUNS = [
    Run("1 process", 1),
    Run("FSDP 2", 2, FSDP2),
    Run("TP 2", 2, ("--parallelism.tensor_parallel_degree", "2")),
    # two pipeline ranks (TorchTitan's default looped schedule, two stages each): activations and
    # their gradients cross the ranks by send/recv; the loss is the last stage's
    Run("PP 2", 2, ("--parallelism.pipeline_parallel_degree", "2"), log_rank=1),
    # each TransformerBlock and the loss through Inductor, against the eager CPU run
    Run("compile", 1, neuron_args=("--compile.enable",)),
    # whole blocks recomputed in backward (FSDP2 regathers their weights for it)
    Run("FSDP 2 full AC", 2, (*FSDP2, "activation-checkpoint:full")),
    # no recomputation: the control for both policies
    Run("FSDP 2 no AC", 2, (*FSDP2, "activation-checkpoint:none")),
    # DCP: the neuron run saves its sharded model, optimizer, scheduler and data-loader state at
    # step 5; a second invocation loads it and trains the rest
    Run("FSDP 2 resume", 2, FSDP2, resume_at=5),
]
_SUBCOMMAND = re.compile(r"^[a-z-]+:[a-z-]+$")  # tyro's way of choosing a config class


def _ordered(args) -> list[str]:
    """Options first, tyro subcommands last: options after a subcommand belong to its class."""
    return [a for a in args if not _SUBCOMMAND.match(a)] + [a for a in args if _SUBCOMMAND.match(a)]


def _ac_policy(args) -> str | None:
    """The activation-checkpointing class TorchTitan should report applying for these arguments."""
    chosen = [a.split(":", 1)[1] for a in args if a.startswith("activation-checkpoint:")]
    return {"selective": "SelectiveAC", "full": "FullAC", "none": None}[chosen[-1] if chosen else "selective"]


def _ac_problems(args, text: str) -> list[str]:
    """A row that asks for a policy must have run it (an argument TorchTitan ignored would
    otherwise compare the default policy twice)."""
    applied = re.findall(r"Applied (\w+) activation checkpointing", text)  # once per model part (PP)
    want = _ac_policy(args)
    if set(applied) != ({want} if want else set()):
        return [f"asked for {want or 'no'} activation checkpointing, the log says {applied or 'none applied'}"]
    return []


def _resume_problems(full: dict, resumed: dict, text: str, checkpoint: Path, at: int, steps: int) -> list[str]:
    """What is wrong with a resumed run: it must say it loaded `checkpoint` (step `at`), start at
    step at+1, log exactly steps at+1..steps and log the uninterrupted run's losses for them, to
    the last printed digit (same device, same kernels, same state)."""
    problems = []
    if f"Loading the checkpoint from {checkpoint}." not in text:
        problems.append(f"the resumed run does not say it loaded {checkpoint}")
    if f"Training starts at step {at + 1}" not in text:
        problems.append(f"the resumed run does not start at step {at + 1}")
    if "rc" in resumed:
        problems.append(f"the resumed run failed (exit {resumed['rc']})")
    logged = sorted(s for s in resumed if s != "rc")
    if logged != list(range(at + 1, steps + 1)):
        problems.append(f"the resumed run logged steps {logged}, not {at + 1}..{steps}")
    differ = [s for s in range(at + 1, steps + 1) if s in resumed and resumed[s] != full.get(s)]
    if differ:
        problems.append("resumed losses differ from the uninterrupted run's at steps "
                        + ", ".join(f"{s} ({resumed[s]} vs {full.get(s)})" for s in differ))
    return problems

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


def _run_args(run: Run, device: str, base: list[str]) -> list[str]:
    """A run's TorchTitan arguments on `device` from the common ones (`_titan_args`): the neuron side
    of a resume check saves every `resume_at` steps."""
    args = list(base)
    if device != "cpu" and run.resume_at is not None:
        args[args.index("--checkpoint.interval") + 1] = str(run.resume_at)
    return _ordered(args + list(run.args) + list(run.neuron_args if device != "cpu" else ()))


def _run(checkout: Path, device: str, nproc: int, args: list[str], log: Path, rank: int = 0) -> tuple[dict, str]:
    env = dict(os.environ, PYTHONPATH=f"{checkout}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               PYTHONUNBUFFERED="1", LOG_RANK=str(rank))  # as TorchTitan's run_train.sh says it
    if device == "cpu":
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           "--local-ranks-filter", str(rank), "--role", "rank", "--tee", "3",
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
    for run in RUNS:
        if args.only and run.name not in args.only:
            continue
        if run.resume_at is not None and not 0 < run.resume_at < args.steps:
            print(f"torchtitan: {run.name} resumes at step {run.resume_at}, which needs --steps above it")
            return 1
        result = {"name": run.name, "processes": run.processes}
        for dev, dev_args in (("cpu", run.args), (device, run.args + run.neuron_args)):
            key = (dev, run.processes, dev_args, run.resume_at if dev == device else None)
            if key not in done:  # the compiled layout's CPU reference is the eager one's
                dump = work / f"{run.name.replace(' ', '_')}-{dev}"
                t0 = time.time()
                titan_args = _run_args(run, dev, _titan_args(args.steps, args.seq_len, args.batch, dataset,
                                                             dump, seed))
                losses, text = _run(checkout, dev, run.processes, titan_args, Path(f"{dump}.log"), run.log_rank)
                done[key] = {dev: losses, f"{dev}_seconds": round(time.time() - t0, 1),
                             f"{dev}_warnings": _warnings(text), f"{dev}_log": f"{dump}.log",
                             f"{dev}_problems": _ac_problems(dev_args, text), f"{dev}_titan_args": titan_args,
                             f"{dev}_dump": str(dump)}
            result.update(done[key])
        problems = result["cpu_problems"] + result[f"{device}_problems"]
        if run.resume_at is not None:
            # a fresh folder holding only the step-k checkpoint: TorchTitan loads the newest step
            # of its checkpoint folder, so nothing but the save under test can be what it resumes
            dump = work / f"{run.name.replace(' ', '_')}-{device}-resumed"
            checkpoint = dump / "checkpoint" / f"step-{run.resume_at}"
            saved = Path(result[f"{device}_dump"]) / "checkpoint" / checkpoint.name
            if saved.is_dir():
                shutil.copytree(saved, checkpoint)
            t0 = time.time()
            titan_args = [str(dump) if a == result[f"{device}_dump"] else a for a in result[f"{device}_titan_args"]]
            resumed, text = _run(checkout, device, run.processes, titan_args, Path(f"{dump}.log"), run.log_rank)
            result.update(resumed=resumed, resumed_seconds=round(time.time() - t0, 1), resumed_log=f"{dump}.log")
            problems += ([] if saved.is_dir() else [f"the uninterrupted run saved no {saved}"])
            problems += _resume_problems(result[device], resumed, text, checkpoint, run.resume_at, args.steps)
        cpu, neu = result["cpu"], result[device]
        steps = [s for s in range(1, args.steps + 1)]
        diffs = [abs(cpu[s] - neu[s]) if s in cpu and s in neu else float("inf") for s in steps]
        result["max_diff"] = max(diffs)
        result["problems"] = problems
        bound = COMPILED_TOLERANCE if run.neuron_args else TOLERANCE
        result["passed"] = "rc" not in cpu and "rc" not in neu and result["max_diff"] <= bound and not problems
        ok &= result["passed"]
        rows.append(result)
        nproc = run.processes
        print(f"\n{run.name} ({nproc} process{'es' if nproc > 1 else ''}): "
              f"{'PASS' if result['passed'] else 'FAIL'}  max |cpu - neuron| = {result['max_diff']:.2e}")
        resumed = result.get("resumed")
        print("| step | cpu (gloo) | neuron | abs diff |" + (" neuron resumed |" if resumed else "")
              + "\n|---|---|---|---|" + ("---|" if resumed else ""))
        for s, d in zip(steps, diffs):
            print(f"| {s} | {cpu.get(s, float('nan')):.5f} | {neu.get(s, float('nan')):.5f} | {d:.1e} |"
                  + (f" {resumed[s]:.5f} |" if resumed and s in resumed else " |" if resumed else ""))
        for problem in problems:
            print(f"  problem: {problem}")
        for dev in ("cpu", device, "resumed"):
            if dev in result and "rc" in result[dev]:
                print(f"{dev} run failed (exit {result[dev]['rc']}), log: {result[f'{dev}_log']}")
            for w in result.get(f"{dev}_warnings", []):
                print(f"  {dev} warning: {w}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print(f"\ntorchtitan: {sum(r['passed'] for r in rows)} of {len(rows)} layouts match the CPU")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
