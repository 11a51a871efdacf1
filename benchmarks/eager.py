"""Eager overhead and throughput on neuron against PyTorch CPU, measured in the same run.

Targets (issue #2): small-op overhead <= 1.5x CPU; large-op throughput >= 0.95x CPU.
CPU and neuron are timed in alternating rounds and the best round of each is kept, so drift in
a shared machine's load hits both alike.
"""
import time

import torch

import torch_neuronx  # noqa: F401

ROUNDS = 7


def timed(fn, device, iters):
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    if device == "neuron":
        torch.neuron.synchronize()
    return (time.perf_counter() - t0) / iters


def compare(make, iters):
    """make(device) -> callable; returns best seconds per call for cpu and neuron."""
    fns = {d: make(d) for d in ("cpu", "neuron")}
    for d, fn in fns.items():
        timed(fn, d, max(1, iters // 10))  # warm-up
    best = {d: float("inf") for d in fns}
    for _ in range(ROUNDS):
        for d, fn in fns.items():
            best[d] = min(best[d], timed(fn, d, iters))
    return best


def main():
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; neuron = {torch.neuron.get_device_name()}")
    print(f"\nper-op overhead (µs/op, lower is better; best of {ROUNDS} alternating rounds)")
    print(f"{'op':<22}{'cpu':>10}{'neuron':>10}{'ratio':>8}  target <= 1.5")
    ops = {"add": lambda a, b: (lambda: a + b), "mul": lambda a, b: (lambda: a * b),
           "view": lambda a, b: (lambda: a.view(-1, 1)), "sum": lambda a, b: (lambda: a.sum())}
    for n in (1, 1024):
        for name, op in ops.items():
            def make(device, op=op, n=n):
                return op(torch.randn(n, device=device), torch.randn(n, device=device))
            r = compare(make, 20000)
            print(f"{name + f' [{n}]':<22}{r['cpu'] * 1e6:>10.2f}{r['neuron'] * 1e6:>10.2f}"
                  f"{r['neuron'] / r['cpu']:>8.2f}")
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


if __name__ == "__main__":
    main()
