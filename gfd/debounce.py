"""One call put off: at most one pending call, run later on a timer thread; ``close`` ends it.

Two owners use it: the config watch (a burst of changes -> one ``settled`` trigger, the quiet
period after the last: :meth:`Debounce.restart`) and an API sink's drift (a repair that waits,
and is not put off further by the drifts seen meanwhile: :meth:`Debounce.start`). Thread-safe:
the owners call it from their watch threads, the timer runs the action on its own, and a
call cancelled, replaced or closed before its time never runs -- even one whose timer has
already fired and waits for the lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class Debounce:
    """At most one pending call (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._closed = False

    @property
    def pending(self) -> bool:
        """A call is waiting for its time."""
        with self._lock:
            return self._timer is not None

    @property
    def closed(self) -> bool:
        with self._lock:
            return self._closed

    def start(self, delay: float, action: Callable[[], None]) -> bool:
        """Run ``action`` in ``delay`` seconds, unless a call is already pending (it keeps its
        time) or this was closed; whether it was scheduled."""
        with self._lock:
            if self._closed or self._timer is not None:
                return False
            self._schedule(delay, action)
            return True

    def restart(self, delay: float, action: Callable[[], None]) -> bool:
        """Run ``action`` in ``delay`` seconds instead of any pending call (a debounce: a
        burst of restarts ends in one call, ``delay`` after the last); False once closed."""
        with self._lock:
            if self._closed:
                return False
            if self._timer is not None:
                self._timer.cancel()
            self._schedule(delay, action)
            return True

    def close(self) -> None:
        """Cancel the pending call; nothing is scheduled any more. Idempotent."""
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def _schedule(self, delay: float, action: Callable[[], None]) -> None:
        timer = threading.Timer(delay, lambda: self._due(timer, action))
        timer.daemon = True
        self._timer = timer
        timer.start()

    def _due(self, timer: threading.Timer, action: Callable[[], None]) -> None:
        with self._lock:
            if self._timer is not timer:
                return  # cancelled, replaced or closed while this timer was firing
            self._timer = None
        action()
