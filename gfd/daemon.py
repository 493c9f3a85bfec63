"""The agent loop: read -> label -> validate -> publish, every interval, with reload,
capped exponential backoff on errors, and errors logged once per distinct cause.

A cycle publishes everything or nothing: labels are computed whole before the sink
is called, and a failed read publishes nothing (the last published labels stay).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from gfd.backoff import backoff
from gfd.errors import ConfigError, GfdError, NvmlInitError, PublishError
from gfd.labelers.inventory import model_groups
from gfd.labelers.options import LabelOptions
from gfd.labelers.pipeline import Labelling, compute_labels
from gfd.sinks.base import PublishResult, Sink
from gfd.snapshot import Snapshot

log = logging.getLogger(__name__)

BACKOFF_CAP = 300.0


class SnapshotSource(Protocol):
    fail_on_init_error: bool

    def read(self) -> Snapshot: ...

    def close(self) -> None: ...


@runtime_checkable
class Refreshable(Protocol):
    def refresh(self) -> None:
        """Re-read slowly changing facts at the next read (on SIGHUP)."""
        ...


class OptionsSource(Protocol):
    """Label options that may change at run time (config file content, SIGHUP)."""

    def poll(self, *, force: bool) -> LabelOptions | None:
        """New options when the config changed (or ``force``), else None.
        Raises ConfigError when the new config is invalid."""
        ...


class Observer(Protocol):
    """What the loop reports to (metrics.Metrics satisfies it)."""

    def cycle(self, result: str, seconds: float) -> None: ...
    def discovery(self, seconds: float) -> None: ...
    def published(self, labels: int, *, added: int, changed: int, removed: int,
                  when: float) -> None: ...
    def rejected(self, reason: str, count: int = 1) -> None: ...
    def error(self, kind: str) -> None: ...
    def gpus(self, by_model: dict[str, int]) -> None: ...
    def nvml_up(self, up: bool) -> None: ...


class HealthState(Protocol):
    def cycle_started(self) -> None: ...
    def cycle_finished(self) -> None: ...
    def mark_published(self) -> None: ...


@dataclass(slots=True)
class Signals:
    """Flags set by signal handlers (in cli.py) and a single event that wakes the loop."""

    wake: threading.Event = field(default_factory=threading.Event)
    stop: bool = False
    reload: bool = False

    def request_stop(self) -> None:
        self.stop = True
        self.wake.set()

    def request_reload(self) -> None:
        self.reload = True
        self.wake.set()


@dataclass(slots=True)
class Agent:
    """One gfd agent: owns the current label options and the error bookkeeping."""

    source: SnapshotSource
    sink: Sink
    options: LabelOptions
    reloader: OptionsSource | None = None
    observer: Observer | None = None
    health: HealthState | None = None
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    _last_error: str = field(default="", init=False)
    _config_error: str = field(default="", init=False)
    _warnings: frozenset[str] = field(default=frozenset(), init=False)
    _cycles: int = field(default=0, init=False)
    failures: int = field(default=0, init=False)

    def _report_error(self, kind: str, exc: GfdError) -> None:
        message = str(exc)
        if message != self._last_error:
            log.error("%s", message)
            self._last_error = message
        else:
            log.debug("still failing: %s", message)
        if self.observer:
            self.observer.error(kind)

    def _config_refused(self, message: str) -> None:
        """A refused config keeps the last good one; reported once until the config changes."""
        if message != self._config_error:
            log.error("%s", message)
            self._config_error = message
        if self.observer:
            self.observer.error("config")

    def _candidate_options(self, force: bool) -> LabelOptions | None:
        if self.reloader is None:
            return None
        try:
            return self.reloader.poll(force=force)
        except ConfigError as exc:
            self._config_refused(f"{exc}; keeping the last good config")
            return None

    def label(self, snapshot: Snapshot, candidate: LabelOptions | None) -> Labelling:
        """Labels for a snapshot; a new config that cannot label it is refused."""
        if candidate is not None:
            try:
                labelling = compute_labels(snapshot, candidate)
            except ConfigError as exc:
                self._config_refused(f"new config refused: {exc}; keeping the last good one")
            else:
                log.info("config reloaded")
                self._config_error = ""
                self.options = candidate
                return labelling
        return compute_labels(snapshot, self.options)

    def cycle(self, *, force_reload: bool = False) -> bool:
        """One read-label-publish pass. True when labels are published (or unchanged)."""
        first = self._cycles == 0
        self._cycles += 1
        start = self.clock()
        if self.health:
            self.health.cycle_started()
        if force_reload and isinstance(self.source, Refreshable):
            self.source.refresh()
        try:
            candidate = self._candidate_options(force_reload)
            snapshot = self.source.read()
            read_done = self.clock()
            labelling = self.label(snapshot, candidate)
            result = self.sink.publish(labelling.labels)
        except NvmlInitError as exc:
            if first and self.source.fail_on_init_error:
                raise
            self._failed("discovery", exc, start)
            return False
        except PublishError as exc:
            self._failed("publish", exc, start)
            return False
        except ConfigError as exc:
            if first:
                raise
            self._failed("config", exc, start)
            return False
        except GfdError as exc:
            self._failed("discovery", exc, start)
            return False
        finally:
            if self.health:
                self.health.cycle_finished()
        self._succeeded(snapshot, labelling, result, start, read_done)
        return True

    def _failed(self, kind: str, exc: GfdError, start: float) -> None:
        self.failures += 1
        self._report_error(kind, exc)
        if self.observer:
            self.observer.cycle("error", self.clock() - start)

    def _succeeded(self, snapshot: Snapshot, labelling: Labelling, result: PublishResult,
                   start: float, read_done: float) -> None:
        if self._last_error:
            log.info("recovered: labels published again")
            self._last_error = ""
        current = frozenset(labelling.warnings) | {r.message for r in labelling.rejected}
        for warning in sorted(current - self._warnings):
            log.warning("%s", warning)
        self._warnings = current
        self.failures = 0
        change = result.change
        if not change.empty:
            log.info("labels changed: %s: %s", change.summary(), " ".join(
                [f"+{k}" for k in change.added] + [f"~{k}" for k in change.changed]
                + [f"-{k}" for k in change.removed]))
        elif result.written:
            log.debug("labels unchanged; expiry refreshed")
        else:
            log.debug("labels unchanged")
        if self.health:
            self.health.mark_published()
        obs = self.observer
        if obs:
            obs.discovery(read_done - start)
            obs.cycle("published" if result.written else "unchanged", self.clock() - start)
            obs.published(len(labelling.labels), added=len(change.added),
                          changed=len(change.changed), removed=len(change.removed),
                          when=self.wall())
            reasons: dict[str, int] = {}
            for rejection in labelling.rejected:
                reasons[rejection.reason] = reasons.get(rejection.reason, 0) + 1
            for reason, count in reasons.items():
                obs.rejected(reason, count)
            obs.gpus({g.name: len(g.gpus) for g in model_groups(snapshot)})
            obs.nvml_up(snapshot.nvml_available)

    def run(self, signals: Signals, *, interval: float | None, oneshot: bool = False) -> int:
        """Label until stopped. Returns the exit code (0: stopped by a signal or oneshot done)."""
        try:
            while True:
                force = signals.reload
                signals.reload = False
                started = self.clock()
                ok = self.cycle(force_reload=force)
                if oneshot:
                    return 0 if ok else 1
                if signals.stop:
                    return 0
                if ok:
                    # start to start: a change waits at most one interval, whatever a cycle took
                    delay = None if interval is None else max(
                        0.0, interval - (self.clock() - started))
                else:
                    delay = backoff(self.failures, interval if interval else BACKOFF_CAP)
                    log.debug("retrying in %.1fs", delay)
                signals.wake.wait(timeout=delay)
                signals.wake.clear()
                if signals.stop:
                    return 0
        finally:
            self.source.close()
