"""Prometheus metrics, liveness/readiness, and the /metrics /healthz /readyz HTTP server.

The only module that imports ``prometheus_client``. Every ``Metrics`` owns a fresh
private registry, so two instances (two tests, two agents) never share state.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gfd.errors import ConfigError

log = logging.getLogger(__name__)

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
"""Content type of ``/metrics``: the classic Prometheus text exposition format."""

DURATION_BUCKETS: Final[tuple[float, ...]] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip
"""Histogram buckets for cycle and discovery durations, 1 ms … 30 s (then +Inf)."""

EVENT_BUCKETS: Final[tuple[float, ...]] = (
    0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
"""Event to publish: the 100 ms coalescing window plus one cycle is the expected case."""

CYCLE_RESULTS: Final = ("published", "unchanged", "error")
CHANGE_KINDS: Final = ("added", "changed", "removed")


class Metrics:
    """All gfd metrics on one private registry (a fresh registry per instance)."""

    def __init__(self, *, version: str) -> None:
        self._registry: Any = CollectorRegistry(auto_describe=True)
        reg = self._registry
        self._cycles: Any = Counter(
            "gfd_cycles",
            "Discovery/publish cycles completed, by result (published, unchanged, error).",
            ["result"],
            registry=reg,
        )
        self._cycle_seconds: Any = Histogram(
            "gfd_cycle_duration_seconds",
            "Wall time of one whole cycle: discover, label, validate, publish.",
            buckets=DURATION_BUCKETS,
            registry=reg,
        )
        self._discovery_seconds: Any = Histogram(
            "gfd_discovery_duration_seconds",
            "Wall time spent reading the GPUs (NVML, nvidia-smi, host files).",
            buckets=DURATION_BUCKETS,
            registry=reg,
        )
        self._labels_published: Any = Gauge(
            "gfd_labels_published",
            "Number of labels gfd holds at the publish target after the last publish.",
            registry=reg,
        )
        self._label_changes: Any = Counter(
            "gfd_label_changes",
            "Label keys added, changed or removed at the publish target.",
            ["kind"],
            registry=reg,
        )
        self._last_publish: Any = Gauge(
            "gfd_last_publish_timestamp_seconds",
            "Unix time of the last successful publish.",
            registry=reg,
        )
        self._rejected: Any = Counter(
            "gfd_labels_rejected",
            "Labels not published because they failed validation, by reason (api-server: "
            "refused by the API server, the published value kept).",
            ["reason"],
            registry=reg,
        )
        self._errors: Any = Counter(
            "gfd_errors",
            "Errors by where they happened (discovery, publish, config, ...).",
            ["kind"],
            registry=reg,
        )
        self._api_requests: Any = Counter(
            "gfd_api_requests",
            "Kubernetes API requests by verb and HTTP status code ('error': no response).",
            ["verb", "code"],
            registry=reg,
        )
        self._gpus: Any = Gauge(
            "gfd_gpus",
            "GPUs found on this node at the last discovery, by model.",
            ["model"],
            registry=reg,
        )
        self._nvml_up: Any = Gauge(
            "gfd_nvml_up",
            "1 if NVML answered at the last discovery, 0 if it failed.",
            registry=reg,
        )
        self._degraded: Any = Gauge(
            "gfd_degraded_facts",
            "GPUs whose fact NVML could not give at the last discovery, by fact and state: "
            "held (the last good value is used) or unknown (its labels are left out).",
            ["fact", "state"],
            registry=reg,
        )
        self._degraded_series: set[tuple[str, str]] = set()
        self._events: Any = Counter(
            "gfd_events",
            "Changes watchers saw, by source (nvml, config, output, api) and kind "
            "(mig-config-change, xid, gpu-unavailable, changed, drift, deleted, ...).",
            ["source", "kind"],
            registry=reg,
        )
        self._event_seconds: Any = Histogram(
            "gfd_event_to_publish_seconds",
            "From a watcher seeing a change to the end of the cycle that published for it.",
            ["source"],
            buckets=EVENT_BUCKETS,
            registry=reg,
        )
        self._repairs: Any = Counter(
            "gfd_drift_repairs",
            "Times gfd rewrote its labels because someone else changed or removed them, by "
            "target (output: the feature file; api: the Node or NodeFeature object).",
            ["target"],
            registry=reg,
        )
        self._reconnects: Any = Counter(
            "gfd_watch_reconnects",
            "Watches re-established at the API server, by reason (timeout, dropped, "
            "expired, error).",
            ["reason"],
            registry=reg,
        )
        build_info: Any = Gauge(
            "gfd_build_info",
            "Always 1; the version label says which gfd is running.",
            ["version"],
            registry=reg,
        )
        build_info.labels(version=version).set(1)
        # Known label values start at 0 so rate() and dashboards see them from the start.
        for result in CYCLE_RESULTS:
            self._cycles.labels(result=result)
        for kind in CHANGE_KINDS:
            self._label_changes.labels(kind=kind)
        for target in ("output", "api"):
            self._repairs.labels(target=target)
        self._gpu_models: set[str] = set()
        self._gpu_lock = threading.Lock()

    def cycle(self, result: str, seconds: float) -> None:
        """Record one finished cycle: its result and how long it took."""
        self._cycles.labels(result=result).inc()
        self._cycle_seconds.observe(seconds)

    def discovery(self, seconds: float) -> None:
        """Record how long reading the GPUs took."""
        self._discovery_seconds.observe(seconds)

    def published(
        self, labels: int, *, added: int, changed: int, removed: int, when: float
    ) -> None:
        """Record a successful publish of ``labels`` labels at Unix time ``when``."""
        self._labels_published.set(labels)
        for kind, count in (("added", added), ("changed", changed), ("removed", removed)):
            if count:
                self._label_changes.labels(kind=kind).inc(count)
        self._last_publish.set(when)

    def rejected(self, reason: str, count: int = 1) -> None:
        """Count labels dropped by validation (or refused by the API server) for ``reason``."""
        if count:
            self._rejected.labels(reason=reason).inc(count)

    def error(self, kind: str) -> None:
        """Count one error of ``kind`` (e.g. "discovery", "publish", "config")."""
        self._errors.labels(kind=kind).inc()

    def api_request(self, verb: str, code: str) -> None:
        """Count one API request; ``code`` is the HTTP status, or "error" for no response."""
        self._api_requests.labels(verb=verb, code=code).inc()

    def gpus(self, by_model: Mapping[str, int]) -> None:
        """Set the GPU count per model; models no longer present lose their series."""
        with self._gpu_lock:
            for model in self._gpu_models - by_model.keys():
                self._gpus.remove(model)
            for model, count in by_model.items():
                self._gpus.labels(model=model).set(count)
            self._gpu_models = set(by_model)

    def nvml_up(self, up: bool) -> None:
        """Record whether NVML answered at the last discovery."""
        self._nvml_up.set(1 if up else 0)

    def degraded(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Set the GPUs per (fact, state) with a degraded fact; series that cleared go away."""
        with self._gpu_lock:
            for series in self._degraded_series - counts.keys():
                self._degraded.remove(*series)
            for (fact, state), count in counts.items():
                self._degraded.labels(fact=fact, state=state).set(count)
            self._degraded_series = set(counts)

    def event(self, source: str, kind: str) -> None:
        """Count one change a watcher saw."""
        self._events.labels(source=source, kind=kind).inc()

    def event_handled(self, source: str, seconds: float) -> None:
        """A cycle published for a change seen ``seconds`` ago."""
        self._event_seconds.labels(source=source).observe(seconds)

    def drift_repaired(self, target: str) -> None:
        """A cycle rewrote what someone else had changed at ``target`` (output, api)."""
        self._repairs.labels(target=target).inc()

    def watch_reconnect(self, reason: str) -> None:
        """Count one re-established API watch."""
        self._reconnects.labels(reason=reason).inc()

    def render(self) -> bytes:
        """Every metric in the Prometheus text exposition format (version 0.0.4)."""
        out: bytes = generate_latest(self._registry)
        return out


class Health:
    """Liveness and readiness, shared between the agent loop and the HTTP server.

    Thread-safe (a lock); time comes from an injected clock.
    """

    def __init__(self, *, stuck_after: float, clock: Callable[[], float] = time.monotonic) -> None:
        if stuck_after <= 0:
            raise ValueError(f"stuck_after must be positive, got {stuck_after!r}")
        self._stuck_after = stuck_after
        self._clock = clock
        self._lock = threading.Lock()
        self._started: float | None = None
        self._published = False

    def cycle_started(self) -> None:
        """The agent loop began a cycle."""
        with self._lock:
            self._started = self._clock()

    def cycle_finished(self) -> None:
        """The agent loop finished a cycle (whatever its result)."""
        with self._lock:
            self._started = None

    def mark_published(self) -> None:
        """Labels have been published (readiness holds from now on)."""
        with self._lock:
            self._published = True

    def live(self) -> tuple[bool, str]:
        """False with a reason while a cycle has run longer than ``stuck_after`` seconds."""
        with self._lock:
            started = self._started
        if started is not None:
            running = self._clock() - started
            if running > self._stuck_after:
                return False, f"cycle running for {running:.0f}s (limit {self._stuck_after:g}s)"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        """True once labels have been published at least once."""
        with self._lock:
            published = self._published
        return (True, "ok") if published else (False, "no labels published yet")


class _HttpServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer that carries what its handlers serve."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], *, metrics: Metrics, health: Health) -> None:
        self.metrics = metrics
        self.health = health
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    """GET/HEAD /metrics, /healthz, /readyz; 404 for anything else."""

    server: _HttpServer

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def _answer(self, *, body: bool) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            try:
                payload = self.server.metrics.render()
            except Exception:  # a broken collector must not kill the server thread
                log.exception("rendering metrics failed")
                self._send(HTTPStatus.INTERNAL_SERVER_ERROR, b"error rendering metrics\n", body)
                return
            self._send(HTTPStatus.OK, payload, body, content_type=CONTENT_TYPE)
        elif path in ("/healthz", "/readyz"):
            health = self.server.health
            ok, reason = health.live() if path == "/healthz" else health.ready()
            status = HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE
            self._send(status, reason.encode() + b"\n", body)
        else:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", body)

    def _send(
        self,
        status: HTTPStatus,
        payload: bytes,
        body: bool,
        *,
        content_type: str = "text/plain; charset=utf-8",
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if body:
            self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)


class MetricsServer:
    """HTTP server on a daemon thread: /metrics, /healthz, /readyz; 404 otherwise."""

    def __init__(
        self, metrics: Metrics, health: Health, *, port: int, host: str = "0.0.0.0"
    ) -> None:
        self._metrics = metrics
        self._health = health
        self._host = host
        self._port = port
        self._server: _HttpServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Bind the port and serve on a daemon thread (ConfigError if it cannot be bound)."""
        with self._lock:
            if self._server is not None:
                raise RuntimeError("MetricsServer already started")
            try:
                server = _HttpServer(
                    (self._host, self._port), metrics=self._metrics, health=self._health
                )
            except OSError as exc:
                raise ConfigError(
                    f"--metrics-port {self._port}: cannot listen on {self._host}:{self._port}: "
                    f"{exc.strerror or exc} (another process may hold the port: choose a free "
                    "one, or 0 to serve no metrics)") from exc
            self._server = server
            self._thread = threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": 0.1},
                name="gfd-metrics-http",
                daemon=True,
            )
            self._thread.start()
        log.info("serving /metrics /healthz /readyz on %s:%d", self._host, self.port)

    @property
    def port(self) -> int:
        """The bound port once started (``port=0`` binds a free one); the requested one before."""
        server = self._server
        if server is None:
            return self._port
        return int(server.server_address[1])

    def stop(self) -> None:
        """Shut down and close the socket; idempotent (and harmless if never started)."""
        with self._lock:
            server, thread = self._server, self._thread
            self._server = self._thread = None
        if server is None or thread is None:
            return
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
