"""gfd's Prometheus metrics: every metric's definition on one private registry, and what each
agent event records in it. The only module that imports ``prometheus_client``. Every
``Metrics`` owns a fresh private registry, so two instances (two tests, two agents) never
share state."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gfd.metrics.health import Health
from gfd.snapshot import RESOURCE_MANAGERS
from gfd.triggers import SOURCES

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
        self._manager: Any = Gauge(
            "gfd_resource_manager",
            "1 for the resource manager the labels were computed for at the last discovery "
            "(device-plugin or dra; --resource-manager, or what auto found), 0 for the other.",
            ["manager"],
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
        self._unhealthy: Any = Gauge(
            "gfd_gpus_unhealthy",
            "GPUs that answered NVML with a fatal error ('GPU is lost') or had a critical Xid "
            "or GPU-unavailable event, at the last discovery (gfd's gpu.unhealthy).",
            registry=reg,
        )
        self._running: Any = Gauge(
            "gfd_cycle_running_seconds",
            "How long the cycle in progress has run (0 between cycles); /healthz fails past "
            "--stuck-after.",
            registry=reg,
        )
        self._stuck_after: Any = Gauge(
            "gfd_stuck_after_seconds",
            "The agent's --stuck-after: /healthz fails when gfd_cycle_running_seconds "
            "passes it.",
            registry=reg,
        )
        self._events: Any = Counter(
            "gfd_events",
            "Changes watchers saw, by source (nvml, config, output, api, registry) and kind "
            "(mig-config-change, xid, gpu-unavailable, changed, drift, deleted, "
            "registration, ...).",
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
        self._watcher_failures: Any = Counter(
            "gfd_watcher_failures",
            "Watcher threads that died of an unexpected error, by watcher (nvml, config, "
            "output, api); each one's duty went back to polling.",
            ["watcher"],
            registry=reg,
        )
        self._kube_events: Any = Counter(
            "gfd_kube_events",
            "Kubernetes Events on the Node by reason (GpuLost, LabelPublishFailing, ...) and "
            "result: created, patched (a repeat counted), throttled (over the per-reason "
            "rate, counted in the next one), dropped (the send queue was full), failed (the "
            "API server refused it, or did not answer for 15 minutes).",
            ["reason", "result"],
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
        for watcher in SOURCES:
            self._watcher_failures.labels(watcher=watcher)
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

    def unhealthy(self, count: int) -> None:
        """Record how many GPUs are unhealthy (lost, or a critical Xid)."""
        self._unhealthy.set(count)

    def follow(self, health: Health) -> None:
        """Export how long the cycle in progress has run, read from ``health`` at scrape, and
        the limit ``health`` holds it to (the one /healthz uses, so an alert agrees)."""
        self._running.set_function(health.running)
        self._stuck_after.set(health.stuck_after)

    def nvml_up(self, up: bool) -> None:
        """Record whether NVML answered at the last discovery."""
        self._nvml_up.set(1 if up else 0)

    def resource_manager(self, name: str) -> None:
        """Record the resource manager of the last discovery (one series per manager)."""
        for manager in RESOURCE_MANAGERS:
            self._manager.labels(manager=manager).set(1 if manager == name else 0)

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

    def watcher_died(self, source: str) -> None:
        """Count one watcher thread that died (its duty is polled from now on)."""
        self._watcher_failures.labels(watcher=source).inc()

    def watch_reconnect(self, reason: str) -> None:
        """Count one re-established API watch."""
        self._reconnects.labels(reason=reason).inc()

    def kube_event(self, reason: str, result: str) -> None:
        """Count one Event gfd recorded (or did not) on the Node."""
        self._kube_events.labels(reason=reason, result=result).inc()

    def render(self) -> bytes:
        """Every metric in the Prometheus text exposition format (version 0.0.4)."""
        out: bytes = generate_latest(self._registry)
        return out
