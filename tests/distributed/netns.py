"""Two "hosts" on one machine: two network namespaces joined by a veth pair, and a launcher that
runs `torchrun --nnodes 2` in each, under a hard time limit, reading back what each rank wrote
(common.py's rank{R}.json) as launch.py does for one host.

Why namespaces: two namespaces share the kernel, /dev/shm, the hostname and the pid space, but not
their network: a rank in one cannot reach the other's abstract unix sockets, so the process group
must treat them as two hosts and talk TCP over the veth pair, as two machines would.

Addresses come from 198.18.0.0/15 (RFC 2544's benchmarking range), which no real network routes.
The veth ends are created inside the namespaces, so nothing is left in the root namespace, and
deleting a namespace deletes its end (and with it the pair). Teardown kills every process still in
the namespaces first (torchrun starts each worker in a session of its own, so killing torchrun
alone could leave ranks behind), and runs also when the test fails.
"""
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time

from launch import Launch, free_port, shm_entries

SUBNET = "198.18.39"


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def refusal() -> str | None:
    """Why this machine cannot make network namespaces (None: it can)."""
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2) to make network namespaces"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    probe = f"nx-probe-{os.getpid()}"
    r = _ip("netns", "add", probe, check=False)
    if r.returncode != 0:
        return f"`ip netns add` refused: {r.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


@dataclasses.dataclass
class Host:
    ns: str      # the namespace's name
    ifname: str  # its end of the veth pair
    addr: str    # its address on the pair


class TwoHosts:
    """hosts[0] and hosts[1]; hosts[0] runs the rendezvous."""

    def __init__(self):
        tag = f"{os.getpid() % 100000}"
        self.hosts = [Host(f"nx-{tag}-a", "nxa0", f"{SUBNET}.1"), Host(f"nx-{tag}-b", "nxb0", f"{SUBNET}.2")]

    def __enter__(self):
        a, b = self.hosts
        try:
            for h in self.hosts:
                _ip("netns", "add", h.ns)
            _ip("link", "add", a.ifname, "netns", a.ns, "type", "veth", "peer", "name", b.ifname, "netns", b.ns)
            for h in self.hosts:
                _ip("-n", h.ns, "addr", "add", f"{h.addr}/24", "dev", h.ifname)
                _ip("-n", h.ns, "link", "set", h.ifname, "up")
                _ip("-n", h.ns, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def pids(self, host: Host) -> list:
        r = _ip("netns", "pids", host.ns, check=False)
        return [int(p) for p in r.stdout.split()] if r.returncode == 0 else []

    def kill(self, host: Host):
        """SIGKILLs every process in the host's namespace (a machine that lost power)."""
        for pid in self.pids(host):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def link(self, host: Host, up: bool):
        _ip("-n", host.ns, "link", "set", host.ifname, "up" if up else "down")

    def close(self):
        for h in self.hosts:
            self.kill(h)
        deadline = time.monotonic() + 10
        while any(self.pids(h) for h in self.hosts) and time.monotonic() < deadline:
            time.sleep(0.05)
        for h in self.hosts:
            _ip("netns", "del", h.ns, check=False)

    def exec(self, host: Host, cmd: list) -> list:
        return ["ip", "netns", "exec", host.ns, *cmd]


@dataclasses.dataclass
class Run(Launch):
    """A launch across the two hosts: `returncodes` and `logs` are torchrun's, one per host."""
    world: int = 0
    stray: list = dataclasses.field(default_factory=list)  # pids left in the namespaces at the end

    def nranks(self) -> int:
        return self.world

    def tail(self, chars: int = 4000) -> str:
        parts = [f"torchrun returncodes {self.returncodes}, {self.seconds:.1f} s"
                 + (" — KILLED at the time limit" if self.timed_out else "")]
        for h, log in enumerate(self.logs):
            parts.append(f"--- host {h} output (last {chars} chars) ---\n{log[-chars:]}")
        return "\n".join(parts)


def torchrun(pair: TwoHosts, script: str, args: list, out: str, timeout: float, env: dict | None = None,
             nproc: int = 2, during=None, torchrun_args: tuple = (), done=None) -> Run:
    """Runs `torchrun --nnodes 2 --nproc-per-node nproc script --out out *args` in each namespace.
    `during(pair, started)` is called every 50 ms while the run goes on (fault injection); the run
    ends when both torchruns have exited, when `done()` holds, or at `timeout` s; then everything
    left in the namespaces is killed (and listed in `stray`)."""
    os.makedirs(out, exist_ok=True)
    shm_before = shm_entries()
    port = free_port()
    base = dict(os.environ)
    base.update({"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"})
    base.update(env or {})
    procs, logs = [], []
    start = time.monotonic()
    timed_out = False
    try:
        for h, host in enumerate(pair.hosts):
            e = dict(base, GLOO_SOCKET_IFNAME=host.ifname, NEURONX_TEST_HOST=str(h))
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", str(nproc),
                   "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{pair.hosts[0].addr}:{port}",
                   "--rdzv-id", f"nx{port}", "--local-addr", host.addr,
                   # the rendezvous store runs on host 0: torchrun cannot tell by the address,
                   # which is not the machine's hostname's
                   "--rdzv-conf", f"is_host={int(h == 0)},join_timeout=60", *torchrun_args,
                   os.path.abspath(script), "--out", os.path.abspath(out), *args]
            log = open(os.path.join(out, f"host{h}.log"), "w")
            logs.append(log)
            procs.append(subprocess.Popen(pair.exec(host, cmd), env=e, cwd=out, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL))
        while any(p.poll() is None for p in procs):
            if time.monotonic() - start > timeout:
                timed_out = True
                break
            if during is not None:
                during(pair, start)
            if done is not None and done():
                break
            time.sleep(0.05)
    finally:
        stray = [pid for h in pair.hosts for pid in pair.pids(h)]
        for h in pair.hosts:
            pair.kill(h)
        for p in procs:
            p.wait()
        for log in logs:
            log.close()
    seconds = time.monotonic() - start
    texts, ranks = [], {}
    for h in range(len(pair.hosts)):
        with open(os.path.join(out, f"host{h}.log"), errors="replace") as f:
            texts.append(f.read())
    for name in os.listdir(out):
        if name.startswith("rank") and name.endswith(".json"):
            with contextlib.suppress(json.JSONDecodeError), open(os.path.join(out, name)) as f:
                rec = json.load(f)
                ranks[rec["rank"]] = rec
    leaked = sorted(shm_entries() - shm_before)
    return Run([p.returncode for p in procs], timed_out, seconds, texts, ranks, leaked, 2 * nproc, stray)
