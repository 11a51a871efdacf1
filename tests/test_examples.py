"""Every example runs as is (a user's first contact with the flows of tests/test_hf_stack.py)."""
import os
import subprocess
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


@pytest.mark.parametrize("name,expect", [
    ("trainer_finetune.py", "optimizer: adamw_torch_fused"),
    ("accelerate_loop.py", "on neuron"),
    ("peft_lora.py", "merged model on neuron"),
    ("trl_sft.py", "trained on neuron"),
    ("diffusers_ddpm.py", "neuron generator"),
    ("generate_static.py", "'recompiles': 0"),
    ("fsdp2_llama.py", "trained with FSDP2 on 2 ranks of neuron"),
    ("nki_rmsnorm.py", "trained on neuron with the NKI RMSNorm"),
    ("vllm_serve.py", "served by vLLM on neuron"),
])
def test_example_runs(name, expect):
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, name)], capture_output=True, text=True, timeout=600,
                       cwd=EXAMPLES)
    assert r.returncode == 0 and expect in r.stdout, r.stdout[-2000:] + r.stderr[-3000:]
