"""`nobs serve`: read-only HTTP on 127.0.0.1:7001 unless told otherwise. /healthz (the server is up),
/readyz (ready while the last collection is recent), /version, /v1/devices, /v1/health and
/metrics (Prometheus text, names prefixed neuron_). Only GET and HEAD; any other method gets 405.
Every error, malformed requests included, is answered as JSON: {"error": "...", "status": code}.
One request per connection (HTTP/1.0); a client has _REQUEST_S to send its request, and a fixed
number of threads serve every client, however many connect."""
from __future__ import annotations

import io
import json
import selectors
import socket
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler

from . import cli, state

_MAX_PATH = 256
_REQUEST_S = 5.0  # from connecting to the end of the request head
_MAX_HEAD = 16 << 10  # bytes of request line and headers
_MAX_PENDING = 1024  # connections still sending their request; past it the oldest is dropped
_WORKERS = 4  # threads that answer complete requests


class Collector:
    """Samples the published state every `interval` seconds on a thread of its own. A collection
    that fails is retried the next interval (the thread outlives any error); data older than
    `stale_after` seconds makes /readyz answer 503."""

    def __init__(self, interval: float):
        self.interval = interval
        self.stale_after = 3 * interval + 2.0
        self.count, self.props = cli.topology()
        self.lock = threading.Lock()
        self.devices, self.problems, self.collected_at, self.error = None, [], None, None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="nobs-collector", daemon=True)
        self.thread.start()

    def _loop(self):
        previous = last = None
        while True:
            try:
                snap, now = state.read(), time.monotonic()
                if previous is not None:  # utilization needs two samples
                    devices = state.devices(snap, self.count, self.props, previous, now - last)
                    with self.lock:
                        self.devices, self.problems, self.collected_at = devices, snap.problems, time.time()
                        self.error = None
                previous, last = snap, now
            except Exception as e:  # noqa: BLE001 (the operator gets the traceback; /readyz says stale)
                error = f"{type(e).__name__}: {e}"
                if error != self.error:  # once, not every interval
                    traceback.print_exc(file=sys.stderr)
                with self.lock:
                    self.error = error
            if self.stop.wait(self.interval if self.collected_at is not None else 0.2):
                return

    def current(self):
        with self.lock:
            return self.devices, self.problems, self.collected_at

    def readiness(self) -> dict:
        with self.lock:
            at, error = self.collected_at, self.error
        if at is None:
            return {"ready": False, "reason": "no collection yet" + (f" (it failed: {error})" if error else "")}
        age = time.time() - at
        if age > self.stale_after:
            return {"ready": False, "reason": f"the last collection is {age:.0f} s old" +
                    (f" (collecting fails: {error})" if error else "")}
        return {"ready": True}


def _metrics(collector: Collector) -> bytes:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

    devices, _, _ = collector.current()

    class Families:
        def collect(self):
            info = InfoMetricFamily("neuron_observer", "nobs serve")
            info.add_metric([], {"version": cli._version()})
            yield info
            gauges = {k: GaugeMetricFamily(f"neuron_device_{k}", h, labels=["device"]) for k, h in (
                ("memory_used_bytes", "device memory held by processes"),
                ("memory_total_bytes", "device memory of the logical core"),
                ("utilization_ratio", "share of the last interval in which the device's queues ran tasks"),
                ("processes", "processes using the device"))}
            healthy = GaugeMetricFamily("neuron_device_health", "1 for the device's health status",
                                        labels=["device", "status"])
            counters = {k: CounterMetricFamily(f"neuron_device_{k}", h, labels=["device"]) for k, h in (
                ("tasks", "tasks the device's queues finished"), ("tasks_failed", "tasks that failed"),
                ("correctable_errors", "correctable HBM memory errors"),
                ("uncorrectable_errors", "uncorrectable HBM memory errors"))}
            for d in devices or []:
                label = [str(d["index"])]
                gauges["memory_used_bytes"].add_metric(label, d["memory_used"])
                gauges["memory_total_bytes"].add_metric(label, d["memory_total"])
                gauges["utilization_ratio"].add_metric(label, d["utilization"] or 0.0)
                gauges["processes"].add_metric(label, len(d["processes"]))
                for status in ("healthy", "unhealthy", "unknown"):
                    healthy.add_metric(label + [status], 1.0 if d["health"] == status else 0.0)
                counters["tasks"].add_metric(label, d["tasks"])
                counters["tasks_failed"].add_metric(label, d["failed"])
                counters["correctable_errors"].add_metric(label, d["correctable_errors"])
                counters["uncorrectable_errors"].add_metric(label, d["uncorrectable_errors"])
            yield from gauges.values()
            yield healthy
            yield from counters.values()

    registry = CollectorRegistry()
    registry.register(Families())
    return generate_latest(registry)


def handler_for(collector: Collector):
    class Handler(BaseHTTPRequestHandler):
        server_version = "nobs"
        # What a request is taken for until its request line parses. The stdlib's default, HTTP/0.9,
        # answers with neither a status line nor headers, so a malformed request's error would reach
        # the client as a bare body; every answer here has both.
        default_request_version = "HTTP/1.0"

        # A Server hands a request as (connection, its head as read, None) or, for a head that did
        # not arrive whole, (connection, b"", (status, why)): the body of a GET is never read.
        def setup(self):
            self.connection, head, self.refusal = self.request
            self.rfile = io.BytesIO(head)
            self.wfile = self.connection.makefile("wb")

        def handle(self):
            if self.refusal is None:
                return self.handle_one_request()
            self.command, self.request_version, self.requestline = None, self.default_request_version, ""
            self.send_error(*self.refusal)

        def finish(self):
            try:
                self.wfile.flush()
            except OSError:
                pass  # the client went away
            self.wfile.close()
            self.rfile.close()

        def log_message(self, *args):  # quiet: a health endpoint is polled
            pass

        def _send(self, code: int, body, content_type="application/json"):
            data = body if isinstance(body, bytes) else (json.dumps(body, indent=2) + "\n").encode()
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            if code == 405:
                self.send_header("Allow", "GET, HEAD")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _error(self, code: int, message: str):
            self._send(code, {"error": message, "status": code})

        def send_error(self, code, message=None, explain=None):
            """The stdlib calls this for what it refuses before a handler runs (a malformed request
            line or headers, an unknown method): the same JSON as every other error, not its HTML."""
            if code == HTTPStatus.NOT_IMPLEMENTED and self.command:
                # A method with no do_ handler (POST, PUT, an unknown one): the API is read-only.
                code, message = HTTPStatus.METHOD_NOT_ALLOWED, f"{self.command} is not allowed: the API is read-only"
            self.close_connection = True  # what follows a request it could not read cannot be trusted
            self._error(int(code), message or HTTPStatus(code).phrase)

        def do_GET(self):
            try:
                self._get()
            except ConnectionError:
                self.close_connection = True  # the client went away: nobody is left to answer
            except Exception as e:  # noqa: BLE001 (the client gets an answer; the operator the traceback)
                traceback.print_exc(file=sys.stderr)
                self.close_connection = True
                self._error(500, f"internal error: {type(e).__name__}: {e}")

        def _get(self):
            if len(self.path) > _MAX_PATH:
                return self._error(414, "request path too long")
            path = self.path.split("?", 1)[0]
            if path == "/healthz":
                return self._send(200, {"status": "ok"})
            if path == "/readyz":
                ready = collector.readiness()
                return self._send(200 if ready["ready"] else 503, ready)
            devices, problems, at = collector.current()
            if path == "/version":
                return self._send(200, {"version": cli._version(), "api": "v1"})
            if path in ("/v1/devices", "/v1/health") and at is None:
                return self._error(503, "no collection yet")
            if path == "/v1/devices":
                return self._send(200, {"collected_unix_s": at, "devices": devices, "problems": problems})
            if path == "/v1/health":
                worst = "healthy"
                for d in devices:
                    if d["health"] != "healthy":
                        worst = d["health"] if worst == "healthy" else worst
                return self._send(200, {"status": worst, "collected_unix_s": at, "devices": [
                    {"index": d["index"], "health": d["health"], "reasons": d["reasons"]} for d in devices]})
            if path == "/metrics":
                return self._send(200, _metrics(collector), "text/plain; version=0.0.4; charset=utf-8")
            return self._error(404, f"no such endpoint: {path[:64]}")

        do_HEAD = do_GET  # every other method reaches send_error as unsupported, and gets its 405

    return Handler


class Server:
    """One thread reads every connection's request head without blocking (a selector), so a client
    that sends slowly or not at all holds no thread; _WORKERS threads answer complete requests. A
    head not complete within _REQUEST_S gets 408, one larger than _MAX_HEAD 431."""

    def __init__(self, address, collector):
        self.handler = handler_for(collector)
        self.socket = socket.create_server(address, backlog=128)
        self.socket.setblocking(False)
        self.server_address = self.socket.getsockname()
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.socket, selectors.EVENT_READ)
        self.pending = {}  # connection -> [head so far, deadline], oldest first
        self.workers = ThreadPoolExecutor(_WORKERS, thread_name_prefix="nobs-http")
        self._stop, self._stopped = threading.Event(), threading.Event()
        self._stopped.set()  # shutdown() before serve_forever() has nothing to wait for

    def serve_forever(self):
        self._stopped.clear()
        try:
            while not self._stop.is_set():
                for key, _ in self.selector.select(timeout=0.5):
                    if key.fileobj is self.socket:
                        self._accept()
                    else:
                        self._read(key.fileobj)
                now = time.monotonic()
                for conn, (_, deadline) in list(self.pending.items()):
                    if deadline > now:
                        break  # the rest came later
                    self._answer(conn, (HTTPStatus.REQUEST_TIMEOUT, f"no whole request within {_REQUEST_S:g} s"))
        finally:
            self._stopped.set()

    def _accept(self):
        for _ in range(64):  # then back to the connections already open
            try:
                conn, _ = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of descriptors, or the client gave up: make room and go on serving
                if self.pending:
                    self._drop(next(iter(self.pending)))
                return
            if len(self.pending) >= _MAX_PENDING:
                self._drop(next(iter(self.pending)))  # the oldest: every request takes milliseconds to send
            conn.setblocking(False)
            self.pending[conn] = [b"", time.monotonic() + _REQUEST_S]
            self.selector.register(conn, selectors.EVENT_READ)

    def _read(self, conn):
        entry = self.pending.get(conn)
        if entry is None:
            return  # dropped to make room earlier in this round of events
        try:
            chunk = conn.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return self._drop(conn)
        if not chunk:
            return self._drop(conn)  # the client left before its request was whole
        entry[0] += chunk
        if b"\r\n\r\n" in entry[0] or b"\n\n" in entry[0]:
            self._answer(conn, None)
        elif len(entry[0]) > _MAX_HEAD:
            self._answer(conn, (HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, f"request head over {_MAX_HEAD} bytes"))

    def _release(self, conn) -> bytes:
        self.selector.unregister(conn)
        return self.pending.pop(conn)[0]

    def _drop(self, conn):
        self._release(conn)
        conn.close()

    def _answer(self, conn, refusal):
        head = self._release(conn)
        conn.setblocking(True)
        conn.settimeout(_REQUEST_S)  # a client that does not read its answer holds a worker no longer
        self.workers.submit(self._respond, conn, b"" if refusal else head, refusal)

    def _respond(self, conn, head, refusal):
        try:
            self.handler((conn, head, refusal), conn.getpeername(), self)
        except OSError:
            pass  # the client went away
        except Exception:  # noqa: BLE001 (the handler answers its own errors; this is the rest)
            traceback.print_exc(file=sys.stderr)
        finally:
            conn.close()

    def shutdown(self):
        self._stop.set()
        self._stopped.wait()

    def server_close(self):
        for conn in list(self.pending):
            self._drop(conn)
        self.selector.close()
        self.socket.close()
        self.workers.shutdown(wait=True)


def run(args) -> int:
    collector = Collector(interval=1.0)
    server = Server((args.host, args.port), collector)
    print(f"nobs serve: http://{args.host}:{server.server_address[1]}/ (Ctrl-C stops)", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        collector.stop.set()
        server.server_close()
    return 0
