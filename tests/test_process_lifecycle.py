"""The device over a process's life and at its edges: fork, exit with work in flight, many devices,
mixing devices, dtypes Trainium lacks, the sanitizer. Anything that could hang runs in a subprocess
with a hard time limit."""
import pytest
import torch

from conftest import run_python


def test_forked_child_gets_a_clear_error_and_never_hangs():
    code = """
import os, torch
torch.ones(2, device="neuron").sum().item()
pid = os.fork()
if pid == 0:
    for use in (lambda: torch.ones(2, device="neuron"), lambda: torch.neuron.synchronize()):
        try:
            use()
            os._exit(3)
        except RuntimeError as e:
            if "forked subprocess" not in str(e):
                os._exit(4)
    os._exit(0 if torch.neuron._is_in_bad_fork() else 5)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status), torch.ones(2, device="neuron").sum().item())
"""
    r = run_python(code, timeout=60)
    assert r.stdout.split() == ["child", "0", "2.0"], r.stdout + r.stderr[-2000:]


def test_forked_child_computes_on_the_cpu_with_every_thread():
    # The device parks an OpenMP team of its own (executor.cpp's park_a_team); were
    # it the user's thread's, a forked child's first parallel region would wait for its threads.
    code = """
import os, torch
x = torch.randn(1 << 20)
torch.ones(2, device="neuron").sum().item()
pid = os.fork()
if pid == 0:
    os._exit(0 if torch.equal(x * 2 + 1, torch.addcmul(torch.ones(1 << 20), x, torch.full((1,), 2.0))) else 1)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status), torch.get_num_threads())
"""
    r = run_python(code, timeout=60)
    assert r.returncode == 0 and r.stdout.split()[:2] == ["child", "0"], r.stdout + r.stderr[-2000:]


def test_fork_before_any_use_leaves_the_child_free_to_use_the_device():
    code = """
import os, torch
pid = os.fork()
if pid == 0:
    os._exit(0 if torch.ones(3, device="neuron").sum().item() == 3 else 1)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
"""
    r = run_python(code, timeout=60)
    assert r.stdout.split() == ["child", "0"], r.stdout + r.stderr[-2000:]


def test_exit_with_work_in_flight_is_orderly():
    code = """
import torch, torch.nn.functional as F
m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(4 * 14 * 14, 8)).to("neuron")
opt = torch.optim.AdamW(m.parameters(), fused=True)
g = torch.Generator(device="neuron").manual_seed(0)
x = torch.randn(4, 3, 16, 16, device="neuron", generator=g)
for _ in range(3):
    q = m(x).view(4, 2, 1, 4)
    F.scaled_dot_product_attention(q, q, q).sum().backward()
    opt.step()
torch.neuron._sleep(100)  # still running when the script ends
print("end")
"""
    for _ in range(5):
        r = run_python(code, timeout=120)
        assert r.returncode == 0 and r.stdout.strip() == "end", (r.returncode, r.stderr[-2000:])
        assert "terminate called" not in r.stderr


def test_more_than_64_devices_and_invalid_indices():
    code = """
import torch
print(torch.neuron.device_count())
x = torch.ones(3, device="neuron:64") * 2
torch.neuron.empty_cache()
print(x.sum().item(), torch.neuron.memory_allocated(67) >= 0)
"""
    r = run_python(code, {"TORCH_NEURONX_CHIPS": "17"})
    assert r.stdout.split() == ["68", "6.0", "True"], r.stdout + r.stderr[-2000:]
    for call in (lambda: torch.neuron.memory_allocated(5), lambda: torch.neuron.memory_stats(9),
                 lambda: torch.neuron.mem_get_info(4)):
        with pytest.raises(RuntimeError, match="invalid device index"):
            call()


def test_mixing_devices_is_an_error():
    a = torch.ones(3, device="neuron")
    for fn in (lambda: a + torch.ones(3), lambda: torch.mm(a.view(1, 3), torch.ones(3, 1)),
               lambda: torch.cat([a, torch.ones(3)]), lambda: a + torch.ones(3, device="neuron:1")):
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            fn()
    assert (a + torch.tensor(1.0)).sum().item() == 6  # 0-dim CPU tensors act as scalars


def test_float64_warns_and_strict_raises():
    r = run_python("import warnings, torch\nwith warnings.catch_warnings(record=True) as w:\n"
                   "    warnings.simplefilter('always')\n"
                   "    x = torch.ones(2, dtype=torch.float64, device='neuron'); y = x * 2\n"
                   "print(sum('Trainium cannot run it' in str(m.message) for m in w), y.sum().item())")
    assert r.stdout.split() == ["1", "4.0"], r.stderr
    r = run_python("import torch\ntorch.ones(2, dtype=torch.float64, device='neuron')",
                   {"TORCH_NEURONX_STRICT": "1"})
    assert r.returncode != 0 and "not supported by Trainium" in r.stderr


def test_complex_warns_once_with_what_to_do():
    # RoPE as TorchTitan's Llama writes it: complex frequencies at every step; one warning, which
    # says what to do instead, and the values are the CPU's
    code = ("import warnings, torch\nwith warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    freqs = torch.polar(torch.ones(4, 8), torch.arange(32.).view(4, 8) / 10)\n"
            "    x = torch.arange(64.).view(4, 16) / 7\n"
            "    got = [torch.view_as_real(torch.view_as_complex(x.to('neuron').view(4, 8, 2)) * freqs.to('neuron'))"
            " for _ in range(3)]\n"
            "want = torch.view_as_real(torch.view_as_complex(x.view(4, 8, 2)) * freqs)\n"
            "msgs = [str(m.message) for m in w if 'Trainium cannot run it' in str(m.message)]\n"
            "print(len(msgs), all(torch.equal(g.cpu(), want) for g in got))\nprint(msgs[0])")
    r = run_python(code)
    assert r.returncode == 0, r.stderr[-3000:]
    count, same = r.stdout.splitlines()[0].split()
    assert (count, same) == ("1", "True"), r.stdout
    assert "cos/sin" in r.stdout and "TORCH_NEURONX_STRICT=1" in r.stdout and "once per process" in r.stdout


def test_sanitizer_catches_host_access():
    ok = run_python("import torch\nx = torch.randn(64, device='neuron')\n"
                    "print(float((x * 2).sum().item() - 2 * x.cpu().sum().item()) < 1e-3)",
                    {"TORCH_NEURONX_SANITIZE": "1"})
    assert ok.stdout.strip() == "True", ok.stderr
    bad = run_python("import ctypes, torch\nx = torch.ones(64, device='neuron')\ntorch.neuron.synchronize()\n"
                     "print(ctypes.c_float.from_address(x.data_ptr()).value)",
                     {"TORCH_NEURONX_SANITIZE": "1"})
    assert bad.returncode != 0
    assert "host access to neuron device memory" in bad.stderr
    unsanitized = run_python("import ctypes, torch\nx = torch.ones(64, device='neuron')\ntorch.neuron.synchronize()\n"
                             "print(ctypes.c_float.from_address(x.data_ptr()).value)")
    assert unsanitized.stdout.strip() == "1.0"


def test_sanitizer_runs_a_whole_training_run():
    # Every kernel, sync op, copy and compiled kernel touches device memory only inside a queue
    # task: the demo (loading, Trainer, compiled static-cache generate) runs with device memory
    # closed to the host.
    r = run_python("import tempfile\nfrom torch_neuronx.demo import main\n"
                   "main(['--steps', '5', '--new-tokens', '4', '--out', tempfile.mkdtemp()])\nprint('done')",
                   {"TORCH_NEURONX_SANITIZE": "1"}, timeout=600)
    assert r.returncode == 0 and "done" in r.stdout, r.stderr[-2000:]


def test_sanitizer_prints_the_python_stack_of_the_offending_thread():
    r = run_python("import ctypes, torch\nx = torch.ones(64, device='neuron')\ntorch.neuron.synchronize()\n"
                   "def peek(t):\n    return ctypes.c_float.from_address(t.data_ptr()).value\n"
                   "print(peek(x))\n", {"TORCH_NEURONX_SANITIZE": "1"})
    assert r.returncode != 0
    assert "host access to neuron device memory" in r.stderr
    assert "in peek" in r.stderr and 'File "<string>", line 5' in r.stderr, r.stderr[-2000:]
