"""Starts N ranks of a worker script the way torchrun does (the same environment variables: RANK,
LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT...), under a hard time limit, and reads back what each rank
wrote (common.py's rank{R}.json).

Why not torchrun itself: it starts every worker in a session of its own, so killing torchrun's
process group leaves ranks running; and it kills the surviving ranks the moment one rank fails,
which hides what a survivor reports about the failure — the very thing the failure tests check.
Here all ranks share one process group that a timeout kills at once, and a rank that fails gives
the others `grace_s` to report before they are killed too.
"""
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time

SHM_PREFIX = "neuronx"  # the neuron backend's shared-memory segments (runtime/src/shm_group.cpp)


@dataclasses.dataclass
class Launch:
    returncodes: list
    timed_out: bool
    seconds: float
    logs: list
    ranks: dict  # rank -> its JSON record, for the ranks that wrote one
    shm_leaked: list

    def tail(self, chars: int = 2500) -> str:
        parts = [f"returncodes {self.returncodes}, {self.seconds:.1f} s"
                 + (" — KILLED at the time limit" if self.timed_out else "")]
        for r, log in enumerate(self.logs):
            parts.append(f"--- rank {r} output (last {chars} chars) ---\n{log[-chars:]}")
        return "\n".join(parts)

    def nranks(self) -> int:
        return len(self.returncodes)

    def scenarios(self, prefix: str = "") -> list:
        """Every planned scenario name starting with `prefix`, in the order rank 0 planned them."""
        names = []
        for rec in self.ranks.values():
            names += [n for n in rec["planned"] if n.startswith(prefix) and n not in names]
        return names

    def verdict(self, name: str):
        """("pass" | "skip" | "fail", message) for one scenario over all ranks."""
        per_rank, lines, seen = {}, [], {}
        for r in range(self.nranks()):
            rec = self.ranks.get(r)
            res = rec["results"].get(name) if rec else None
            if res is None:
                why = (rec or {}).get("stopped") or "no result (the rank died, hung or was killed)"
                res = {"status": "not run", "max_diff": None, "detail": why, "checks": 0}
            per_rank[r] = res
            detail = res["detail"]
            if detail and detail in seen:  # the same traceback on every rank is shown once
                detail = f"(same as rank {seen[detail]})"
            else:
                seen[detail] = r
            head = f"rank {r}: {res['status']}"
            if res["max_diff"] is not None:
                head += f" max_diff={res['max_diff']:.3g} checks={res['checks']}"
            lines.append(f"{head} {detail}".rstrip())
        # ranks outside a sub-group pass without comparing anything, whatever the members did
        statuses = {res["status"] for res in per_rank.values()}
        compared = any(res["status"] == "pass" and res["checks"] for res in per_rank.values())
        if not statuses <= {"pass", "skip"}:
            state = "fail"
        elif compared and "skip" not in statuses:
            state = "pass"
        elif not compared and "skip" in statuses:
            reason = next(res["detail"] for res in per_rank.values() if res["status"] == "skip")
            return "skip", f"{name}: {reason}"
        else:
            state = "fail"
            lines.append("ranks disagree on skipping" if compared else "no rank compared anything")
        return state, f"{name}\n" + "\n".join(lines)


def artifact(out: str, scenario: str, rank: int) -> str:
    """Where a rank saves the tensors of a scenario for pytest (common.Context.save)."""
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in scenario)
    return os.path.join(out, f"{name}.rank{rank}.pt")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shm_entries() -> set:
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith(SHM_PREFIX)}
    except FileNotFoundError:
        return set()


def launch(script: str, nproc: int, args: list, out: str, timeout: float, env: dict | None = None,
           grace_s: float = 20.0) -> Launch:
    """Runs `python script --out out *args` as ranks 0..nproc-1; never longer than `timeout` s."""
    os.makedirs(out, exist_ok=True)
    shm_before = shm_entries()
    base = dict(os.environ)
    base.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": str(nproc),
                 "LOCAL_WORLD_SIZE": str(nproc), "GROUP_RANK": "0", "ROLE_WORLD_SIZE": str(nproc),
                 "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"})
    base.update(env or {})
    cmd = [sys.executable, os.path.abspath(script), "--out", os.path.abspath(out), *args]
    procs, logs = [], []
    start = time.monotonic()
    pgid = None
    try:
        for r in range(nproc):
            e = dict(base, RANK=str(r), LOCAL_RANK=str(r), ROLE_RANK=str(r))
            log = open(os.path.join(out, f"rank{r}.log"), "w")
            logs.append(log)
            # one process group for all ranks (and whatever they start) so that one killpg ends the lot
            kw = {"process_group": 0 if pgid is None else pgid}
            procs.append(subprocess.Popen(cmd, env=e, cwd=out, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, **kw))
            if pgid is None:
                pgid = procs[0].pid
        timed_out, first_failure = False, None
        while any(p.poll() is None for p in procs):
            now = time.monotonic()
            if now - start > timeout:
                timed_out = True
                break
            if first_failure is None and any(p.returncode not in (None, 0) for p in procs):
                first_failure = now
            if first_failure is not None and now - first_failure > grace_s:
                break
            time.sleep(0.05)
    finally:
        if pgid is not None:
            try:
                os.killpg(pgid, signal.SIGKILL)  # also ends leftovers of ranks that did exit
            except ProcessLookupError:
                pass
        for p in procs:
            p.wait()
        for log in logs:
            log.close()
    seconds = time.monotonic() - start
    texts, ranks = [], {}
    for r in range(nproc):
        with open(os.path.join(out, f"rank{r}.log"), errors="replace") as f:
            texts.append(f.read())
        try:
            with open(os.path.join(out, f"rank{r}.json")) as f:
                ranks[r] = json.load(f)
        except (FileNotFoundError, json.JSONDecodeError):
            pass
    leaked = sorted(shm_entries() - shm_before)
    return Launch([p.returncode for p in procs], timed_out, seconds, texts, ranks, leaked)
