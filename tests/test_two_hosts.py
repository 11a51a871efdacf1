"""ProcessGroupNeuron across two hosts, tested as two network namespaces of this machine joined by
a veth pair (tests/distributed/netns.py): `torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend
c10d` in each, so ranks 0, 1 share one "host" and 2, 3 the other. The group is hybrid there:
shared memory inside a host, gloo between them, all_reduce hierarchical.

The ranks run the same scenario scripts as tests/test_distributed.py (every c10d collective,
DDP, FSDP2, TP inside a host x FSDP across), compared with the same single-process references;
then the faults: the link going down mid-collective, a whole host SIGKILLed, a host late to a
collective. Each launch has a hard time limit, and the namespaces are deleted whatever happens.
Skipped, with the reason, where the machine refuses network namespaces (no root, no `ip`).
"""
import glob
import json
import os
import re
import subprocess
import sys
import time

import pytest
import torch

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "distributed")
sys.path.insert(0, HERE)

import netns as N  # noqa: E402
import workloads as W  # noqa: E402
from test_distributed import (COLLECTIVES, _neuron_skip_reason, assert_params, assert_updates,  # noqa: E402
                              check_scenarios, load)

LAUNCH_TIMEOUT_S = 240
FAULT_TIMEOUT_S = 90


def _skip_reason():
    return N.refusal() or _neuron_skip_reason(2)


_REASON = _skip_reason()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=f"two hosts as network namespaces: {_REASON}")


@pytest.fixture
def pair():
    with N.TwoHosts() as p:
        yield p


def check_clean_exit(r):
    assert not r.timed_out and r.returncodes == [0, 0], r.tail()
    assert r.shm_leaked == [], f"shared memory left in /dev/shm: {r.shm_leaked}"
    assert r.stray == [], f"processes left in the namespaces: {r.stray}"


def _worker(pair, tmp_path, *suites):
    """One 2 x 2 launch of worker.py running `suites`."""
    out = str(tmp_path)
    args = ["--device", "neuron", "--backend", "neuron"] + [a for s in suites for a in ("--suite", s)]
    return N.torchrun(pair, os.path.join(HERE, "worker.py"), args, out, LAUNCH_TIMEOUT_S,
                      env={"NEURONX_TEST_TRANSPORT": "hybrid"}), out


def test_host_identity_tells_the_namespaces_apart(pair):
    """Two namespaces share hostname, boot id and /dev/shm but not their network: two identities;
    TORCH_NEURONX_HOST_ID replaces the identity, and an empty one is refused naming the variable."""
    code = "from torch_neuronx.distributed import _host_identity as h\ntry:\n print(h())\n" \
           "except ValueError as e:\n print('refused', e)"

    def identity(host, **env):
        r = subprocess.run(pair.exec(host, [sys.executable, "-c", code]), capture_output=True, text=True,
                           timeout=120, env=dict(os.environ, **env))
        assert r.returncode == 0, r.stderr[-3000:]
        return r.stdout.strip().splitlines()[-1]

    a, b = (identity(h) for h in pair.hosts)
    assert a != b and a.split("|")[:2] == b.split("|")[:2], (a, b)  # same hostname and boot id
    assert identity(pair.hosts[0], TORCH_NEURONX_HOST_ID="rack1-node7") == "id:rack1-node7"
    refused = identity(pair.hosts[1], TORCH_NEURONX_HOST_ID=" ")
    assert refused.startswith("refused") and "TORCH_NEURONX_HOST_ID" in refused, refused


def test_namespaces_are_two_hosts_to_the_group(pair, subtests, tmp_path):
    """Every collective of the single-host tests, on the world group (hybrid, 2 ranks per host)
    and on the group [1, 3] (one rank per host); groups of one host's ranks use shared memory;
    all_reduce of 9 MiB (3 pipelined chunks) with every op, every rank bitwise equal;
    hierarchical all_gather and reduce_scatter on hosts with equal and unequal numbers of ranks."""
    r, _ = _worker(pair, tmp_path, "collectives", "hosts")
    required = ["world/transport"] + [f"world/{c}" for c in COLLECTIVES] + ["world/compiled"]
    required += [f"group[1,3]/{c}" for c in COLLECTIVES]
    check_scenarios(subtests, r, "collectives/", required)
    check_scenarios(subtests, r, "hosts/", ["transports", "large_all_reduce", "one_host_group", "gather_and_scatter"])
    check_clean_exit(r)


def test_training_across_hosts_matches_one_process(pair, subtests, tmp_path):
    """DDP and FSDP2 over the 4 ranks of both hosts, and dp=2 x tp=2 with TP inside each host and
    FSDP across: the losses and parameters of one process doing the same."""
    r, out = _worker(pair, tmp_path, "train")
    ddp_losses, ddp_params = W.ddp_reference(3)
    init = W.full_state(W.tiny_llama())
    fsdp_losses, fsdp_params = W.llama_sgd_reference(3, 4, param_dtype=torch.bfloat16)
    tp_fsdp_losses, tp_fsdp_params = W.llama_sgd_reference(2, 2)

    def compare(name):
        ranks = load(out, name, 4)
        if name == "train/ddp":
            for k, got in enumerate(ranks):
                assert_params(got["params"], ddp_params, 1e-5, 1e-4, f"rank {k}")
            mean = [sum(x["losses"][s] for x in ranks) / 4 for s in range(len(ddp_losses))]
            assert mean == pytest.approx(ddp_losses, abs=1e-5), (mean, ddp_losses)
        elif name.startswith("train/fsdp2"):
            for k, got in enumerate(ranks):
                assert got["losses"] == pytest.approx(fsdp_losses[k], abs=5e-4), (k, got["losses"])
                assert_updates(got["params"], fsdp_params, init, 0.01, f"{name} rank {k}")
        else:
            for k, got in enumerate(ranks):
                # the tp mesh dim is the inner one: ranks {0, 1} and {2, 3}, each a host
                assert got["dp_rank"] == k // 2, (k, got["dp_rank"])
                assert got["losses"] == pytest.approx(tp_fsdp_losses[got["dp_rank"]], abs=1e-5)
                assert_params(got["params"], tp_fsdp_params, 1e-5, 1e-4, f"rank {k}")
    check_scenarios(subtests, r, "train/", ["ddp", "fsdp2_reshard_True", "fsdp2_reshard_False", "tp_fsdp_2d"],
                    compare)
    check_clean_exit(r)


# ---- faults ------------------------------------------------------------------------------------

def _records(out, prefix):
    recs = {}
    for path in glob.glob(os.path.join(out, f"{prefix}.rank*.json")):
        with open(path) as f:
            rec = json.load(f)
        recs[rec["rank"]] = rec
    return recs


def _gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as f:  # a zombie no one reaped yet is gone too
        return f.read().rsplit(")", 1)[1].split()[0] == "Z"


def _fault(pair, tmp_path, mode, survivors):
    """Runs host_faults.py; `inject(pair, victim)` runs once every rank is ready. Returns the
    survivors' fault records, the ready records and the time of the fault."""
    out = str(tmp_path)
    state = {"fault_at": None}

    def during(p, _start):
        if state["fault_at"] is not None:
            return
        ready = _records(out, "ready")
        if len(ready) < 4:
            return
        victim = p.hosts[int(ready[2]["host"])]  # the host of ranks 2 and 3
        state["fault_at"] = time.time()
        if mode == "link_down":
            p.link(victim, up=False)
        elif mode == "kill_host":
            p.kill(victim)

    def done():
        return set(survivors) <= set(_records(out, "fault")) and all(
            _gone(rec["pid"]) for rank, rec in _records(out, "ready").items() if rank in survivors)

    r = N.torchrun(pair, os.path.join(HERE, "host_faults.py"), ["--device", "neuron", "--mode", mode], out,
                   FAULT_TIMEOUT_S, during=during, done=done)
    faults = _records(out, "fault")
    assert set(survivors) <= set(faults), f"survivors {survivors} wrote no result:\n{r.tail()}"
    ready = _records(out, "ready")
    assert {ready[k]["host"] for k in (0, 1)} == {ready[0]["host"]} != {ready[2]["host"]}, ready
    for k in survivors:
        assert _gone(ready[k]["pid"]), f"rank {k} is still running after it reported:\n{r.tail()}"
    assert r.shm_leaked == [], f"shared memory left in /dev/shm: {r.shm_leaked}"
    return r, faults, state["fault_at"]


def _names_other_host(msg, rank):
    other = 1 if rank < 2 else 0
    ranks = "[2, 3]" if other == 1 else "[0, 1]"
    return f"other host(s): host {other} '" in msg and f"(ranks {ranks})" in msg


@pytest.mark.parametrize("mode", ["link_down", "kill_host"])
def test_a_lost_host_fails_every_survivor_naming_it(pair, tmp_path, mode):
    """The link goes down (no host hears the other) or every process of the host of ranks 2, 3 is
    SIGKILLed, while the ranks all-reduce in a loop: every surviving rank's collective raises
    within the group's timeout, naming the other host; the next collective raises at once; the
    survivors exit and leave no shared memory behind."""
    survivors = [0, 1, 2, 3] if mode == "link_down" else [0, 1]
    r, faults, fault_at = _fault(pair, tmp_path, mode, survivors)
    assert fault_at is not None, r.tail()
    for k in survivors:
        rec = faults[k]
        took = rec["raised_at"] - fault_at
        assert took < rec["timeout"] + 3, f"rank {k} raised {took:.1f} s after the fault: {rec}"
        assert re.search(r"all_?reduce", rec["message"], re.I), rec["message"]
        assert _names_other_host(rec["message"], k), f"rank {k}: {rec['message']}"
        assert rec["second_raised"] and rec["second_seconds"] < 2, rec


def test_a_host_late_to_a_collective_fails_the_others_within_the_timeout(pair, tmp_path):
    """Ranks 2, 3 (one host) sleep past the group's timeout before an all_reduce that ranks 0, 1
    call at once: those raise within the timeout (plus the exchange's share of it), naming the
    late host, and leave nothing behind."""
    r, faults, _ = _fault(pair, tmp_path, "late_host", [0, 1])
    for k in (0, 1):
        rec = faults[k]
        took = rec["raised_at"] - rec["started_at"]
        assert took < rec["timeout"] + 3, f"rank {k} raised after {took:.1f} s: {rec}"
        assert _names_other_host(rec["message"], k), f"rank {k}: {rec['message']}"


def test_elastic_restart_resumes_from_a_dcp_checkpoint(pair, tmp_path):
    """Rank 3 crashes after step 2's checkpoint; torchrun (--max-restarts 1) restarts both hosts'
    ranks, which resume from step 2 and end with the parameters of 4 uninterrupted steps.

    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: by default torchrun 2.13 hands the restarted ranks the
    rendezvous' own store, which still holds the first attempt's keys, and gloo's connectFullMesh
    then dials the dead ranks' addresses (plain gloo on CPU fails the same way); with it each
    rendezvous round gets a fresh store."""
    r = N.torchrun(pair, os.path.join(HERE, "elastic.py"), ["--device", "neuron", "--steps", "4",
                                                           "--crash-after", "2"], str(tmp_path), LAUNCH_TIMEOUT_S,
                   env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}, torchrun_args=("--max-restarts", "1"))
    assert not r.timed_out and r.returncodes == [0, 0], r.tail()
    with open(tmp_path / "elastic.json") as f:
        rec = json.load(f)
    assert rec["resumed_from"] == 2, rec["resumed_from"]
    _, params = W.ddp_reference(4)
    assert_params({k: torch.tensor(v) for k, v in rec["params"].items()}, params, 1e-5, 1e-4, "after the restart")
    assert r.shm_leaked == [], f"shared memory left in /dev/shm: {r.shm_leaked}"
    assert r.stray == [], f"processes left in the namespaces: {r.stray}"
