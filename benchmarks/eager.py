"""Eager overhead and throughput on neuron against PyTorch CPU, measured in the same run.

Targets (issue #7): small-op overhead <= 1.0x CPU; large-op throughput >= 0.95x CPU; issue #38:
the 200-op small-tensor loop no slower than the CPU (<= 1.0x time), and an op big enough to split
across the kernel team (add on 2**17 and 2**20 elements) no slower than on the CPU: what it costs
to start the worker's OpenMP team for each kernel.
Each device is timed in a process of its own (in one process the two slow each other: each one's
OpenMP threads spin while the other's work needs the cores), the best of ROUNDS rounds counting.
The script runs itself twice, once per device, then prints the two runs side by side: every
measurement is `value(device, thunk)`, which a child evaluates for its own device and the printing
run reads back in the same order.
"""
import contextlib
import io
import json
import math
import sys
import time

import torch

from own_process import rerun

import torch_neuronx

ROUNDS = 7


def timed(fn, device, iters):
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    if device == "neuron":
        torch.neuron.synchronize()
    return (time.perf_counter() - t0) / iters


MEASURING = None  # the device this process measures; None in the run that prints
RESULTS = {"cpu": [], "neuron": []}  # measured values, in the order they were taken


def value(device, thunk, other=math.nan):
    """thunk() measured in `device`'s own process; in the printing run, that value; `other` in the
    other device's process (which prints nothing)."""
    if MEASURING is None:
        return RESULTS[device].pop(0)
    if MEASURING != device:
        return other
    v = thunk()
    RESULTS[device].append(v)
    return v


def compare(make, iters):
    """make(device) -> callable; returns best seconds per call for cpu and neuron."""
    def best(device):
        fn = make(device)
        timed(fn, device, max(1, iters // 10))  # warm-up
        return min(timed(fn, device, iters) for _ in range(ROUNDS))
    return {d: value(d, lambda d=d: best(d)) for d in ("cpu", "neuron")}


def main():
    # Only in the printing run: asking starts neuron's runtime, whose parked kernel team makes libgomp
    # throttle every team of the process, the CPU's too (its add on 2**17 elements: 13 -> 36 µs).
    if MEASURING is None:
        name = torch.neuron.get_device_name()
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; neuron = {name}")
    if LOOP_ONLY:
        graph_replay()
        return
    print(f"\nper-op overhead (µs/op, lower is better; best of {ROUNDS} rounds, each device in its own process)")
    print(f"{'op':<22}{'cpu':>10}{'neuron':>10}{'ratio':>8}  target <= 1.0")
    ops = {"add": lambda a, b: (lambda: a + b), "mul": lambda a, b: (lambda: a * b),
           "view": lambda a, b: (lambda: a.view(-1, 1)), "sum": lambda a, b: (lambda: a.sum())}
    for n in (1, 1024):
        for name, op in ops.items():
            def make(device, op=op, n=n):
                return op(torch.randn(n, device=device), torch.randn(n, device=device))
            r = compare(make, 20000)
            print(f"{name + f' [{n}]':<22}{r['cpu'] * 1e6:>10.2f}{r['neuron'] * 1e6:>10.2f}"
                  f"{r['neuron'] / r['cpu']:>8.2f}")
    print("\nops large enough to open a parallel region on the kernel team (µs/op; issue #38 item 3)")
    print(f"{'op':<22}{'cpu':>10}{'neuron':>10}{'ratio':>8}  target <= 1.0")
    for n in (2**17, 2**20):
        def make(device, n=n):
            a, b = torch.randn(n, device=device), torch.randn(n, device=device)
            out = torch.empty(n, device=device)
            return lambda: torch.add(a, b, out=out)
        r = compare(make, 2000)
        print(f"{f'add [{n}]':<22}{r['cpu'] * 1e6:>10.2f}{r['neuron'] * 1e6:>10.2f}{r['neuron'] / r['cpu']:>8.2f}")
    print("\nops of the boxed pipeline, async through meta + CPU kernel (µs/op)")
    print(f"{'op':<30}{'cpu':>10}{'neuron':>10}{'ratio':>8}")
    F = torch.nn.functional
    queued = {
        "cat 2x[64,64]": lambda d: (lambda a: lambda: torch.cat([a, a]))(torch.randn(64, 64, device=d)),
        "index_select [1024,64]": lambda d: (lambda a, i: lambda: torch.index_select(a, 0, i))(
            torch.randn(1024, 64, device=d), torch.randint(0, 1024, (256,), device=d)),
        "where [64,64]": lambda d: (lambda a: lambda: torch.where(a > 0, a, -a))(torch.randn(64, 64, device=d)),
        "layer_norm bf16 [512,1024]": lambda d: (lambda a: lambda: F.layer_norm(a, (1024,)))(
            torch.randn(512, 1024, dtype=torch.bfloat16, device=d)),
        "sdpa causal [2,8,128,64]": lambda d: (
            lambda q: lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True))(
            torch.randn(2, 8, 128, 64, device=d)),
    }
    torch_neuronx.reset_op_counts()
    for name, make in queued.items():
        r = compare(make, 200)
        print(f"{name:<30}{r['cpu'] * 1e6:>10.2f}{r['neuron'] * 1e6:>10.2f}{r['neuron'] / r['cpu']:>8.2f}")
    counts = value("neuron", lambda: [sum(c[k] for c in torch_neuronx.op_counts().values())
                                      for k in ("async", "sync", "copy")], other=[0, 0, 0])
    print(f"calls: {counts[0]} async, {counts[1]} sync, {counts[2]} copy")
    print("\nthroughput (higher is better)")
    print(f"{'op':<26}{'cpu':>10}{'neuron':>10}{'ratio':>8}  target >= 0.95")
    n = 1024
    for dtype, iters in ((torch.float32, 10), (torch.bfloat16, 10)):
        def make(device, dtype=dtype):
            a, b = torch.randn(n, n, dtype=dtype, device=device), torch.randn(n, n, dtype=dtype, device=device)
            return lambda: a @ b
        r = compare(make, iters)
        cpu, neu = (2 * n**3 / r[d] / 1e9 for d in ("cpu", "neuron"))
        print(f"{f'matmul {n} {str(dtype)[6:]} GFLOP/s':<26}{cpu:>10.1f}{neu:>10.1f}{neu / cpu:>8.2f}")
    m = 16 * 2**20

    def make_add(device):
        a, b, out = (torch.randn(m, device=device) for _ in range(3))
        return lambda: torch.add(a, b, out=out)
    r = compare(make_add, 20)
    cpu, neu = (3 * 4 * m / r[d] / 1e9 for d in ("cpu", "neuron"))
    print(f"{'add 16M fp32 GB/s':<26}{cpu:>10.1f}{neu:>10.1f}{neu / cpu:>8.2f}")

    graph_replay()
    profiler_overhead()


def profiler_overhead():
    """torch.profiler's cost per small op on neuron with device spans (ProfilerActivity.PrivateUse1:
    a span per task, its launch and flow, and the Trn2/Trn3 estimate of its op) against the
    profiler off, and against the CPU-only profiler on the CPU device."""
    from torch.profiler import ProfilerActivity, profile

    iters = 5000
    print(f"\nprofiler cost per op (a + b on [1024], µs/op; {iters} ops per round, best of {ROUNDS})")
    print(f"{'':<44}{'µs/op':>8}{'vs off':>8}")
    for device, activities in (("cpu", [ProfilerActivity.CPU]),
                               ("neuron", [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1])):
        def measure(device=device, activities=activities):
            a, b = torch.randn(1024, device=device), torch.randn(1024, device=device)
            timed(lambda: a + b, device, 500)
            off = min(timed(lambda: a + b, device, iters) for _ in range(ROUNDS))
            on = float("inf")
            for _ in range(ROUNDS):
                with profile(activities=activities, record_shapes=True) as prof:
                    on = min(on, timed(lambda: a + b, device, iters))
            return off, on, sum(1 for e in prof.events() if e.device_type != torch.autograd.DeviceType.CPU)
        off, on, spans = value(device, measure, other=(math.nan, math.nan, 0))
        label = "+".join(a_.name for a_ in activities)
        print(f"{device + ' profiler off':<44}{off * 1e6:>8.2f}{1.0:>8.2f}")
        print(f"{device + f' profiler {label} ({spans} device spans)':<44}{on * 1e6:>8.2f}{on / off:>8.2f}")


def small_loop(x, w):
    y = x
    for _ in range(100):  # 200 ops: a multiply-add and a tanh, on 256 elements
        y = torch.tanh(torch.addcmul(y, y, w))
    return y


def graph_replay():
    """A 200-op small-tensor loop: eager on CPU, eager on neuron (concatenation off and on), and
    neuron replaying a NeuronGraph."""
    def make(device):
        x, w = torch.randn(256, device=device), torch.randn(256, device=device) * 0.01
        return lambda: small_loop(x, w)

    def replayed():
        x, w = torch.randn(256, device="neuron"), torch.randn(256, device="neuron") * 0.01
        small_loop(x, w)
        g = torch.neuron.NeuronGraph()
        with torch.neuron.graph(g):
            small_loop(x, w)
        return min(timed(g.replay, "neuron", 20) for _ in range(ROUNDS))

    def concatenated():
        """Eager with concatenation on (torch_neuronx.set_concatenation): the segments a warm-up
        builds run as one queue task each after it. Returns (seconds per loop, ops concatenated per
        loop, queue tasks per loop)."""
        x, w = torch.randn(256, device="neuron"), torch.randn(256, device="neuron") * 0.01
        was = torch_neuronx.set_concatenation(True)
        try:
            timed(lambda: small_loop(x, w), "neuron", 20)  # first calls, then segments built
            timed(lambda: small_loop(x, w), "neuron", 20)
            torch_neuronx.reset_op_counts()
            tasks = torch_neuronx._C._tasks_submitted(0)
            best = min(timed(lambda: small_loop(x, w), "neuron", 20) for _ in range(ROUNDS))
            loops = 20 * ROUNDS
            tasks = (torch_neuronx._C._tasks_submitted(0) - tasks) / loops
            ops = sum(c["concatenated"] for c in torch_neuronx.op_counts().values()) / loops
            return best, ops, tasks
        finally:
            torch_neuronx.set_concatenation(was)

    r = compare(make, 20)
    replay = value("neuron", replayed)
    concat, concat_ops, concat_tasks = value("neuron", concatenated, other=(math.nan, 0, 0))
    print("\n200-op small-tensor loop (µs per loop, lower is better; target <= 1.0 eager)")
    print(f"{'':<34}{'µs':>10}{'vs CPU':>8}")
    for name, t in (("CPU eager", r["cpu"]), ("neuron eager", r["neuron"]),
                    ("neuron eager, concatenation on", concat), ("neuron graph replay", replay)):
        print(f"{name:<34}{t * 1e6:>10.1f}{t / r['cpu']:>8.2f}")
    print(f"concatenation on: {concat_ops:.0f} ops concatenated and {concat_tasks:.1f} queue tasks per loop")


# --loop: only the 200-op small-tensor loop (eager, concatenation on, graph replay).
LOOP_ONLY = "--loop" in sys.argv


def run():
    global MEASURING
    args = [a for a in sys.argv[1:] if a != "--loop"]
    if len(args) == 2 and args[0] == "--measure":
        MEASURING = args[1]
        with contextlib.redirect_stdout(io.StringIO()):
            main()
        print(json.dumps(RESULTS[MEASURING]))
        return
    for device in RESULTS:
        RESULTS[device] = rerun(__file__, "--measure", device, *(["--loop"] if LOOP_ONLY else []))
    main()


if __name__ == "__main__":
    run()
