"""Eager overhead and throughput on neuron against PyTorch CPU, measured in the same run.

Targets (issue #2): small-op overhead <= 1.5x CPU; large-op throughput >= 0.95x CPU.
"""
import time

import torch

import torch_neuronx  # noqa: F401


def per_op_us(fn, device, iters):
    fn()
    if device == "neuron":
        torch.neuron.synchronize()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        if device == "neuron":
            torch.neuron.synchronize()
        best = min(best, (time.perf_counter() - t0) / iters)
    return best * 1e6


def main():
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; neuron = {torch.neuron.get_device_name()}")
    print("\nper-op overhead (µs/op, lower is better; best of 5)")
    print(f"{'op':<22}{'cpu':>10}{'neuron':>10}{'ratio':>8}  target <= 1.5")
    for n in (1, 1024):
        for name, make in (("add", lambda a, b: (lambda: a + b)), ("mul", lambda a, b: (lambda: a * b)),
                           ("view", lambda a, b: (lambda: a.view(-1, 1))), ("sum", lambda a, b: (lambda: a.sum()))):
            res = {}
            for device in ("cpu", "neuron"):
                a, b = torch.randn(n, device=device), torch.randn(n, device=device)
                res[device] = per_op_us(make(a, b), device, 2000)
            print(f"{name + f' [{n}]':<22}{res['cpu']:>10.2f}{res['neuron']:>10.2f}{res['neuron'] / res['cpu']:>8.2f}")
    print("\nthroughput (higher is better)")
    print(f"{'op':<26}{'cpu':>10}{'neuron':>10}{'ratio':>8}  target >= 0.95")
    for dtype in (torch.float32, torch.bfloat16):
        res = {}
        n = 1024
        for device in ("cpu", "neuron"):
            a, b = torch.randn(n, n, dtype=dtype, device=device), torch.randn(n, n, dtype=dtype, device=device)
            us = per_op_us(lambda: a @ b, device, 5 if dtype == torch.float32 else 2)
            res[device] = 2 * n**3 / (us * 1e-6) / 1e9
        name = f"matmul {n} {str(dtype)[6:]} GFLOP/s"
        print(f"{name:<26}{res['cpu']:>10.1f}{res['neuron']:>10.1f}{res['neuron'] / res['cpu']:>8.2f}")
    res = {}
    n = 16 * 2**20
    for device in ("cpu", "neuron"):
        a, b = torch.randn(n, device=device), torch.randn(n, device=device)
        out = torch.empty(n, device=device)
        us = per_op_us(lambda: torch.add(a, b, out=out), device, 20)
        res[device] = 3 * 4 * n / (us * 1e-6) / 1e9
    print(f"{'add 16M fp32 GB/s':<26}{res['cpu']:>10.1f}{res['neuron']:>10.1f}{res['neuron'] / res['cpu']:>8.2f}")


if __name__ == "__main__":
    main()
