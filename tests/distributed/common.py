"""What every distributed worker shares: its command line, the process group for a device and a
backend, and the scenario runner whose JSON pytest reads back (tests/test_distributed.py).

Policy:
- The same script runs on `--device neuron --backend neuron` and on `--device cpu --backend gloo`;
  nothing here branches on the device except set-up.
- One launch runs many scenarios in a row (process start-up costs seconds). A scenario is a
  function `fn(ctx, check)`: it compares results with values it computed locally from what every
  rank contributed, through `check`, or saves tensors with `ctx.save()` for pytest to compare with
  a single-process reference. `Skip` says a scenario does not apply here, and why.
- Each rank rewrites `{out}/rank{R}.json` after every scenario, so a rank that hangs or dies still
  leaves what it had done; pytest reports planned scenarios that have no result as "not run".
- After every scenario the ranks meet at a barrier on the c10d store, not on the backend under
  test, and learn whether every rank passed. When only some ranks raised, the others may have
  left a collective unmatched: later collectives could pair with the wrong calls, so the run stops
  there rather than report garbage. A timeout stops it too (the process group is spent).
"""
import argparse
import json
import os
import sys
import time
import traceback
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist

from launch import artifact

# the deprecation notices of c10d's older names drown the output a failing test shows
warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.distributed|collectives|transformers")
warnings.filterwarnings("ignore", message=".*deprecated.*", category=FutureWarning)

BARRIER_TIMEOUT_S = 120.0  # longer than a collective's timeout: a stuck rank reports before the others give up


class Skip(Exception):
    """The scenario does not apply to this device or backend; the message says why."""


def parse_args(extra=None):
    p = argparse.ArgumentParser()
    p.add_argument("--device", choices=["neuron", "cpu"], default="cpu")
    p.add_argument("--backend", choices=["neuron", "gloo"], default=None)
    p.add_argument("--out", required=True, help="folder for rank{R}.json and saved tensors")
    p.add_argument("--suite", action="append", default=[], help="scenario groups to run (repeatable)")
    p.add_argument("--only", default="", help="run only scenarios whose name contains this")
    p.add_argument("--timeout", type=float, default=60.0, help="process-group timeout in seconds")
    if extra:
        extra(p)
    args = p.parse_args()
    args.backend = args.backend or ("neuron" if args.device == "neuron" else "gloo")
    return args


def bind_device(args) -> torch.device:
    """The device of this rank; with neuron, selects it before any collective (as DDP/FSDP expect)."""
    if args.device == "cpu":
        return torch.device("cpu")
    import torch_neuronx  # noqa: F401  (registers torch.neuron and the "neuron" c10d backend)
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.neuron.set_device(local_rank)
    return torch.device("neuron", local_rank)


def init(args) -> "Context":
    device = bind_device(args)
    dist.init_process_group(args.backend, timeout=timedelta(seconds=args.timeout))
    return Context(args, device)


class Context:
    def __init__(self, args, device):
        self.args, self.device = args, device
        self.backend = args.backend
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.out = args.out

    def save(self, name: str, obj):
        """Tensors for pytest's comparison with a single-process reference, on CPU."""
        torch.save(_to_cpu(obj), artifact(self.out, name, self.rank))


def _to_cpu(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj


class Check:
    """The comparisons of one scenario: it passes when every one holds."""

    def __init__(self):
        self.max_diff = 0.0
        self.failures = []
        self.count = 0

    def close(self, label, actual, expected, atol=0.0, rtol=0.0):
        self.count += 1
        actual = actual.detach().cpu()
        expected = expected.detach().cpu()
        if actual.shape != expected.shape or actual.dtype != expected.dtype:
            self.failures.append(f"{label}: got {actual.dtype}{list(actual.shape)}, "
                                 f"expected {expected.dtype}{list(expected.shape)}")
            return
        a, e = actual.double(), expected.double()
        diff = (a - e).abs()
        worst = diff.max().item() if diff.numel() else 0.0
        self.max_diff = max(self.max_diff, worst)
        if not (diff <= atol + rtol * e.abs()).all():
            self.failures.append(f"{label}: max abs diff {worst:.3g} > atol {atol:g} + rtol {rtol:g}")

    def equal(self, label, actual, expected):
        self.count += 1
        if actual != expected:
            self.failures.append(f"{label}: got {actual!r}, expected {expected!r}")

    def true(self, label, cond, detail=""):
        self.count += 1
        if not cond:
            self.failures.append(f"{label}: {detail}" if detail else label)


def _store_barrier(store, key: str, world: int, timeout: float) -> bool:
    store.add(key, 1)
    deadline = time.monotonic() + timeout
    while store.add(key, 0) < world:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def run(ctx, scenarios):
    """Runs `scenarios` ([(name, fn)]) in order on every rank, recording each; see the policy above."""
    names = [n for n, _ in scenarios if ctx.args.only in n]
    record = {"rank": ctx.rank, "world": ctx.world, "device": ctx.args.device, "backend": ctx.backend,
              "planned": names, "results": {}, "stopped": None}
    path = os.path.join(ctx.out, f"rank{ctx.rank}.json")

    def write():
        with open(path + ".tmp", "w") as f:
            json.dump(record, f, indent=1)
        os.replace(path + ".tmp", path)

    write()
    store = dist.distributed_c10d._get_default_store()
    for i, (name, fn) in enumerate(s for s in scenarios if s[0] in names):
        check = Check()
        t0 = time.monotonic()
        status, detail = "pass", ""
        try:
            fn(ctx, check)
            if check.failures:
                status, detail = "fail", "; ".join(check.failures[:6])
        except Skip as e:
            status, detail = "skip", str(e)
        except Exception as e:  # recorded, then the barrier decides whether the run can go on
            status = "error"
            detail = f"{type(e).__name__}: {e}"[:1500] + "\n" + traceback.format_exc()[-2500:]
        record["results"][name] = {"status": status, "max_diff": check.max_diff, "checks": check.count,
                                   "detail": detail, "seconds": round(time.monotonic() - t0, 3)}
        write()
        errored = status == "error"
        store.set(f"scenario/{i}/error/{ctx.rank}", "1" if errored else "0")
        if not _store_barrier(store, f"scenario/{i}/done", ctx.world, BARRIER_TIMEOUT_S):
            record["stopped"] = f"after {name}: not every rank finished it within {BARRIER_TIMEOUT_S:.0f} s"
            write()
            sys.stdout.flush()
            os._exit(3)
        errors = [store.get(f"scenario/{i}/error/{r}") == b"1" for r in range(ctx.world)]
        timed_out = errored and "timed out" in detail.lower()
        if any(errors) and (not all(errors) or timed_out):
            record["stopped"] = f"after {name}: it raised on ranks {[r for r, e in enumerate(errors) if e]} " \
                                f"of {ctx.world}; later collectives could pair with the wrong calls"
            write()
            break
    return record


def finish():
    """Tears the group down the way a user's script would; the exit code says nothing about results."""
    if dist.is_initialized():
        dist.destroy_process_group()
