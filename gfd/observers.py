"""What the agent's loop reports, split by what it reports on: each cycle's outcome, what the
node's snapshot shows, the watchers' triggers, and the loop's liveness. ``metrics.Metrics``
hears the first three (``Observer``), ``metrics.Health`` the last; here too is how one
published cycle becomes those reports."""

from __future__ import annotations

from typing import Protocol

from gfd.facts.gpus import model_groups
from gfd.facts.gpus import unhealthy as unhealthy_gpus
from gfd.labelers.pipeline import Labelling
from gfd.sinks.base import PublishResult
from gfd.snapshot import Snapshot


class CycleObserver(Protocol):
    """Each cycle's outcome: how long it took, what it published, refused, or failed at."""

    def cycle(self, result: str, seconds: float) -> None: ...
    def discovery(self, seconds: float) -> None: ...
    def published(self, labels: int, *, added: int, changed: int, removed: int,
                  when: float) -> None: ...
    def rejected(self, reason: str, count: int = 1) -> None: ...
    def error(self, kind: str) -> None: ...


class NodeObserver(Protocol):
    """What the snapshot of a published cycle shows about the node's GPUs."""

    def gpus(self, by_model: dict[str, int]) -> None: ...
    def nvml_up(self, up: bool) -> None: ...
    def unhealthy(self, count: int) -> None: ...
    def resource_manager(self, name: str) -> None: ...
    def degraded(self, counts: dict[tuple[str, str], int]) -> None: ...


class TriggerObserver(Protocol):
    """The watchers' triggers: seen, handled (event to publish), drift repaired, a watcher
    that died."""

    def event(self, source: str, kind: str) -> None: ...
    def event_handled(self, source: str, seconds: float) -> None: ...
    def drift_repaired(self, target: str) -> None: ...
    def watcher_died(self, source: str) -> None: ...


class Observer(CycleObserver, NodeObserver, TriggerObserver, Protocol):
    """Everything the loop counts (``metrics.Metrics``)."""


class HealthState(Protocol):
    """The loop's liveness and readiness (``metrics.Health``): when it will turn next, when a
    cycle runs, and that labels were published."""

    def idle_until(self, at: float) -> None: ...
    def cycle_started(self) -> None: ...
    def cycle_finished(self) -> None: ...
    def mark_published(self) -> None: ...


def rejections(labelling: Labelling, result: PublishResult) -> dict[str, int]:
    """How many labels were dropped, by reason: gfd's own checks, and ``api-server`` for
    those the API server refused (their published values kept)."""
    reasons: dict[str, int] = {}
    for rejection in labelling.rejected:
        reasons[rejection.reason] = reasons.get(rejection.reason, 0) + 1
    if result.rejected:
        reasons["api-server"] = reasons.get("api-server", 0) + len(result.rejected)
    return reasons


def report_published(observer: CycleObserver, labelling: Labelling, result: PublishResult, *,
                     read: float, took: float, when: float) -> None:
    """A cycle that published (or found its target unchanged): ``read`` and ``took`` seconds
    for its read and for all of it, ``when`` on the wall clock."""
    observer.discovery(read)
    observer.cycle("published" if result.written else "unchanged", took)
    change = result.change
    observer.published(len(labelling.labels), added=len(change.added),
                       changed=len(change.changed), removed=len(change.removed), when=when)
    for reason, count in rejections(labelling, result).items():
        observer.rejected(reason, count)


def report_node(observer: NodeObserver, snapshot: Snapshot) -> None:
    """The GPUs by model, NVML, the unhealthy GPUs, the resource manager and the facts a GPU
    holds or does not know, as the published snapshot shows them."""
    observer.gpus({g.name: len(g.gpus) for g in model_groups(snapshot)})
    observer.nvml_up(snapshot.nvml_available)
    observer.unhealthy(len(unhealthy_gpus(snapshot)))
    observer.resource_manager(snapshot.resource_manager.name)
    degraded: dict[tuple[str, str], int] = {}
    for gpu in snapshot.gpus:
        for d in gpu.degraded:
            state = (d.fact, "held" if d.held else "unknown")
            degraded[state] = degraded.get(state, 0) + 1
    observer.degraded(degraded)
