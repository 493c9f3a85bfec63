"""One deadline for a cycle's API work: the agent loop opens it, every request and retry wait
of that cycle takes its time from it, so no run of slow answers outlives --stuck-after."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

API_SHARE = 0.5
"""The part of --stuck-after a cycle's API requests share, counted from the cycle's start.
The rest is the margin that keeps /healthz at 200 when the last request fails at the
deadline: a loaded machine wakes the deadline's watchdog and the loop late, and the cycle
still has to log its failure and finish."""


class Budget:
    """The time left to the API work of the cycle in progress.

    ``open(seconds)`` starts a cycle's budget on the calling thread (the agent loop's);
    ``left()`` is what remains of it for a request made on that thread, and None on any other
    thread (the watch and Events threads, which never hold up a cycle) or while no budget is
    open (``gfd diff``, ``gfd prune``: each request keeps only its own deadline). Thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._until: float | None = None
        self._seconds = 0.0
        self._owner: int | None = None

    def open(self, seconds: float) -> None:
        """Give the API work the calling thread does from now on ``seconds`` in all."""
        with self._lock:
            self._until = self._clock() + seconds
            self._seconds = seconds
            self._owner = threading.get_ident()

    def close(self) -> None:
        """The cycle is over: requests are bound by their own deadline only again."""
        with self._lock:
            self._until = self._owner = None

    @property
    def seconds(self) -> float:
        """The whole budget last opened (for messages)."""
        return self._seconds

    def left(self) -> float | None:
        """Seconds left to the calling thread's API work (0.0 once spent); None: unbounded."""
        with self._lock:
            until, owner = self._until, self._owner
        if until is None or owner != threading.get_ident():
            return None
        return max(0.0, until - self._clock())
