"""`nobs top`: the devices' table, redrawn every interval until q (or Ctrl-C)."""
from __future__ import annotations

import select
import sys
import termios
import time
import tty

from . import cli, state


def run(args) -> int:
    count, props = cli.topology()
    previous, last = state.read(), time.monotonic()
    fd = sys.stdin.fileno() if sys.stdin.isatty() else None
    saved = termios.tcgetattr(fd) if fd is not None else None
    try:
        if fd is not None:
            tty.setcbreak(fd)  # keys arrive one at a time, unechoed
        first = True
        while True:
            if not first:
                ready, _, _ = select.select([sys.stdin] if fd is not None else [], [], [], args.interval)
                if ready and sys.stdin.read(1) in ("q", "Q"):
                    return 0
            first = False
            snap, now = state.read(), time.monotonic()
            devices = state.devices(snap, count, props, previous, now - last)
            previous, last = snap, now
            health = {h: sum(d["health"] == h for d in devices) for h in ("healthy", "unhealthy", "unknown")}
            head = (f"nobs top  {time.strftime('%H:%M:%S')}  {len(devices)} devices: {health['healthy']} healthy, "
                    f"{health['unhealthy']} unhealthy, {health['unknown']} unknown  (q quits)")
            problems = "".join(f"\nproblem: {p}" for p in snap.problems)
            sys.stdout.write("\x1b[H\x1b[2J" + head + "\n\n" + cli.table(devices) + problems + "\n")
            sys.stdout.flush()
    except KeyboardInterrupt:
        return 0
    finally:
        if saved is not None:
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)
