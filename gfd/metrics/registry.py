"""gfd's Prometheus metrics: every metric's definition on one private registry, and what each
agent event records in it. The only module that imports ``prometheus_client``. Every
``Metrics`` owns a fresh private registry, so two instances (two tests, two agents) never
share state."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

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


@dataclass(frozen=True, slots=True, kw_only=True)
class Family:
    """One metric family as /metrics shows it: its name, kind, help text, label names and, for
    a histogram, its buckets."""

    name: str
    kind: Literal["counter", "gauge", "histogram"]
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()


FAMILIES: Final[tuple[Family, ...]] = (
    Family(name="gfd_cycles", kind="counter", labels=("result",),
           help="Discovery/publish cycles completed, by result (published, unchanged, error)."),
    Family(name="gfd_cycle_duration_seconds", kind="histogram", buckets=DURATION_BUCKETS,
           help="Wall time of one whole cycle: discover, label, validate, publish."),
    Family(name="gfd_discovery_duration_seconds", kind="histogram", buckets=DURATION_BUCKETS,
           help="Wall time spent reading the GPUs (NVML, nvidia-smi, host files)."),
    Family(name="gfd_labels_published", kind="gauge",
           help="Number of labels gfd holds at the publish target after the last publish."),
    Family(name="gfd_label_changes", kind="counter", labels=("kind",),
           help="Label keys added, changed or removed at the publish target."),
    Family(name="gfd_last_publish_timestamp_seconds", kind="gauge",
           help="Unix time of the last successful publish."),
    Family(name="gfd_labels_rejected", kind="counter", labels=("reason",),
           help=("Labels not published because they failed validation, by reason (api-server: "
                 "refused by the API server, the published value kept).")),
    Family(name="gfd_errors", kind="counter", labels=("kind",),
           help="Errors by where they happened (discovery, publish, config, ...)."),
    Family(name="gfd_api_requests", kind="counter", labels=("verb", "code"),
           help="Kubernetes API requests by verb and HTTP status code ('error': no response)."),
    Family(name="gfd_gpus", kind="gauge", labels=("model",),
           help="GPUs found on this node at the last discovery, by model."),
    Family(name="gfd_nvml_up", kind="gauge",
           help="1 if NVML answered at the last discovery, 0 if it failed."),
    Family(name="gfd_resource_manager", kind="gauge", labels=("manager",),
           help=("1 for the resource manager the labels were computed for at the last "
                 "discovery (device-plugin or dra; --resource-manager, or what auto found), 0 "
                 "for the other.")),
    Family(name="gfd_degraded_facts", kind="gauge", labels=("fact", "state"),
           help=("GPUs whose fact NVML could not give at the last discovery, by fact and state: "
                 "held (the last good value is used) or unknown (its labels are left out).")),
    Family(name="gfd_gpus_unhealthy", kind="gauge",
           help=("GPUs that answered NVML with a fatal error ('GPU is lost') or had a critical Xid "
                 "or GPU-unavailable event, at the last discovery (gfd's gpu.unhealthy).")),
    Family(name="gfd_cycle_running_seconds", kind="gauge",
           help=("How long the cycle in progress has run (0 between cycles); /healthz fails past "
                 "--stuck-after.")),
    Family(name="gfd_stuck_after_seconds", kind="gauge",
           help=("The agent's --stuck-after: /healthz fails when gfd_cycle_running_seconds "
                 "passes it.")),
    Family(name="gfd_events", kind="counter", labels=("source", "kind"),
           help=("Changes watchers saw, by source (nvml, config, output, api, registry) and kind "
                 "(mig-config-change, xid, gpu-unavailable, changed, drift, deleted, "
                 "registration, ...).")),
    Family(name="gfd_event_to_publish_seconds", kind="histogram", labels=("source",),
           buckets=EVENT_BUCKETS,
           help="From a watcher seeing a change to the end of the cycle that published for it."),
    Family(name="gfd_drift_repairs", kind="counter", labels=("target",),
           help=("Times gfd rewrote its labels because someone else changed or removed them, by "
                 "target (output: the feature file; api: the Node or NodeFeature object).")),
    Family(name="gfd_watch_reconnects", kind="counter", labels=("reason",),
           help=("Watches re-established at the API server, by reason (timeout, dropped, "
                 "expired, error).")),
    Family(name="gfd_watcher_failures", kind="counter", labels=("watcher",),
           help=("Watcher threads that died of an unexpected error, by watcher (nvml, config, "
                 "output, api); each one's duty went back to polling.")),
    Family(name="gfd_kube_events", kind="counter", labels=("reason", "result"),
           help=("Kubernetes Events on the Node by reason (GpuLost, LabelPublishFailing, ...) and "
                 "result: created, patched (a repeat counted), throttled (over the per-reason "
                 "rate, counted in the next one), dropped (the send queue was full), failed (the "
                 "API server refused it, or did not answer for 15 minutes).")),
    Family(name="gfd_build_info", kind="gauge", labels=("version",),
           help="Always 1; the version label says which gfd is running."),
)
"""Every metric gfd exports, in the order /metrics lists them (``_total`` is added to a
counter's name by the client)."""


_KINDS: Final[dict[str, Any]] = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}


def _register(family: Family, registry: Any) -> Any:
    """``family``'s metric on ``registry``."""
    extra: dict[str, Any] = {"buckets": family.buckets} if family.buckets else {}
    return _KINDS[family.kind](family.name, family.help, family.labels, registry=registry,
                               **extra)


class Metrics:
    """All gfd metrics on one private registry (a fresh registry per instance)."""

    def __init__(self, *, version: str) -> None:
        self._registry: Any = CollectorRegistry(auto_describe=True)
        self._family: dict[str, Any] = {
            family.name: _register(family, self._registry) for family in FAMILIES}
        """Each family's metric, by name."""
        self._family["gfd_build_info"].labels(version=version).set(1)
        # Known label values start at 0 so rate() and dashboards see them from the start.
        for result in CYCLE_RESULTS:
            self._family["gfd_cycles"].labels(result=result)
        for kind in CHANGE_KINDS:
            self._family["gfd_label_changes"].labels(kind=kind)
        for target in ("output", "api"):
            self._family["gfd_drift_repairs"].labels(target=target)
        for watcher in SOURCES:
            self._family["gfd_watcher_failures"].labels(watcher=watcher)
        self._degraded_series: set[tuple[str, str]] = set()
        self._gpu_models: set[str] = set()
        self._gpu_lock = threading.Lock()

    def cycle(self, result: str, seconds: float) -> None:
        """Record one finished cycle: its result and how long it took."""
        self._family["gfd_cycles"].labels(result=result).inc()
        self._family["gfd_cycle_duration_seconds"].observe(seconds)

    def discovery(self, seconds: float) -> None:
        """Record how long reading the GPUs took."""
        self._family["gfd_discovery_duration_seconds"].observe(seconds)

    def published(
        self, labels: int, *, added: int, changed: int, removed: int, when: float
    ) -> None:
        """Record a successful publish of ``labels`` labels at Unix time ``when``."""
        self._family["gfd_labels_published"].set(labels)
        for kind, count in (("added", added), ("changed", changed), ("removed", removed)):
            if count:
                self._family["gfd_label_changes"].labels(kind=kind).inc(count)
        self._family["gfd_last_publish_timestamp_seconds"].set(when)

    def rejected(self, reason: str, count: int = 1) -> None:
        """Count labels dropped by validation (or refused by the API server) for ``reason``."""
        if count:
            self._family["gfd_labels_rejected"].labels(reason=reason).inc(count)

    def error(self, kind: str) -> None:
        """Count one error of ``kind`` (e.g. "discovery", "publish", "config")."""
        self._family["gfd_errors"].labels(kind=kind).inc()

    def api_request(self, verb: str, code: str) -> None:
        """Count one API request; ``code`` is the HTTP status, or "error" for no response."""
        self._family["gfd_api_requests"].labels(verb=verb, code=code).inc()

    def gpus(self, by_model: Mapping[str, int]) -> None:
        """Set the GPU count per model; models no longer present lose their series."""
        with self._gpu_lock:
            for model in self._gpu_models - by_model.keys():
                self._family["gfd_gpus"].remove(model)
            for model, count in by_model.items():
                self._family["gfd_gpus"].labels(model=model).set(count)
            self._gpu_models = set(by_model)

    def unhealthy(self, count: int) -> None:
        """Record how many GPUs are unhealthy (lost, or a critical Xid)."""
        self._family["gfd_gpus_unhealthy"].set(count)

    def follow(self, health: Health) -> None:
        """Export how long the cycle in progress has run, read from ``health`` at scrape, and
        the limit ``health`` holds it to (the one /healthz uses, so an alert agrees)."""
        self._family["gfd_cycle_running_seconds"].set_function(health.running)
        self._family["gfd_stuck_after_seconds"].set(health.stuck_after)

    def nvml_up(self, up: bool) -> None:
        """Record whether NVML answered at the last discovery."""
        self._family["gfd_nvml_up"].set(1 if up else 0)

    def resource_manager(self, name: str) -> None:
        """Record the resource manager of the last discovery (one series per manager)."""
        for manager in RESOURCE_MANAGERS:
            self._family["gfd_resource_manager"].labels(manager=manager).set(
                1 if manager == name else 0)

    def degraded(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Set the GPUs per (fact, state) with a degraded fact; series that cleared go away."""
        with self._gpu_lock:
            for series in self._degraded_series - counts.keys():
                self._family["gfd_degraded_facts"].remove(*series)
            for (fact, state), count in counts.items():
                self._family["gfd_degraded_facts"].labels(fact=fact, state=state).set(count)
            self._degraded_series = set(counts)

    def event(self, source: str, kind: str) -> None:
        """Count one change a watcher saw."""
        self._family["gfd_events"].labels(source=source, kind=kind).inc()

    def event_handled(self, source: str, seconds: float) -> None:
        """A cycle published for a change seen ``seconds`` ago."""
        self._family["gfd_event_to_publish_seconds"].labels(source=source).observe(seconds)

    def drift_repaired(self, target: str) -> None:
        """A cycle rewrote what someone else had changed at ``target`` (output, api)."""
        self._family["gfd_drift_repairs"].labels(target=target).inc()

    def watcher_died(self, source: str) -> None:
        """Count one watcher thread that died (its duty is polled from now on)."""
        self._family["gfd_watcher_failures"].labels(watcher=source).inc()

    def watch_reconnect(self, reason: str) -> None:
        """Count one re-established API watch."""
        self._family["gfd_watch_reconnects"].labels(reason=reason).inc()

    def kube_event(self, reason: str, result: str) -> None:
        """Count one Event gfd recorded (or did not) on the Node."""
        self._family["gfd_kube_events"].labels(reason=reason, result=result).inc()

    def render(self) -> bytes:
        """Every metric in the Prometheus text exposition format (version 0.0.4)."""
        out: bytes = generate_latest(self._registry)
        return out
