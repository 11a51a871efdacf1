"""Golden programs for `nobs health run`: `python -m torch_neuronx.observer.golden DEVICE [PEER]` runs
each on one logical core and compares it with known values, printing a JSON line per program and
exiting 0 only when all match. PEER is a second core for the collective (a two-rank all-reduce
over the neuron process group), or -1 to leave it out."""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time


def _matmul(torch, dev):
    # Small integers: the product is exact in float32, so it must equal the closed form.
    n = 128
    a = (torch.arange(n * n, dtype=torch.float32) % 7 - 3).reshape(n, n)
    b = (torch.arange(n * n, dtype=torch.float32) % 5 - 2).reshape(n, n).t().contiguous()
    want = a.double() @ b.double()
    got = (a.to(dev) @ b.to(dev)).cpu().double()
    return torch.equal(got, want), f"max error {(got - want).abs().max().item():g}"


def _elementwise(torch, dev):
    x = torch.linspace(-4, 4, 4096, dtype=torch.float32)
    got = (torch.sin(x.to(dev)) * 2 + 1).cpu()
    want = torch.sin(x.double()) * 2 + 1
    err = (got.double() - want).abs().max().item()
    return err < 1e-5, f"max error {err:g}"


def _reduction(torch, dev):
    n = 1 << 16
    got = torch.arange(1, n + 1, dtype=torch.float64).to(torch.float32).to(dev).sum().cpu().item()
    return got == n * (n + 1) // 2, f"sum {got:.0f}, expected {n * (n + 1) // 2}"


def _dma_copy(torch, dev):
    host = torch.randint(0, 255, (1 << 20,), dtype=torch.uint8)
    on_device = host.to(dev)
    copied = torch.empty_like(on_device)
    copied.copy_(on_device)  # device to device
    back = copied.cpu()
    return torch.equal(back, host), f"{int((back != host).sum())} of {host.numel()} bytes differ"


def _rank(rank, devices, store_path):
    import torch
    import torch.distributed as dist

    dev = torch.device("neuron", devices[rank])
    torch.neuron.set_device(dev)
    dist.init_process_group("neuron", store=dist.FileStore(store_path, 2), rank=rank, world_size=2)
    try:
        t = torch.full((1024,), float(rank + 1), device=dev)
        dist.all_reduce(t)
        if not torch.equal(t.cpu(), torch.full((1024,), 3.0)):
            raise RuntimeError(f"rank {rank}: all_reduce gave {t.cpu()[:4].tolist()}..., expected 3.0")
    finally:
        dist.destroy_process_group()


def _collective(torch, device, peer):
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_rank, args=([device, peer], os.path.join(tmp, "store")), nprocs=2)
    return True, f"all_reduce between neuron:{device} and neuron:{peer}"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    device, peer = int(argv[0]), int(argv[1]) if len(argv) > 1 else -1
    import torch

    dev = torch.device("neuron", device)
    checks = [("matmul", lambda: _matmul(torch, dev)), ("elementwise", lambda: _elementwise(torch, dev)),
              ("reduction", lambda: _reduction(torch, dev)), ("dma_copy", lambda: _dma_copy(torch, dev))]
    if peer >= 0:
        checks.append(("collective", lambda: _collective(torch, device, peer)))
    ok = True
    for name, check in checks:
        t0 = time.perf_counter()
        try:
            passed, detail = check()
        except Exception as e:  # a program that raises (an unhealthy device refuses work) fails
            lines = str(e).strip().splitlines() or [""]
            passed, detail = False, f"{type(e).__name__}: {lines[-1]}"
        ok = ok and passed
        print(json.dumps({"check": name, "passed": bool(passed), "detail": detail,
                          "seconds": round(time.perf_counter() - t0, 3)}), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
