"""The loop's periodic duties (``Duty``) and the one schedule that says when each is due."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


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
