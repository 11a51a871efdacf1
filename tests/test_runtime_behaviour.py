"""Memory, streams/events, RNG, serialization, sanitizer, fallback counting, fidelity."""
import gc
import io

import pytest
import torch

from conftest import run_python


def test_oom_raises_and_allocator_recovers():
    gc.collect()
    base = torch.neuron.memory_allocated()
    big = torch.empty(20 * 2**30, dtype=torch.uint8, device="neuron")  # reserved lazily, never touched
    with pytest.raises(torch.OutOfMemoryError) as e:
        torch.empty(10 * 2**30, dtype=torch.uint8, device="neuron")
    msg = str(e.value)
    assert "neuron:0" in msg and "10.00 GiB" in msg and "allocated" in msg
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
    base = torch.neuron.memory_allocated()
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
    assert torch.neuron.memory_reserved() <= peak
    assert "Allocated memory" in torch.neuron.memory_summary()


def test_cached_block_is_reused():
    x = torch.empty(1 << 20, device="neuron")
    ptr = x.data_ptr()
    del x
    y = torch.empty(1 << 20, device="neuron")
    assert y.data_ptr() == ptr


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


def test_launch_blocking_reports_at_the_call():
    r = run_python(
        "import torch\nx = torch.zeros(4, device='neuron')\n"
        "x.index_copy_(0, torch.tensor([1], device='neuron'), torch.ones(1, device='neuron'))\n"
        "try:\n    x.index_copy_(0, torch.tensor([7], device='neuron'), torch.ones(1, device='neuron'))\n"
        "    print('no error')\nexcept IndexError as e:\n    print('raised at call')\n",
        {"NEURON_LAUNCH_BLOCKING": "1"})
    assert "raised at call" in r.stdout, r.stdout + r.stderr


def test_rng_reproducible_and_state_layout():
    torch.neuron.manual_seed(1234)
    a = torch.randn(100, device="neuron")
    b = torch.rand(10, device="neuron")
    d = torch.nn.functional.dropout(torch.ones(50, device="neuron"), 0.5)
    torch.neuron.manual_seed(1234)
    torch.testing.assert_close(torch.randn(100, device="neuron").cpu(), a.cpu())
    torch.testing.assert_close(torch.rand(10, device="neuron").cpu(), b.cpu())
    torch.testing.assert_close(torch.nn.functional.dropout(torch.ones(50, device="neuron"), 0.5).cpu(), d.cpu())
    assert not torch.equal(a.cpu(), torch.randn(100, device="neuron").cpu())
    state = torch.neuron.get_rng_state()
    assert state.dtype == torch.uint8 and state.numel() == 16
    seed, offset = state.view(torch.int64).tolist()
    assert seed == 1234 and offset > 0  # seed then offset: the layout DTensor edits
    x1 = torch.randint(0, 100, (20,), device="neuron")
    torch.neuron.set_rng_state(state)
    torch.testing.assert_close(torch.randint(0, 100, (20,), device="neuron").cpu(), x1.cpu())
    p = torch.multinomial(torch.ones(10, device="neuron"), 5)
    assert p.device.type == "neuron" and len(set(torch.randperm(10, device="neuron").tolist())) == 10
    assert torch.neuron.initial_seed() == 1234


def test_generator_offset_api_and_default_generators():
    """torch.neuron.default_generators holds one generator per device (as torch.cuda's does once
    initialised), and get_offset/set_offset move within the seed's stream: going back replays."""
    gens = torch.neuron.default_generators
    assert len(gens) == torch.neuron.device_count() and gens[1].device == torch.device("neuron", 1)
    g = gens[0]
    torch.neuron.manual_seed(5)
    assert g.get_offset() == 0
    a = torch.randn(64, device="neuron")
    after = g.get_offset()
    assert after > 0
    g.set_offset(0)
    torch.testing.assert_close(torch.randn(64, device="neuron").cpu(), a.cpu(), rtol=0, atol=0)
    assert g.get_offset() == after
    own = torch.Generator("neuron").manual_seed(5)
    own.set_offset(after)
    assert own.get_offset() == after and own.initial_seed() == 5
    assert not torch.equal(torch.randn(64, device="neuron", generator=own).cpu(), a.cpu())


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


def test_save_and_load_round_trip(tmp_path):
    sd = {"w": torch.randn(3, 4, device="neuron"), "i": torch.arange(5, device="neuron")}
    path = tmp_path / "t.pt"
    torch.save(sd, path)
    cpu = torch.load(path, map_location="cpu")
    assert cpu["w"].device.type == "cpu"
    torch.testing.assert_close(cpu["w"], sd["w"].cpu())
    back = torch.load(path)
    assert back["w"].device == torch.device("neuron:0")
    on = torch.load(path, map_location="neuron")
    torch.testing.assert_close(on["i"].cpu(), torch.arange(5))
    buf = io.BytesIO()
    torch.save(torch.nn.Linear(2, 2).to("neuron").state_dict(), buf)
    buf.seek(0)
    assert torch.load(buf, map_location="neuron")["weight"].is_neuron


def test_backend_metadata_is_kept_through_save_load_and_detach(tmp_path):
    from torch._utils import get_tensor_metadata, set_tensor_metadata

    t = torch.randn(3, 3, device="neuron")
    assert get_tensor_metadata(t) == {}
    flags = {"packed": True, "pinned_layout": True}
    set_tensor_metadata(t, flags)
    assert get_tensor_metadata(t) == flags
    d = t.detach()
    set_tensor_metadata(t, {"packed": False})  # False clears a flag; the detached alias keeps its own
    assert get_tensor_metadata(t) == {"pinned_layout": True} and get_tensor_metadata(d) == flags
    torch.save(d, tmp_path / "t.pt")
    back = torch.load(tmp_path / "t.pt")
    assert back.is_neuron and get_tensor_metadata(back) == flags
    torch.testing.assert_close(back.cpu(), t.cpu())
    assert get_tensor_metadata(torch.load(tmp_path / "t.pt", map_location="cpu")) == {}  # the CPU has none


def test_pinned_non_blocking_copies():
    src = torch.randn(1000).pin_memory()
    assert src.is_pinned()
    d = src.to("neuron", non_blocking=True)
    back = torch.empty(1000).pin_memory()
    back.copy_(d, non_blocking=True)
    torch.neuron.synchronize()
    torch.testing.assert_close(back, src)


def test_sanitizer_catches_host_access():
    ok = run_python("import torch\nx = torch.randn(64, device='neuron')\n"
                    "print(float((x * 2).sum().item() - 2 * x.cpu().sum().item()) < 1e-3)",
                    {"TORCH_NEURONX_SANITIZE": "1"})
    assert ok.stdout.strip() == "True", ok.stderr
    bad = run_python("import ctypes, torch\nx = torch.ones(64, device='neuron')\ntorch.neuron.synchronize()\n"
                     "print(ctypes.c_float.from_address(x.data_ptr()).value)",
                     {"TORCH_NEURONX_SANITIZE": "1"})
    assert bad.returncode != 0
    assert "host access to neuron device memory" in bad.stderr
    unsanitized = run_python("import ctypes, torch\nx = torch.ones(64, device='neuron')\ntorch.neuron.synchronize()\n"
                             "print(ctypes.c_float.from_address(x.data_ptr()).value)")
    assert unsanitized.stdout.strip() == "1.0"


def test_sanitizer_runs_a_whole_training_run():
    # Every kernel, sync op, copy and compiled kernel touches device memory only inside a queue
    # task: the demo (loading, Trainer, compiled static-cache generate) runs with device memory
    # closed to the host.
    r = run_python("import tempfile\nfrom torch_neuronx.demo import main\n"
                   "main(['--steps', '5', '--new-tokens', '4', '--out', tempfile.mkdtemp()])\nprint('done')",
                   {"TORCH_NEURONX_SANITIZE": "1"}, timeout=600)
    assert r.returncode == 0 and "done" in r.stdout, r.stderr[-2000:]


def test_float64_warns_and_strict_raises():
    r = run_python("import warnings, torch\nwith warnings.catch_warnings(record=True) as w:\n"
                   "    warnings.simplefilter('always')\n"
                   "    x = torch.ones(2, dtype=torch.float64, device='neuron'); y = x * 2\n"
                   "print(sum('Trainium cannot run it' in str(m.message) for m in w), y.sum().item())")
    assert r.stdout.split() == ["1", "4.0"], r.stderr
    r = run_python("import torch\ntorch.ones(2, dtype=torch.float64, device='neuron')",
                   {"TORCH_NEURONX_STRICT": "1"})
    assert r.returncode != 0 and "not supported by Trainium" in r.stderr


def test_mixing_devices_is_an_error():
    a = torch.ones(3, device="neuron")
    for fn in (lambda: a + torch.ones(3), lambda: torch.mm(a.view(1, 3), torch.ones(3, 1)),
               lambda: torch.cat([a, torch.ones(3)]), lambda: a + torch.ones(3, device="neuron:1")):
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            fn()
    assert (a + torch.tensor(1.0)).sum().item() == 6  # 0-dim CPU tensors act as scalars
