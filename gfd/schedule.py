"""The loop's clock: the periodic duties (``Duty``) and the one schedule that says when each
is due; what woke the loop (``Wake``); and when the next label cycle runs (``Pace``), holding
what woke the loop while a failing API sink backs off."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gfd.triggers import Trigger


@dataclass(frozen=True, slots=True)
class Duty:
    """A periodic duty of the loop: ``action`` marks something stale, then a cycle runs."""

    name: str
    every: float
    action: Callable[[], None]


class Schedule:
    """When each periodic duty is next due, on the loop's monotonic clock."""

    def __init__(self) -> None:
        self._duties: dict[str, Duty] = {}
        self._due: dict[str, float] = {}

    def set(self, duties: tuple[Duty, ...], now: float) -> None:
        """Adopt these duties; one that keeps its name and interval keeps its due time."""
        due = {}
        for duty in duties:
            old = self._duties.get(duty.name)
            keep = old is not None and old.every == duty.every
            due[duty.name] = self._due[duty.name] if keep else now + duty.every
        self._duties = {d.name: d for d in duties}
        self._due = due

    def next_due(self) -> float | None:
        return min(self._due.values(), default=None)

    def pop_due(self, now: float) -> list[Duty]:
        """The duties due at ``now``, each rescheduled one interval later."""
        ready = [self._duties[name] for name, at in sorted(self._due.items()) if at <= now]
        for duty in ready:
            self._due[duty.name] = now + duty.every
        return ready


@dataclass(frozen=True, slots=True)
class Wake:
    """What woke the loop in one turn: the watchers' triggers, SIGHUP, a duty that ran."""

    triggers: tuple[Trigger, ...] = ()
    sighup: bool = False
    """Re-read the config and every GPU's static facts, even if unchanged."""
    config_changed: bool = False
    """A trigger asked for the config file to be read (its watcher saw it change)."""
    duty: bool = False

    def __bool__(self) -> bool:
        return bool(self.triggers or self.sighup or self.config_changed or self.duty)

    def __or__(self, other: Wake) -> Wake:
        return Wake(self.triggers + other.triggers, sighup=self.sighup or other.sighup,
                    config_changed=self.config_changed or other.config_changed,
                    duty=self.duty or other.duty)


@dataclass(slots=True)
class Pace:
    """When the next label cycle is due, and what waits for it while a failing API sink backs
    off: that backoff is then the only clock, and what woke the loop (a file, a watch event,
    a duty, SIGHUP) joins the retry's cycle."""

    next_cycle: float | None
    """On the loop's monotonic clock; None: only a wake-up starts a cycle."""
    held: Wake = field(default_factory=Wake)

    def admit(self, wake: Wake, now: float, *, api_backoff: bool) -> Wake | None:
        """Why a cycle runs now (with what was held for it), or None: nothing woke the loop
        and no cycle is due, or ``api_backoff`` holds what woke it until the retry."""
        due = self.next_cycle is not None and now >= self.next_cycle
        if wake and api_backoff and self.next_cycle is not None and not due:
            self.held = self.held | wake
            return None
        if wake or due:
            taken, self.held = self.held | wake, Wake()
            return taken
        return None
