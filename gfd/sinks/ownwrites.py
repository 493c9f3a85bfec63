"""An API sink's own writes as its watch sees them: a read that raced one, and their echo.

The sink writes on the loop's thread; its ``ObjectWatch`` reads and watches the object on a
thread of its own. Two things the watch reports are not drift, and this is the one place
both sinks tell them (as client-go's reflector keeps its store the one place where a relist
meets the writes around it):

- the state a read (the watch's LIST, at start and after a 410) reports when a write of
  gfd's was in flight as the read began, or started before the state was looked at: the
  read may show the object from before that write, and the write repairs whatever it shows;
- the echo of a write of gfd's (an event carrying a resourceVersion gfd's write was
  answered with), however late it arrives.

Thread-safe: the loop's thread calls :meth:`writing` and :meth:`wrote`, the watch thread
:meth:`listing`, :meth:`raced` and :meth:`echo`.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

OWN_VERSIONS = 16
"""resourceVersions of its own writes a sink remembers, to know their echo from the watch."""


def resource_version(obj: dict[str, Any]) -> str:
    """The object's ``metadata.resourceVersion`` ("" without one)."""
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class OwnWrites:
    """The writes one sink made, counted and remembered for its watch's sake."""

    def __init__(self, remember: int = OWN_VERSIONS) -> None:
        self._lock = threading.Lock()
        self._started = 0
        """Writes started (a run of attempts counts once: it is in flight throughout)."""
        self._in_flight = False
        self._listed_at: int | None = None
        """``_started`` as the watch's read began; -1: a write was in flight then; None: no
        read waiting to be reported."""
        self._versions: deque[str] = deque(maxlen=remember)

    @contextmanager
    def writing(self) -> Iterator[None]:
        """On the loop's thread, around a write (or a run of attempts at one)."""
        with self._lock:
            self._started += 1
            self._in_flight = True
        try:
            yield
        finally:
            with self._lock:
                self._in_flight = False

    def wrote(self, answer: dict[str, Any]) -> None:
        """The server answered a write of gfd's with ``answer``: its echo is no drift."""
        with self._lock:
            self._versions.append(resource_version(answer))

    def listing(self) -> None:
        """On the watch thread, just before it reads the object (``ObjectWatch``'s
        ``on_list``): which writes that read may miss."""
        with self._lock:
            self._listed_at = -1 if self._in_flight else self._started

    def raced(self) -> bool:
        """On the watch thread, for each state it reports: True when it is a read's that a
        write of gfd's was in flight for, or that one started after (the write repairs
        whatever it shows). Answers once per read: later states are the watch's events."""
        with self._lock:
            listed, self._listed_at = self._listed_at, None
            return listed is not None and listed != self._started

    def echo(self, obj: dict[str, Any]) -> bool:
        """``obj`` is the object as one of gfd's own writes left it."""
        with self._lock:
            return resource_version(obj) in self._versions
