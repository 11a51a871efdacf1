"""Streams, events and queued work: ordering, timing, a queued failure reaching synchronize and
events, launch blocking, threads sharing a stream, interrupting a wait, device time in the profiler."""
import pytest
import torch

from conftest import run_python

N = "neuron"


def test_two_streams_ordered_by_events():
    s1 = torch.neuron.Stream()
    s2 = torch.neuron.Stream(priority=-1)
    assert s1.stream_id != s2.stream_id and s2.priority == -1
    a = torch.randn(512, 512, device="neuron")
    with torch.neuron.stream(s1):
        assert torch.neuron.current_stream() == s1
        b = a
        for _ in range(8):
            b = b @ a / 512
        ev = torch.neuron.Event()
        ev.record(s1)
    s2.wait_event(ev)
    with torch.neuron.stream(s2):
        c = b.sum() * 2
    s2.synchronize()
    assert torch.neuron.current_stream() == torch.neuron.default_stream()
    expected = a.cpu()
    e = expected
    for _ in range(8):
        e = e @ expected / 512
    torch.testing.assert_close(c.cpu(), e.sum() * 2, rtol=1e-4, atol=1e-4)
    assert ev.query() and s1.query()


def test_event_timing_and_wait_stream():
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    x = torch.randn(512, 512, device="neuron")
    start.record()
    for _ in range(4):
        x = x @ x / 512
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) > 0
    s = torch.neuron.Stream()
    s.wait_stream(torch.neuron.current_stream())
    with torch.neuron.stream(s):
        y = x + 1
    torch.neuron.current_stream().wait_stream(s)
    torch.testing.assert_close(y.cpu(), x.cpu() + 1)


def test_queued_failure_surfaces_at_synchronize():
    x = torch.zeros(4, device="neuron")
    x.index_copy_(0, torch.tensor([1], device="neuron"), torch.ones(1, device="neuron"))  # its signature runs once
    bad = torch.tensor([7], device="neuron")  # out of range: only the kernel can see that
    x.index_copy_(0, bad, torch.ones(1, device="neuron"))
    with pytest.raises(IndexError, match="index_copy"):
        torch.neuron.synchronize()
    assert (x + 1).sum().item() == 5  # the device is still usable


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


def test_launch_blocking_reports_at_the_call():
    r = run_python(
        "import torch\nx = torch.zeros(4, device='neuron')\n"
        "x.index_copy_(0, torch.tensor([1], device='neuron'), torch.ones(1, device='neuron'))\n"
        "try:\n    x.index_copy_(0, torch.tensor([7], device='neuron'), torch.ones(1, device='neuron'))\n"
        "    print('no error')\nexcept IndexError as e:\n    print('raised at call')\n",
        {"NEURON_LAUNCH_BLOCKING": "1"})
    assert "raised at call" in r.stdout, r.stdout + r.stderr


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


def test_profiler_reports_device_time():
    """profile(use_device="neuron") records device events: CPU totals stay sane (they came out
    hugely negative without profiler hooks) and device time shows per op."""
    from torch.autograd import profiler
    x = torch.randn(128, 128, device="neuron")
    with profiler.profile(use_device="neuron") as prof:
        for _ in range(3):
            (x @ x).relu()
        torch.neuron.synchronize()
    rows = {e.key: e for e in prof.key_averages()}
    assert "aten::mm" in rows and rows["aten::mm"].count == 3
    assert all(e.cpu_time_total >= 0 and e.device_time_total >= 0 for e in rows.values())
    assert rows["aten::mm"].self_device_time_total > 0
    assert rows["aten::mm"].self_device_time_total < 60e6  # microseconds: under a minute
