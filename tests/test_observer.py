"""Neuron Observer: the state processes publish, nobs's commands, injected faults, the HTTP
endpoints and `nobs top` in a terminal. Every test uses its own state directory."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from conftest import run_python

NOBS = [sys.executable, "-m", "torch_neuronx.observer"]

# A process using the device: it holds `mib` MiB on `device`, says "ready", and waits for a line
# on stdin; then it checks its tensor was not disturbed and exits.
HOLDER = """
import sys, torch
x = torch.full(({mib} * 262144,), 7.0, device="neuron:{device}")
torch.neuron.synchronize()
print("ready", flush=True)
sys.stdin.readline()
assert bool((x == 7.0).all()), "the tensor changed"
print("intact", flush=True)
"""

# A process that sees an uncorrectable memory error on neuron:0 and uses neuron:{device}: its work
# there runs, and work on neuron:0 raises at the call.
BESIDE_A_BAD_CORE = """
import sys, torch
x = torch.full(({mib} * 262144,), 7.0, device="neuron:{device}")
torch.neuron.synchronize()
try:
    torch.ones(4, device="neuron:0")
    refused = "nothing"
except RuntimeError as e:
    refused = str(e)
print("ready", flush=True)
sys.stdin.readline()
print("sum:", (x * 2).sum().item(), flush=True)
print("refused:", refused, flush=True)
"""


@pytest.fixture
def env(tmp_path):
    e = dict(os.environ, TORCH_NEURONX_STATE_DIR=str(tmp_path / "state"))
    e.pop("TORCH_NEURONX_INJECT_FAULT", None)
    return e


def nobs(env, *args, timeout=180):
    return subprocess.run(NOBS + list(args), capture_output=True, text=True, env=env, timeout=timeout)


def nobs_json(env, *args, code=0):
    r = nobs(env, *args, "--json")
    assert r.returncode == code, r.stdout + r.stderr
    return json.loads(r.stdout)


class Holder:
    def __init__(self, env, device=0, mib=8, fault=None, extra=None, script=HOLDER):
        e = dict(env, **({"TORCH_NEURONX_INJECT_FAULT": fault} if fault else {}), **(extra or {}))
        self.proc = subprocess.Popen([sys.executable, "-c", script.format(device=device, mib=mib)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=e)
        line = self.proc.stdout.readline()
        assert line.strip() == "ready", line + self.proc.stderr.read()
        path = os.path.join(env["TORCH_NEURONX_STATE_DIR"], f"{self.proc.pid}.json")
        deadline = time.time() + 30
        while time.time() < deadline:  # until its monitor has published the memory it holds
            try:
                with open(path) as f:
                    if json.load(f)["devices"][device]["memory_used"]:
                        break
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        else:
            raise AssertionError(f"pid {self.proc.pid} published no state")

    def finish(self) -> str:
        out, err = self.proc.communicate("go\n", timeout=60)
        assert self.proc.returncode == 0, err
        return out

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def holders():
    made = []
    yield lambda *a, **k: made.append(Holder(*a, **k)) or made[-1]
    for h in made:
        h.kill()


def test_a_process_using_a_device_is_listed_with_its_memory_and_all_is_healthy(env, holders):
    h = holders(env, device=1, mib=64)
    doc = nobs_json(env, "devices")
    dev = {d["index"]: d for d in doc["devices"]}
    assert len(dev) == 4 and all(d["health"] == "healthy" for d in dev.values())
    (user,) = dev[1]["processes"]
    assert user["pid"] == h.proc.pid and user["memory"] >= 64 << 20
    assert dev[1]["memory_used"] >= 64 << 20 and dev[0]["processes"] == []
    status = nobs_json(env, "status")
    assert status["healthy"] == 4 and status["processes"] == [h.proc.pid] and status["problems"] == []
    assert "intact" in h.finish()
    assert nobs_json(env, "status")["processes"] == []  # an orderly exit removes its state


def test_a_health_run_passes_on_an_idle_core_and_leaves_a_busy_one_alone(env, holders):
    h = holders(env, device=0, mib=16)
    r = nobs(env, "health", "run", "--device", "0", "--json")
    assert r.returncode == 1
    (busy,) = json.loads(r.stdout)["results"]
    assert busy["outcome"] == "device_busy" and busy["processes"] == [h.proc.pid] and busy["checks"] == []
    doc = nobs_json(env, "health", "run", "--device", "1")
    (ok,) = doc["results"]
    assert ok["outcome"] == "passed"
    assert {c["check"] for c in ok["checks"]} == {"matmul", "elementwise", "reduction", "dma_copy", "collective"}
    assert "intact" in h.finish()  # the busy device's work was not disturbed


def test_an_uncorrectable_memory_error_makes_the_device_unhealthy_and_refuses_work(env, holders):
    h = holders(env, device=0, fault="hbm_uncorrectable@2")
    status = nobs_json(env, "status", code=1)
    assert status["unhealthy"] == 1 and status["healthy"] == 3
    dev = {d["index"]: d for d in nobs_json(env, "devices")["devices"]}
    assert dev[2]["health"] == "unhealthy" and "uncorrectable" in dev[2]["reasons"][0]
    assert dev[2]["uncorrectable_errors"] == 1
    h.finish()
    r = run_python("import torch\n"
                   "print(torch.neuron.device_health(2), torch.neuron.device_health(0))\n"
                   "try:\n    torch.ones(4, device='neuron:2')\nexcept RuntimeError as e:\n    print('raised:', e)\n",
                   env=dict(env, TORCH_NEURONX_INJECT_FAULT="hbm_uncorrectable@2"))
    assert r.stdout.startswith("unhealthy healthy"), r.stdout + r.stderr
    assert "raised: neuron:2 has an uncorrectable HBM memory error" in r.stdout


def test_an_uncorrectable_error_on_one_core_is_published_and_leaves_the_others_working(env, holders, server):
    from prometheus_client.parser import text_string_to_metric_families

    h = holders(env, device=1, mib=4, fault="hbm_uncorrectable@0", script=BESIDE_A_BAD_CORE)
    status = nobs_json(env, "status", code=1)
    assert (status["unhealthy"], status["healthy"], status["processes"]) == (1, 3, [h.proc.pid])
    dev = {d["index"]: d for d in nobs_json(env, "devices")["devices"]}
    assert dev[0]["health"] == "unhealthy" and dev[0]["uncorrectable_errors"] == 1
    assert f"1 uncorrectable HBM memory error(s) (pid {h.proc.pid})" in dev[0]["reasons"]
    assert [dev[i]["health"] for i in (1, 2, 3)] == ["healthy"] * 3
    assert [p["pid"] for p in dev[1]["processes"]] == [h.proc.pid] and dev[0]["processes"] == []
    deadline = time.time() + 20
    while True:  # the collector samples every second: wait for one made after the process published
        code, body = get(server + "/v1/health")
        if code == 200 and json.loads(body)["status"] != "healthy" or time.time() > deadline:
            break
        time.sleep(0.2)
    doc = json.loads(body)
    assert doc["status"] == "unhealthy" and [d["health"] for d in doc["devices"]] == ["unhealthy"] + ["healthy"] * 3
    families = {f.name: f for f in text_string_to_metric_families(get(server + "/metrics")[1])}
    bad = [s for s in families["neuron_device_uncorrectable_errors"].samples if s.name.endswith("_total")]
    assert {s.labels["device"]: s.value for s in bad} == {"0": 1.0, "1": 0.0, "2": 0.0, "3": 0.0}
    health = [s for s in families["neuron_device_health"].samples if s.value == 1]
    assert sorted((s.labels["device"], s.labels["status"]) for s in health) == [
        ("0", "unhealthy"), ("1", "healthy"), ("2", "healthy"), ("3", "healthy")]
    out = h.finish()
    assert f"sum: {14.0 * 4 * 262144}" in out  # its work on neuron:1 ran
    assert "refused: neuron:0 has an uncorrectable HBM memory error" in out, out


def test_correctable_errors_are_counted_and_unhealthy_only_past_the_limit(env, holders):
    holders(env, device=0, fault="hbm_correctable@1:3")
    dev = {d["index"]: d for d in nobs_json(env, "devices")["devices"]}
    assert dev[1]["correctable_errors"] == 3 and dev[1]["health"] == "healthy"
    holders(env, device=0, fault="hbm_correctable@3:17")  # the default limit is 16
    dev = {d["index"]: d for d in nobs_json(env, "devices")["devices"]}
    assert dev[3]["health"] == "unhealthy" and "over the limit of 16" in dev[3]["reasons"][0]


def test_corrupted_results_are_caught_only_by_the_golden_check(env):
    fault = dict(env, TORCH_NEURONX_INJECT_FAULT="corrupt@3")
    r = run_python("import torch\nprint(torch.arange(8.).to('neuron:3').cpu().tolist())", env=fault)
    assert r.returncode == 0 and r.stdout.strip() != str([float(i) for i in range(8)])  # silently wrong
    r = nobs(fault, "health", "run", "--device", "3", "--json")
    assert r.returncode == 1, r.stderr
    (res,) = json.loads(r.stdout)["results"]
    assert res["outcome"] == "failed" and not any(c["passed"] for c in res["checks"] if c["check"] != "collective")


def test_a_hung_queue_is_reported_by_the_watchdog_and_times_out_a_health_run(env, holders):
    # Its first op on the hung core waits for the device forever (the drill's point): it says so first.
    h = subprocess.Popen([sys.executable, "-c", "import torch\nprint('queuing', flush=True)\n"
                          "x = torch.ones(4, device='neuron:2') * 2"],
                         stdout=subprocess.PIPE, text=True,
                         env=dict(env, TORCH_NEURONX_INJECT_FAULT="hang@2", TORCH_NEURONX_WATCHDOG_S="1"))
    try:
        assert h.stdout.readline().strip() == "queuing"
        deadline = time.time() + 30
        while True:
            dev = {d["index"]: d for d in nobs_json(env, "devices")["devices"]}
            if dev[2]["health"] == "unhealthy" or time.time() > deadline:
                break
        assert dev[2]["health"] == "unhealthy" and "hung" in dev[2]["reasons"][0], dev[2]
    finally:
        h.kill()
        h.wait()
    r = nobs(dict(env, TORCH_NEURONX_INJECT_FAULT="hang@1"), "health", "run", "--device", "1", "--timeout", "6",
             "--json")
    assert r.returncode == 1 and json.loads(r.stdout)["results"][0]["outcome"] == "timeout"


def test_a_malformed_fault_is_a_clear_error():
    r = run_python("import torch; torch.ones(1, device='neuron')", env={"TORCH_NEURONX_INJECT_FAULT": "meltdown@0"})
    assert r.returncode != 0 and "TORCH_NEURONX_INJECT_FAULT: 'meltdown@0': unknown kind" in r.stderr


def test_a_dead_process_claims_nothing(env, holders):
    h = holders(env, device=1, mib=32)
    h.proc.send_signal(signal.SIGKILL)
    h.proc.wait()
    state = os.path.join(env["TORCH_NEURONX_STATE_DIR"], f"{h.proc.pid}.json")
    assert os.path.exists(state)  # it could not clean up
    dev = {d["index"]: d for d in nobs_json(env, "devices")["devices"]}
    assert dev[1]["processes"] == [] and dev[1]["memory_used"] == 0
    assert not os.path.exists(state)


def test_state_others_could_write_or_a_corrupt_file_is_not_trusted(env, holders, tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "4242.json").write_text('{"version": 1, "pid": 42')  # truncated
    os.chmod(state / "4242.json", 0o600)
    status = nobs_json(env, "status", code=1)
    assert status["unknown"] == 4 and "4242.json is corrupt" in status["problems"][0]
    (state / "4242.json").unlink()
    (state / "4243.json").write_text("{}")
    os.chmod(state / "4243.json", 0o644)  # another user could have written it
    assert "not trusted" in nobs_json(env, "status", code=1)["problems"][0]
    (state / "4243.json").unlink()
    os.chmod(state, 0o755)
    assert nobs_json(env, "status", code=1)["trusted"] is False
    r = run_python("import torch; x = torch.ones(1, device='neuron'); print(x.sum().item())", env=env)
    assert r.stdout.strip() == "1.0" and "not trusted" in r.stderr  # the device works; nothing is published
    assert os.listdir(state) == []


def test_monitor_prints_json_lines(env, holders):
    holders(env, device=0)
    r = nobs(env, "monitor", "--interval", "0.2", "--count", "2")
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert r.returncode == 0 and len(lines) == 2
    assert all(len(doc["devices"]) == 4 and doc["devices"][0]["processes"] for doc in lines)


@pytest.fixture
def server(env):
    proc = subprocess.Popen(NOBS + ["serve", "--port", "0"], stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stderr.readline()
    assert "http://127.0.0.1:" in line, line  # loopback unless told otherwise
    url = line.split()[2].rstrip("/")
    yield url
    proc.terminate()
    proc.wait(timeout=30)


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_http_endpoints_and_prometheus_metrics(server, env, holders):
    from prometheus_client.parser import text_string_to_metric_families

    holders(env, device=3, mib=16)
    assert get(server + "/healthz") == (200, json.dumps({"status": "ok"}, indent=2) + "\n")
    deadline = time.time() + 20
    while get(server + "/readyz")[0] != 200 and time.time() < deadline:
        time.sleep(0.1)
    assert json.loads(get(server + "/readyz")[1]) == {"ready": True}
    assert json.loads(get(server + "/version")[1])["api"] == "v1"
    while True:  # the collector samples every second: wait for one made after the holder published
        code, body = get(server + "/v1/devices")
        devices = json.loads(body)["devices"]
        if devices[3]["processes"] or time.time() > deadline:
            break
        time.sleep(0.2)
    assert code == 200 and len(devices) == 4 and devices[3]["processes"]
    assert json.loads(get(server + "/v1/health")[1])["status"] == "healthy"
    code, text = get(server + "/metrics")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    used = {s.labels["device"]: s.value for s in families["neuron_device_memory_used_bytes"].samples}
    assert code == 200 and used["3"] >= 16 << 20 and used["0"] == 0
    health = [s for s in families["neuron_device_health"].samples if s.value == 1]
    assert sorted((s.labels["device"], s.labels["status"]) for s in health) == [(str(i), "healthy") for i in range(4)]
    assert all(name.startswith("neuron_") for name in families)


def raw(url, request: bytes):
    """Sends `request` as it is and reads the whole answer: (status, headers, parsed JSON body)."""
    host, port = url.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(request)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *fields = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (f.partition(":") for f in fields)}
    assert status_line.startswith("HTTP/1.0 "), answer[:200]
    assert headers["content-type"] == "application/json" and int(headers["content-length"]) == len(body), headers
    return int(status_line.split()[1]), headers, json.loads(body)


def test_http_refuses_what_it_does_not_serve_and_says_why_in_json(server):
    for path, code in (("/nope", 404), ("/" + "a" * 300, 414)):
        status, headers, doc = raw(server, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert status == code and doc["status"] == code and doc["error"], doc
    status, headers, doc = raw(server, b"POST /v1/devices HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")
    assert (status, doc["status"], headers["allow"]) == (405, 405, "GET, HEAD")
    assert doc["error"] == "POST is not allowed: the API is read-only"
    status, headers, doc = raw(server, b"BREW /healthz HTTP/1.1\r\n\r\n")  # a method nobody knows
    assert (status, doc["status"], headers["allow"]) == (405, 405, "GET, HEAD")
    for malformed in (b"GET /healthz BOGUS/1.1\r\n\r\n", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
                      b"GET /healthz HTTP/1.1 extra\r\n\r\n"):
        status, _, doc = raw(server, malformed)
        assert status == 400 and doc["status"] == 400 and doc["error"], (malformed, doc)
    assert "Bad request version ('BOGUS/1.1')" in raw(server, b"GET /healthz BOGUS/1.1\r\n\r\n")[2]["error"]
    status, _, doc = raw(server, b"GET /healthz HTTP/1.1\r\n\r\n")  # and it goes on serving
    assert status == 200 and doc == {"status": "ok"}


def test_http_answers_an_internal_error_as_json(capfd):
    import threading

    from torch_neuronx.observer import server as observer_server

    class Broken:
        def current(self):
            raise RuntimeError("the collector broke")

    httpd = observer_server.Server(("127.0.0.1", 0), Broken())
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        status, _, doc = raw(url, b"GET /v1/health HTTP/1.1\r\n\r\n")
        assert status == 500 and doc == {"error": "internal error: RuntimeError: the collector broke", "status": 500}
        assert "RuntimeError: the collector broke" in capfd.readouterr().err  # the operator gets the traceback
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_json_is_printed_where_it_means_something_and_refused_elsewhere(env, capsys, monkeypatch):
    from torch_neuronx.observer import cli

    monkeypatch.setenv("TORCH_NEURONX_STATE_DIR", env["TORCH_NEURONX_STATE_DIR"])
    for command, hint in ((["top", "--json"], "`nobs monitor` prints the same as JSON lines"),
                          (["serve", "--json"], "its API answers JSON on its own")):
        with pytest.raises(SystemExit) as e:
            cli.main(command)
        assert e.value.code == 2 and hint in capsys.readouterr().err
    assert cli.main(["monitor", "--json", "--interval", "0.05", "--count", "1"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert [d["health"] for d in json.loads(line)["devices"]] == ["healthy"] * 4
    assert cli.main(["status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["healthy"] == 4
    with pytest.raises(SystemExit) as e:
        cli.main(["monitor", "--count", "0"])
    assert e.value.code == 2 and "--count must be positive" in capsys.readouterr().err


def test_top_runs_in_a_terminal(env, holders):
    pexpect = pytest.importorskip("pexpect")
    holders(env, device=2, mib=16)
    child = pexpect.spawn(sys.executable, ["-m", "torch_neuronx.observer", "top", "--interval", "0.3"],
                          env=env, encoding="utf-8", timeout=60, dimensions=(40, 160))
    child.expect("neuron:3")
    child.expect("healthy")
    child.send("q")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


# A reader in another pid namespace and a command line cut inside a character: more of what the
# observer must not trust is in test_observer_robustness.py.
def test_a_reader_in_another_pid_namespace_neither_counts_nor_deletes_a_live_process(env, holders):
    h = holders(env, device=0, fault="hbm_uncorrectable@1")
    path = os.path.join(env["TORCH_NEURONX_STATE_DIR"], f"{h.proc.pid}.json")
    # A monitoring sidecar: its own pid namespace and /proc, in which the holder's pid is not seen.
    r = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc"] + NOBS + ["status", "--json"],
                       capture_output=True, text=True, env=env, timeout=180)
    assert os.path.exists(path), "the reader deleted a live process's state"
    assert r.returncode == 1, r.stdout + r.stderr
    s = json.loads(r.stdout)
    assert (s["healthy"], s["unhealthy"], s["unknown"]) == (3, 0, 1), s
    assert s["processes"] == [] and s["unverified_processes"] == [h.proc.pid] and s["problems"] == []
    r = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc"] + NOBS + ["devices", "--json"],
                       capture_output=True, text=True, env=env, timeout=180)
    dev = {d["index"]: d for d in json.loads(r.stdout)["devices"]}
    assert dev[1]["health"] == "unknown" and "another pid namespace" in dev[1]["reasons"][0], dev[1]
    assert [p["pid"] for p in dev[0]["unverified_processes"]] == [h.proc.pid] and dev[0]["processes"] == []
    # Where the holder runs, its view is whole.
    s = nobs_json(env, "status", code=1)
    assert (s["unhealthy"], s["processes"], s["unverified_processes"]) == (1, [h.proc.pid], [])
    assert "intact" in h.finish()


def test_a_command_line_cut_inside_a_character_leaves_the_state_readable(env, holders):
    # The runtime keeps 200 bytes of the command line: pad so that byte 199 starts a two-byte "é".
    prefix = len(sys.executable.encode()) + len(" -c ")
    comment = "#" + "x" * ((198 - prefix) % 2) + "é" * 100 + "\n"
    h = holders(env, device=0, script=comment + HOLDER)
    s = nobs_json(env, "status")
    assert (s["healthy"], s["processes"], s["problems"]) == (4, [h.proc.pid], [])
    with open(os.path.join(env["TORCH_NEURONX_STATE_DIR"], f"{h.proc.pid}.json"), "rb") as f:
        command = json.loads(f.read().decode("utf-8"))["command"]  # strict: whole characters only
    assert command == f"{sys.executable} -c {comment}".encode()[:199].decode(), command[-8:]
    assert "intact" in h.finish()
