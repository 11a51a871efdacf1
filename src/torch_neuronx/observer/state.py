"""The device state the runtime of every process using a neuron device publishes: one JSON file
per process in a directory only this user may enter. A file is trusted only when this user owns
it, its mode is 0600, it parses and it has the expected fields; a file whose process is gone, or
whose pid now belongs to another process, claims nothing (and is removed)."""
from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field

VERSION = 1
_MAX_BYTES = 1 << 20
_DEVICE_FIELDS = {"index": int, "memory_total": int, "memory_used": int, "queues": int, "tasks": int,
                  "failed": int, "queued": int, "busy_ns": int, "correctable": int, "uncorrectable": int,
                  "hung": bool, "last_error": str, "health": str, "health_reason": str}
_PROCESS_FIELDS = {"version": int, "pid": int, "start_time": int, "uid": int, "command": str, "profile": str,
                   "lnc": int, "updated_unix_ms": int, "devices": list}


def state_dir() -> str:
    return os.environ.get("TORCH_NEURONX_STATE_DIR") or f"/dev/shm/torch-neuronx-{os.getuid()}"


def start_time(pid: int) -> int:
    """Clock ticks since boot when `pid` started (/proc/<pid>/stat, field 22); 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return 0
    return int(text[text.rindex(")") + 2:].split()[19])


@dataclass
class Snapshot:
    """The live processes' states, and what could not be trusted."""
    directory: str
    processes: list = field(default_factory=list)
    problems: list = field(default_factory=list)
    trusted: bool = True


def _check(doc, fields: dict, what: str):
    if not isinstance(doc, dict):
        raise ValueError(f"{what} is not an object")
    for name, kind in fields.items():
        value = doc.get(name)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ValueError(f"{what}: field {name!r} is missing or not {kind.__name__}")


def _read_file(path: str) -> dict:
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) != 0o600:
        raise ValueError("not a file of this user with mode 0600")
    if st.st_size > _MAX_BYTES:
        raise ValueError(f"{st.st_size} bytes, more than a state file holds")
    with open(path, "rb") as f:
        doc = json.loads(f.read().decode("utf-8"))
    _check(doc, _PROCESS_FIELDS, "the state")
    if doc["version"] != VERSION:
        raise ValueError(f"version {doc['version']}, expected {VERSION}")
    for i, d in enumerate(doc["devices"]):
        _check(d, _DEVICE_FIELDS, f"device entry {i}")
    return doc


def read(directory: str | None = None) -> Snapshot:
    directory = directory or state_dir()
    snap = Snapshot(directory)
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        return snap  # no process has used a device yet
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        snap.trusted = False
        snap.problems.append(f"{directory} is not a directory of this user that only it may enter (mode 0700): "
                             f"its state is not trusted")
        return snap
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".json"):
            continue
        path = os.path.join(directory, name)
        try:
            doc = _read_file(path)
        except FileNotFoundError:
            continue  # its process just exited
        except (OSError, ValueError, UnicodeDecodeError) as e:
            snap.problems.append(f"state file {path} is corrupt or not trusted ({e}); ignored")
            continue
        if name != f"{doc['pid']}.json" or start_time(doc["pid"]) != doc["start_time"]:
            try:  # its process is gone (or the pid was reused): it claims nothing
                os.unlink(path)
            except OSError:
                pass
            continue
        snap.processes.append(doc)
    return snap


def device_health(snap: Snapshot, index: int) -> tuple[str, list]:
    """healthy, unhealthy or unknown, with the reasons: unhealthy when any live process's runtime
    found it so (the rule lives in the runtime: Runtime::device_health)."""
    if not snap.trusted or snap.problems:
        return "unknown", list(snap.problems)
    reasons = [f"{d['health_reason']} (pid {p['pid']})" for p in snap.processes for d in p["devices"]
               if d["index"] == index and d["health"] == "unhealthy"]
    return ("unhealthy" if reasons else "healthy"), reasons


def devices(snap: Snapshot, count: int, props, previous: Snapshot | None = None, interval_s: float = 0.0) -> list:
    """Per device: its profile, memory, the processes using it, utilization (the share of the
    interval since `previous` in which its queues ran tasks) and health."""
    busy_before = {(p["pid"], d["index"]): d["busy_ns"] for p in previous.processes for d in p["devices"]} \
        if previous is not None else {}
    busy_now = {(p["pid"], d["index"]): d["busy_ns"] for p in snap.processes for d in p["devices"]}
    out = []
    for i in range(count):
        users, used, correctable, uncorrectable, tasks, failed = [], 0, 0, 0, 0, 0
        for p in snap.processes:
            for d in p["devices"]:
                if d["index"] != i:
                    continue
                correctable += d["correctable"]  # what any process saw of the device
                uncorrectable += d["uncorrectable"]
                if d["memory_used"] or d["tasks"] or d["queued"]:
                    users.append({"pid": p["pid"], "command": p["command"], "memory": d["memory_used"]})
                    used += d["memory_used"]
                    tasks += d["tasks"]
                    failed += d["failed"]
        utilization = None
        if previous is not None and interval_s > 0:
            delta = sum(v - busy_before.get(k, v) for k, v in busy_now.items() if k[1] == i)
            utilization = min(1.0, max(0.0, delta / (interval_s * 1e9)))
        health, reasons = device_health(snap, i)
        out.append({"index": i, "name": f"neuron:{i}", "profile": props[i]["name"], "memory_total": props[i]["total"],
                    "memory_used": used, "processes": users, "utilization": utilization, "tasks": tasks,
                    "failed": failed, "correctable_errors": correctable, "uncorrectable_errors": uncorrectable,
                    "health": health, "reasons": reasons})
    return out
