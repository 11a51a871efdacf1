"""Multi-process tests of torch.distributed on the neuron device: c10d collectives, DTensor, DDP,
FSDP2, tensor parallelism, Accelerate + Trainer, transformers' tensor-parallel loading, and what a
rank sees when a peer fails.

Every test runs twice: on neuron with the "neuron" backend, and on cpu with gloo, which checks the
suite itself (it turns on by itself once `import torch_neuronx` registers the "neuron" backend).
The ranks run the scripts in tests/distributed/ (launched by launch.py, under a hard time limit);
one launch runs many scenarios and is shared by the tests of this module. Scenarios compare
against values every rank can compute, or save tensors that the tests here compare with a
single-process reference computed in this process. Each scenario is its own subtest.
"""
import os
import re
import sys

import pytest
import torch
import torch.distributed as dist

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "distributed")
sys.path.insert(0, HERE)

import launch as L  # noqa: E402
from conftest import run_python  # noqa: E402
import workloads as W  # noqa: E402

LAUNCH_TIMEOUT_S = {2: 180, 4: 240}


def _neuron_skip_reason(nproc: int = 2):
    try:
        import torch_neuronx  # noqa: F401
    except ImportError as e:
        return f"torch_neuronx does not import: {e}"
    if "neuron" not in dist.Backend.backend_list:
        return "no 'neuron' c10d backend registered by `import torch_neuronx` (ProcessGroupNeuron)"
    if torch.neuron.device_count() < nproc:
        return f"needs {nproc} neuron devices, found {torch.neuron.device_count()}"
    return None


def devices(nproc: int = 2):
    reason = _neuron_skip_reason(nproc)
    return [pytest.param("cpu", id="cpu-gloo"),
            pytest.param("neuron", id="neuron", marks=pytest.mark.skipif(reason is not None, reason=str(reason)))]


def _env(device):
    # cpu runs keep torch_neuronx out of the ranks: transformers and accelerate pick "the
    # accelerator" by themselves, which would be neuron (with gloo, which cannot move its tensors)
    return {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"} if device == "cpu" else {}


_RUNS = {}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """run(script, nproc, device, *args) -> (Launch, out folder); each distinct launch happens once."""
    def get(script, nproc, device, *args):
        key = (script, nproc, device, args)
        if key not in _RUNS:
            out = tmp_path_factory.mktemp(f"{script.removesuffix('.py')}-{nproc}-{device}")
            backend = "neuron" if device == "neuron" else "gloo"
            r = L.launch(os.path.join(HERE, script), nproc, ["--device", device, "--backend", backend, *args],
                         str(out), LAUNCH_TIMEOUT_S[nproc], env=_env(device))
            _RUNS[key] = (r, str(out))
        return _RUNS[key]
    yield get
    _RUNS.clear()


def core(run, device, nproc):
    return run("worker.py", nproc, device, "--suite", "collectives", "--suite", "dtensor", "--suite", "train")


def check_scenarios(subtests, r, prefix, required=(), compare=None):
    """One subtest per scenario named `prefix...`; `compare(name)` adds the reference comparison."""
    assert not r.timed_out, r.tail()
    names = r.scenarios(prefix)
    missing = [q for q in required if not any(q in n for n in names)]
    assert names and not missing, f"scenarios missing under {prefix!r}: {missing}\n" + r.tail()
    for name in names:
        with subtests.test(msg=name):
            state, msg = r.verdict(name)
            if state == "skip":
                pytest.skip(msg)
            assert state == "pass", msg
            if compare is not None:
                compare(name)


def check_clean_exit(r):
    assert r.returncodes == [0] * len(r.returncodes), r.tail()
    assert r.shm_leaked == [], f"shared memory left in /dev/shm: {r.shm_leaked}"


def load(out, name, nproc):
    return [torch.load(L.artifact(out, name, k)) for k in range(nproc)]


def assert_params(got: dict, ref: dict, atol: float, rtol: float, label: str):
    assert got.keys() == ref.keys(), f"{label}: parameter names differ"
    for k in ref:
        torch.testing.assert_close(got[k], ref[k], atol=atol, rtol=rtol, msg=lambda m: f"{label} {k}: {m}")


def assert_updates(got: dict, ref: dict, init: dict, rel: float, label: str):
    """The update of each tensor (final - initial) matches the reference's to within `rel` of its
    largest entry: bf16 arithmetic may round differently on another device (bf16 against fp32
    compute moves updates by ~1.3%), a wrong reduction or a lost shard moves them by 50-100%."""
    for k in ref:
        want, have = ref[k] - init[k], got[k] - init[k]
        scale = want.abs().max().item()
        worst = (have - want).abs().max().item()
        assert worst <= rel * scale + 1e-6, f"{label} {k}: update differs by {worst:.3g}, largest update {scale:.3g}"


# ---- c10d collectives -------------------------------------------------------------------------

COLLECTIVES = ["broadcast", "all_reduce_sum", "all_reduce_avg", "all_reduce_min", "all_reduce_max",
               "all_reduce_product", "all_reduce_coalesced", "reduce[", "all_gather[", "all_gather_into_tensor",
               "reduce_scatter[", "reduce_scatter_tensor", "all_to_all[", "all_to_all_uneven", "all_to_all_single",
               "send_recv", "isend_irecv", "batch_isend_irecv", "barrier", "gather[", "scatter[", "async_op",
               "functional", "objects"]


@pytest.mark.parametrize("nproc", [2, 4])
@pytest.mark.parametrize("device", devices(4))
def test_collectives(run, subtests, device, nproc):
    r, _ = core(run, device, nproc)
    required = [f"world/{c}" for c in COLLECTIVES] + ["world/compiled"]
    if nproc == 4:
        required += [f"group[1,3]/{c}" for c in COLLECTIVES]
    check_scenarios(subtests, r, "collectives/", required)
    check_clean_exit(r)


@pytest.mark.skipif(_neuron_skip_reason() is not None, reason=str(_neuron_skip_reason()))
def test_collectives_over_the_host_transport(subtests, tmp_path):
    """The path of groups that span hosts (gloo underneath, tensors staged through host memory),
    forced on one host: the same collectives, the same answers."""
    r = L.launch(os.path.join(HERE, "worker.py"), 2, ["--device", "neuron", "--backend", "neuron", "--suite",
                                                      "collectives"], str(tmp_path), LAUNCH_TIMEOUT_S[2],
                 env={"TORCH_NEURONX_DIST_TRANSPORT": "host"})
    check_scenarios(subtests, r, "collectives/", ["world/transport"] + [f"world/{c}" for c in COLLECTIVES])
    check_clean_exit(r)


# ---- DTensor ----------------------------------------------------------------------------------

@pytest.mark.parametrize("device", devices())
def test_dtensor(run, subtests, device):
    r, _ = core(run, device, 2)
    check_scenarios(subtests, r, "dtensor/", ["distribute", "redistribute", "partial", "ops", "random_dropout",
                                              "random_offset_tracker", "ops_while_a_collective_ends"])


@pytest.mark.parametrize("device", devices(4))
def test_dtensor_2d_mesh(run, subtests, device):
    r, _ = core(run, device, 4)
    check_scenarios(subtests, r, "dtensor/", ["mesh_2d"])


# ---- training: DDP, FSDP2, TP, TP x FSDP ------------------------------------------------------

@pytest.mark.parametrize("device", devices())
def test_ddp_matches_full_batch(run, subtests, device):
    r, out = core(run, device, 2)
    losses, params = W.ddp_reference(3)

    def compare(name):
        ranks = load(out, name, 2)
        for k, got in enumerate(ranks):
            assert_params(got["params"], params, 1e-5, 1e-4, f"rank {k}")
        # each rank's loss is the mean over its half: their mean is the full batch's loss
        mean = [sum(x["losses"][s] for x in ranks) / 2 for s in range(len(losses))]
        assert mean == pytest.approx(losses, abs=1e-5), (mean, losses)
    check_scenarios(subtests, r, "train/ddp", ["ddp"], compare)


@pytest.mark.parametrize("device", devices())
def test_fsdp2_bf16_matches_reference(run, subtests, device):
    r, out = core(run, device, 2)
    init = W.full_state(W.tiny_llama())
    ref_losses, ref_params = W.llama_sgd_reference(3, 2, param_dtype=torch.bfloat16)

    def compare(name):
        for k, got in enumerate(load(out, name, 2)):
            assert got["losses"] == pytest.approx(ref_losses[k], abs=5e-4), (k, got["losses"], ref_losses[k])
            assert_updates(got["params"], ref_params, init, 0.01, f"{name} rank {k}")
    check_scenarios(subtests, r, "train/fsdp2", ["reshard_True", "reshard_False"], compare)


@pytest.mark.parametrize("device", devices())
def test_tensor_parallel_matches_one_process(run, subtests, device):
    r, out = core(run, device, 2)
    logits, loss, params = W.tp_reference()

    def compare(name):
        for k, got in enumerate(load(out, name, 2)):
            torch.testing.assert_close(got["logits"], logits, atol=1e-5, rtol=1e-4)
            assert got["loss"] == pytest.approx(loss, abs=1e-5)
            assert_params(got["params"], params, 1e-5, 1e-4, f"rank {k}")
    check_scenarios(subtests, r, "train/tp", ["tp"], compare)


@pytest.mark.parametrize("device", devices())
def test_pipeline_parallel_matches_one_process(run, subtests, device):
    r, out = core(run, device, 2)
    ref_losses, ref_params = W.pp_reference()

    def compare(name):
        first, last = load(out, name, 2)
        assert first["losses"] == []
        torch.testing.assert_close(torch.tensor(last["losses"]), torch.tensor(ref_losses), atol=1e-6, rtol=1e-5)
        assert_params({**first["params"], **last["params"]}, ref_params, 1e-6, 1e-5, "stages")
    check_scenarios(subtests, r, "train/pp", ["pp"], compare)


@pytest.mark.parametrize("device", devices(4))
def test_tp_fsdp_2d_matches_reference(run, subtests, device):
    r, out = core(run, device, 4)
    ref_losses, ref_params = W.llama_sgd_reference(2, 2)

    def compare(name):
        for k, got in enumerate(load(out, name, 4)):
            assert got["losses"] == pytest.approx(ref_losses[got["dp_rank"]], abs=1e-5)
            assert_params(got["params"], ref_params, 1e-5, 1e-4, f"rank {k}")
    check_scenarios(subtests, r, "train/tp_fsdp_2d", ["tp_fsdp_2d"], compare)


# ---- Hugging Face: Accelerate + Trainer, tensor-parallel from_pretrained -----------------------

@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("tiny-llama"))
    W.tiny_llama().save_pretrained(path)
    return path


@pytest.mark.parametrize("device", devices())
def test_accelerate_trainer_and_tp_from_pretrained(run, subtests, device, tiny_checkpoint):
    import transformers
    r, out = run("hf.py", 2, device, "--model-dir", tiny_checkpoint)
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_checkpoint)
    ids = W.tokens(5, batch=2, seq=8)
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    tokens = model.generate(ids, max_new_tokens=8, do_sample=False)

    def compare(name):
        if name != "hf/tp_from_pretrained":
            return
        for got in load(out, "hf/tp_generate", 2):
            torch.testing.assert_close(got["logits"], logits, atol=1e-5, rtol=1e-4)
            assert torch.equal(got["tokens"], tokens), (got["tokens"], tokens)
    check_scenarios(subtests, r, "hf/", ["accelerate_state", "trainer", "tp_from_pretrained"], compare)
    check_clean_exit(r)


def _launcher(name: str, port: int) -> list:
    bin_dir = os.path.dirname(sys.executable)
    if name == "accelerate-launch":
        # as users type it: with no config, several neuron devices make accelerate pick --multi_gpu
        return [os.path.join(bin_dir, "accelerate"), "launch", "--num_processes", "2",
                "--main_process_port", str(port)]
    return [os.path.join(bin_dir, "torchrun"), "--nproc-per-node", "2", "--master-port", str(port)]


@pytest.mark.skipif(_neuron_skip_reason() is not None, reason=str(_neuron_skip_reason()))
@pytest.mark.parametrize("launcher", ["accelerate-launch", "torchrun"])
def test_accelerate_launch_gives_each_rank_its_local_device(tmp_path, launcher):
    """A user's script under a real launcher, nothing bound before `Accelerator()`: each rank is on
    neuron:LOCAL_RANK (accelerate's MULTI_NEURON read the current device, 0 on every rank, and DDP
    failed on rank 1), and DDP's losses and weights are those of the same steps in one process."""
    import json
    import subprocess

    import accelerate_ddp as A
    from accelerate.utils import DistributedType

    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ, HF_HOME=str(tmp_path / "hf"), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    cmd = _launcher(launcher, L.free_port()) + [os.path.join(HERE, "accelerate_ddp.py"), str(out)]
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        log, _ = proc.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 15)  # the elastic agent passes it on to the ranks
        log, _ = proc.communicate()
    ranks = {}
    for r in range(2):
        path = out / f"rank{r}.json"
        if path.exists():
            ranks[r] = json.loads(path.read_text())
    errors = "\n".join(line for line in log.splitlines() if "Error:" in line)
    assert proc.returncode == 0 and len(ranks) == 2, \
        f"{' '.join(cmd)}: rc {proc.returncode}\n{errors}\n--- output tail ---\n{log[-2500:]}"

    model, batches = A.model_and_batches()
    want_losses = A.train(model, torch.optim.SGD(model.parameters(), lr=0.1), batches)
    for r, rec in ranks.items():
        local = rec["local_rank"]
        assert (rec["accelerator_device"], rec["current_device"], rec["parameter_devices"]) == \
            (f"neuron:{local}", local, [f"neuron:{local}"]), f"rank {r}: {rec}"
        assert rec["distributed_type"] == str(DistributedType.MULTI_NEURON)
        torch.testing.assert_close(rec["losses"], want_losses, atol=1e-5, rtol=1e-5, msg=f"rank {r} losses")
        for k, v in model.state_dict().items():
            torch.testing.assert_close(torch.tensor(rec["parameters"][k]), v, atol=1e-5, rtol=1e-5,
                                       msg=lambda m: f"rank {r} {k}: {m}")
    assert sorted(rec["local_rank"] for rec in ranks.values()) == [0, 1]


@pytest.mark.parametrize("device", devices())
def test_tp_from_pretrained_default_adamw_matches_one_process(run, subtests, device, tiny_checkpoint):
    """Tensor parallelism alone, as users start it (`tp_plan="auto"`), trained with the default
    AdamW: foreach on neuron, as on CUDA, over lists mixing DTensors and plain tensors."""
    r, out = run("hf.py", 2, device, "--model-dir", tiny_checkpoint)
    losses, params = W.adamw_reference(W.ADAMW_STEPS)

    def compare(name):
        for k, got in enumerate(load(out, name, 2)):
            assert got["losses"] == pytest.approx(losses, abs=1e-5), (k, got["losses"], losses)
            assert_params(got["params"], params, 1e-5, 1e-4, f"rank {k}")
    check_scenarios(subtests, r, "hf_train/", ["tp_adamw"], compare)


# What _patches.optimizer_foreach_groups_by_mesh relies on in PyTorch, and what it changes: one
# process, a one-rank group. Fails loudly if PyTorch stops choosing foreach for such lists, stops
# grouping through Optimizer._group_tensors_by_device_and_dtype, or starts splitting them itself.
FOREACH_GROUPS_CHECK = r'''
import importlib
import inspect
import torch
import torch_neuronx  # noqa: F401
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard, distribute_tensor
import torch.optim.optimizer as optimizer
from torch.utils._foreach_utils import _get_foreach_kernels_supported_devices

torch.neuron.set_device(0)
dist.init_process_group("cpu:gloo,neuron:neuron", store=dist.HashStore(), rank=0, world_size=1)
patched = optimizer.Optimizer._group_tensors_by_device_and_dtype
upstream = patched.__wrapped__

def params(device):
    mesh = init_device_mesh(device, (1,))
    torch.manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(8, 4, device=device)),
          torch.nn.Parameter(distribute_tensor(torch.randn(8, 4, device=device), mesh, [Shard(0)])),
          torch.nn.Parameter(torch.randn(4, device=device)),
          torch.nn.Parameter(distribute_tensor(torch.randn(8, device=device), mesh, [Shard(0)]))]
    for p in ps:
        p.grad = torch.ones_like(p)
    return ps

# what PyTorch does, and why the patch exists: foreach is the default for mixed lists on the
# foreach devices, and upstream grouping puts DTensors and plain tensors in one group
assert DTensor in optimizer._foreach_supported_types
assert {"cuda", "neuron"} <= set(_get_foreach_kernels_supported_devices())
ps = params("neuron")
assert optimizer._default_to_fused_or_foreach(ps, False) == (False, True)
groups = upstream([ps, [p.grad for p in ps]], True)
assert len(groups) == 1, groups.keys()
# the multi-tensor optimizers group through the patched static method
adam = importlib.import_module("torch.optim.adam")
assert "Optimizer._group_tensors_by_device_and_dtype(" in inspect.getsource(adam._multi_tensor_adam)
try:
    with torch.no_grad():
        torch._foreach_mul_(ps, 0.5)
except RuntimeError as e:
    assert "got mixed torch.Tensor and DTensor" in str(e), e
else:
    raise AssertionError("a foreach kernel over DTensors and plain tensors no longer fails")

# neuron: split by mesh, indices kept, keys unpack as (device, dtype)
groups = patched([ps, [p.grad for p in ps], []], True)
assert len(groups) == 2, groups.keys()
seen = []
for (device, dtype), (lists, indices) in groups.items():
    assert device.type == "neuron" and dtype == torch.float32
    assert len({isinstance(p, DTensor) for p in lists[0]}) == 1 and lists[2] == []
    assert [ps[i] for i in indices] == lists[0] and [ps[i].grad for i in indices] == lists[1]
    seen += indices
assert sorted(seen) == [0, 1, 2, 3]
# cpu (and every other device): what PyTorch returns, untouched
cpu = params("cpu")
assert len(upstream([cpu], True)) == 1
assert patched([cpu], True).keys() == upstream([cpu], True).keys()

# the default AdamW steps as the per-tensor loop does
results = []
for foreach in (None, False):
    ps = params("neuron")
    opt = torch.optim.AdamW(ps, foreach=foreach)
    for _ in range(2):
        opt.step()
    results.append([(p.full_tensor() if isinstance(p, DTensor) else p).detach().cpu() for p in ps])
for a, b in zip(*results):
    torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
dist.destroy_process_group()
print("ok")
'''


@pytest.mark.skipif(_neuron_skip_reason(1) is not None, reason=str(_neuron_skip_reason(1)))
def test_optimizer_foreach_groups_split_dtensors_on_neuron_only():
    r = run_python(FOREACH_GROUPS_CHECK, env={"LOCAL_RANK": "0"})
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout[-3000:] + r.stderr[-3000:]


# ---- failure behaviour (neuron backend only) ---------------------------------------------------

@pytest.mark.skipif(_neuron_skip_reason() is not None, reason=str(_neuron_skip_reason()))
@pytest.mark.parametrize("mode", ["exit", "sleep", "sleep_after_set_timeout"])
def test_peer_failure_raises_within_timeout(tmp_path, mode):
    """A peer that dies (exit) or never joins (sleep): the survivor's all_reduce raises within the
    group's 5 s timeout, names the collective and the missing rank; the group stays failed. A
    timeout given after creation (_set_pg_timeout, as gloo and NCCL take it; TorchTitan sets one)
    is the one that applies, without torch's "only supported for either nccl or gloo" warning."""
    import json
    flags = ["--mode", mode.split("_")[0]] + (["--set-timeout"] if mode.endswith("set_timeout") else [])
    r = L.launch(os.path.join(HERE, "failures.py"), 2, ["--device", "neuron"] + flags, str(tmp_path),
                 timeout=90, env=_env("neuron"))
    assert not r.timed_out and r.seconds < 45, r.tail()
    assert (tmp_path / "failure.json").exists(), f"rank 0 wrote no result ({r.seconds:.1f} s):\n{r.tail()}"
    with open(tmp_path / "failure.json") as f:
        res = json.load(f)
    first, second = res["first"], res["second"]
    assert first["raised"], f"all_reduce returned although rank 1 is gone: {first}"
    assert first["seconds"] < res["timeout"] + 5, first
    assert re.search(r"all_?reduce", first["message"], re.I), first["message"]
    assert re.search(r"rank[s]?\D{0,20}\b1\b", first["message"], re.I), first["message"]
    assert second["raised"] and second["seconds"] < 2, f"the next collective must fail at once: {second}"
    assert res["set_timeout_warnings"] == [], res["set_timeout_warnings"]
    assert r.returncodes[0] == 0, r.tail()
    assert r.shm_leaked == [], f"shared memory left in /dev/shm: {r.shm_leaked}"


# ---- strangers at the device-memory handshake (neuron backend only) ---------------------------

HANDSHAKE_TIMEOUT_S = 5.0  # handshake.py's group timeout


def _handshake(tmp_path, mode):
    r = L.launch(os.path.join(HERE, "handshake.py"), 2, ["--device", "neuron", "--mode", mode], str(tmp_path),
                 timeout=45, env=_env("neuron"))
    assert not r.timed_out, r.tail()
    assert sorted(r.ranks) == [0, 1], f"not every rank wrote a result:\n{r.tail()}"
    assert r.shm_leaked == [], f"shared memory left in /dev/shm: {r.shm_leaked}"
    return r


@pytest.mark.skipif(_neuron_skip_reason() is not None, reason=str(_neuron_skip_reason()))
@pytest.mark.parametrize("mode", ["silent", "impostors"])
def test_strangers_at_the_device_memory_socket_do_not_stop_the_group(tmp_path, mode):
    """Anyone on the host can connect to a rank's abstract `@neuronx-*-fds` socket. A stranger that
    connects first and sends nothing must not hold the rank up, and a process of another user, or
    of ours but not a rank, that claims to be rank 1 is refused: the group forms within its timeout
    with the real rank's memory, and the all_reduce sums what the ranks put in."""
    if mode == "impostors" and os.geteuid() != 0:
        pytest.skip("running an intruder as another user needs root")
    r = _handshake(tmp_path, mode)
    want = [float(sum(k + 1 for k in range(2)))]  # the distinct values of the summed tensor
    for k, rec in r.ranks.items():
        assert rec["formed"] and rec["error"] == "", f"rank {k}: {rec['error']}\n{r.tail()}"
        assert rec["seconds"] < HANDSHAKE_TIMEOUT_S, f"rank {k} took {rec['seconds']:.1f} s to form the group"
        assert rec["sum"] == want, f"rank {k}: all_reduce gave the values {rec['sum']}, expected {want}"
    assert "refused a connection to its device memory socket" in r.logs[0], r.tail()
    if mode == "impostors":
        assert f"(uid {65534})" in r.logs[0], r.tail()


@pytest.mark.skipif(_neuron_skip_reason() is not None, reason=str(_neuron_skip_reason()))
@pytest.mark.skipif(os.geteuid() != 0, reason="running an intruder as another user needs root")
def test_device_memory_handshake_without_the_peer_times_out_naming_the_strangers(tmp_path):
    """Only impostors reach rank 0 before its timeout (rank 1 comes later): rank 0 accepts none of
    them as rank 1, and fails at the group's timeout naming the missing rank and who was refused."""
    r = _handshake(tmp_path, "late_peer")
    rec = r.ranks[0]
    assert not rec["formed"], f"rank 0 formed a group with an impostor as rank 1: {rec}"
    assert rec["seconds"] < HANDSHAKE_TIMEOUT_S + 3, rec
    msg = rec["error"]
    assert "timed out" in msg and "rank(s) [1]" in msg and "to share their device memory" in msg, msg
    assert "2 connection(s) from processes that are not ranks of the group were refused" in msg, msg
    assert not r.ranks[1]["formed"], r.ranks[1]
