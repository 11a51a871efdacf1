"""torch.profiler on neuron: a device span per task on a lane per device and stream, linked to the
host op that queued it by a flow, device time in key_averages, the cost model's Trn2/Trn3 estimate
on each span; and the memory history in torch.cuda's snapshot format."""
import json
import os
import pickle

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

from torch_neuronx import cost_model

N = "neuron"
ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def events_of(prof, tmp_path):
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return json.loads(path.read_text())["traceEvents"]


def train_step(model, opt, x):
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()


def test_training_step_has_device_spans_lanes_flows_and_device_time(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8)).to(N)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(32, 64, device=N)
    train_step(model, opt, x)  # first calls out of the way
    with profile(activities=ACTIVITIES, record_shapes=True) as prof:
        train_step(model, opt, x)
        torch.neuron.synchronize()
    events = events_of(prof, tmp_path)

    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert {"aten_addmm_kernel", "aten_mm_kernel"} <= {k["name"] for k in kernels}, kernels
    # The lanes: a process "neuron:0", a thread per stream.
    processes = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and
               e["name"] == "thread_name"}
    for k in kernels:
        assert processes[k["pid"]] == "neuron:0" and threads[(k["pid"], k["tid"])] == f"stream {k['tid']}"
        assert k["args"]["device"] == 0 and k["dur"] >= 0

    # Flows: each kernel queued in the trace ends one that a launch on the host's thread starts,
    # inside its host op (work queued before the trace began has neither).
    starts = {e["id"]: e for e in events if e.get("ph") == "s" and e.get("cat") == "ac2g"}
    ends = {(e["pid"], e["tid"], e["ts"]): e for e in events if e.get("ph") == "f" and e.get("cat") == "ac2g"}
    assert ends and all(e["id"] in starts and starts[e["id"]]["pid"] == os.getpid() for e in ends.values())
    ops = {e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op"}
    linked = [k for k in kernels if "External id" in k["args"]]
    assert {"aten_addmm_kernel", "aten_mm_kernel"} <= {k["name"] for k in linked}
    for k in linked:
        assert (k["pid"], k["tid"], k["ts"]) in ends
        op = ops[k["args"]["External id"]]
        assert k["name"].startswith(op["name"].replace("::", "_")), (k["name"], op["name"])
        assert op["ts"] <= k["ts"] + 1, "a kernel cannot start before the op that queued it"

    # key_averages: the host ops carry their kernels' device time.
    host = [e for e in prof.key_averages() if e.key == "aten::addmm" and e.self_cpu_time_total > 0]
    assert host and host[0].device_time_total > 0
    assert sum(e.self_device_time_total for e in prof.key_averages()) > 0


@pytest.mark.parametrize("profile_name", ["trn2", "trn3"])
def test_each_span_carries_the_cost_models_estimate_of_its_op(tmp_path, profile_name):
    a = torch.randn(256, 512, device=N, dtype=torch.bfloat16)
    b = torch.randn(512, 384, device=N, dtype=torch.bfloat16)
    a @ b
    with profile(activities=ACTIVITIES, record_shapes=True) as prof:
        (a @ b).exp()
        torch.neuron.synchronize()
    kernels = {k["name"]: k for k in events_of(prof, tmp_path) if k.get("cat") == "kernel"}
    meta = {t: torch.empty(t.shape, dtype=t.dtype, device="meta") for t in (a, b)}
    mm = cost_model.estimate(torch.mm, meta[a], meta[b], profile=profile_name).total_us
    exp = cost_model.estimate(torch.exp, torch.empty(256, 384, dtype=torch.bfloat16, device="meta"),
                              profile=profile_name).total_us
    assert kernels["aten_mm_kernel"]["args"][f"{profile_name} estimate us"] == pytest.approx(mm)
    assert kernels["aten_exp_kernel"]["args"][f"{profile_name} estimate us"] == pytest.approx(exp)


def test_a_side_stream_has_its_own_lane(tmp_path):
    x = torch.randn(64, 64, device=N)
    s = torch.neuron.Stream()
    s.wait_stream(torch.neuron.current_stream())  # x is made on the default stream
    with profile(activities=ACTIVITIES) as prof:
        with torch.neuron.stream(s):
            y = x * 2
        z = x + 1
        torch.neuron.synchronize()
    kernels = {k["name"]: k for k in events_of(prof, tmp_path) if k.get("cat") == "kernel"}
    assert kernels["aten_mul_Tensor_kernel"]["tid"] == s.stream_id != kernels["aten_add_Tensor_kernel"]["tid"]
    torch.testing.assert_close(y.cpu() + 1, z.cpu() + x.cpu())


def test_compiled_kernels_are_spans_named_for_the_kernel(tmp_path):
    f = torch.compile(lambda a: (a.sin() * 2).relu() @ a, backend="neuron")
    x = torch.randn(64, 64, device=N)
    f(x)
    torch.neuron.synchronize()  # work queued before the trace has no host op in it to price it by
    with profile(activities=ACTIVITIES) as prof:
        out = f(x)
        torch.neuron.synchronize()
    kernels = [k for k in events_of(prof, tmp_path) if k.get("cat") == "kernel"]
    fused = [k for k in kernels if k["name"].startswith("cpp_fused_")]
    assert fused and all("trn2 estimate us" in k["args"] for k in fused), kernels
    torch.testing.assert_close(out.cpu(), (x.cpu().sin() * 2).relu() @ x.cpu(), rtol=1e-4, atol=1e-4)


def test_schedule_and_tensorboard_handler_record_only_the_active_steps(tmp_path):
    x = torch.randn(128, 128, device=N)
    with profile(activities=ACTIVITIES, schedule=schedule(wait=1, warmup=1, active=2, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(str(tmp_path))) as prof:
        for _ in range(5):
            x @ x
            torch.neuron.synchronize()
            prof.step()
    files = list(tmp_path.glob("*.pt.trace.json"))
    assert len(files) == 1, files
    events = json.loads(files[0].read_text())["traceEvents"]
    assert len([e for e in events if e.get("cat") == "kernel" and e["name"] == "aten_mm_kernel"]) == 2


def test_every_span_of_a_scheduled_trace_links_to_its_host_op_and_is_priced(tmp_path):
    # No synchronize between steps: the queue runs behind the host, so work queued in a warmup
    # step is still running when the active steps begin. Each cycle's trace has the work its own
    # steps queued, all of it (the profiler synchronizes as a cycle ends), each span linked.
    x = torch.randn(96, 64, device=N)
    w = torch.randn(64, 64, device=N)
    active = 2
    with profile(activities=ACTIVITIES, record_shapes=True,
                 schedule=schedule(wait=1, warmup=1, active=active, repeat=2),
                 on_trace_ready=tensorboard_trace_handler(str(tmp_path))) as prof:
        for _ in range(9):
            y = torch.cat([x @ w, x], dim=1).relu()
            prof.step()
    torch.neuron.synchronize()
    files = sorted(tmp_path.glob("*.pt.trace.json"))
    assert len(files) == 2, files
    for f in files:
        events = json.loads(f.read_text())["traceEvents"]
        ops = {e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op"}
        spans = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy")]
        names = [k["name"] for k in spans]
        for name in ("aten_mm_kernel", "aten_cat_out_kernel", "aten_relu_kernel"):
            assert names.count(name) == active, names
        for k in spans:
            assert ops[k["args"]["External id"]]["name"].replace("::", "_") in k["name"], k
            assert k["args"]["trn2 estimate us"] > 0 and k["args"]["trn3 estimate us"] > 0, k
    cat = [k for k in spans if k["name"] == "aten_cat_out_kernel"][0]
    meta = [torch.empty(96, 64, device="meta"), torch.empty(96, 64, device="meta")]
    want = cost_model.estimate(torch.cat, meta, dim=1, profile="trn2").total_us
    assert cat["args"]["trn2 estimate us"] == pytest.approx(want, rel=0.05)
    torch.testing.assert_close(y.cpu(), torch.cat([x.cpu() @ w.cpu(), x.cpu()], dim=1).relu())


def test_key_averages_keep_host_ops_and_kernels_apart_and_add_up_to_the_trace(tmp_path):
    a = torch.randn(128, 256, device=N)
    b = torch.randn(256, 64, device=N)
    torch.neuron.synchronize()
    with profile(activities=ACTIVITIES) as prof:
        for _ in range(3):
            c = torch.cat([a @ b, a[:, :64]]).sigmoid()
        c.cpu()
        torch.neuron.synchronize()
    events = events_of(prof, tmp_path)
    spans = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy")]
    in_trace = sum(e["dur"] for e in spans)
    rows = prof.key_averages()
    device_rows = [r for r in rows if r.device_type == torch.autograd.DeviceType.PrivateUse1]
    host_rows = [r for r in rows if r.device_type == torch.autograd.DeviceType.CPU]
    # A kernel's name is never a host op's: one row each, not two rows of one name.
    assert {r.key for r in device_rows} == {e["name"] for e in spans}
    assert not {r.key for r in device_rows} & {r.key for r in host_rows}
    assert {r.key: r.count for r in device_rows}["aten_mm_kernel"] == 3
    # The kernels' rows add up to the device time in the trace, and so do the host ops' rows
    # (each kernel is linked to one host op); PyTorch's table totals the kernels' rows only, as
    # on CUDA, where summing both kinds of row counts each kernel twice.
    assert sum(r.self_device_time_total for r in device_rows) == pytest.approx(in_trace, rel=1e-3)
    assert sum(r.self_device_time_total for r in host_rows) == pytest.approx(in_trace, rel=1e-3)
    mm = [r for r in host_rows if r.key == "aten::mm"][0]
    kernel = [r for r in device_rows if r.key == "aten_mm_kernel"][0]
    assert mm.self_device_time_total == pytest.approx(kernel.self_device_time_total)
    assert "Memcpy DtoH" in {e["name"] for e in spans if e["cat"] == "gpu_memcpy"}


def test_a_cpu_only_profile_records_no_device_spans(tmp_path):
    x = torch.randn(64, 64, device=N)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        x @ x
        torch.neuron.synchronize()
    events = events_of(prof, tmp_path)
    assert any(e.get("cat") == "cpu_op" and e["name"] == "aten::mm" for e in events)
    assert not [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "ac2g", "cuda_runtime")]


# ---- memory history ----

@pytest.fixture
def history():
    torch.neuron.synchronize()
    torch.neuron.empty_cache()
    torch.neuron.memory._record_memory_history(max_entries=10_000, clear_history=True)
    yield
    torch.neuron.memory._record_memory_history(enabled=None)


def allocate_and_free():
    a = torch.randn(4096, 4096, device=N)  # 64 MiB: a segment of its own, whatever is cached
    b = a * 2
    del a
    return b


def test_the_snapshot_has_the_stack_of_each_live_block_and_renders(history, tmp_path):
    from torch.cuda import _memory_viz

    keep = allocate_and_free()
    torch.neuron.synchronize()
    snap = torch.neuron.memory._snapshot()
    blocks = [b for seg in snap["segments"] for b in seg["blocks"]]
    for seg in snap["segments"]:
        assert seg["total_size"] == sum(b["size"] for b in seg["blocks"])
        assert seg["allocated_size"] == sum(b["size"] for b in seg["blocks"] if b["state"] == "active_allocated")
    live = [b for b in blocks if b["address"] == keep.data_ptr()]
    assert len(live) == 1 and live[0]["state"] == "active_allocated"
    assert live[0]["requested_size"] == keep.numel() * 4
    assert "allocate_and_free" in {f["name"] for f in live[0]["frames"]}

    trace = snap["device_traces"][0]
    actions = [t["action"] for t in trace]
    assert {"segment_alloc", "alloc", "free_requested", "free_completed"} <= set(actions), actions
    freed = [t for t in trace if t["action"] == "free_requested" and t["size"] >= 64 << 20]  # `a`'s
    assert freed and "allocate_and_free" in {f["name"] for f in freed[0]["frames"]}

    html = _memory_viz.trace_plot(snap)
    assert "snapshot.pickle" in html and len(html) > 10_000
    torch.neuron.memory._dump_snapshot(str(tmp_path / "snap.pickle"))
    again = pickle.loads((tmp_path / "snap.pickle").read_bytes())
    assert len(again["device_traces"][0]) >= len(trace)
    assert torch.neuron.memory_snapshot() == torch.neuron.memory._snapshot()["segments"]


def test_history_is_bounded_and_stops_when_disabled():
    torch.neuron.memory._record_memory_history(max_entries=3, clear_history=True)
    try:
        for _ in range(5):
            torch.empty(1024, device=N)
        assert len(torch.neuron.memory._snapshot()["device_traces"][0]) == 3
    finally:
        torch.neuron.memory._record_memory_history(enabled=None)
    torch.empty(1024, device=N)
    assert torch.neuron.memory._snapshot()["device_traces"][0] == []


def test_an_out_of_memory_error_is_in_the_history(history):
    with pytest.raises(torch.OutOfMemoryError, match="memory_summary"):
        torch.empty(1 << 42, dtype=torch.uint8, device=N)
    oom = [t for t in torch.neuron.memory._snapshot()["device_traces"][0] if t["action"] == "oom"]
    assert oom and oom[-1]["size"] == 1 << 42 and oom[-1]["device_free"] > 0


@pytest.mark.parametrize("kwargs, match", [
    ({"enabled": "some"}, "enabled"),
    ({"context": "stack"}, "context"),
    ({"stacks": "cpp"}, "stacks"),
    ({"max_entries": 0}, "max_entries"),
])
def test_bad_history_settings_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        torch.neuron.memory._record_memory_history(**kwargs)


def test_an_nki_kernel_is_a_span_priced_by_its_own_model(tmp_path):
    from torch_neuronx import nki
    from torch_neuronx.nki import kernels

    x, w = torch.randn(256, 512, device=N), torch.randn(512, device=N)
    kernels.rmsnorm(x, w)
    torch.neuron.synchronize()
    with profile(activities=ACTIVITIES, record_shapes=True) as prof:
        kernels.rmsnorm(x, w)
        torch.neuron.synchronize()
    spans = [k for k in events_of(prof, tmp_path) if k.get("cat") == "kernel" and k["name"] == "nki_rmsnorm_kernel"]
    assert len(spans) == 1
    for p in ("trn2", "trn3"):
        want = nki.estimate(kernels.rmsnorm, profile=p)(x, w).latency_us
        assert spans[0]["args"][f"{p} estimate us"] == pytest.approx(want)


def test_a_c10d_collectives_span_is_priced_by_the_collectives_model(tmp_path):
    from conftest import run_python

    from torch_neuronx import cost_constants

    code = f"""
import json, torch, torch.distributed as dist, torch_neuronx
from torch.profiler import ProfilerActivity, profile
dist.init_process_group("neuron", rank=0, world_size=1, store=dist.HashStore())
x = torch.randn(1024, 256, device="neuron")
dist.all_reduce(x)
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], record_shapes=True) as prof:
    dist.all_reduce(x)
    torch.neuron.synchronize()
prof.export_chrome_trace({str(tmp_path / "t.json")!r})
dist.destroy_process_group()
"""
    r = run_python(code)
    assert r.returncode == 0, r.stderr[-2000:]
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    (span,) = [e for e in events if e.get("cat") == "kernel" and e["name"] == "ncclKernel_allreduce"]
    # one rank: nothing moves, the collective's kernel still launches
    assert span["args"]["trn2 estimate us"] == pytest.approx(cost_model.ROOFLINES["trn2"].fixed_us)
    # as the tracer describes the host op, among 2 ranks (torch.distributed not initialised here)
    (price,) = cost_model.price_traced([("c10d::allreduce_", "[[[1024, 256]], [], [], [], [], []]",
                                         '[["Float"], "", "", "", "", ""]', "[null, null, null, null, false, -1]")])
    for p, us in zip(("trn2", "trn3"), price):
        want = cost_constants.collective_seconds("all_reduce", 1024 * 256 * 4, 2, p)[0] * 1e6
        assert us == pytest.approx(want + cost_model.ROOFLINES[p].fixed_us)
