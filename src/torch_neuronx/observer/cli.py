"""`nobs`: the neuron devices' health, from the state every process using one publishes.

  nobs status                     overall health; exit 1 if a device is not healthy
  nobs devices                    each device: profile, memory, processes, utilization, health
  nobs health run [--device N] [--timeout S]
                                  golden programs per core; exit 0 only when all passed
  nobs monitor [--interval S] [--count N]
                                  JSON lines, as neuron-monitor
  nobs top [--interval S]         a live table (q quits)
  nobs serve [--host H] [--port P]
                                  HTTP: /healthz /readyz /version /v1/devices /v1/health /metrics

status, devices and health run print JSON with --json; monitor always does (it takes --json too).
top (a table for a terminal) and serve (an HTTP server) refuse it.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

from . import state

GIB = 1 << 30


def topology():
    """The visible devices (count and, per device, its profile and memory), as this process's
    settings describe them. Read from the runtime's topology without starting a queue: nobs itself
    is not a process using a device."""
    from torch_neuronx import _C

    count = _C._device_count()
    props = []
    for i in range(count):
        p = _C._device_properties(i)
        props.append({"name": p["profile"], "total": p["total_memory"]})
    return count, props


def _version() -> str:
    from torch_neuronx import __version__

    return __version__


def sample(interval_s: float = 0.25):
    """Devices with utilization measured over `interval_s`."""
    count, props = topology()
    before = state.read()
    time.sleep(interval_s)
    snap = state.read()
    return snap, state.devices(snap, count, props, before, interval_s)


def status(devices: list, snap: state.Snapshot) -> dict:
    counts = {h: sum(1 for d in devices if d["health"] == h) for h in ("healthy", "unhealthy", "unknown")}
    return {"version": _version(), "state_dir": snap.directory, "trusted": snap.trusted, "devices": len(devices),
            **counts, "processes": sorted(p["pid"] for p in snap.processes),
            "unverified_processes": sorted(p["pid"] for p in snap.unverified), "problems": snap.problems}


def health_run(device: int | None, timeout: float) -> list:
    count, _ = topology()
    if device is not None and not 0 <= device < count:
        raise SystemExit(f"nobs: --device {device}: {count} devices are visible (0-{count - 1})")
    snap = state.read()

    def busy_with(d):  # other processes holding memory or work on the device (maybe alive): not to be disturbed
        return sorted(p["pid"] for p in snap.processes + snap.unverified if p["pid"] != os.getpid() and any(
            x["index"] == d and (x["memory_used"] or x["queued"]) for x in p["devices"]))

    results = []
    for d in ([device] if device is not None else range(count)):
        holders = busy_with(d)
        if holders:
            results.append({"device": d, "outcome": "device_busy", "processes": holders, "checks": []})
            continue
        peer = next((p for p in list(range(d + 1, count)) + list(range(d)) if not busy_with(p)), -1)
        cmd = [sys.executable, "-m", "torch_neuronx.observer.golden", str(d), str(peer)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
            outcome = None
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the golden program and its ranks
            out, err = proc.communicate()
            outcome = "timeout"
        checks = []
        for line in out.splitlines():
            try:
                checks.append(json.loads(line))
            except ValueError:
                pass
        if outcome is None:
            outcome = "passed" if proc.returncode == 0 and checks and all(c["passed"] for c in checks) else "failed"
        result = {"device": d, "outcome": outcome, "checks": checks}
        if outcome == "failed" and not checks:
            result["error"] = err.strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        results.append(result)
    return results


def _memory(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


def table(devices: list) -> str:
    lines = [f"{'device':<10}{'profile':<8}{'memory used / total':>26}{'util':>7}  {'health':<10} processes"]
    for d in devices:
        util = "-" if d["utilization"] is None else f"{d['utilization']:.0%}"
        procs = ", ".join([f"{p['pid']} ({_memory(p['memory'])})" for p in d["processes"]] +
                          [f"{p['pid']}? ({_memory(p['memory'])})" for p in d["unverified_processes"]]) or "-"
        memory = _memory(d["memory_used"]) + " / " + _memory(d["memory_total"])
        lines.append(f"{d['name']:<10}{d['profile']:<8}{memory:>26}{util:>7}  {d['health']:<10} {procs}")
        for r in d["reasons"]:
            lines.append(f"{'':<10}{r}")
    return "\n".join(lines)


def _print(args, doc, text: str):
    print(json.dumps(doc, indent=2) if args.json else text, flush=True)


def cmd_status(args) -> int:
    snap, devices = sample()
    s = status(devices, snap)
    text = (f"neuron devices: {s['devices']} ({s['healthy']} healthy, {s['unhealthy']} unhealthy, "
            f"{s['unknown']} unknown); processes: {len(s['processes'])}; state: {s['state_dir']}")
    for d in devices:
        for r in d["reasons"]:
            text += f"\n  {d['name']}: {r}"
    for p in snap.unverified:
        text += f"\n  process {p['pid']} ({' '.join(p['command'].split())[:60]}): may have exited: {p['why']}"
    for p in s["problems"]:
        text += f"\n  problem: {p}"
    if s["unhealthy"]:
        text += "\n  recommended action: stop jobs on the unhealthy devices and run `nobs health run` on them"
    elif s["problems"]:
        text += "\n  recommended action: the state could not be read or trusted; see the problems above"
    elif s["unknown"]:
        text += "\n  recommended action: run nobs in the processes' pid namespace, where it can see whether they run"
    _print(args, s, text)
    return 0 if s["healthy"] == s["devices"] else 1


def cmd_devices(args) -> int:
    snap, devices = sample()
    _print(args, {"devices": devices, "problems": snap.problems}, table(devices))
    return 0


def cmd_health_run(args) -> int:
    results = health_run(args.device, args.timeout)
    lines = []
    for r in results:
        extra = f" (held by pid {', '.join(map(str, r['processes']))}; not disturbed)" if r.get("processes") else ""
        lines.append(f"neuron:{r['device']}: {r['outcome']}{extra}")
        for c in r["checks"]:
            lines.append(f"  {c['check']:<12}{'passed' if c['passed'] else 'FAILED':<8}{c['detail']}")
        for e in r.get("error", []):
            lines.append(f"  {e}")
    _print(args, {"results": results}, "\n".join(lines))
    return 0 if results and all(r["outcome"] == "passed" for r in results) else 1


def cmd_monitor(args) -> int:
    count, props = topology()
    previous, last = state.read(), time.monotonic()
    n = 0
    try:
        while args.count is None or n < args.count:
            time.sleep(args.interval)
            snap, now = state.read(), time.monotonic()
            devices = state.devices(snap, count, props, previous, now - last)
            print(json.dumps({"timestamp": time.time(), "devices": devices, "problems": snap.problems}), flush=True)
            previous, last, n = snap, now, n + 1
    except KeyboardInterrupt:
        pass
    return 0


def _refuse_json(why: str):
    """An action for --json on a command whose output cannot be JSON: a clear error, not an option
    silently ignored."""
    class RefuseJson(argparse.Action):
        def __init__(self, **kwargs):
            super().__init__(nargs=0, **kwargs)

        def __call__(self, parser, namespace, values, option_string=None):
            parser.error(f"--json: {why}")

    return RefuseJson


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="nobs", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(__doc__.split("\n\n")[1:3]))
    sub = p.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="JSON output")
    sub.add_parser("status", parents=[common]).set_defaults(fn=cmd_status)
    sub.add_parser("devices", parents=[common]).set_defaults(fn=cmd_devices)
    health = sub.add_parser("health").add_subparsers(dest="action", required=True)
    run = health.add_parser("run", parents=[common])
    run.add_argument("--device", type=int)
    run.add_argument("--timeout", type=float, default=120.0, help="seconds per device (default 120)")
    run.set_defaults(fn=cmd_health_run)
    monitor = sub.add_parser("monitor")
    monitor.add_argument("--json", action="store_true", help="accepted: the output is always JSON lines")
    monitor.add_argument("--interval", type=float, default=1.0)
    monitor.add_argument("--count", type=int, help="stop after this many reports")
    monitor.set_defaults(fn=cmd_monitor)
    top = sub.add_parser("top")
    top.add_argument("--json", action=_refuse_json("top draws a table for a terminal; `nobs monitor` prints the "
                                                    "same as JSON lines"), help="refused: use `nobs monitor`")
    top.add_argument("--interval", type=float, default=1.0)
    top.set_defaults(fn=lambda a: __import__("torch_neuronx.observer.top", fromlist=["run"]).run(a))
    serve = sub.add_parser("serve")
    serve.add_argument("--json", action=_refuse_json("serve is an HTTP server; its API answers JSON on its own "
                                                      "(/metrics in Prometheus text)"), help="refused")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=7001)
    serve.set_defaults(fn=lambda a: __import__("torch_neuronx.observer.server", fromlist=["run"]).run(a))
    args = p.parse_args(argv)
    for name in ("interval", "timeout"):
        if getattr(args, name, 1) is not None and getattr(args, name, 1) <= 0:
            p.error(f"--{name} must be positive")
    if getattr(args, "count", None) is not None and args.count <= 0:
        p.error("--count must be positive")
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
