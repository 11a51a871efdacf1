"""What the ranks of a group spanning two hosts see when the other host fails, on a group created
with a 5 s timeout. Every rank joins, all-reduces once (the group works), writes
`ready.rank{R}.json` and then:
- `--mode link_down`: all-reduces in a loop; the test takes the veth link down meanwhile, so a
  collective is in flight on both hosts when the link goes;
- `--mode kill_host`: the same loop; the test SIGKILLs every process of the host of rank 2;
- `--mode late_host`: the ranks of rank 2's host sleep past the timeout before their next
  all_reduce; the others call it at once.
A rank whose collective raises writes `fault.rank{R}.json` (the message, when it raised, whether
the next collective raised at once) and exits without tearing the group down, as a crashed job
would: the test checks that nothing is left behind.
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist

import common

GROUP_TIMEOUT_S = 5.0


def write(path, obj):
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(path + ".tmp", path)


def attempt(fn, device):
    try:
        fn()
        torch.neuron.synchronize() if device.type == "neuron" else None
        return None
    except Exception as e:
        return e


def main():
    args = common.parse_args(lambda p: p.add_argument("--mode", choices=["link_down", "kill_host", "late_host"],
                                                      required=True))
    args.timeout = GROUP_TIMEOUT_S
    ctx = common.init(args)
    t = torch.ones(1 << 16, device=ctx.device)
    dist.all_reduce(t)
    torch.neuron.synchronize()
    write(os.path.join(ctx.out, f"ready.rank{ctx.rank}.json"),
          {"rank": ctx.rank, "host": os.environ.get("NEURONX_TEST_HOST"), "pid": os.getpid()})
    late = args.mode == "late_host" and ctx.rank in (2, 3)
    if late:
        time.sleep(GROUP_TIMEOUT_S * 3)
    calls, started = 0, time.time()
    while True:
        t0 = time.time()
        err = attempt(lambda: dist.all_reduce(t), ctx.device)
        if err is not None:
            break
        calls += 1
        if time.time() - started > 120:  # the test's own limit is shorter; never loop for ever
            os._exit(4)
    raised_at = time.time()
    again = time.time()
    second = attempt(lambda: dist.all_reduce(t, async_op=True).wait(), ctx.device)
    write(os.path.join(ctx.out, f"fault.rank{ctx.rank}.json"),
          {"rank": ctx.rank, "late": late, "calls": calls, "timeout": GROUP_TIMEOUT_S, "type": type(err).__name__,
           "message": str(err)[:4000], "started_at": t0, "raised_at": raised_at,
           "second_raised": second is not None, "second_seconds": time.time() - again})
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
