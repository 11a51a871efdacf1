"""What a rank sees when its peer fails, on a group created with a 5 s timeout: rank 1 either
exits abruptly before an all_reduce (`--mode exit`, like a crash) or never calls it (`--mode
sleep`); rank 0 calls it and writes `failure.json`: whether it raised, the message, how long it
took, and whether the next collective raised at once (the group must stay failed, not hang again).
With `--set-timeout`, the group is created with a 120 s timeout and given the 5 s one afterwards
through torch.distributed's _set_pg_timeout (as TorchTitan does); the warnings that call gave are
in `failure.json` too.

`python failures.py --device {neuron,cpu} --out DIR --mode {exit,sleep} [--set-timeout]`, two ranks.
"""
import json
import os
import sys
import time
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist

import common

GROUP_TIMEOUT_S = 5.0


def call(fn, device):
    t0 = time.monotonic()
    try:
        fn()
        if device.type == "neuron":  # an error of a collective queued on a stream surfaces here at the latest
            torch.neuron.synchronize()
        return {"raised": False, "message": "", "seconds": time.monotonic() - t0}
    except Exception as e:
        return {"raised": True, "type": type(e).__name__, "message": str(e)[:3000],
                "seconds": time.monotonic() - t0}


def main():
    def options(p):
        p.add_argument("--mode", choices=["exit", "sleep"], required=True)
        p.add_argument("--set-timeout", action="store_true")

    args = common.parse_args(options)
    args.timeout = 120.0 if args.set_timeout else GROUP_TIMEOUT_S
    ctx = common.init(args)
    set_timeout_warnings = []
    if args.set_timeout:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            dist.distributed_c10d._set_pg_timeout(timedelta(seconds=GROUP_TIMEOUT_S))
        set_timeout_warnings = [str(w.message) for w in caught]
    result_path = os.path.join(ctx.out, "failure.json")
    t = torch.ones(16, device=ctx.device)
    dist.all_reduce(t)  # the group works: what follows is about the failure, not about set-up
    if ctx.rank == 1:
        if args.mode == "exit":
            os._exit(1)
        deadline = time.monotonic() + 60  # never calls the collective; leaves once rank 0 reported
        while not os.path.exists(result_path) and time.monotonic() < deadline:
            time.sleep(0.1)
        os._exit(0)
    first = call(lambda: dist.all_reduce(t), ctx.device)
    # an async call must fail through wait() the same way, and at once: the group is already failed
    second = call(lambda: dist.all_reduce(t, async_op=True).wait(), ctx.device)
    with open(result_path + ".tmp", "w") as f:
        json.dump({"mode": args.mode, "timeout": GROUP_TIMEOUT_S, "first": first, "second": second,
                   "set_timeout_warnings": set_timeout_warnings}, f, indent=1)
    os.replace(result_path + ".tmp", result_path)
    sys.stdout.flush()
    # no destroy_process_group(): a real job dies here too, and the backend must not leave
    # shared memory behind when a rank ends without tearing down
    os._exit(0)


if __name__ == "__main__":
    main()
