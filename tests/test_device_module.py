"""`torch.neuron` answers what PyTorch, transformers and accelerate ask of a device module (as they
ask torch.cuda): the RNG state that activation checkpointing saves and restores, `_utils` for
torch.load, the per-process memory fraction, utilization."""
import io
import os

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from conftest import run_python

os.environ.setdefault("HF_HUB_OFFLINE", "1")
N = "neuron"


def _grads_with_random_draws(use_checkpoint, reentrant):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Dropout(0.5), torch.nn.Linear(32, 16)).to(N)
    x = torch.randn(8, 16).to(N).requires_grad_()
    torch.neuron.manual_seed(1)

    def f(x):
        return model(x) * torch.rand_like(x)

    y = checkpoint(f, x, use_reentrant=reentrant) if use_checkpoint else f(x)
    y.sum().backward()
    return [x.grad.cpu()] + [p.grad.cpu() for p in model.parameters()]


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpoint_recomputes_the_forwards_random_numbers(reentrant):
    """torch.utils.checkpoint restores a device's RNG state before recomputing only when the device
    module's `_initialized` is true; without it the recomputation drew new dropout masks."""
    plain = _grads_with_random_draws(False, reentrant)
    checkpointed = _grads_with_random_draws(True, reentrant)
    for a, b in zip(checkpointed, plain):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_hf_gradient_checkpointing_with_dropout_matches_the_model_without_it():
    import transformers

    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, attention_dropout=0.3)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").to(N).train()
    ids = torch.randint(0, 64, (2, 12)).to(N)

    def grads():
        model.zero_grad()
        torch.neuron.manual_seed(7)
        model(input_ids=ids, labels=ids).loss.backward()
        return {n: p.grad.cpu() for n, p in model.named_parameters()}

    plain = grads()
    model.activation_checkpointing_enable()
    assert model.is_activation_checkpointing
    checkpointed = grads()
    for name, g in plain.items():
        torch.testing.assert_close(checkpointed[name], g, rtol=0, atol=0, msg=name)


def test_initialized_follows_the_runtime():
    r = run_python("import torch\nprint(torch.neuron._initialized)\n"
                   "torch.ones(1, device='neuron')\nprint(torch.neuron._initialized)\n")
    assert r.stdout.split() == ["False", "True"], r.stdout + r.stderr


def test_random_submodule_and_generators_as_torch_cuda():
    state = torch.neuron.random.get_rng_state()
    a = torch.rand(4, device=N)
    torch.neuron.random.set_rng_state(state)
    torch.testing.assert_close(torch.rand(4, device=N), a, rtol=0, atol=0)
    states = torch.neuron.random.get_rng_state_all()
    assert len(states) == torch.neuron.device_count()
    torch.neuron.random.set_rng_state_all(states)
    assert torch.neuron._get_generator(torch.device(N, 0)) is torch.neuron.default_generators[0]


def test_torch_load_maps_onto_a_neuron_device():
    buf = io.BytesIO()
    torch.save({"w": torch.arange(6.0).reshape(2, 3)}, buf)
    for location, index in (("neuron:1", 1), ("neuron", 0), (torch.device(N, 1), 1)):
        buf.seek(0)
        w = torch.load(buf, map_location=location)["w"]
        assert w.device == torch.device(N, index)
        torch.testing.assert_close(w.cpu(), torch.arange(6.0).reshape(2, 3))
    assert torch.neuron._utils._get_device_index("neuron:1") == 1
    assert torch.neuron._utils._get_device_index("cpu", allow_cpu=True) == -1
    with pytest.raises(ValueError, match="neuron"):
        torch.neuron._utils._get_device_index("cuda:0")


def test_per_process_memory_fraction_is_enforced():
    r = run_python(
        "import torch\n"
        "total = torch.neuron.mem_get_info(1)[1]\n"
        "assert torch.neuron.get_per_process_memory_fraction(1) == 1.0\n"
        "torch.neuron.set_per_process_memory_fraction(0.25, 1)\n"
        "print(torch.neuron.get_per_process_memory_fraction(1))\n"
        "keep = torch.empty(int(total * 0.2) // 4, device='neuron:1')\n"
        "try:\n"
        "    torch.empty(int(total * 0.1) // 4, device='neuron:1')\n"
        "except torch.OutOfMemoryError as e:\n"
        "    print('OOM', 'set_per_process_memory_fraction(0.25)' in str(e))\n"
        "print(torch.empty(int(total * 0.1) // 4, device='neuron:0').numel() > 0)\n"  # other devices unlimited
        "del keep\n"
        "print(torch.empty(int(total * 0.2) // 4, device='neuron:1').numel() > 0)\n"  # the allocator stays usable
        "torch.neuron.set_per_process_memory_fraction(1.0, 1)\n"
        "print(torch.empty(int(total * 0.5) // 4, device='neuron:1').numel() > 0)\n"
        "for bad in (1.5, -0.1):\n"
        "    try:\n"
        "        torch.neuron.set_per_process_memory_fraction(bad)\n"
        "    except RuntimeError as e:\n"
        "        print('refused', 'fraction' in str(e))\n")
    assert r.stdout.split("\n")[:7] == ["0.25", "OOM True", "True", "True", "True", "refused True",
                                        "refused True"], r.stdout + r.stderr[-2000:]


def test_utilization_is_the_share_of_time_the_queues_ran_tasks():
    import time

    torch.neuron.synchronize()
    torch.neuron.utilization()
    time.sleep(0.2)
    assert torch.neuron.utilization() <= 5  # idle
    torch.neuron._sleep(300)  # 300 ms of queued busy time
    torch.neuron.synchronize()
    assert torch.neuron.utilization() >= 80
