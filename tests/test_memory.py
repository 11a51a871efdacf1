"""Device memory: the caching allocator (reuse, splitting and merging, statistics), out of memory and
recovery, fragmentation, record_stream, overlapping copies, pinned host copies."""
import gc

import pytest
import torch

from conftest import run_python

N = "neuron"


def test_oom_raises_and_allocator_recovers():
    gc.collect()
    base = torch.neuron.memory_allocated()
    big = torch.empty(20 * 2**30, dtype=torch.uint8, device="neuron")  # reserved lazily, never touched
    with pytest.raises(torch.OutOfMemoryError) as e:
        torch.empty(10 * 2**30, dtype=torch.uint8, device="neuron")
    msg = str(e.value)
    assert "neuron:0" in msg and "10.00 GiB" in msg and "allocated" in msg and "reserved" in msg and "free" in msg
    assert "torch.neuron.memory_summary()" in msg
    assert torch.neuron.memory_stats()["num_ooms"] >= 1
    del big
    again = torch.empty(10 * 2**30, dtype=torch.uint8, device="neuron")
    assert again.numel() == 10 * 2**30
    del again
    torch.neuron.empty_cache()
    assert torch.neuron.memory_allocated() == base
    assert torch.ones(3, device="neuron").sum().item() == 3


def test_memory_stats_return_to_baseline():
    torch.neuron.synchronize()
    gc.collect()
    torch.neuron.empty_cache()
    base = torch.neuron.memory_allocated()
    base_reserved = torch.neuron.memory_reserved()  # segments other tests' live tensors hold
    torch.neuron.reset_peak_memory_stats()
    xs = [torch.randn(256, 256, device="neuron") for _ in range(4)]
    y = (xs[0] @ xs[1]).relu()
    assert torch.neuron.memory_allocated() >= base + 5 * 256 * 256 * 4
    peak = torch.neuron.max_memory_allocated()
    del xs, y
    gc.collect()
    assert torch.neuron.memory_allocated() == base
    assert torch.neuron.max_memory_allocated() == peak
    assert torch.neuron.memory_reserved() >= torch.neuron.memory_allocated()
    torch.neuron.empty_cache()
    assert torch.neuron.memory_reserved() <= base_reserved  # what this test reserved went back
    assert "Allocated memory" in torch.neuron.memory_summary()


def test_cached_block_is_reused():
    x = torch.empty(1 << 20, device="neuron")
    ptr = x.data_ptr()
    del x
    y = torch.empty(1 << 20, device="neuron")
    assert y.data_ptr() == ptr


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


def test_record_stream_keeps_a_block_until_the_other_stream_is_done():
    # The ops' signatures run once first: a first call waits for its kernel, which would wait for
    # the sleep below instead of queueing behind it.
    (torch.full((4,), 3.0, device=N) * 2).cpu()
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


def test_partially_overlapping_copy_is_refused_as_on_cpu():
    a = torch.arange(6.0, device=N)
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        a[1:].copy_(a[:-1])
    a.copy_(a)  # the same memory, the same layout: allowed
    assert a.tolist() == [0, 1, 2, 3, 4, 5]


def test_pinned_non_blocking_copies():
    src = torch.randn(1000).pin_memory()
    assert src.is_pinned()
    d = src.to("neuron", non_blocking=True)
    back = torch.empty(1000).pin_memory()
    back.copy_(d, non_blocking=True)
    torch.neuron.synchronize()
    torch.testing.assert_close(back, src)


def test_profile_memory_records_device_allocations():
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(256, 256, device="neuron")
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        y = x @ x
        del y
    usage = {e.key: e.self_device_memory_usage for e in prof.key_averages()}
    assert usage["aten::mm"] == 256 * 256 * 4  # the output, allocated on the device
    assert usage["[memory]"] == -256 * 256 * 4  # freed when y went


def test_the_host_cache_calls_of_torch_accelerator_work_on_neuron():
    """torch.accelerator.empty_host_cache() (vLLM calls it at shutdown) crashed once the device was
    used: no host allocator was registered for the device."""
    r = run_python("import torch\n"
                   "x = torch.ones(4, device='neuron')\n"
                   "pinned = torch.ones(1000).pin_memory()\n"
                   "y = pinned.to('neuron', non_blocking=True)\n"
                   "torch.accelerator.empty_host_cache()\n"
                   "print(x.sum().item(), y.sum().item())\n")
    assert r.returncode == 0 and r.stdout.split() == ["4.0", "1000.0"], r.stderr[-2000:]


def test_memory_viz_text_tools_read_a_neuron_snapshot_offline(tmp_path):
    """The offline route the README gives: PyTorch's own text tools on a dumped neuron snapshot."""
    import subprocess
    import sys

    torch.neuron.synchronize()
    torch.neuron.memory._record_memory_history(max_entries=1000, clear_history=True)
    try:
        keep = torch.randn(4096, 4096, device=N)  # 64 MiB, live at the dump
        gone = keep * 2
        del gone  # 64 MiB, freed before the dump
        torch.neuron.synchronize()
        torch.neuron.memory._dump_snapshot(str(tmp_path / "snap.pickle"))
    finally:
        torch.neuron.memory._record_memory_history(enabled=None)

    def viz(tool):
        r = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", tool, str(tmp_path / "snap.pickle")],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        return r.stdout

    stats = viz("stats")
    assert "total_allocated:" in stats and "64.0MiB allocated, 0.0B free" in stats, stats
    trace = viz("trace")
    assert "Device 0" in trace and "del " in trace and "# free completed for" in trace and "64.0MiB" in trace, trace
    del keep
