"""The device state the runtime of every process using a neuron device publishes: one JSON file
per process in a directory only this user may enter. A file is trusted only when this user owns
it, its mode is 0600, it parses within bounds (size, nesting, number ranges) and it has the
expected fields. A file whose process is provably gone, or whose pid now belongs to another
process, claims nothing (and is removed). Only a reader in the writer's pid namespace, whose /proc
shows that namespace, can prove it: elsewhere (a sidecar container) the process is "unknown" and
its file is left alone."""
from __future__ import annotations

import json
import math
import os
import stat
import time
from dataclasses import dataclass, field

VERSION = 1
_MAX_BYTES = 1 << 20
_MAX_DEPTH = 3  # the process, its list of devices, a device
_MAX_DIGITS = 20  # as many as a uint64 has: the runtime writes nothing larger
_UINT64 = (0, (1 << 64) - 1)
_RANGES = {"pid": (1, 1 << 22)}  # Linux's PID_MAX_LIMIT; every other integer is a uint64
_DEVICE_FIELDS = {"index": int, "memory_total": int, "memory_used": int, "queues": int, "tasks": int,
                  "failed": int, "queued": int, "busy_ns": int, "correctable": int, "uncorrectable": int,
                  "hung": bool, "last_error": str, "health": str, "health_reason": str}
_PROCESS_FIELDS = {"version": int, "pid": int, "start_time": int, "pid_ns": int, "uid": int, "command": str,
                   "profile": str, "lnc": int, "updated_unix_ms": int, "devices": list}


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
    """The live processes' states, those whose liveness cannot be seen from here (each with a
    "why"), and what could not be trusted."""
    directory: str
    processes: list = field(default_factory=list)
    unverified: list = field(default_factory=list)
    problems: list = field(default_factory=list)
    trusted: bool = True


def _check(doc, fields: dict, what: str):
    if not isinstance(doc, dict):
        raise ValueError(f"{what} is not an object")
    for name, kind in fields.items():
        value = doc.get(name)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ValueError(f"{what}: field {name!r} is missing or not {kind.__name__}")
        lo, hi = _RANGES.get(name, _UINT64)
        if kind is int and not lo <= value <= hi:
            raise ValueError(f"{what}: field {name!r} is {value}, outside {lo}..{hi}")


def _too_deep(text: str) -> bool:
    """Whether arrays and objects nest past _MAX_DEPTH, outside strings. Checked before json
    parses the text: its parser recurses once per level."""
    depth, in_string, escaped = 0, False, False
    for c in text:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            if depth > _MAX_DEPTH:
                return True
        elif c in "]}":
            depth -= 1
    return False


def _integer(text: str) -> int:
    if len(text.lstrip("-")) > _MAX_DIGITS:
        raise ValueError(f"a number of {len(text)} digits, more than a state holds")
    return int(text)


def _real(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:32]} is out of range")
    return value


def _constant(name: str):
    raise ValueError(f"{name} is not a number a state holds")


def _read_file(path: str) -> dict:
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) != 0o600:
        raise ValueError("not a file of this user with mode 0600")
    with open(path, "rb") as f:
        data = f.read(_MAX_BYTES + 1)  # the file may have grown since lstat
    if len(data) > _MAX_BYTES:
        raise ValueError(f"more than {_MAX_BYTES} bytes, more than a state file holds")
    # A command line is not always UTF-8 (argv is bytes): a stray byte costs a character, not the file.
    text = data.decode("utf-8", errors="replace")
    if _too_deep(text):
        raise ValueError(f"arrays or objects nested more than {_MAX_DEPTH} deep")
    doc = json.loads(text, parse_int=_integer, parse_float=_real, parse_constant=_constant)
    _check(doc, _PROCESS_FIELDS, "the state")
    if doc["version"] != VERSION:
        raise ValueError(f"version {doc['version']}, expected {VERSION}")
    for i, d in enumerate(doc["devices"]):
        _check(d, _DEVICE_FIELDS, f"device entry {i}")
    return doc


def _own_pid_namespace() -> tuple[int, str]:
    """This process's pid namespace (the inode of /proc/self/ns/pid), or 0 and why its /proc cannot
    tell whether a pid runs: /proc unreadable, or mounted for another pid namespace."""
    try:
        if os.readlink("/proc/self") != str(os.getpid()):
            return 0, "this reader's /proc shows another pid namespace than its own"
        return os.stat("/proc/self/ns/pid").st_ino, ""
    except OSError as e:
        return 0, f"this reader cannot read its pid namespace ({e.strerror})"


def _liveness(doc: dict, namespace: int, why_not: str) -> tuple[str, str]:
    """alive, dead or unknown (and why unknown). Dead only when proven: the pid runs nothing, or a
    process that started at another time, in the namespace the pid was published in."""
    age = f"it last published {max(0.0, time.time() - doc['updated_unix_ms'] / 1000):.0f} s ago"
    if not namespace:
        return "unknown", f"{why_not}; {age}"
    if doc["pid_ns"] != namespace:
        return "unknown", f"it runs in another pid namespace (a container?), where this reader cannot see it; {age}"
    now = start_time(doc["pid"])
    if now == 0:
        return "dead", ""
    if doc["start_time"] == 0:
        return "unknown", f"it published no start time to tell a reused pid by; {age}"
    return ("alive" if now == doc["start_time"] else "dead"), ""


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
    try:
        names = sorted(os.listdir(directory))
    except OSError as e:
        snap.trusted = False
        snap.problems.append(f"{directory} cannot be listed ({e.strerror}): its state is not known")
        return snap
    namespace, why_not = _own_pid_namespace()
    for name in names:
        if not name.endswith(".json"):
            continue
        path = os.path.join(directory, name)
        try:
            doc = _read_file(path)
            if name != f"{doc['pid']}.json":
                raise ValueError(f"it names pid {doc['pid']}")
        except FileNotFoundError:
            continue  # its process just exited
        except (OSError, ValueError) as e:
            snap.problems.append(f"state file {path} is corrupt or not trusted ({e}); ignored")
            continue
        alive, why = _liveness(doc, namespace, why_not)
        if alive == "dead":
            try:  # its process is gone (or the pid was reused): it claims nothing
                os.unlink(path)
            except OSError:
                pass
        elif alive == "unknown":
            snap.unverified.append(dict(doc, why=why))
        else:
            snap.processes.append(doc)
    return snap


def device_health(snap: Snapshot, index: int) -> tuple[str, list]:
    """healthy, unhealthy or unknown, with the reasons: unhealthy when any live process's runtime
    found it so (the rule lives in the runtime: Runtime::device_health); unknown when only a
    process whose liveness cannot be seen from here does."""
    if not snap.trusted or snap.problems:
        return "unknown", list(snap.problems)
    reasons = [f"{d['health_reason']} (pid {p['pid']})" for p in snap.processes for d in p["devices"]
               if d["index"] == index and d["health"] == "unhealthy"]
    unverified = [f"{d['health_reason']} (pid {p['pid']}, which may have exited: {p['why']})"
                  for p in snap.unverified for d in p["devices"] if d["index"] == index and d["health"] == "unhealthy"]
    return ("unhealthy" if reasons else "unknown" if unverified else "healthy"), reasons + unverified


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
        unverified = [{"pid": p["pid"], "command": p["command"], "memory": d["memory_used"], "why": p["why"]}
                      for p in snap.unverified for d in p["devices"]
                      if d["index"] == i and (d["memory_used"] or d["tasks"] or d["queued"])]
        utilization = None
        if previous is not None and interval_s > 0:
            delta = sum(v - busy_before.get(k, v) for k, v in busy_now.items() if k[1] == i)
            utilization = min(1.0, max(0.0, delta / (interval_s * 1e9)))
        health, reasons = device_health(snap, i)
        out.append({"index": i, "name": f"neuron:{i}", "profile": props[i]["name"], "memory_total": props[i]["total"],
                    "memory_used": used, "processes": users, "unverified_processes": unverified,
                    "utilization": utilization, "tasks": tasks, "failed": failed,
                    "correctable_errors": correctable, "uncorrectable_errors": uncorrectable,
                    "health": health, "reasons": reasons})
    return out
