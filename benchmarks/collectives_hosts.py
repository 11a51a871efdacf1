"""all_reduce, all_gather_into_tensor and reduce_scatter_tensor across two hosts, the hosts being
two network namespaces of this machine joined by a veth pair (tests/distributed/netns.py), 2 x 2
ranks: the neuron backend's hybrid group (shared memory inside a host, gloo between,
hierarchical) against plain gloo on CPU tensors over the same namespaces, and against the neuron
group of 4 ranks on one host. A socket test measures what the veth pair carries (one TCP stream),
and the last column is the hierarchical exchange's share of it: per all_reduce each host's leader
sends and receives one buffer's worth (2 hosts), per all_gather or reduce_scatter half of one,
so share = that / time / veth bandwidth.

Run: `python benchmarks/collectives_hosts.py [--max-size BYTES] [--collectives a,b]` as root
(`make bench-collectives` runs it after benchmarks/collectives.py); where namespaces are refused
it says why and exits 0. Sizes and bus bandwidth follow nccl-tests: the size is all_reduce's
buffer, all_gather's output and reduce_scatter's input; all_reduce moves 2(n-1)/n of it per rank,
the other two (n-1)/n.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "distributed"))

SIZES = [1 << k for k in range(10, 29, 2)]  # 1 KiB ... 256 MiB
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
# (bus bytes per byte of size, bytes each leader sends between 2 hosts per byte of size)
MOVES = {"all_reduce": (2 * 3 / 4, 1.0), "all_gather": (3 / 4, 0.5), "reduce_scatter": (3 / 4, 0.5)}
ROUNDS = 3
SOCKET_BYTES = 256 << 20


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}"
        n /= 1024
    return f"{n:.0f} TiB"


def iterations(size):
    return max(2, min(100, (32 << 20) // size))


# ---- inside a rank ---------------------------------------------------------------------------

def _collective(name, size, device):
    """A call of collective `name` at `size` bytes (nccl-tests' meaning) on fresh float32 tensors."""
    import torch
    import torch.distributed as dist
    world = dist.get_world_size()
    if name == "all_reduce":
        t = torch.ones(size // 4, device=device)
        return lambda group: dist.all_reduce(t, group=group)
    if name == "all_gather":
        x, out = torch.ones(size // 4 // world, device=device), torch.empty(size // 4, device=device)
        return lambda group: dist.all_gather_into_tensor(out, x, group=group)
    x, out = torch.ones(size // 4, device=device), torch.empty(size // 4 // world, device=device)
    return lambda group: dist.reduce_scatter_tensor(out, x, group=group)


def worker(sizes, collectives, out):
    import torch
    import torch.distributed as dist

    import torch_neuronx  # noqa: F401
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.neuron.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("neuron")
    gloo = dist.new_group(backend="gloo")
    neuron = torch.device("neuron", torch.neuron.current_device())
    only_neuron = os.environ.get("NEURONX_BENCH_ONLY_NEURON") == "1"

    def timed(fn, device, iters):
        dist.barrier(group=gloo)
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        if device.type == "neuron":
            torch.neuron.synchronize()
        elapsed = torch.tensor([(time.perf_counter() - t0) / iters])
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=gloo)  # the slowest rank's time
        return elapsed.item()

    lines = []
    for name in collectives:
        for size in sizes:
            best = {}
            devices = {"neuron": neuron} if only_neuron else {"neuron": neuron, "gloo": torch.device("cpu")}
            for k, device in devices.items():
                call = _collective(name, size, device)

                def fn(call=call, group=gloo if k == "gloo" else None):
                    call(group)
                timed(fn, device, 1)  # warm-up: first-touch pages, connections
                best[k] = min(timed(fn, device, iterations(size)) for _ in range(ROUNDS))
            lines.append(f"{name} {size} " + " ".join(f"{k}={v}" for k, v in best.items()))
    if rank == 0:
        with open(out, "w") as f:
            f.write(f"transport={torch_neuronx.distributed.transport()} world={world}\n" + "\n".join(lines) + "\n")
    dist.destroy_process_group()


# ---- the driver ------------------------------------------------------------------------------

def parse(path):
    with open(path) as f:
        head, *rows = f.read().split("\n")
    table = {}
    for row in filter(None, rows):
        name, size, *cells = row.split()
        table[name, int(size)] = {k: float(v) for k, v in (c.split("=") for c in cells)}
    return head, table


def veth_bandwidth(pair):
    """One TCP stream from host 1 to host 0 over the veth pair, bytes per second."""
    a, b = pair.hosts
    server = subprocess.Popen(pair.exec(a, [sys.executable, "-c", f"""
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("{a.addr}", 45039)); s.listen(1)
c, _ = s.accept(); n = 0
while True:
    d = c.recv(1 << 20)
    if not d: break
    n += len(d)
print(n)
"""]), stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    client = subprocess.run(pair.exec(b, [sys.executable, "-c", f"""
import socket, time
s = socket.create_connection(("{a.addr}", 45039)); buf = b"x" * (4 << 20); t0 = time.perf_counter()
for _ in range({SOCKET_BYTES} // len(buf)): s.sendall(buf)
s.shutdown(socket.SHUT_WR); s.recv(1); print(time.perf_counter() - t0)
"""]), capture_output=True, text=True, timeout=120)
    got = int(server.communicate(timeout=60)[0].strip())
    if got != SOCKET_BYTES or client.returncode != 0:
        raise RuntimeError(f"socket test moved {got} of {SOCKET_BYTES} bytes: {client.stderr[-2000:]}")
    return SOCKET_BYTES / float(client.stdout.strip())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--max-size", type=int, default=SIZES[-1], help="largest size in bytes")
    p.add_argument("--collectives", default=",".join(COLLECTIVES), help="which of " + ", ".join(COLLECTIVES))
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # a rank: where rank 0 writes its times
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)  # netns.torchrun passes its folder
    args = p.parse_args()
    sizes = [s for s in SIZES if s <= args.max_size]
    collectives = args.collectives.split(",")
    unknown = sorted(set(collectives) - set(COLLECTIVES))
    if unknown:
        p.error(f"unknown collectives {unknown}; choose from {', '.join(COLLECTIVES)}")
    if args.worker:
        return worker(sizes, collectives, args.worker)
    import netns as N
    reason = N.refusal()
    if reason:
        print(f"two-host all_reduce rows skipped: {reason}")
        return 0
    me = [os.path.abspath(__file__), "--max-size", str(args.max_size), "--collectives", args.collectives]
    with tempfile.TemporaryDirectory() as out:
        with N.TwoHosts() as pair:
            veth = veth_bandwidth(pair)
            r = N.torchrun(pair, me[0], [*me[1:], "--worker", os.path.join(out, "hosts.txt")],
                           os.path.join(out, "hosts"), 1800, env={"OMP_NUM_THREADS": "1"})
            if r.returncodes != [0, 0]:
                print(r.tail())
                return 1
        one = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
                              *me, "--worker", os.path.join(out, "one.txt")], capture_output=True, text=True,
                             env=dict(os.environ, OMP_NUM_THREADS="1", NEURONX_BENCH_ONLY_NEURON="1"), timeout=1800)
        if one.returncode != 0:
            print(one.stdout[-3000:], one.stderr[-3000:])
            return 1
        head, two = parse(os.path.join(out, "hosts.txt"))
        head_one, single = parse(os.path.join(out, "one.txt"))
    print(f"2 hosts x 2 ranks (network namespaces on one machine, {os.cpu_count()} cores): {head}; "
          f"one host: {head_one}")
    print(f"veth pair, one TCP stream: {veth / 1e9:.2f} GB/s")
    print("bus bandwidth GB/s (higher is better); share = the hierarchical exchange's use of the veth")
    for name in collectives:
        bus_per_byte, leader_per_byte = MOVES[name]
        print(f"\n{name}\n{'size':>10}{'hybrid':>10}{'gloo':>10}{'one host':>10}{'vs gloo':>9}{'share':>8}")
        for size in sizes:
            bus = size * bus_per_byte
            t2, t1 = two[name, size], single[name, size]
            hy, gl, sh = bus / t2["neuron"], bus / t2["gloo"], bus / t1["neuron"]
            share = size * leader_per_byte / t2["neuron"] / veth
            print(f"{human(size):>10}{hy / 1e9:>10.3f}{gl / 1e9:>10.3f}{sh / 1e9:>10.3f}{hy / gl:>9.2f}{share:>8.2f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
