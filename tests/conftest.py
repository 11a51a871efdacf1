import os
import subprocess
import sys

import pytest
import torch

assert torch.neuron.is_available(), "the neuron device must autoload with `import torch`"

# PyTorch's device-generic test machinery (common_device_type, imported by test modules after
# this) takes neuron's test base through its public hook.
import torch_neuronx.testing  # noqa: E402

os.environ.setdefault("TORCH_TEST_DEVICES", torch_neuronx.testing.TEST_BASE)


@pytest.fixture
def fresh_dynamo():
    """Each test compiles from nothing and counts only its own compiles."""
    torch._dynamo.reset()
    torch_neuronx.reset_compile_stats()
    yield
    torch._dynamo.reset()


def to_neuron(x):
    if isinstance(x, torch.Tensor):
        return x.to("neuron")
    if isinstance(x, (list, tuple)):
        return type(x)(to_neuron(v) for v in x)
    return x


def assert_same(neuron_out, cpu_out, **tol):
    """Values, dtype and shape of a neuron result against the CPU result."""
    if isinstance(cpu_out, (list, tuple)):
        assert len(neuron_out) == len(cpu_out)
        for a, b in zip(neuron_out, cpu_out):
            assert_same(a, b, **tol)
        return
    if isinstance(cpu_out, torch.Tensor):
        assert isinstance(neuron_out, torch.Tensor) and neuron_out.device.type == "neuron", neuron_out
        torch.testing.assert_close(neuron_out.cpu(), cpu_out, **tol)
    else:
        assert neuron_out == cpu_out


def run_python(code: str, env: dict | None = None, timeout: int = 120, cwd: str | None = None
               ) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter (for settings read once per process)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env,
                          timeout=timeout, cwd=cwd)


@pytest.fixture(scope="session")
def vllm_models_saved(tmp_path_factory):
    """The vLLM tests' tiny models (tests/vllm_models.py), saved once for all of them."""
    import vllm_models

    return vllm_models.build(tmp_path_factory.mktemp("vllm-models"))


@pytest.fixture(autouse=True)
def _sync_after_test():
    yield
    torch.neuron.synchronize()
