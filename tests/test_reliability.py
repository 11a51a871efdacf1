"""Regression tests of the reliability audit (issue #11): threads, fork, record_stream,
fragmentation, many devices, overlapping copies, shutdown, errors and events, the sanitizer.
Anything that could hang runs in a subprocess with a hard time limit."""
import pytest
import torch

from conftest import run_python

N = "neuron"


def test_threads_sharing_a_stream_get_right_results():
    # The invariant: every kernel runs as a task of its stream's queue, in queue order, whatever
    # the threads do; the host only waits. Many threads, and many first calls (new shapes).
    code = """
import threading, torch
errors = []
def work(seed):
    g = torch.Generator().manual_seed(seed)
    for i in range(25):
        n = 8 + (seed * 7 + i) % 24  # new shapes: first calls of their signatures
        a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
        want = ((a @ b).relu() * 2 + a).sum(1)
        an, bn = a.to("neuron"), b.to("neuron")
        got = ((an @ bn).relu() * 2 + an).sum(1).cpu()
        nz = torch.nonzero(an > 0).cpu()  # a sync op among them
        if not torch.allclose(got, want, rtol=1e-4, atol=1e-4) or not torch.equal(nz, torch.nonzero(a > 0)):
            errors.append((seed, i, (got - want).abs().max().item()))
threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print("errors", errors)
"""
    r = run_python(code, timeout=240)
    assert r.returncode == 0 and "errors []" in r.stdout, r.stdout + r.stderr[-2000:]


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


def test_record_stream_keeps_a_block_until_the_other_stream_is_done():
    s2 = torch.neuron.Stream()
    x = torch.full((1 << 16,), 3.0, device=N)
    s2.wait_stream(torch.neuron.current_stream())
    with torch.neuron.stream(s2):
        torch.neuron._sleep(200)
        y = x * 2  # queued behind the sleep: x is read long after the host frees it
    x.record_stream(s2)
    ptr = x.data_ptr()
    del x
    z = torch.full((1 << 16,), 7.0, device=N)  # must not take x's block while s2 may still read it
    assert z.data_ptr() != ptr
    s2.synchronize()
    assert torch.equal(y.cpu(), torch.full((1 << 16,), 6.0))
    del z
    torch.neuron.synchronize()
    w = torch.empty(1 << 16, device=N)  # once s2 is done, the block is reused
    assert w.data_ptr() == ptr
    with pytest.raises(RuntimeError, match="expected a stream of neuron:0"):
        w.record_stream(torch.neuron.Stream(device=1))


def test_fragmented_device_memory_serves_what_fits_and_names_the_largest_block():
    code = """
import torch
MiB = 2**20
blocks = [torch.empty(12 * MiB, dtype=torch.uint8, device="neuron") for _ in range(20)]
for i in range(0, 20, 2): blocks[i] = None
torch.neuron.empty_cache()
big = torch.empty(24 * MiB, dtype=torch.uint8, device="neuron")
print("ok", torch.neuron.mem_get_info()[0] // MiB)
try:
    torch.empty(200 * MiB, dtype=torch.uint8, device="neuron")
except torch.OutOfMemoryError as e:
    print("oom", "largest free block" in str(e), "largest cached free block" in str(e))
"""
    r = run_python(code, {"TORCH_NEURONX_HBM_BYTES": "256MiB"})
    assert r.stdout.split() == ["ok", "112", "oom", "True", "True"], r.stdout + r.stderr[-2000:]


def test_cached_blocks_are_split_and_merged():
    torch.neuron.synchronize()
    torch.neuron.empty_cache()
    big = torch.empty(16 * 2**20, dtype=torch.uint8, device=N)
    base = big.data_ptr()
    del big
    a = torch.empty(4 * 2**20, dtype=torch.uint8, device=N)  # carved from the cached 16 MiB block
    b = torch.empty(4 * 2**20, dtype=torch.uint8, device=N)
    assert a.data_ptr() == base and b.data_ptr() == base + 4 * 2**20
    reserved = torch.neuron.memory_reserved()
    del a, b
    c = torch.empty(16 * 2**20, dtype=torch.uint8, device=N)  # the pieces merged back
    assert c.data_ptr() == base and torch.neuron.memory_reserved() == reserved


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


def test_partially_overlapping_copy_is_refused_as_on_cpu():
    a = torch.arange(6.0, device=N)
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        a[1:].copy_(a[:-1])
    a.copy_(a)  # the same memory, the same layout: allowed
    assert a.tolist() == [0, 1, 2, 3, 4, 5]


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


def test_task_errors_reach_events_and_stream_synchronize():
    s = torch.neuron.Stream()
    x = torch.randn(4, 3, device=N)
    # A clean call of the same signature first: the failing calls below are then queued, and
    # their errors reach the event and the stream (a signature's first call would raise at once).
    torch.index_select(x, 0, torch.tensor([1], device=N))
    torch.neuron.synchronize()
    with torch.neuron.stream(s):
        torch.index_select(x, 0, torch.tensor([9], device=N))
        ev = torch.neuron.Event()
        ev.record()
    with pytest.raises(IndexError, match="index_select"):
        ev.synchronize()
    with torch.neuron.stream(s):
        torch.index_select(x, 0, torch.tensor([9], device=N))
    with pytest.raises(IndexError, match="index_select"):
        s.synchronize()
    torch.neuron.synchronize()  # reported once


def test_synchronize_is_interruptible():
    code = """
import os, signal, threading, time, torch
# A shell that starts the tests in the background hands them SIGINT ignored, and Python then
# installs no KeyboardInterrupt handler: install it, as an interactive session has it.
signal.signal(signal.SIGINT, signal.default_int_handler)
torch.neuron._sleep(60000)
threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
t = time.time()
try:
    torch.neuron.synchronize()
    print("not interrupted", time.time() - t, flush=True)
except KeyboardInterrupt:
    print("interrupted", time.time() - t < 30, flush=True)
os._exit(0)  # not the orderly exit, which would wait out the sleep
"""
    r = run_python(code, timeout=120)
    assert r.stdout.split()[:2] == ["interrupted", "True"], r.stdout + r.stderr[-2000:]


def test_sanitizer_prints_the_python_stack_of_the_offending_thread():
    r = run_python("import ctypes, torch\nx = torch.ones(64, device='neuron')\ntorch.neuron.synchronize()\n"
                   "def peek(t):\n    return ctypes.c_float.from_address(t.data_ptr()).value\n"
                   "print(peek(x))\n", {"TORCH_NEURONX_SANITIZE": "1"})
    assert r.returncode != 0
    assert "host access to neuron device memory" in r.stderr
    assert "in peek" in r.stderr and 'File "<string>", line 5' in r.stderr, r.stderr[-2000:]
