"""The disk cache of compiled neuron programs.

Scope: only compiles of neuron graphs use it — backend "neuron", and the default Inductor backend
when a graph's inputs are on neuron (`_patches.inductor_neuron_compile_cache`). Nothing is set up
when the package loads or when Inductor is imported, so CPU (and every other device's) compiles
keep Inductor's own cache, where and as they would without this package.

Entry: what one neuron compile writes. Each neuron compile runs Inductor in a private, empty work
folder — its TORCHINDUCTOR_CACHE_DIR for that compile, with Inductor's in-memory caches cleared on
the way in and out (Inductor's own `temporary_cache_dir`, so no kernel is skipped because an
earlier compile built it elsewhere). The backward is compiled with the forward, not lazily at the
first backward, outside the compile (so a forward-only use of a model that requires grad compiles
its backward too), and the kernels' libraries are waited for as the wrapper loads
(inductor.program_call). Afterwards that folder — the AOTAutograd and FX graph records, the
wrapper .py, kernel sources and .so files, and Inductor's vector-ISA probes if this process had not
run them yet — is the entry. Inductor shares kernels between graphs by content; entries do not (a
kernel two entries use is stored twice): that is what lets an entry be written, verified and
evicted as one unit.

Layout: TORCH_NEURONX_CACHE_DIR (default: $XDG_CACHE_HOME/torch_neuronx, else ~/.cache/torch_neuronx)
holds one folder per compiler identity (torch_neuronx version and a hash of its code generator's
sources, torch version, device profile); inside, one folder per entry, named by a hash of the
graph's code, its inputs' shapes, strides, dtypes and devices, grad mode and the compile options.
That name only picks the folder: Inductor's own keys, inside it, decide whether a program is
reused, so a name that is too coarse costs a compile, never a wrong program (a compile that misses
inside an entry publishes the entry again, with both programs).
- Written atomically: an entry is copied into a hidden folder, its manifest (each file's size and
  SHA-256) written last, and the folder renamed into place: readers see a whole entry or none.
- Verified: a hit copies the entry into the compile's work folder, hashing as it copies; a file
  that does not match the manifest makes the entry damaged: it is removed, and the compile is a
  miss that writes it again. So does a manifest that names a file outside the entry (an absolute
  path, or one through '..'): nothing is read or written for it. Inductor only ever loads the
  verified copies.
- Evicted whole: after each write the least recently used entries (a hit touches the manifest) are
  removed until the folder fits TORCH_NEURONX_CACHE_SIZE (default 10 GiB); a limit smaller than one
  entry keeps none.
- A read-only cache is served read-only: hits only read it (Inductor's lock files are in the work
  folder). A cache that cannot be created or written (read-only, full disk, a path through a file)
  means compiling without caching, with one warning per process.
The work folders are in the system's temporary folder and are removed when the process exits.

`torch.compiler.save_cache_artifacts()` after neuron compiles gives their AOTAutograd and FX-graph
records, as for any device; `torch.compiler.load_cache_artifacts(...)` in another process (or on
another machine) makes them serve neuron compiles too: each neuron compile that misses this cache
starts its work folder with the loaded records, so AOTAutograd and Inductor skip tracing and
lowering (the kernels are built from their sources, for this machine), and the entry it writes
makes the next process warm (`keep_loaded_artifacts`).

Inductor also probes, once per process, which vector instruction sets the host's compiler can build
and load (a test library compiled and loaded in a child process per instruction set, about a
second). During neuron compiles the outcomes are kept under TORCH_NEURONX_CACHE_DIR, keyed by the
machine's instruction-set flags, the compiler and the torch version, so a warm process skips them
(`remember_vec_isa_probes`).
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import json
import os
import platform
import shutil
import tempfile
import threading
import time
import uuid
import warnings

import torch

from .. import _C, __version__
from . import stats

MANIFEST = "MANIFEST.json"
_SKIP = ("locks",)  # Inductor's lock files: per process, never part of an entry
_STALE_SECONDS = 3600  # a hidden folder this old was left by a process that died while writing
_state = threading.local()
_warned = False
_work_folders: list = []


def root() -> str:
    configured = _C._config_text("TORCH_NEURONX_CACHE_DIR")
    if configured:
        return os.path.abspath(os.path.expanduser(configured))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "torch_neuronx")


@functools.cache  # the sources this process loaded: one folder for all its compiles
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


def size_limit() -> int:
    return int(_C._config_bytes("TORCH_NEURONX_CACHE_SIZE", 10 << 30))


def entry_key(gm, example_inputs, options) -> str:
    """The entry folder's name (see the note above: a partition, not the program's identity)."""
    digest = hashlib.sha256(gm.code.encode())
    for x in example_inputs:
        if isinstance(x, torch.Tensor):
            digest.update(repr((x.dtype, x.device.type, tuple(x.shape), tuple(x.stride()), x.requires_grad)).encode())
        else:
            digest.update(repr(x if isinstance(x, (int, float, bool, torch.SymInt)) else type(x)).encode())
    digest.update(repr((torch.is_grad_enabled(), sorted((str(k), repr(v)) for k, v in (options or {}).items())))
                  .encode())
    return digest.hexdigest()[:32]


def _warn_uncached(error: OSError) -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(f"neuron: the compile cache {root()} cannot be written ({error}); compiling without caching "
                      "(set TORCH_NEURONX_CACHE_DIR to a writable folder to cache compiled programs)", stacklevel=3)


def _user_inductor_dir() -> str | None:
    """A TORCHINDUCTOR_CACHE_DIR the user set (Inductor's fresh_cache() in PyTorch's tests, say): neuron
    compiles then use it as Inductor would, without this cache. Inductor writes its default there
    itself the first time it asks, which does not count."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    current = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    return current if current and os.path.abspath(current) != os.path.abspath(default_cache_dir()) else None


def _files(folder: str) -> list:
    """The entry's files under `folder`, as paths relative to it."""
    found = []
    for parent, dirs, names in os.walk(folder):
        dirs[:] = [d for d in dirs if not (parent == folder and d in _SKIP)]
        for name in names:
            if not name.endswith(".tmp") and not (parent == folder and name == MANIFEST):
                found.append(os.path.relpath(os.path.join(parent, name), folder))
    return sorted(found)


def _copy(src: str, dst: str, names) -> dict:
    """Copies the named files from src to dst; returns {name: [size, sha256]} of what was copied."""
    copied = {}
    for name in names:
        target = os.path.join(dst, name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        digest, size = hashlib.sha256(), 0
        with open(os.path.join(src, name), "rb") as fin, open(target, "wb") as fout:
            while chunk := fin.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
                fout.write(chunk)
        shutil.copymode(os.path.join(src, name), target)  # the .so files stay executable
        copied[name] = [size, digest.hexdigest()]
    return copied


def _remove(folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)  # a read-only cache keeps it: then it is only skipped


def _check_names(manifest) -> None:
    """Raises ValueError unless each name of the manifest is a file inside its entry: the name is
    joined to the entry to read and to the work folder to write, so an absolute one or one through
    '..' would read and write elsewhere."""
    if not isinstance(manifest, dict):
        raise ValueError(f"{MANIFEST} is not a table of files")
    for name in manifest:
        if os.path.isabs(name) or os.path.normpath(name) != name or name == "." or name.split(os.sep)[0] == "..":
            raise ValueError(f"{MANIFEST} names {name!r}, which is not a file inside its entry")


def restore(entry: str, work: str) -> dict | None:
    """Copies a verified entry into the work folder and returns its manifest; a missing entry gives
    None, a damaged one is removed and gives None (the work folder is emptied again)."""
    manifest_path = os.path.join(entry, MANIFEST)
    if not os.path.isdir(entry):
        return None
    try:
        with open(manifest_path) as f:
            manifest = json.load(f)
        _check_names(manifest)
        if _copy(entry, work, manifest) == manifest:
            with contextlib.suppress(OSError):
                os.utime(manifest_path)  # most recently used (not on a read-only cache)
            return manifest
    except (OSError, ValueError, TypeError):  # unreadable, vanished meanwhile, or not a manifest
        pass
    _remove(entry)
    _remove(work)
    os.makedirs(work)
    return None


def publish(work: str, entry: str) -> None:
    """Writes the work folder's files as the entry, atomically (see the note above)."""
    parent = os.path.dirname(entry)
    staging = os.path.join(parent, f".tmp-{os.getpid()}-{uuid.uuid4().hex}")
    try:
        manifest = _copy(work, staging, _files(work))
        with open(os.path.join(staging, MANIFEST), "w") as f:
            json.dump(manifest, f)
        try:
            os.rename(staging, entry)
        except OSError:  # an older entry of that name (republishing, or another process won)
            old = os.path.join(parent, f".old-{os.getpid()}-{uuid.uuid4().hex}")
            with contextlib.suppress(FileNotFoundError):
                os.rename(entry, old)
            os.rename(staging, entry)
            _remove(old)
    finally:
        _remove(staging)


def _entries(folder: str):
    """(path, size, last use) of each entry. A folder with no manifest is an entry being written, or
    what a process that died while writing or removing one left: removed once it is stale."""
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        try:
            if name.startswith(".") or not os.path.exists(os.path.join(path, MANIFEST)):
                if time.time() - os.stat(path).st_mtime > _STALE_SECONDS:
                    _remove(path)
                continue
            used = os.stat(os.path.join(path, MANIFEST)).st_mtime
            yield path, sum(os.path.getsize(os.path.join(path, n)) for n in _files(path)), used
        except OSError:  # removed by another process meanwhile
            continue


def evict(folder: str | None = None, limit: int | None = None) -> int:
    """Removes the least recently used entries, whole, until the folder fits the limit; returns bytes freed."""
    folder = folder or directory()
    limit = size_limit() if limit is None else limit
    entries = sorted(_entries(folder), key=lambda e: e[2])
    total = sum(size for _, size, _ in entries)
    freed = 0
    for path, size, _ in entries:
        if total - freed <= limit:
            break
        _remove(path)
        freed += size
    return freed


def _work_folder() -> str:
    work = tempfile.mkdtemp(prefix="torch_neuronx-compile-")
    if not _work_folders:
        atexit.register(lambda: [_remove(w) for w in _work_folders])
    _work_folders.append(work)
    return work


def compiling() -> bool:
    """Whether this thread is inside a neuron compile, with or without this cache: compile_fx's calls
    of itself are part of the outer compile."""
    return getattr(_state, "compiling", False)


def _in_work_folder() -> bool:
    """Whether this thread's neuron compile runs in a work folder of this cache (Inductor's cache
    for that compile); not when the user set Inductor's folder."""
    return getattr(_state, "in_work_folder", False)


@functools.cache  # the machine, its compiler and torch do not change within a process
def _host_identity() -> str:
    from torch._inductor import cpu_vec_isa
    from torch._inductor.cpp_builder import get_cpp_compiler

    identity = repr((platform.machine(), sorted(cpu_vec_isa.x86_isa_checker()), get_cpp_compiler(), torch.__version__))
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


def _probe_file() -> str:
    return os.path.join(root(), "probes", f"vec-isa-{_host_identity()}.json")


def remember_vec_isa_probes() -> None:
    """Inductor's VecISA.check_build (does a test library with this instruction set build and load?)
    answers from the kept outcomes during a neuron compile, and keeps what it had to probe."""
    from torch._inductor import cpu_vec_isa

    original = cpu_vec_isa.VecISA.check_build
    if getattr(original, "_neuron", False):
        return

    @functools.wraps(original)
    def check_build(self, code: str) -> bool:
        if not _in_work_folder():
            return original(self, code)
        key = f"{self} {hashlib.sha256(code.encode()).hexdigest()[:16]}"
        path = _probe_file()
        try:
            with open(path) as f:
                known = json.load(f)
        except (OSError, ValueError):
            known = {}
        if isinstance(known.get(key), bool):
            return known[key]
        ok = original(self, code)
        with contextlib.suppress(OSError):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            staging = f"{path}.{os.getpid()}.tmp"
            with open(staging, "w") as f:
                json.dump({**known, key: ok}, f)
            os.replace(staging, path)
        return ok

    check_build._neuron = True
    cpu_vec_isa.VecISA.check_build = check_build


_loaded_artifacts: list = []  # what torch.compiler.load_cache_artifacts loaded in this process


def keep_loaded_artifacts(cache_module) -> None:
    """torch.compiler.load_cache_artifacts writes the records into Inductor's cache folder of the
    moment; neuron compiles run in their own work folders, so the records are also kept here and
    written into each work folder of a neuron compile that misses this cache."""
    manager = cache_module.CacheArtifactManager
    original = manager.populate_caches
    if getattr(original, "_neuron", False):
        return

    @functools.wraps(original)
    def populate_caches(artifacts):
        if not _in_work_folder():
            _loaded_artifacts.append(artifacts)
        return original(artifacts)

    populate_caches._neuron = True
    manager.populate_caches = staticmethod(populate_caches)


def _seed() -> None:
    if _loaded_artifacts:
        from torch.compiler._cache import CacheArtifactManager

        for artifacts in _loaded_artifacts:
            CacheArtifactManager.populate_caches(artifacts)


def compile_with_cache(gm, example_inputs, options, compile_fn, graph: bool = True):
    """Runs compile_fn (Inductor on a neuron graph) with the neuron cache: the entry is restored
    into a private work folder, Inductor compiles there, and what it wrote becomes the entry.
    `graph`: the compile is of a graph Dynamo just traced (False: a static program specialized
    from a symbolic graph already counted)."""
    if compiling():
        return compile_fn()  # a nested compile of the same graph
    record = stats.begin_compile(gm, graph)
    _state.compiling = True
    try:
        return _compile_cached(gm, example_inputs, options, compile_fn)
    finally:
        _state.compiling = False
        stats.end_compile(record)


def _compile_cached(gm, example_inputs, options, compile_fn):
    if _user_inductor_dir():
        return compile_fn()  # the user's own Inductor cache
    from torch._functorch import config as functorch_config
    from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir

    remember_vec_isa_probes()
    folder, entry = directory(), None
    try:
        os.makedirs(folder, exist_ok=True)
        entry = os.path.join(folder, entry_key(gm, example_inputs, options))
    except OSError as e:
        _warn_uncached(e)
    work = _work_folder()
    manifest = restore(entry, work) if entry else None
    _state.in_work_folder = True
    try:
        with temporary_cache_dir(work), functorch_config.patch(force_non_lazy_backward_lowering=True):
            if manifest is None:
                _seed()
            compiled = compile_fn()
    finally:
        _state.in_work_folder = False
    if entry and (manifest is None or set(_files(work)) - set(manifest)):  # a miss: Inductor wrote something
        try:
            publish(work, entry)
            evict(folder)
        except OSError as e:
            _warn_uncached(e)
    return compiled
