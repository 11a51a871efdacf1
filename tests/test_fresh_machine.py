"""What a newcomer meets on a fresh machine: the installed package from any working directory
(the repository root included), CI whose every cache lies in a fresh folder, no instruction that
needs `python -P`, and the README's Python blocks run as written."""

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import run_python

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_package_and_demo_import_from_the_repository_root():
    proc = run_python("import torch, torch_neuronx, torch_neuronx.demo\n"
                      "print(torch_neuronx.__file__)\n"
                      "print(torch.randn(4, device='neuron').sum().device)", cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    path, device = proc.stdout.split()
    assert device == "neuron:0"
    # The installed copy, never the checkout's source tree.
    assert not os.path.abspath(path).startswith(os.path.join(REPO, "src") + os.sep), path
    assert not os.path.exists(os.path.join(REPO, "torch_neuronx")), "a package folder at the root shadows the install"


# Each place a library of the test run keeps state, as that library resolves it.
PROBE = r"""
import json, os, subprocess, sys, tempfile
import torch, datasets.config, huggingface_hub.constants as hub, matplotlib, transformers.utils.hub as th
import vllm.envs
from torch._inductor.runtime.cache_dir_utils import cache_dir
from torch_neuronx.compile import cache as neuron_cache
places = {
    "home": os.path.expanduser("~"), "tmp": tempfile.gettempdir(), "inductor": cache_dir(),
    "torch_neuronx": neuron_cache.root(), "torch_hub": torch.hub.get_dir(),
    "hf_home": hub.HF_HOME, "hf_hub": hub.HF_HUB_CACHE, "hf_datasets": datasets.config.HF_DATASETS_CACHE,
    "hf_modules": th.HF_MODULES_CACHE, "vllm_cache": vllm.envs.VLLM_CACHE_ROOT,
    "vllm_config": vllm.envs.VLLM_CONFIG_ROOT, "matplotlib_cache": matplotlib.get_cachedir(),
    "matplotlib_config": matplotlib.get_configdir(),
    "pip": subprocess.run([sys.executable, "-m", "pip", "cache", "dir"], capture_output=True, text=True).stdout.strip(),
    "ccache": subprocess.run(["ccache", "-k", "cache_dir"], capture_output=True, text=True).stdout.strip(),
}
print("PLACES " + json.dumps({k: str(v) for k, v in places.items()}))
"""


def test_ci_run_keeps_every_cache_in_a_fresh_folder(tmp_path):
    """.ci/run itself, with a stand-in for `make` that reports where each library would keep its
    state: every place lies in the fresh folder .ci/run made, whatever this machine has set."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "probe.py").write_text(PROBE)
    out = tmp_path / "out.txt"
    make = bin_dir / "make"
    make.write_text(f"#!/bin/sh\n[ \"$1\" = test ] || exit 2\nexec {sys.executable} {tmp_path / 'probe.py'} > {out}\n")
    make.chmod(0o755)
    # As a warm machine would have it: caches set to folders that outlive the run.
    warm = str(tmp_path / "warm")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": warm, "XDG_CACHE_HOME": warm,
           "HF_HOME": warm, "VLLM_CACHE_ROOT": warm, "TORCHINDUCTOR_CACHE_DIR": warm, "TRANSFORMERS_CACHE": warm}
    proc = subprocess.run(["bash", os.path.join(REPO, ".ci", "run")], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    fresh = re.search(r"every cache in (\S+)", proc.stdout).group(1)
    assert not os.path.exists(fresh), "the fresh folder outlived the run"
    places = json.loads(out.read_text().split("PLACES ", 1)[1])
    outside = {k: v for k, v in places.items() if not os.path.abspath(v).startswith(fresh + os.sep)}
    assert outside == {}, f"outside {fresh}: {outside}"


def test_no_instruction_needs_python_dash_p():
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    pattern = re.compile(r"python3? -P\b|\"-P\"|'-P'|\.venv/bin/python -P|\$\(PY\) -P")
    found = []
    for name in files:
        if name.endswith((".py", ".md", ".sh", ".toml", ".txt")) or os.path.basename(name) in ("Makefile", "run"):
            with open(os.path.join(REPO, name), encoding="utf-8", errors="replace") as f:
                found += [f"{name}:{i}" for i, line in enumerate(f, 1) if pattern.search(line)]
    found = [f for f in found if not f.startswith("tests/test_fresh_machine.py")]
    assert found == []


def readme_blocks():
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        text = f.read()
    return [(text[:m.start()].count("\n") + 2, m.group(1))
            for m in re.finditer(r"^```python\n(.*?)^```", text, flags=re.S | re.M)]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """For the block that loads "path/to/checkpoint": the examples' tiny Llama and its tokenizer."""
    sys.path.insert(0, os.path.join(REPO, "examples"))
    from _tiny import tiny_llama_checkpoint

    return tiny_llama_checkpoint(str(tmp_path_factory.mktemp("readme-checkpoint")))


def test_readme_has_python_blocks():
    assert len(readme_blocks()) >= 5


@pytest.mark.parametrize("line,code", readme_blocks(), ids=[f"README.md:{n}" for n, _ in readme_blocks()])
def test_readme_python_block_runs(line, code, checkpoint, tmp_path):
    """Each block as a newcomer pastes it into a fresh interpreter (in an empty folder)."""
    code = code.replace("path/to/checkpoint", checkpoint)
    proc = run_python(code, cwd=str(tmp_path), timeout=600, env={"HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, f"README.md:{line}\n{code}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
