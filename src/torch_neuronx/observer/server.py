"""`nobs serve`: read-only HTTP on 127.0.0.1:7001 unless told otherwise. /healthz (the server is up),
/readyz (ready once the first collection is done), /version, /v1/devices, /v1/health and /metrics
(Prometheus text, names prefixed neuron_). Only GET and HEAD; any other method gets 405. Every
error, malformed requests included, is answered as JSON: {"error": "...", "status": code}."""
from __future__ import annotations

import json
import sys
import threading
import time
import traceback
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import cli, state

_MAX_PATH = 256


class Collector:
    """Samples the published state every `interval` seconds on a thread of its own."""

    def __init__(self, interval: float):
        self.interval = interval
        self.count, self.props = cli.topology()
        self.lock = threading.Lock()
        self.devices, self.problems, self.collected_at = None, [], None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="nobs-collector", daemon=True)
        self.thread.start()

    def _loop(self):
        previous, last = state.read(), time.monotonic()
        while not self.stop.wait(self.interval if self.devices is not None else 0.2):
            snap, now = state.read(), time.monotonic()
            devices = state.devices(snap, self.count, self.props, previous, now - last)
            with self.lock:
                self.devices, self.problems, self.collected_at = devices, snap.problems, time.time()
            previous, last = snap, now

    def current(self):
        with self.lock:
            return self.devices, self.problems, self.collected_at


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
            devices, problems, at = collector.current()
            if path == "/healthz":
                return self._send(200, {"status": "ok"})
            if path == "/readyz":
                return self._send(200 if at else 503, {"ready": at is not None})
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


def run(args) -> int:
    collector = Collector(interval=1.0)
    server = ThreadingHTTPServer((args.host, args.port), handler_for(collector))
    print(f"nobs serve: http://{args.host}:{server.server_address[1]}/ (Ctrl-C stops)", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        collector.stop.set()
        server.server_close()
    return 0
