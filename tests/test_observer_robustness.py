"""Neuron Observer against what it cannot trust or cannot see: readers in another pid namespace,
forged and malformed state files, command lines that are not ASCII, a collector that fails and
HTTP clients that never finish their request. Every test uses its own state directory."""
import json
import os
import socket
import subprocess
import threading
import time

import pytest
from test_observer import NOBS, get, nobs, nobs_json, raw

from torch_neuronx.observer import state


@pytest.fixture
def env(tmp_path):
    e = dict(os.environ, TORCH_NEURONX_STATE_DIR=str(tmp_path / "state"))
    e.pop("TORCH_NEURONX_INJECT_FAULT", None)
    return e


def healthy_device(index: int) -> dict:
    return {"index": index, "memory_total": 1 << 30, "memory_used": 0, "queues": 1, "tasks": 0, "failed": 0,
            "queued": 0, "busy_ns": 0, "correctable": 0, "uncorrectable": 0, "hung": False, "last_error": "",
            "health": "healthy", "health_reason": ""}


def document(pid: int, **fields) -> dict:
    """A state as the runtime writes it, by default for this test process's namespace."""
    return {"version": 1, "pid": pid, "start_time": state.start_time(pid) if pid > 0 else 0,
            "pid_ns": os.stat("/proc/self/ns/pid").st_ino, "uid": os.getuid(), "command": "forged",
            "profile": "trn2", "lnc": 1, "updated_unix_ms": int(time.time() * 1000), "watchdog_s": 10.0,
            "devices": [healthy_device(i) for i in range(4)], **fields}


def forge(env, pid: int, text: str | bytes | None = None, **fields) -> str:
    """Writes a state file for `pid` as the runtime would (0600 in a 0700 directory): `text` as it
    is, or the document with `fields`."""
    directory = env["TORCH_NEURONX_STATE_DIR"]
    os.makedirs(directory, mode=0o700, exist_ok=True)
    path = os.path.join(directory, f"{pid}.json")
    data = text if text is not None else json.dumps(document(pid, **fields))
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    return path


def a_pid_that_runs_nothing() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


# ---- 5: a reader in another pid namespace ----------------------------------------------------------


def test_a_state_from_another_pid_namespace_is_unknown_even_where_its_pid_runs(env):
    # Its pid here belongs to another process (this one, started at another time): no proof it is gone.
    path = forge(env, os.getpid(), start_time=1, pid_ns=os.stat("/proc/self/ns/pid").st_ino + 1,
                 devices=[healthy_device(0), healthy_device(1), dict(healthy_device(2), health="unhealthy",
                                                                      health_reason="an uncorrectable error"),
                          healthy_device(3)])
    s = nobs_json(env, "status", code=1)
    assert (s["healthy"], s["unknown"], s["processes"], s["unverified_processes"]) == (3, 1, [], [os.getpid()])
    assert os.path.exists(path)


# ---- 15: forged files ------------------------------------------------------------------------


def test_a_forged_state_of_a_pid_that_runs_nothing_claims_nothing(env):
    path = forge(env, a_pid_that_runs_nothing(), start_time=0)
    s = nobs_json(env, "status")
    assert s["processes"] == [] and (s["healthy"], s["unverified_processes"], s["problems"]) == (4, [], [])
    assert not os.path.exists(path)  # in this pid namespace its process is provably gone


@pytest.mark.parametrize("pid", [-1, 0])
def test_a_state_with_an_impossible_pid_is_a_problem_not_a_process(env, pid):
    forge(env, pid, start_time=0)
    s = nobs_json(env, "status", code=1)
    assert s["processes"] == [] and s["unknown"] == 4
    assert f"field 'pid' is {pid}, outside 1..{1 << 22}" in s["problems"][0]


# ---- 6: command lines that are not ASCII -----------------------------------------------------


def test_a_command_line_that_is_not_utf8_costs_a_character_not_the_file(env):
    text = json.dumps(document(os.getpid(), command="@"))
    forge(env, os.getpid(), text.encode().replace(b'"@"', b'"python caf\xc3"'))  # argv is bytes, not UTF-8
    s = nobs_json(env, "status")
    assert (s["healthy"], s["processes"], s["problems"]) == (4, [os.getpid()], [])


# ---- 9: malformed files --------------------------------------------------------------------------


def test_a_deeply_nested_state_file_is_a_problem_not_a_crash(env):
    forge(env, 4242, "[" * 100_000)
    r = nobs(env, "status", "--json")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    s = json.loads(r.stdout)
    assert s["unknown"] == 4 and "4242.json is corrupt" in s["problems"][0] and "nested more than" in s["problems"][0]


@pytest.mark.parametrize("field, value, why", [
    ("memory_used", 10**400, "401 digits"), ("memory_used", 1 << 64, "outside 0..18446744073709551615"),
    ("busy_ns", -1, "outside 0..")], ids=["10**400", "2**64", "negative"])
def test_a_number_out_of_range_is_a_problem_not_a_crash(env, field, value, why):
    forge(env, os.getpid(), devices=[dict(healthy_device(0), **{field: value})] + [healthy_device(i) for i in (1, 2)])
    r = nobs(env, "devices", "--json")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    (problem,) = json.loads(r.stdout)["problems"]
    assert why in problem, problem
    s = nobs_json(env, "status", code=1)
    assert s["unknown"] == 4 and s["processes"] == []


def test_infinite_and_nan_numbers_are_a_problem(env):
    for raw_value in ("1e400", "NaN", "-Infinity"):
        forge(env, os.getpid(), json.dumps(document(os.getpid(), watchdog_s="@")).replace('"@"', raw_value))
        (problem,) = nobs_json(env, "status", code=1)["problems"]
        assert "out of range" in problem or "not a number a state holds" in problem, problem


@pytest.fixture
def served(env):
    """`nobs serve` on a free port: (its URL, its process)."""
    proc = subprocess.Popen(NOBS + ["serve", "--port", "0"], stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stderr.readline()
    assert "http://127.0.0.1:" in line, line
    yield line.split()[2].rstrip("/"), proc
    proc.terminate()
    proc.wait(timeout=30)


def wait_for(predicate, timeout=20.0):
    deadline = time.time() + timeout
    while not predicate():
        assert time.time() < deadline, "timed out"
        time.sleep(0.1)


def test_serve_reports_malformed_files_and_recovers_when_they_go(env, served):
    url, _ = served
    nested = forge(env, 4242, "[" * 100_000)
    huge = forge(env, os.getpid(), devices=[dict(healthy_device(0), memory_used=10**400)] +
                 [healthy_device(i) for i in (1, 2, 3)])
    wait_for(lambda: get(url + "/v1/devices")[0] == 200)
    doc = json.loads(get(url + "/v1/devices")[1])
    assert len(doc["problems"]) == 2 and {d["health"] for d in doc["devices"]} == {"unknown"}
    code, text = get(url + "/metrics")
    assert code == 200 and "neuron_device_health" in text
    os.unlink(nested)
    os.unlink(huge)
    before = doc["collected_unix_s"]
    wait_for(lambda: json.loads(get(url + "/v1/devices")[1])["problems"] == [])
    doc = json.loads(get(url + "/v1/devices")[1])
    assert doc["collected_unix_s"] > before and {d["health"] for d in doc["devices"]} == {"healthy"}
    assert get(url + "/readyz") == (200, json.dumps({"ready": True}, indent=2) + "\n")


def test_the_collector_outlives_an_error_and_readyz_says_its_data_is_stale(env, monkeypatch, capfd):
    from torch_neuronx.observer import server

    monkeypatch.setenv("TORCH_NEURONX_STATE_DIR", env["TORCH_NEURONX_STATE_DIR"])
    broken, real = threading.Event(), state.read

    def read(*args):
        if broken.is_set():
            raise RuntimeError("the state broke")
        return real(*args)

    monkeypatch.setattr(state, "read", read)
    collector = server.Collector(interval=0.1)
    httpd = server.Server(("127.0.0.1", 0), collector)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        wait_for(lambda: get(url + "/readyz")[0] == 200)
        broken.set()
        wait_for(lambda: get(url + "/readyz")[0] == 503)
        reason = json.loads(get(url + "/readyz")[1])["reason"]
        assert "old (collecting fails: RuntimeError: the state broke)" in reason, reason
        assert collector.thread.is_alive() and "RuntimeError: the state broke" in capfd.readouterr().err
        broken.clear()
        wait_for(lambda: get(url + "/readyz")[0] == 200)
    finally:
        collector.stop.set()
        httpd.shutdown()
        httpd.server_close()


# ---- 11: slow and idle HTTP clients ---------------------------------------------------------------


def threads_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("Threads:")).split()[1])


def test_serve_bounds_slow_clients_and_keeps_answering_healthz(served):
    url, proc = served
    host, port = url.split("//")[1].split(":")
    idle = socket.create_connection((host, int(port)), timeout=30)  # connects and sends nothing
    opened = time.monotonic()
    partial = []
    try:
        for _ in range(300):  # each sends half a request and then nothing
            s = socket.create_connection((host, int(port)), timeout=10)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            partial.append(s)
        start = time.monotonic()
        status, _, doc = raw(url, b"GET /healthz HTTP/1.1\r\n\r\n")
        assert (status, doc) == (200, {"status": "ok"}) and time.monotonic() - start < 2.0
        assert threads_of(proc.pid) <= 16  # not a thread per connection
        answer = b""
        while chunk := idle.recv(65536):  # the server gives up on it: 408, then it closes
            answer += chunk
        assert time.monotonic() - opened < 10 and answer.startswith(b"HTTP/1.0 408 "), answer[:100]
        assert json.loads(answer.partition(b"\r\n\r\n")[2])["status"] == 408
        assert raw(url, b"GET /healthz HTTP/1.1\r\n\r\n")[0] == 200
    finally:
        idle.close()
        for s in partial:
            s.close()
