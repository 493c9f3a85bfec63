"""Drift at the API server: turns "the object gfd published changed under it" into a trigger
for the loop, at once -- and keeps gfd out of a fight with another writer.

An API sink's watch (``objectwatch.ObjectWatch``) reports each new state of the object; the
sink decides whether it drifted from what gfd published and calls :meth:`Drift.report`. The
first repairs go out at once (the loop coalesces a burst into one cycle). Another controller
that keeps rewriting gfd's labels would make that a loop of writes, so a drift seen again
within :data:`FIGHT_WINDOW` of the last repair waits, doubling from one second up to
:data:`FIGHT_CAP`, and is said once: the labels are repaired, but never faster than that.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from gfd.backoff import backoff
from gfd.debounce import Debounce
from gfd.logs import Once
from gfd.sinks.objectwatch import WATCHED_RESYNC, Kind, ObjectWatch, Reason, WatchApi
from gfd.triggers import Fire, Trigger, died

log = logging.getLogger(__name__)

FIGHT_WINDOW = 30.0
"""Seconds: a drift this soon after the last one counts as the same writer again."""
FREE_REPAIRS = 2
"""Drifts in a row repaired at once before backing off."""
FIGHT_CAP = 300.0
"""The longest wait before repairing a drift that keeps coming back."""


class Drift:
    """Fires ``api`` triggers for one sink's object (thread-safe: the watch thread reports)."""

    def __init__(self, fire: Fire, target: str, action: Callable[[], None], *,
                 clock: Callable[[], float] = time.monotonic,
                 rand: Callable[[], float] = random.random) -> None:
        self._fire = fire
        self._target = target
        self._action = action
        self._clock = clock
        self._rand = rand
        self._lock = threading.Lock()
        self._last = -FIGHT_WINDOW
        self._in_a_row = 0
        self._repair = Debounce()
        """The repair that waits while another writer keeps changing the object."""
        self._once = Once(log)

    def report(self, kind: str, detail: str) -> None:
        """The object drifted (``kind``: changed, deleted, replaced): repair it."""
        with self._lock:
            if self._repair.closed:
                return
            now = self._clock()
            self._in_a_row = self._in_a_row + 1 if now - self._last < FIGHT_WINDOW else 1
            self._last = now
            if self._in_a_row <= FREE_REPAIRS:
                self._once.reset()
                self._fire(Trigger(source="api", kind=kind, at=now, action=self._action,
                                   detail=detail))
                return
            if self._repair.pending:
                return  # a repair is already scheduled
            delay = backoff(self._in_a_row - FREE_REPAIRS, FIGHT_CAP, self._rand)
            self._once.warning("%s keeps being changed by another writer (%d times in a row); "
                               "repairing it at most every %.0fs", self._target,
                               self._in_a_row, FIGHT_CAP, key="fight")
            self._repair.start(delay, lambda: self._fire(Trigger(
                source="api", kind=kind, at=self._clock(), action=self._action, detail=detail)))

    def close(self) -> None:
        self._repair.close()


class Watched:
    """An API sink's watch on its own object and the drift it reports: asked for by the sink's
    ``watch()``, opened once the sink has published (``published()``), consulted by its
    ``refresh()`` (the resync rule), stopped by ``close()``.

    Why only then: the watch's first read shows the object as it was before gfd wrote it, and
    that is not drift -- read before gfd's first write, it would cost a phantom repair (a read
    and a write per node per start). Read after it, it shows gfd's labels."""

    def __init__(self) -> None:
        self._watcher: ObjectWatch | None = None
        self._drift: Drift | None = None
        self._asked: Callable[[], None] | None = None
        self._published = False

    @property
    def active(self) -> bool:
        """Started and not closed: drift is reported."""
        return self._drift is not None

    def start(self, fire: Fire, api: WatchApi, kind: Kind, name: str, *, namespace: str = "",
              target: str, on_change: Callable[[dict[str, Any] | None], None],
              action: Callable[[], None],
              on_reconnect: Callable[[Reason], None] | None,
              on_list: Callable[[], None] | None = None) -> None:
        """Watch the object (once), from the sink's first publish on: ``on_change`` decides
        whether it drifted and calls :meth:`report`; ``action`` is what the trigger runs on
        the loop's thread."""
        if self._watcher is not None or self._asked is not None:
            return

        def begin() -> None:
            self._drift = Drift(fire, target, action)
            self._watcher = ObjectWatch(
                api, kind, name, namespace=namespace, on_change=on_change,
                on_reconnect=on_reconnect, on_list=on_list,
                on_death=lambda why: fire(died("api", why, time.monotonic())))
            self._watcher.start()

        self._asked = begin
        if self._published:
            self.published()

    def published(self) -> None:
        """The sink's object holds what gfd wrote (or found in sync): open the watch if asked."""
        self._published = True
        begin, self._asked = self._asked, None
        if begin is not None:
            begin()

    def report(self, kind: str, detail: str) -> None:
        if self._drift is not None:
            self._drift.report(kind, detail)

    def resync_due(self, since_last: float) -> bool:
        """Whether the resync duty should rewrite now, ``since_last`` seconds after the last
        one: always without a healthy watch, else once every ``WATCHED_RESYNC``."""
        healthy = self._watcher is not None and self._watcher.healthy
        return not healthy or since_last >= WATCHED_RESYNC

    def close(self) -> None:
        self._asked = None
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None
        if self._drift is not None:
            self._drift.close()
            self._drift = None
