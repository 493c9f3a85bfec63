"""Liveness and readiness: what ``/healthz`` and ``/readyz`` answer, kept by the agent loop."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


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
        self._turn_by: float | None = None
        self._published = False

    @property
    def stuck_after(self) -> float:
        """Seconds a cycle may run, or the loop be late to wake, before liveness fails."""
        return self._stuck_after

    def idle_until(self, at: float) -> None:
        """The agent loop sleeps and will turn again by ``at`` (on this clock)."""
        with self._lock:
            self._turn_by = at

    def cycle_started(self) -> None:
        """The agent loop began a cycle."""
        with self._lock:
            self._started = self._clock()
            self._turn_by = None

    def cycle_finished(self) -> None:
        """The agent loop finished a cycle (whatever its result)."""
        with self._lock:
            self._started = None

    def mark_published(self) -> None:
        """Labels have been published (readiness holds from now on)."""
        with self._lock:
            self._published = True

    def running(self) -> float:
        """Seconds the cycle in progress has run; 0.0 between cycles."""
        with self._lock:
            started = self._started
        return 0.0 if started is None else max(0.0, self._clock() - started)

    def live(self) -> tuple[bool, str]:
        """False with a reason while a cycle has run longer than ``stuck_after`` seconds, or
        the loop has not turned ``stuck_after`` seconds past the time it was due to."""
        with self._lock:
            started, turn_by = self._started, self._turn_by
        now = self._clock()
        if started is not None:
            running = now - started
            if running > self._stuck_after:
                return False, f"cycle running for {running:.0f}s (limit {self._stuck_after:g}s)"
        elif turn_by is not None and now - turn_by > self._stuck_after:
            return False, (f"agent loop has not turned for {now - turn_by:.0f}s past its "
                           f"wake-up (limit {self._stuck_after:g}s)")
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        """True once labels have been published at least once."""
        with self._lock:
            published = self._published
        return (True, "ok") if published else (False, "no labels published yet")
