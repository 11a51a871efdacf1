"""Settings read from the environment: each is parsed strictly when its layer starts, a bad value
is one clear error naming the variable and the value, and nothing is silently ignored."""
import os
import re
import resource
import subprocess
import sys

import pytest
import torch

from conftest import run_python

USE_DEVICE = "import torch\nx = torch.arange(6.0, device='neuron')\nprint((x * 2 + 1).cpu().tolist())\n"


def run_limited(code, env, address_space):
    """Runs `code` in a fresh interpreter whose address space is limited (ulimit -v)."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180,
                          env={**os.environ, **env}, preexec_fn=limit)


def one_error(r):
    """The process failed with one traceback: none more from the atexit callback."""
    assert r.returncode != 0, r.stdout
    assert "Exception ignored in atexit" not in r.stderr and r.stderr.count("Traceback") == 1, r.stderr[-3000:]


@pytest.mark.parametrize("policy,named", [
    ("aten::add.Tensor=copy", "aten::add.Tensor"),  # a typed kernel: it always runs async
    ("aten::add=sync", "aten::add."),
    ("aten::mul.Tensor=sync", "aten::mul.Tensor"),
])
def test_op_policy_refuses_an_op_with_a_typed_kernel_at_import(policy, named):
    r = run_python("import torch\nprint('imported')", {"TORCH_NEURONX_OP_POLICY": policy})
    assert r.returncode != 0 and "imported" not in r.stdout, r.stdout
    assert "TORCH_NEURONX_OP_POLICY" in r.stderr and named in r.stderr and "typed" in r.stderr, r.stderr[-2000:]


@pytest.mark.parametrize("policy,named", [
    ("garbage", "garbage"),
    ("aten::lgamma=fast", "fast"),
    ("aten::lgama=copy", "aten::lgama"),  # no such operator
    ("aten::linear=copy", "aten::linear"),  # composite: it never reaches the device
    ("aten::lgamma=copy,aten::lgamma=sync", "twice"),
])
def test_malformed_op_policy_is_an_error_at_import(policy, named):
    r = run_python("import torch\nprint('imported')", {"TORCH_NEURONX_OP_POLICY": policy})
    assert r.returncode != 0 and "imported" not in r.stdout, r.stdout
    assert "TORCH_NEURONX_OP_POLICY" in r.stderr and named in r.stderr, r.stderr[-2000:]


def test_op_policy_of_a_boxed_op_is_what_explain_reports():
    code = ("import torch, torch_neuronx\n"
            "x = torch.rand(8) + 0.5\n"
            "torch.testing.assert_close(torch.lgamma(x.to('neuron')).cpu(), torch.lgamma(x))\n"
            "print(torch_neuronx.explain('aten::lgamma.out').split(': ')[1].split()[0], "
            "torch_neuronx.op_counts()['aten::lgamma.out']['copy'])\n")
    r = run_python(code, {"TORCH_NEURONX_OP_POLICY": "aten::lgamma.out=copy", "TORCH_NEURONX_FALLBACK": "silent"})
    assert r.stdout.split() == ["copy", "1"], r.stderr[-2000:]


@pytest.mark.parametrize("env,shown", [
    ({"TORCH_NEURONX_HBM_BYTES": "4611686018427387904"}, "4611686018427387904"),  # 4 x it wraps to 0
    ({"TORCH_NEURONX_HBM_BYTES": "4611686018428436480"}, "4611686018428436480"),  # 4 x it wraps to 4 MiB
    ({"TORCH_NEURONX_HBM_BYTES": "2TiB"}, "2TiB"),
    ({"NEURON_RT_VISIBLE_CORES": "-1"}, "'-1'"),
    ({"NEURON_RT_VISIBLE_CORES": "1-x"}, "'1-x'"),
    ({"TORCH_NEURONX_PROFILE": "trn1"}, "trn1"),
    ({"TORCH_NEURONX_CHIPS": "-1"}, "-1"),
])
def test_a_bad_runtime_setting_is_one_error_showing_the_value(env, shown):
    r = run_python(USE_DEVICE, env)
    one_error(r)
    assert next(iter(env)) in r.stderr and shown in r.stderr, r.stderr[-2000:]


def test_a_large_hbm_setting_within_the_limit_works():
    r = run_python("import torch\nprint(torch.neuron.mem_get_info(0)[1])\n" + USE_DEVICE,
                   {"TORCH_NEURONX_HBM_BYTES": "1TiB"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split("\n")[:2] == [str(2**40), str((torch.arange(6.0) * 2 + 1).tolist())]


def test_log_setting_takes_only_known_areas():
    r = run_python("import torch\nprint('imported')", {"TORCH_NEURONX_LOG": "everything"})
    assert r.returncode != 0 and "imported" not in r.stdout
    assert "TORCH_NEURONX_LOG" in r.stderr and "everything" in r.stderr and "compile" in r.stderr, r.stderr[-2000:]
    r = run_python("import torch\nprint('imported')", {"TORCH_NEURONX_LOG": "compile"})
    assert r.stdout.strip() == "imported", r.stderr[-2000:]


def test_memory_fraction_error_shows_the_value_as_given():
    for bad in (1.0000001, -1e-9):
        with pytest.raises(RuntimeError, match=f"invalid memory fraction {re.escape(repr(bad))}:"):
            torch.neuron.set_per_process_memory_fraction(bad)
    assert torch.neuron.get_per_process_memory_fraction() == 1.0


def test_device_memory_fits_an_address_space_limit():
    """Under ulimit -v 16G the default device memory (24 GiB) cannot be mapped: the error says how
    to size TORCH_NEURONX_HBM_BYTES, and a device of that size then works, as the CPU does."""
    limit = 16 * 2**30
    r = run_limited(USE_DEVICE, {}, limit)
    one_error(r)
    found = re.search(r"TORCH_NEURONX_HBM_BYTES to at most (\d+)MiB", r.stderr)
    assert found, r.stderr[-2000:]
    expected = str((torch.arange(6.0) * 2 + 1).tolist())
    # Half of the most it names: the interpreter maps a little more from run to run.
    r = run_limited(USE_DEVICE, {"TORCH_NEURONX_HBM_BYTES": f"{int(found.group(1)) // 2}MiB"}, limit)
    assert r.returncode == 0 and r.stdout.strip() == expected, r.stderr[-2000:]
    # A device smaller than the limit allows reserves less address space than its usual range.
    r = run_limited(USE_DEVICE, {"TORCH_NEURONX_HBM_BYTES": "3GiB"}, limit)
    assert r.returncode == 0 and r.stdout.strip() == expected, r.stderr[-2000:]
