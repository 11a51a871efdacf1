"""The compile cache (src/torch_neuronx/compile/cache.py): only neuron compiles use it, entries are whole
(written atomically, verified, evicted whole), and a cache that cannot be written, or is read-only,
never fails a compile. Each process-level test runs in a fresh interpreter with the cache settings
it names and none inherited."""
import hashlib
import json
import os
import shutil

import pytest

from conftest import run_python

# Settings a test process must not inherit from the one running the tests.
_CLEAN = ("import os\n"
          "for k in ('TORCHINDUCTOR_CACHE_DIR', 'XDG_CACHE_HOME', 'TORCH_NEURONX_CACHE_DIR',\n"
          "          'TORCH_NEURONX_CACHE_SIZE'):\n"
          "    if k not in os.environ.get('KEEP', '').split(','): os.environ.pop(k, None)\n")

# Makes the cache folder FAULT_ROOT fail as a full disk (FAULT_ERRNO=ENOSPC: writing a file fails) or
# as a read-only mount (EROFS: every change fails). Root ignores file modes, so tests inject the errors.
_FAULTS = '''
import builtins, errno, io, os, shutil
_root = os.path.realpath(os.environ["FAULT_ROOT"])
_err = getattr(errno, os.environ["FAULT_ERRNO"])
def _under(*paths):
    for p in paths:
        try:
            p = os.path.realpath(os.fsdecode(os.fspath(p)))
        except TypeError:
            continue
        if p == _root or p.startswith(_root + os.sep):
            return True
    return False
def _fail(p):
    raise OSError(_err, os.strerror(_err), os.fsdecode(os.fspath(p)))
_open = builtins.open
def _guarded_open(file, mode="r", *a, **k):
    if isinstance(file, (str, bytes, os.PathLike)) and set(mode) & set("wax+") and _under(file):
        _fail(file)
    return _open(file, mode, *a, **k)
builtins.open = io.open = _guarded_open
_os_open = os.open
def _guarded_os_open(path, flags, *a, **k):
    if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and _under(path):
        _fail(path)
    return _os_open(path, flags, *a, **k)
os.open = _guarded_os_open
if _err == errno.EROFS:
    def _guard(f):
        def guarded(*a, **k):
            if _under(*a[:2]):
                _fail(a[0])
            return f(*a, **k)
        return guarded
    for _name in ("mkdir", "rename", "replace", "remove", "unlink", "rmdir", "utime", "chmod"):
        setattr(os, _name, _guard(getattr(os, _name)))
    _rmtree = shutil.rmtree
    def _guarded_rmtree(path, ignore_errors=False, *a, **k):
        if _under(path):
            if ignore_errors:
                return
            _fail(path)
        return _rmtree(path, ignore_errors, *a, **k)
    shutil.rmtree = _guarded_rmtree
'''

# Compiles f on neuron for each shape in SHAPES; prints the cache hits and misses, then each
# compile-cache warning.
_COMPILE = _CLEAN + '''
import warnings
warnings.simplefilter("always")
import torch, torch_neuronx
f = torch.compile(lambda t: torch.tanh(t) * 2 + 1, backend=os.environ.get("BACKEND", "neuron"))
with warnings.catch_warnings(record=True) as caught:
    for n in [int(s) for s in os.environ.get("SHAPES", "3").split(",")]:
        x = torch.arange(2.0 * n).reshape(2, n)
        assert torch.equal(f(x.to("neuron")).cpu(), torch.tanh(x) * 2 + 1)
s = torch_neuronx.compile_stats()  # the neuron backend's; Inductor's own counters for the default backend
if os.environ.get("BACKEND") == "inductor":
    from torch._dynamo.utils import counters
    s = {"cache_hits": counters["inductor"]["fxgraph_cache_hit"],
         "cache_misses": counters["inductor"]["fxgraph_cache_miss"]}
print(s["cache_hits"], s["cache_misses"])
for w in caught:
    if "compile cache" in str(w.message):
        print("WARNING", w.message)
'''


def _compile(env, faults=False):
    keep = ",".join(k for k in ("TORCH_NEURONX_CACHE_DIR", "TORCH_NEURONX_CACHE_SIZE") if k in env)
    r = run_python((_FAULTS if faults else "") + _COMPILE, {"KEEP": keep, **env}, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.strip().split("\n")
    return lines[0], [line for line in lines[1:] if line.startswith("WARNING")]


def _snapshot(folder):
    """Every path under folder with its size and modification time."""
    seen = {}
    for parent, dirs, names in os.walk(folder):
        for name in dirs + names:
            path = os.path.join(parent, name)
            st = os.stat(path)
            seen[os.path.relpath(path, folder)] = (st.st_size, st.st_mtime_ns)
    return seen


def _files(folder):
    return [os.path.join(p, n) for p, _, names in os.walk(folder) for n in names]


def test_cpu_compiles_keep_inductors_cache_as_without_the_backend(tmp_path):
    """With an unwritable home and no cache settings, a CPU-only process with the backend loaded
    imports torch._dynamo and compiles into Inductor's own folder, as one without the backend."""
    (tmp_path / "home").write_text("a file: nothing can be created under it")
    code = _CLEAN + (
        "import json, torch, torch._dynamo\n"
        "from torch._inductor.runtime.cache_dir_utils import cache_dir\n"
        "x = torch.arange(6.0).reshape(2, 3)\n"
        "y = torch.compile(lambda t: torch.sin(t) + t)(x)\n"
        "out = {'backend': 'torch_neuronx' in __import__('sys').modules, 'cache': cache_dir(), 'result': y.tolist(),\n"
        "       'fxgraph': os.path.isdir(os.path.join(cache_dir(), 'fxgraph'))}\n"
        "if out['backend']:  # then a neuron compile (the default backend) must not move it either\n"
        "    torch.compile(lambda t: t * 3)(x.to('neuron'))\n"
        "    out['cache_after_neuron'] = cache_dir()\n"
        "print(json.dumps(out))\n")
    outs = {}
    for autoload in ("1", "0"):
        tmp = tmp_path / f"tmp{autoload}"
        tmp.mkdir()
        r = run_python(code, {"HOME": str(tmp_path / "home" / "sub"), "TMPDIR": str(tmp),
                              "TORCH_DEVICE_BACKEND_AUTOLOAD": autoload}, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        outs[autoload] = json.loads(r.stdout.strip().split("\n")[-1])
        assert outs[autoload]["cache"].startswith(str(tmp) + os.sep), outs[autoload]  # Inductor's default
        assert outs[autoload]["fxgraph"], outs[autoload]
    with_backend, without = outs["1"], outs["0"]
    assert with_backend["backend"] and not without["backend"]
    assert with_backend["result"] == without["result"]
    assert os.path.relpath(with_backend["cache"], tmp_path / "tmp1") == os.path.relpath(without["cache"],
                                                                                        tmp_path / "tmp0")
    assert with_backend["cache_after_neuron"] == with_backend["cache"]


@pytest.mark.parametrize("where", ["home", "cache_dir_is_a_file"])
def test_an_unusable_cache_folder_compiles_without_caching_with_one_warning(tmp_path, where):
    (tmp_path / "file").write_text("not a folder")
    env = {"HOME": str(tmp_path / "file" / "sub")} if where == "home" else \
        {"TORCH_NEURONX_CACHE_DIR": str(tmp_path / "file")}
    counts, warned = _compile({**env, "SHAPES": "3,5"})
    assert counts == "0 2"
    assert len(warned) == 1 and "compiling without caching" in warned[0], warned


def test_a_full_disk_compiles_without_caching_with_one_warning(tmp_path):
    counts, warned = _compile({"TORCH_NEURONX_CACHE_DIR": str(tmp_path), "SHAPES": "3,5",
                               "FAULT_ROOT": str(tmp_path), "FAULT_ERRNO": "ENOSPC"}, faults=True)
    assert counts == "0 2"
    assert len(warned) == 1 and "No space left on device" in warned[0], warned
    assert _files(tmp_path) == []  # nothing half-written is left


def test_a_read_only_warm_cache_is_served_without_writing(tmp_path):
    env = {"TORCH_NEURONX_CACHE_DIR": str(tmp_path)}
    assert _compile(env) == ("0 1", [])
    before = _snapshot(tmp_path)
    read_only = {**env, "FAULT_ROOT": str(tmp_path), "FAULT_ERRNO": "EROFS"}
    assert _compile(read_only, faults=True) == ("1 0", [])  # a hit, and nothing to say
    counts, warned = _compile({**read_only, "SHAPES": "3,4"}, faults=True)  # 4: a new program
    assert counts == "1 1" and len(warned) == 1 and "Read-only file system" in warned[0], warned
    assert _snapshot(tmp_path) == before


def test_a_cache_smaller_than_one_entry_keeps_none_and_compiles(tmp_path):
    env = {"TORCH_NEURONX_CACHE_DIR": str(tmp_path), "TORCH_NEURONX_CACHE_SIZE": "1KiB"}
    for _ in range(2):
        assert _compile({**env, "SHAPES": "3,5"}) == ("0 2", [])
        # entries go whole: no file of one is left behind (the kept vector-ISA probes are no entry)
        assert [f for f in _files(tmp_path) if os.path.relpath(f, tmp_path).split(os.sep)[0] != "probes"] == []


def test_the_default_backend_on_neuron_uses_the_cache(tmp_path):
    env = {"TORCH_NEURONX_CACHE_DIR": str(tmp_path), "BACKEND": "inductor"}
    assert _compile(env) == ("0 1", [])
    assert any(path.endswith(".main.so") for path in _files(tmp_path))  # the kernel is in the neuron cache
    assert _compile(env) == ("1 0", [])


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory):
    folder = tmp_path_factory.mktemp("warm")
    r = run_python(_COMPILE, {"TORCH_NEURONX_CACHE_DIR": str(folder), "KEEP": "TORCH_NEURONX_CACHE_DIR",
                              "TORCH_NEURONX_LOG": "compile"}, timeout=300)
    assert r.stdout.strip() == "0 1" and "neuron compile: graph" in r.stderr, r.stderr[-3000:]
    return folder


def _overwrite(path):
    """Garbage at the start and in the middle of the file, its size unchanged."""
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        for offset in (0, size // 2):
            f.seek(offset)
            f.write(b"\xff\x00garbage\xfe"[:max(1, size // 4)])


@pytest.mark.parametrize("damage", ["kernel .main.so", "wrapper .py", "every file truncated"])
def test_a_damaged_entry_is_recompiled_and_rebuilt(tmp_path, warm_cache, damage):
    shutil.copytree(warm_cache, tmp_path, dirs_exist_ok=True)
    for path in _files(tmp_path):
        if damage == "every file truncated":
            with open(path, "r+b") as f:
                f.truncate(os.path.getsize(path) // 2)
        elif path.endswith(damage.split()[-1]):
            _overwrite(path)
    env = {"TORCH_NEURONX_CACHE_DIR": str(tmp_path)}
    assert _compile(env) == ("0 1", [])  # a miss: compiled again, correct
    assert _compile(env) == ("1 0", [])  # and the entry written again is whole


def _entry(cache, folder, name, files):
    work = folder / f"work-{name}"
    for rel, data in files.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_bytes(data)
    (work / "locks").mkdir()
    (work / "locks" / "x.lock").write_bytes(b"")
    cache.publish(str(work), str(folder / "cache" / name))
    return folder / "cache" / name


def test_entries_are_evicted_whole_least_recently_used_first(tmp_path):
    from torch_neuronx.compile import cache

    (tmp_path / "cache").mkdir()
    for i in range(5):
        entry = _entry(cache, tmp_path, f"e{i}", {"ab/k.so": b"x" * 600, "fxgraph/g/1": b"y" * 400})
        os.utime(entry / cache.MANIFEST, (1000 + i, 1000 + i))
    assert sorted(os.listdir(tmp_path / "cache" / "e0")) == [cache.MANIFEST, "ab", "fxgraph"]  # no lock files
    assert cache.evict(str(tmp_path / "cache"), limit=2500) == 3000
    assert sorted(os.listdir(tmp_path / "cache")) == ["e3", "e4"]  # the most recently used, whole
    assert all(len(_files(tmp_path / "cache" / e)) == 3 for e in ("e3", "e4"))
    assert cache.evict(str(tmp_path / "cache"), limit=10) == 2000  # a limit below one entry keeps none
    assert os.listdir(tmp_path / "cache") == []


def test_restore_checks_every_file_against_the_manifest(tmp_path):
    from torch_neuronx.compile import cache

    (tmp_path / "cache").mkdir()
    entry = _entry(cache, tmp_path, "e", {"ab/k.so": b"x" * 600, "ab/w.py": b"call = 1\n"})
    (tmp_path / "into").mkdir()
    assert cache.restore(str(entry), str(tmp_path / "into")) is not None
    assert (tmp_path / "into" / "ab" / "w.py").read_bytes() == b"call = 1\n"
    shutil.rmtree(tmp_path / "into")
    (tmp_path / "into").mkdir()
    (entry / "ab" / "w.py").write_bytes(b"call = 2\n")  # same size, other content
    assert cache.restore(str(entry), str(tmp_path / "into")) is None
    assert not entry.exists() and _files(tmp_path / "into") == []  # removed; nothing of it is loaded


@pytest.mark.parametrize("name", ["../planted", "absolute"])
def test_a_manifest_naming_a_file_outside_its_entry_is_damaged(tmp_path, name):
    """A crafted manifest must not make a hit read or write outside the entry and the work folder
    (restore joins each name to both): the entry is damaged, and nothing is copied."""
    from torch_neuronx.compile import cache

    (tmp_path / "cache").mkdir()
    entry = _entry(cache, tmp_path, "e", {"ab/k.so": b"x" * 600})
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me")
    source = victim if name == "absolute" else entry / name
    source.write_bytes(b"keep me")
    manifest = json.loads((entry / cache.MANIFEST).read_text())
    manifest[str(victim) if name == "absolute" else name] = [7, hashlib.sha256(b"keep me").hexdigest()]
    (entry / cache.MANIFEST).write_text(json.dumps(manifest))
    (tmp_path / "into").mkdir()
    assert cache.restore(str(entry), str(tmp_path / "into")) is None
    assert not entry.exists() and _files(tmp_path / "into") == []
    assert not (tmp_path / "planted").exists() and victim.read_bytes() == b"keep me"


def test_a_hit_on_a_manifest_naming_a_file_outside_its_entry_compiles_again(tmp_path, warm_cache):
    shutil.copytree(warm_cache, tmp_path / "cache")
    [manifest] = [p for p in _files(tmp_path / "cache") if p.endswith("MANIFEST.json")]
    with open(manifest) as f:
        files = json.load(f)
    with open(os.path.join(os.path.dirname(manifest), "..", "escaped"), "wb") as f:
        f.write(b"x")
    files["../escaped"] = [1, hashlib.sha256(b"x").hexdigest()]
    with open(manifest, "w") as f:
        json.dump(files, f)
    (tmp_path / "tmp").mkdir()  # the work folders', so a file written next to one stays in tmp_path
    env = {"TORCH_NEURONX_CACHE_DIR": str(tmp_path / "cache"), "TMPDIR": str(tmp_path / "tmp")}
    assert _compile(env) == ("0 1", [])  # a miss: damaged, compiled again
    assert not (tmp_path / "tmp" / "escaped").exists()
    assert _compile(env) == ("1 0", [])  # and the entry written again is whole


# Compiles a small training step on neuron; with MODE=save it writes torch.compiler's cache
# artifacts to ARTIFACTS, with MODE=load it loads them first. With NO_PROBES=1 Inductor's
# vector-ISA probe (a child process loading a test library) fails the process if it runs.
_ARTIFACTS = _CLEAN + '''
import torch, torch_neuronx
if os.environ.get("NO_PROBES"):
    from torch._inductor import cpu_vec_isa
    def _no_probe(self, path):
        raise AssertionError("the vector-ISA probe ran although its outcome was kept")
    cpu_vec_isa.VecISA._probe_load = _no_probe
if os.environ["MODE"] == "load":
    with open(os.environ["ARTIFACTS"], "rb") as f:
        torch.compiler.load_cache_artifacts(f.read())
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
x = torch.randn(5, 8)
want = m(x)
want.sum().backward()
grads = [p.grad.clone() for p in m.parameters()]
m.zero_grad()
m.to("neuron")
y = torch.compile(m, backend="neuron")(x.to("neuron"))
y.sum().backward()
assert torch.allclose(y.cpu(), want, atol=1e-6)
assert all(torch.allclose(p.grad.cpu(), g, atol=1e-6) for p, g in zip(m.parameters(), grads))
if os.environ["MODE"] == "save":
    with open(os.environ["ARTIFACTS"], "wb") as f:
        f.write(torch.compiler.save_cache_artifacts()[0])
s = torch_neuronx.compile_stats()
print(s["cache_hits"], s["cache_misses"])
'''


def _artifacts(env):
    r = run_python(_ARTIFACTS, {"KEEP": "TORCH_NEURONX_CACHE_DIR", **env}, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip().split("\n")[-1]


def test_loaded_cache_artifacts_serve_neuron_compiles_in_another_cache(tmp_path):
    """torch.compiler.save_cache_artifacts after a neuron compile, load_cache_artifacts in a process
    whose neuron cache is empty: its compile is served from the loaded records (a hit), and what it
    writes makes the next process warm from the neuron cache alone."""
    path = str(tmp_path / "artifacts.bin")
    assert _artifacts({"MODE": "save", "ARTIFACTS": path, "TORCH_NEURONX_CACHE_DIR": str(tmp_path / "a")}) == "0 1"
    other = str(tmp_path / "b")
    assert _artifacts({"MODE": "load", "ARTIFACTS": path, "TORCH_NEURONX_CACHE_DIR": other}) == "1 0"
    assert _artifacts({"MODE": "none", "TORCH_NEURONX_CACHE_DIR": other, "NO_PROBES": "1"}) == "1 0"


def test_inductors_vector_isa_probes_are_kept_for_the_next_process(tmp_path):
    cache = str(tmp_path / "cache")
    assert _compile({"TORCH_NEURONX_CACHE_DIR": cache})[0] == "0 1"
    probes = [json.load(open(p)) for p in _files(os.path.join(cache, "probes"))]
    assert len(probes) == 1 and probes[0] and all(isinstance(v, bool) for v in probes[0].values()), probes
    shutil.rmtree(os.path.join(cache, [d for d in os.listdir(cache) if d != "probes"][0]))  # programs gone
    env = {"TORCH_NEURONX_CACHE_DIR": cache, "MODE": "none", "NO_PROBES": "1"}
    assert _artifacts(env) == "0 1"  # compiled again, without probing


def test_programs_specialized_from_a_symbolic_graph_are_warm_in_a_second_process(tmp_path):
    """Lengths 3, 4, 5: a static graph, then one symbolic graph whose static programs are compiled
    from fake inputs with a shape environment — what Inductor's FX-graph cache needs to serve them."""
    env = {"TORCH_NEURONX_CACHE_DIR": str(tmp_path), "SHAPES": "3,4,5"}
    first, _ = _compile(env)
    assert first == "0 3"
    second, _ = _compile(env)
    assert second == "3 0"


@pytest.mark.parametrize("backend", ["neuron", "inductor"])
def test_a_user_inductor_folder_compiles_there_and_counts_each_graph_once(tmp_path, backend):
    """With TORCHINDUCTOR_CACHE_DIR set, neuron compiles use that folder as Inductor would; its
    nested compile_fx calls are still one compile (they counted twice: CI on a fresh HOME sets it)."""
    code = _CLEAN + (
        "import json, torch, torch_neuronx\n"
        "m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).to('neuron')\n"
        f"y = torch.compile(m, backend={backend!r})(torch.randn(4, 8, device='neuron'))\n"
        "s = torch_neuronx.compile_stats()\n"
        "print(json.dumps({k: s[k] for k in ('graphs_compiled', 'programs', 'cache_hits', 'cache_misses')}))\n")
    user = tmp_path / "inductor"
    r = run_python(code, {"KEEP": "TORCHINDUCTOR_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR": str(user),
                          "TORCH_NEURONX_CACHE_DIR": str(tmp_path / "neuron")}, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().split("\n")[-1]) == {"graphs_compiled": 1, "programs": 1, "cache_hits": 0,
                                                           "cache_misses": 1}
    assert _files(user), "Inductor wrote nothing in the user's folder"
    assert not (tmp_path / "neuron").exists() or not _files(tmp_path / "neuron")
