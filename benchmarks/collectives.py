"""Bus bandwidth of the neuron process-group backend against gloo on CPU tensors, same machine,
same run; a memcpy line is the ceiling (one process copying the same bytes).

Run: `python benchmarks/collectives.py` (it starts itself under torchrun with 2 ranks).
Target (issue #10): 64 MiB all_reduce >= 5x gloo and >= 0.5x memcpy bandwidth.

Bus bandwidth follows nccl-tests: all_reduce moves 2(n-1)/n of the buffer per rank, all_gather
and reduce_scatter (n-1)/n of the full buffer. Each size is timed in alternating rounds, best
round kept, the slowest rank's time counted.
"""
import os
import subprocess
import sys
import time

import torch
import torch.distributed as dist

import torch_neuronx  # noqa: F401

SIZES = [1 << k for k in range(10, 29, 2)]  # 1 KiB ... 256 MiB
ROUNDS = 3


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}"
        n /= 1024
    return f"{n:.0f} TiB"


def iterations(size):
    return max(2, min(200, (64 << 20) // size))


def make_op(name, device, size, world, group):
    numel = size // 4
    if name == "all_reduce":
        t = torch.ones(numel, device=device)
        return (lambda: dist.all_reduce(t, group=group)), size * 2 * (world - 1) / world
    if name == "all_gather":
        out = torch.empty(numel, device=device)
        inp = torch.ones(numel // world, device=device)
        return (lambda: dist.all_gather_into_tensor(out, inp, group=group)), size * (world - 1) / world
    inp = torch.ones(numel, device=device)
    out = torch.empty(numel // world, device=device)
    return (lambda: dist.reduce_scatter_tensor(out, inp, group=group)), size * (world - 1) / world


def timed(fn, device, iters, cpu_group):
    dist.barrier(group=cpu_group)
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    if device.type == "neuron":
        torch.neuron.synchronize()
    elapsed = torch.tensor([(time.perf_counter() - t0) / iters])
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=cpu_group)  # the slowest rank's time
    return elapsed.item()


def memcpy_seconds(size):
    src = torch.ones(size // 4)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(ROUNDS):
        iters = iterations(size)
        t0 = time.perf_counter()
        for _ in range(iters):
            dst.copy_(src)
        best = min(best, (time.perf_counter() - t0) / iters)
    return best


def worker():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.neuron.set_device(rank % torch.neuron.device_count())
    dist.init_process_group("neuron")
    gloo = dist.new_group(backend="gloo")
    neuron = torch.device("neuron", torch.neuron.current_device())
    cpu = torch.device("cpu")
    if rank == 0:
        print(f"torch {torch.__version__}, {world} ranks on one host, {os.cpu_count()} cores; "
              f"neuron transport: {torch_neuronx.distributed.transport()}")
        print("bus bandwidth GB/s (higher is better); ratio = neuron / gloo; memcpy = one process "
              "copying the buffer\n")
        print(f"{'op':<12}{'size':>10}{'neuron':>10}{'gloo':>10}{'memcpy':>10}{'vs gloo':>9}{'vs memcpy':>11}")
    for name in ("all_reduce", "all_gather", "reduce_scatter"):
        for size in SIZES:
            fns = {}
            for device, group in ((neuron, None), (cpu, gloo)):
                fns[device.type] = make_op(name, device, size, world, group)
            iters = iterations(size)
            best = {k: float("inf") for k in fns}
            for k, (fn, _) in fns.items():
                timed(fn, torch.device(k), 1, gloo)  # warm-up: first-touch pages, connections
            for _ in range(ROUNDS):
                for k, (fn, _) in fns.items():
                    best[k] = min(best[k], timed(fn, torch.device(k), iters, gloo))
            bus_bytes = fns["neuron"][1]
            copy = None
            if rank == 0:
                copy = memcpy_seconds(size)
            dist.barrier(group=gloo)
            if rank == 0:
                bw = {k: bus_bytes / v / 1e9 for k, v in best.items()}
                mem_bw = size / copy / 1e9
                print(f"{name:<12}{human(size):>10}{bw['neuron']:>10.2f}{bw['cpu']:>10.2f}{mem_bw:>10.2f}"
                      f"{bw['neuron'] / bw['cpu']:>9.2f}{bw['neuron'] / mem_bw:>11.2f}", flush=True)
            del fns
        if rank == 0:
            print()
    dist.destroy_process_group()


def main():
    if "RANK" in os.environ:
        return worker()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           os.path.abspath(__file__)]
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    sys.exit(subprocess.call(cmd, env=env))


if __name__ == "__main__":
    main()
