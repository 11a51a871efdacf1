"""Strangers at rank 0's device-memory socket while a neuron process group forms (two ranks).

Rank 0's store starts intruder.py processes against the socket name rank 0 publishes, and waits
until they are connected, before the name reaches rank 1: the strangers are queued ahead of the
real rank. `--mode`:
- `silent`: a process of our own uid that connects and sends nothing;
- `impostors`: a process of another uid (`nobody`) and one of our uid, each claiming to be rank 1
  with a memory file of its own;
- `late_peer`: the impostors, and rank 1 reaches rank 0 only after rank 0's timeout (its store
  holds rank 0's socket name back that long).

Each rank writes `{out}/rank{R}.json`: whether the group formed, how long that took, the error,
and with a group the sum of an all_reduce of rank+1 over the group.

`python handshake.py --device neuron --out DIR --mode {silent,impostors,late_peer}`, two ranks.
"""
import json
import os
import subprocess
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import common

GROUP_TIMEOUT_S = 5.0
NOBODY = 65534
INTRUDERS = {"silent": [("silent", None)],
             "impostors": [("claim", NOBODY), ("claim", None)],
             "late_peer": [("claim", NOBODY), ("claim", None)]}


class Store(dist.Store):
    """A TCPStore that starts the intruders (rank 0), or holds rank 0's socket name back from rank 1
    (late_peer), when the neuron backend publishes or reads a socket name."""

    def __init__(self, inner, rank, mode):
        super().__init__()
        self.inner, self.rank, self.mode, self.intruders = inner, rank, mode, []

    def set(self, key, value):
        if self.rank == 0 and key.endswith("neuronx_fds/0"):
            name = value.decode() if isinstance(value, bytes) else value
            for kind, uid in INTRUDERS[self.mode]:
                cmd = [sys.executable, os.path.join(os.path.dirname(__file__), "intruder.py"), name, kind]
                p = subprocess.Popen(cmd + ([str(uid)] if uid is not None else []), stdout=subprocess.PIPE, text=True)
                self.intruders.append(p)
                line = p.stdout.readline().strip()
                assert line == "connected", f"intruder {kind} uid={uid} did not connect: {line!r}"
        self.inner.set(key, value)

    def get(self, key):
        if self.rank == 1 and self.mode == "late_peer" and key.endswith("neuronx_fds/0"):
            time.sleep(GROUP_TIMEOUT_S + 2)
        return self.inner.get(key)

    def add(self, key, value):
        return self.inner.add(key, value)

    def compare_set(self, key, expected, desired):
        return self.inner.compare_set(key, expected, desired)

    def check(self, keys):
        return self.inner.check(keys)

    def wait(self, keys, timeout=None):
        return self.inner.wait(keys) if timeout is None else self.inner.wait(keys, timeout)

    def delete_key(self, key):
        return self.inner.delete_key(key)

    def num_keys(self):
        return self.inner.num_keys()


def main():
    args = common.parse_args(lambda p: p.add_argument("--mode", choices=sorted(INTRUDERS), required=True))
    device = common.bind_device(args)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    tcp = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, is_master=rank == 0,
                        timeout=timedelta(seconds=60))
    store = Store(tcp, rank, args.mode)
    record = {"rank": rank, "mode": args.mode, "formed": False, "error": "", "sum": None}
    t0 = time.monotonic()
    try:
        dist.init_process_group(args.backend, store=store, rank=rank, world_size=world,
                                timeout=timedelta(seconds=GROUP_TIMEOUT_S))
        record["formed"] = True
        record["seconds"] = time.monotonic() - t0
        t = torch.full((1024,), float(rank + 1), device=device)
        dist.all_reduce(t)
        torch.neuron.synchronize()
        record["sum"] = sorted(set(t.cpu().tolist()))  # every element is the same sum
    except Exception as e:
        record.update(seconds=time.monotonic() - t0, error=f"{type(e).__name__}: {e}"[:3000])
    with open(os.path.join(args.out, f"rank{rank}.json.tmp"), "w") as f:
        json.dump(record, f, indent=1)
    os.replace(os.path.join(args.out, f"rank{rank}.json.tmp"), os.path.join(args.out, f"rank{rank}.json"))
    # rank 0 serves the store: it leaves last
    tcp.add("handshake/done", 1)
    deadline = time.monotonic() + 30
    while rank == 0 and tcp.add("handshake/done", 0) < world and time.monotonic() < deadline:
        time.sleep(0.05)
    for p in store.intruders:
        p.kill()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
