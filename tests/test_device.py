import pytest
import torch

from conftest import run_python


def test_autoload_and_names():
    import torch_neuronx  # noqa: F401

    assert torch.neuron.is_available()
    assert torch._C._get_privateuse1_backend_name() == "neuron"
    assert torch.accelerator.current_accelerator().type == "neuron"
    x = torch.ones(2, device="neuron")
    assert x.is_neuron and x.device == torch.device("neuron", 0)
    assert x.cpu().neuron().is_neuron


def test_autoload_can_be_disabled():
    r = run_python("import torch; print(hasattr(torch, 'neuron'))", {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert r.stdout.strip() == "False", r.stderr


def test_trn2_default_topology():
    assert torch.neuron.device_count() == 4  # trn2, LNC=2, one chip
    p = torch.neuron.get_device_properties(0)
    assert p.profile == "trn2" and p.lnc == 2
    assert p.total_memory == 24 * 2**30
    # named as Trainium's backend names them (TorchTitan's MFU table reads both); software: elsewhere
    assert torch.neuron.get_device_name() == "neuron" and p.name == "trn2"
    assert p.software and p.description == "Trainium2 (trn2, software NeuronCore)"
    assert torch.neuron.mem_get_info(0)[1] == 24 * 2**30


@pytest.mark.parametrize("env,count,memory", [
    ({"TORCH_NEURONX_PROFILE": "trn3"}, 4, 36 * 2**30),
    ({"NEURON_LOGICAL_NC_CONFIG": "1"}, 8, 12 * 2**30),
    ({"TORCH_NEURONX_CHIPS": "2"}, 8, 24 * 2**30),
    ({"NEURON_RT_VISIBLE_CORES": "1-2"}, 2, 24 * 2**30),
    ({"NEURON_RT_VISIBLE_CORES": "3"}, 1, 24 * 2**30),
])
def test_topology_from_env(env, count, memory):
    r = run_python("import torch; p = torch.neuron.get_device_properties(0); "
                   "print(torch.neuron.device_count(), p.total_memory, p.logical_core)", env)
    assert r.returncode == 0, r.stderr
    n, mem, core = map(int, r.stdout.split())
    assert (n, mem) == (count, memory)
    if env.get("NEURON_RT_VISIBLE_CORES") == "3":
        assert core == 3


def test_bad_setting_is_named():
    r = run_python("import torch; torch.neuron.init()", {"TORCH_NEURONX_PROFILE": "trn1"})
    assert r.returncode != 0
    assert "TORCH_NEURONX_PROFILE" in r.stderr and "trn1" in r.stderr


def test_set_device_and_context():
    assert torch.neuron.current_device() == 0
    with torch.neuron.device(2):
        assert torch.neuron.current_device() == 2
        assert torch.empty(1, device="neuron").device.index == 2
    assert torch.neuron.current_device() == 0
    torch.neuron.set_device("neuron:1")
    assert torch.neuron.current_device() == 1
    torch.neuron.set_device(0)
    with pytest.raises(RuntimeError, match="invalid device index"):
        torch.neuron.set_device(9)
    assert torch.neuron.current_device() == 0


def test_tensor_on_other_device_and_cross_device_copy():
    a = torch.arange(6.0, device="neuron:1")
    b = a.to("neuron:3")
    assert b.device.index == 3
    torch.testing.assert_close(b.cpu(), torch.arange(6.0))


def test_module_methods_and_misc_api():
    m = torch.nn.Linear(3, 2).neuron()
    assert next(m.parameters()).is_neuron
    assert torch.neuron.is_bf16_supported()
    assert torch.bfloat16 in torch.neuron.get_amp_supported_dtype()
    assert not torch.neuron._is_in_bad_fork()
    assert torch.neuron.runtime_config()["profile"] == "trn2"


def test_fork_after_use_is_refused():
    r = run_python(
        "import os, torch\n"
        "torch.ones(1, device='neuron').sum().item(); torch.neuron.init()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os._exit(0 if torch.neuron._is_in_bad_fork() else 1)\n"
        "_, status = os.waitpid(pid, 0); print(os.waitstatus_to_exitcode(status))\n")
    assert r.stdout.strip() == "0", r.stderr


def test_readme_lists_every_setting():
    import pathlib

    import torch_neuronx

    readme = (pathlib.Path(__file__).parent.parent / "README.md").read_text()
    rows = [line for line in readme.splitlines() if line.startswith("| `")]
    listed = [line.split("`")[1] for line in rows]
    assert listed == [name for name, _, _ in torch_neuronx.config.settings()]


@pytest.mark.parametrize("env,message", [
    ({"TORCH_NEURONX_HBM_BYTES": "256MB"}, "TORCH_NEURONX_HBM_BYTES"),
    ({"TORCH_NEURONX_HBM_BYTES": " 100"}, "TORCH_NEURONX_HBM_BYTES"),
    ({"TORCH_NEURONX_CHIPS": "-1"}, "TORCH_NEURONX_CHIPS"),
    ({"NEURON_LAUNCH_BLOCKING": "yes"}, "NEURON_LAUNCH_BLOCKING"),
    ({"TORCH_NEURONX_FALLBACK": "loud", "TORCH_NEURONX_OP_POLICY": "aten::lgamma=copy"}, "TORCH_NEURONX_FALLBACK"),
])
def test_malformed_settings_are_errors_naming_the_variable(env, message):
    r = run_python("import torch\ntorch.lgamma(torch.rand(3, device='neuron')).cpu()", env)
    assert r.returncode != 0 and message in r.stderr, r.stderr[-500:]


def test_byte_settings_take_units():
    r = run_python("import torch; print(torch.neuron.get_device_properties(0).total_memory)",
                   {"TORCH_NEURONX_HBM_BYTES": "256MiB"})
    assert r.stdout.strip() == str(256 * 2**20), r.stderr


CPU_WORK = (
    "import torch\n"
    "torch.manual_seed(0)\n"
    "m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))\n"
    "opt = torch.optim.AdamW(m.parameters())\n"
    "for _ in range(3):\n"
    "    loss = m(torch.randn(16, 32)).square().mean(); opt.zero_grad(); loss.backward(); opt.step()\n"
    "print(repr(loss.item()), repr(torch.nonzero(m[0].weight > 0).sum().item()))\n")


def test_a_cpu_only_process_keeps_pytorchs_allocator_and_results():
    """Loading the backend replaced the CPU allocator of every CPU tensor in the process; the
    redirect a device kernel needs is now installed by the first such kernel."""
    loaded = run_python(CPU_WORK + "import torch_neuronx\nprint(torch_neuronx._C._cpu_allocator_is_pytorchs())\n"
                        "torch.nonzero(torch.ones(3, device='neuron')).cpu()\n"
                        "print(torch_neuronx._C._cpu_allocator_is_pytorchs())\n")
    plain = run_python(CPU_WORK, {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert loaded.returncode == 0 and plain.returncode == 0, loaded.stderr + plain.stderr
    out = loaded.stdout.split("\n")
    assert out[0] == plain.stdout.split("\n")[0]  # the same CPU results, bit for bit
    assert out[1:3] == ["True", "False"], loaded.stdout  # PyTorch's own until a device kernel needs it
