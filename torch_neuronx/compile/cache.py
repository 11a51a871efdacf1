"""The disk cache of compiled neuron programs.

Layout: TORCH_NEURONX_CACHE_DIR (default: $XDG_CACHE_HOME/torch_neuronx, else ~/.cache/torch_neuronx)
holds one folder per compiler identity — torch_neuronx version and a hash of its code generator's
sources, torch version, device profile — so a program is only ever reused by the compiler and
device it was built for. Inside, Inductor's
caches: the AOTAutograd results and graphs (keyed by the graph, the input shapes, dtypes and
strides, and every compiler flag) and the compiled kernels (keyed by their source).
- Writes are atomic: an entry is written to a temporary file and renamed into place, so a reader
  sees a whole entry or none, and processes compiling the same model at once both succeed.
- A corrupted or truncated entry fails to load, is reported as a miss and is compiled again.
- The folder is kept under TORCH_NEURONX_CACHE_SIZE bytes (default 10 GiB): after each compile the
  least recently used files go first (a kernel whose file is gone is rebuilt from the source its
  graph keeps).
"""
from __future__ import annotations

import hashlib
import os
import threading

import torch

from .. import _C, __version__

_lock = threading.Lock()
_configured: str | None = None


def root() -> str:
    configured = _C._config_text("TORCH_NEURONX_CACHE_DIR")
    if configured:
        return os.path.abspath(os.path.expanduser(configured))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "torch_neuronx")


def _codegen_fingerprint() -> str:
    """A hash of the sources that shape the generated code: a changed code generator must not
    reuse programs written by the old one, even under the same version number."""
    here = os.path.dirname(os.path.abspath(__file__))
    digest = hashlib.sha256()
    for path in sorted([os.path.join(here, n) for n in os.listdir(here) if n.endswith(".py")] +
                       [os.path.join(os.path.dirname(here), "_patches.py")]):
        with open(path, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()[:10]


def directory() -> str:
    """The folder of this compiler identity (versions, code generator and device profile)."""
    profile = torch.neuron.runtime_config()["profile"]
    torch_version = torch.__version__.replace("+", "_")
    return os.path.join(root(), f"neuronx-{__version__}-{_codegen_fingerprint()}-torch-{torch_version}-{profile}")


_MARK = "_TORCH_NEURONX_INDUCTOR_CACHE_DIR"  # what this package set, inherited by child processes


def configure() -> str:
    """Points Inductor's caches at the neuron cache (once per process, before Inductor first asks).
    A TORCHINDUCTOR_CACHE_DIR the user set is kept; Inductor's default, or one this package set in a
    parent process, is not."""
    global _configured
    with _lock:
        if _configured is None:
            path = directory()
            os.makedirs(path, exist_ok=True)
            from torch._inductor.runtime.cache_dir_utils import default_cache_dir

            current = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
            if not current or current in (os.environ.get(_MARK), default_cache_dir()):
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.environ[_MARK] = path
            _configured = os.environ["TORCHINDUCTOR_CACHE_DIR"]
        return _configured


def size_limit() -> int:
    return int(_C._config_bytes("TORCH_NEURONX_CACHE_SIZE", 10 << 30))


def _files(path: str):
    for folder, _, names in os.walk(path):
        for name in names:
            full = os.path.join(folder, name)
            try:
                st = os.stat(full)
            except OSError:
                continue  # removed by another process meanwhile
            yield full, st.st_size, max(st.st_atime, st.st_mtime)


def evict(path: str | None = None, limit: int | None = None) -> int:
    """Removes the least recently used files until the folder fits the limit; returns bytes freed."""
    path = path or configure()
    limit = size_limit() if limit is None else limit
    files = sorted(_files(path), key=lambda f: f[2])
    total = sum(size for _, size, _ in files)
    freed = 0
    for name, size, _ in files:
        if total - freed <= limit:
            break
        try:
            os.remove(name)
            freed += size
        except OSError:
            pass
    return freed


def compile_with_cache(compile_fn):
    """Runs a compile with the neuron cache in place, then keeps the cache under its size limit."""
    configure()
    try:
        return compile_fn()
    finally:
        evict()
