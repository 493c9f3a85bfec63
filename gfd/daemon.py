"""The agent loop: read -> project (labels and features) -> publish, with one scheduler for
every periodic duty, reload that rebuilds what a new config changes, capped exponential
backoff on errors, and each distinct error logged once. Its clock is ``schedule``, what
wakes it ``signals``, what it runs ``parts`` and what it reports to ``observers``.

A cycle publishes everything or nothing: the labels and features (``projection.Projection``)
are computed whole before the sink is called, and a failed read publishes nothing (the last
published labels stay).

A reload is a transaction: the candidate parts (built by ``app.Reloader`` from the new
settings) must read and project the node (labels and features) before they replace the
running ones; a candidate
that cannot is refused with one line and closed, and the last good config stays.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gfd.backoff import BACKOFF_START, backoff
from gfd.budget import API_SHARE
from gfd.config import MIN_SLEEP_INTERVAL, changed
from gfd.errors import ApiSinkError, BackendInitError, ConfigError, GfdError, PublishError
from gfd.logs import Once, fields
from gfd.observers import HealthState, Observer, report_node, report_published
from gfd.parts import Parts, PartsSource, SnapshotSource
from gfd.projection import Projection, project
from gfd.schedule import Duty, Pace, Schedule, Wake
from gfd.settingkinds import format_duration
from gfd.signals import Signals
from gfd.sinks.base import Change, PublishResult, Sink
from gfd.snapshot import Snapshot
from gfd.triggers import WATCHER_DIED, Fire, Trigger

log = logging.getLogger(__name__)

BACKOFF_CAP = 300.0
"""Seconds: the longest pause between retries of a failing API sink (an --sleep-interval
longer than this is kept instead)."""


_FAILURES: tuple[tuple[type[GfdError], str], ...] = (
    (BackendInitError, "discovery"), (PublishError, "publish"), (ConfigError, "config"))
"""Where a cycle failed, by its error's class (the first that matches); any other error is a
failed read (``discovery``)."""


def _failure_kind(exc: GfdError) -> str:
    """``discovery``, ``publish`` or ``config``: the Events' and metrics' name for it."""
    return next((kind for cls, kind in _FAILURES if isinstance(exc, cls)), "discovery")


@dataclass(slots=True)
class Agent:
    """One gfd agent: owns its parts, the pending reload and the error bookkeeping."""

    parts: Parts
    reloader: PartsSource | None = None
    observer: Observer | None = None
    health: HealthState | None = None
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    config_watched: bool = False
    """A watcher fires a trigger when the config file changes: no per-cycle check needed."""
    rand: Callable[[], float] | None = None
    """The backoff's jitter (None: ``random.random``)."""
    failures: int = field(default=0, init=False)
    _api_failing: bool = field(default=False, init=False)
    _pending: Parts | None = field(default=None, init=False)
    _errors: Once = field(default_factory=lambda: Once(log), init=False)
    _refusals: Once = field(default_factory=lambda: Once(log), init=False)
    _notes: Once = field(default_factory=lambda: Once(log), init=False)
    """Said once for the agent's lifetime (per distinct key)."""
    _warnings: frozenset[str] = field(default=frozenset(), init=False)
    _cycles: int = field(default=0, init=False)
    _fire: Fire | None = field(default=None, init=False)
    _last_written: bool = field(default=False, init=False)
    _schedule: Schedule = field(default_factory=Schedule, init=False)
    _pace: Pace = field(default_factory=lambda: Pace(next_cycle=None), init=False)

    # -- reload ---------------------------------------------------------------------

    def _refuse(self, message: str) -> None:
        """A refused config keeps the last good one; reported once until the config changes."""
        self._refusals.error("%s", message)
        if self.observer:
            self.observer.error("config")

    def _poll_config(self, force: bool) -> None:
        if self.reloader is None:
            return
        try:
            candidate = self.reloader.poll(self.parts, force=force)
        except ConfigError as exc:
            self._refuse(f"{exc}; keeping the last good config")
            return
        if candidate is None:
            return
        if self._pending is not None:  # superseded by a newer file
            self._pending.close_new(self.parts)
            self._pending = None
        if candidate is not self.parts:
            self._pending = candidate

    def _refuse_pending(self, why: str) -> Parts:
        assert self._pending is not None
        self._refuse(f"new config refused: {why}; keeping the last good one")
        self._pending.close_new(self.parts)
        self._pending = None
        return self.parts

    def _apply(self, candidate: Parts) -> None:
        old = self.parts
        self.parts = candidate
        self._pending = None
        self._refusals.reset()
        if old.discovery is not candidate.discovery:
            old.discovery.close()
            self._watch(discovery=candidate.discovery)
        if old.sink is not candidate.sink:
            self._move_labels(old.sink, candidate.sink)
            old.sink.close()
            self._watch(sink=candidate.sink)
        if old.events is not None and old.events is not candidate.events:
            old.events.close()
        changes = "; ".join(candidate.changes) or "no setting changed"
        log.info("config reloaded: %s", changes, extra=fields(changes={
            e.name: {"from": e.spec.kind.render(getattr(old.settings, e.name)),
                     "to": e.spec.kind.render(getattr(candidate.settings, e.name))}
            for e in changed(old.settings, candidate.settings)},
            sharing_changed=old.settings.sharing != candidate.settings.sharing))

    def _watch(self, *, discovery: SnapshotSource | None = None,
               sink: Sink | None = None) -> None:
        """Start the watchers of parts now in use (a pending candidate's wait until applied)."""
        if self._fire is None:
            return
        if discovery is not None:
            discovery.watch(self._fire)
        if sink is not None:
            sink.watch(self._fire)

    def _move_labels(self, old: Sink, new: Sink) -> None:
        """The publish target moved: remove what gfd published at the old one (the new one
        holds the labels now), so two targets never feed the node diverging labels."""
        try:
            result = old.prune()
        except GfdError as exc:
            log.warning("labels now go to %s; removing them from %s failed: %s", new.name,
                        old.name, exc)
            return
        if result.written:
            log.info("labels moved from %s to %s", old.name, new.name)

    # -- one cycle ------------------------------------------------------------------

    def _read_and_project(self, parts: Parts) -> tuple[Snapshot, Projection, float]:
        snapshot = parts.discovery.read()
        read_done = self.clock()
        return snapshot, project(snapshot, parts.options), read_done

    def _projected(self, force_reload: bool,
                   reload_config: bool) -> tuple[Parts, Snapshot, Projection, float]:
        """Read and project with the pending candidate when there is one, else the running
        parts. A candidate whose new back end or new config cannot project the node (its
        labels and features) is refused."""
        if force_reload or reload_config or not self.config_watched:
            self._poll_config(force_reload)
        if force_reload:
            (self._pending or self.parts).discovery.refresh(gpus=True)
        candidate = self._pending
        if candidate is not None:
            try:
                return (candidate, *self._read_and_project(candidate))
            except ConfigError as exc:
                self._refuse_pending(str(exc))
            except GfdError as exc:
                if candidate.discovery is self.parts.discovery:
                    raise  # the running back end failed: an ordinary failed cycle
                self._refuse_pending(f"its GPU back end failed: {exc}")
        return (self.parts, *self._read_and_project(self.parts))

    def cycle(self, *, force_reload: bool = False, reload_config: bool = False) -> bool:
        """One read-label-publish pass. True when labels are published (or unchanged).
        ``force_reload``: SIGHUP (re-read the config and host facts even if unchanged);
        ``reload_config``: a watcher saw the config file change.

        Its API requests (the ResourceSlice LIST of a read, the sink's reads, writes and
        retries, a reload's prune of the old target) share one deadline, ``API_SHARE`` of
        --stuck-after from its start (``Parts.budget``, which every part built for this agent
        shares): however slowly the API server answers, the cycle ends before /healthz
        would call it stuck."""
        budget = self.parts.budget
        if budget is not None:
            budget.open(self.parts.settings.stuck_after * API_SHARE)
        try:
            return self._cycle(force_reload, reload_config)
        finally:
            if budget is not None:
                budget.close()

    def _cycle(self, force_reload: bool, reload_config: bool) -> bool:
        first = self._cycles == 0
        self._cycles += 1
        self._last_written = False
        start = self.clock()
        if self.health:
            self.health.cycle_started()
        try:
            parts, snapshot, projection, read_done = self._projected(force_reload, reload_config)
            result = parts.sink.publish(projection.labels, features=projection.features)
            self._last_written = result.written
        except GfdError as exc:
            kind = _failure_kind(exc)
            if first and (kind == "config" or (isinstance(exc, BackendInitError)
                                               and self.parts.discovery.fail_on_init_error)):
                raise  # gfd cannot start: a bad config, or --fail-on-init-error
            self._failed(kind, exc, start)
            return False
        finally:
            if self.health:
                self.health.cycle_finished()
        if parts is self._pending:
            self._apply(parts)
        self._succeeded(snapshot, projection, result, start, read_done)
        return True

    def _failed(self, kind: str, exc: GfdError, start: float) -> None:
        self.failures += 1
        self._api_failing = isinstance(exc, ApiSinkError)
        if not self._errors.error("%s", str(exc)):
            log.debug("still failing: %s", exc)
        if self.parts.events is not None:
            self.parts.events.failed(kind, str(exc))
        if self.observer:
            self.observer.error(kind)
            self.observer.cycle("error", self.clock() - start)

    def _succeeded(self, snapshot: Snapshot, projection: Projection, result: PublishResult,
                   start: float, read_done: float) -> None:
        labelling = projection.labelling
        if self._errors.reset():
            log.info("recovered: labels published again")
        current = frozenset(labelling.warnings) | {r.message for r in labelling.rejected}
        for warning in sorted(current - self._warnings):
            log.warning("%s", warning)
        self._warnings = current
        self.failures = 0
        change = result.change
        if not result.features.empty:
            self._log_change("features", result.features)
        if not change.empty:
            self._log_change("labels", change, labels=len(labelling.labels))
        elif result.written and result.features.empty:
            log.debug("labels unchanged; target refreshed")
        else:
            log.debug("labels unchanged")
        if self.health:
            self.health.mark_published()
        if self.parts.events is not None:
            self.parts.events.published(snapshot, labelling.labels, change)
        if self.observer:
            report_published(self.observer, labelling, result, read=read_done - start,
                             took=self.clock() - start, when=self.wall())
            report_node(self.observer, snapshot)

    def _log_change(self, what: str, change: Change, **counts: int) -> None:
        """``labels changed: +1 ~0 -0: +nvidia.com/...``, with the keys as log fields."""
        log.info("%s changed: %s: %s", what, change.summary(), " ".join(
            [f"+{k}" for k in change.added] + [f"~{k}" for k in change.changed]
            + [f"-{k}" for k in change.removed]), extra=fields(
            target=self.parts.sink.name, added=list(change.added),
            changed=list(change.changed), removed=list(change.removed),
            counts={"added": len(change.added), "changed": len(change.changed),
                    "removed": len(change.removed), **counts}))

    # -- the loop -------------------------------------------------------------------

    def _run_duty(self, duty: Duty) -> None:
        log.debug("%s due", duty.name)
        try:
            duty.action()
        except GfdError as exc:
            self._errors.error("%s: %s", duty.name, exc)
            if self.observer:
                self.observer.error("publish")

    def _delay_after(self, ok: bool, started: float) -> float | None:
        """Seconds until the next label cycle; None: only a duty or a signal starts one."""
        interval = self.parts.settings.sleep_interval
        if interval is not None and interval < MIN_SLEEP_INTERVAL:
            self._notes.warning(
                "sleep-interval %s is shorter than gfd's minimum; cycles start every %s (a "
                "shorter pause only burns CPU: changes in between are caught by the next read)",
                format_duration(interval), format_duration(MIN_SLEEP_INTERVAL),
                key=f"interval {interval}")
            interval = MIN_SLEEP_INTERVAL
        if ok:
            # start to start: a change waits at most one interval, whatever a cycle took
            return None if interval is None else max(0.0, interval - (self.clock() - started))
        if self._api_failing:
            # Every retry costs API requests, from every node at once in an outage: from one
            # interval, double each time up to minutes, whatever the interval.
            delay = backoff(self.failures, max(BACKOFF_CAP, interval or 0.0), self.rand,
                            start=interval or BACKOFF_START)
        else:  # a local failure (NVML, the disk): retried within one interval
            delay = backoff(self.failures, interval if interval else BACKOFF_CAP, self.rand)
        log.debug("retrying in %.1fs", delay)
        return delay

    def _api_backoff(self) -> bool:
        """The last cycle failed at the API server: its backoff is the loop's only clock."""
        return self.failures > 0 and self._api_failing

    def _woken(self, signals: Signals, now: float) -> tuple[Wake, float | None]:
        """Run the duties due and the triggers' actions; what woke the loop, and when the
        triggers still gathering will be ready (None: none)."""
        due = self._schedule.pop_due(now)
        for duty in due:
            self._run_duty(duty)
        triggers, triggers_at = signals.take(now)
        config_changed = self._handle(triggers)
        sighup = signals.take_reload() > 0
        if sighup:
            log.info("received SIGHUP: reloading the config")
        return Wake(tuple(triggers), sighup=sighup, config_changed=config_changed,
                    duty=bool(due)), triggers_at

    def _handle(self, triggers: list[Trigger]) -> bool:
        """Run the triggers' actions on this thread; True when one asks for a config read."""
        for trigger in triggers:
            log.debug("%s %s%s", trigger.source, trigger.kind,
                      f": {trigger.detail}" if trigger.detail else "")
            if self.observer:
                self.observer.event(trigger.source, trigger.kind)
            if trigger.kind == WATCHER_DIED:
                if self.observer:
                    self.observer.watcher_died(trigger.source)
                if trigger.source == "config":  # from now on, checked every cycle
                    self.config_watched = False
            if trigger.action is not None:
                trigger.action()
        return any(t.reload_config for t in triggers)

    def _handled(self, triggers: tuple[Trigger, ...], ok: bool) -> None:
        """Event-to-publish latency, and drift repaired (a trigger that made gfd write)."""
        if not self.observer or not ok:
            return
        done = self.clock()
        for trigger in triggers:
            self.observer.event_handled(trigger.source, done - trigger.at)
        if self._last_written:
            for target in sorted({t.source for t in triggers} & {"output", "api"}):
                self.observer.drift_repaired(target)

    def _paced(self, ok: bool, started: float, before: Parts) -> None:
        """After a cycle of the running loop: a reload's new duties join the schedule, and
        the next label cycle is set one interval on, or a backoff on after a failure."""
        if self.parts is not before:
            self._schedule.set(self.parts.duties, self.clock())
        delay = self._delay_after(ok, started)
        self._pace.next_cycle = None if delay is None else self.clock() + delay

    def _sleep(self, signals: Signals, triggers_at: float | None) -> None:
        """Until the next cycle, duty or gathered triggers, or a signal or trigger wakes the
        loop. Liveness fails --stuck-after past the wake-up, whatever stopped the loop; with
        nothing due it still turns every half --stuck-after to say it lives."""
        wake_at = min((t for t in (self._pace.next_cycle, self._schedule.next_due(), triggers_at)
                       if t is not None), default=None)
        now = self.clock()
        timeout = (self.parts.settings.stuck_after / 2 if wake_at is None
                   else max(0.0, wake_at - now))
        if self.health:
            self.health.idle_until(now + timeout)
        signals.wake.wait(timeout=timeout)
        signals.wake.clear()

    @staticmethod
    def _stopped(signals: Signals) -> int:
        name = (signal.Signals(signals.stop).name
                if not isinstance(signals.stop, bool) and signals.stop else "a stop request")
        log.info("received %s: exiting", name)
        return 0

    def _start(self, signals: Signals) -> None:
        """Schedule the duties, the first cycle now, and (unless oneshot) start the watchers.
        The API sinks open their watch only after their first publish, so that its first read
        sees what gfd published and is not taken for drift."""
        self._schedule = Schedule()
        self._schedule.set(self.parts.duties, self.clock())
        self._pace = Pace(next_cycle=self.clock())
        if not self.parts.settings.oneshot:
            self._fire = signals.fire
            self._watch(discovery=self.parts.discovery, sink=self.parts.sink)

    def _close(self) -> None:
        self._fire = None
        if self._pending is not None:
            self._pending.close_new(self.parts)
        self.parts.close()

    def run(self, signals: Signals) -> int:
        """Label until stopped. Returns the exit code (0: stopped by a signal or oneshot done).

        Every periodic duty (label cycle, host facts, resync, expiry refresh) is scheduled
        here; whichever is due first, a trigger from a watcher, or a signal wakes the loop.
        While the API fails, its backoff is the only clock (``schedule.Pace``)."""
        self._start(signals)
        try:
            while True:
                now = self.clock()
                wake, triggers_at = self._woken(signals, now)
                why = self._pace.admit(wake, now, api_backoff=self._api_backoff())
                if why is not None:
                    before = self.parts
                    ok = self.cycle(force_reload=why.sighup, reload_config=why.config_changed)
                    if self.parts.settings.oneshot:
                        return 0 if ok else 1
                    self._handled(why.triggers, ok)
                    if signals.stop:
                        return self._stopped(signals)
                    self._paced(ok, now, before)
                elif wake:
                    log.debug("held until the API retry in %.1fs",
                              (self._pace.next_cycle or now) - now)
                self._sleep(signals, triggers_at)
                if signals.stop:
                    return self._stopped(signals)
        finally:
            self._close()
