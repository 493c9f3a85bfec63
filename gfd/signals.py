"""Signals and wake-ups: the self-pipe the agent's loop sleeps on, what signal handlers
record (a stop, a count of SIGHUPs), and the triggers watchers fire from their threads,
coalesced so that a burst becomes one cycle. Nothing here knows the loop."""

from __future__ import annotations

import math
import os
import select
import signal
import threading
from dataclasses import dataclass, field

from gfd.triggers import Trigger

COALESCE = 0.1
"""Seconds the loop waits after a trigger for others to join it: one cycle for a burst
(a MIG reconfiguration fires an event per GPU; a config swap touches several files)."""


class Wakeup:
    """What the loop sleeps on: a self-pipe. ``set`` writes a byte (from a watcher thread,
    or from a signal handler: no lock is taken, so a signal that lands while the loop is
    inside ``wait`` or ``clear`` cannot block it); ``install`` also makes the interpreter's
    C-level handler write to it (``signal.set_wakeup_fd``), so a signal wakes a ``select``
    that would otherwise be retried with the handler's flag unseen."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        for fd in (self._read, self._write):
            os.set_blocking(fd, False)
        self._installed = False
        self._previous = -1

    def set(self) -> None:
        if self._write < 0:
            return
        try:
            os.write(self._write, b"\0")
        except (BlockingIOError, InterruptedError):
            pass  # the pipe is full: the loop is woken already
        except OSError:
            pass  # closed: the loop has ended

    def wait(self, timeout: float | None = None) -> bool:
        """Sleep until set or ``timeout`` seconds; True when woken (the byte stays unread)."""
        if self._read < 0:
            return True
        poller = select.poll()  # not select(): it fails past fd 1024
        poller.register(self._read, select.POLLIN)
        try:
            return bool(poller.poll(None if timeout is None else max(0, math.ceil(timeout * 1000))))
        except OSError:  # closed under the wait
            return True

    def is_set(self) -> bool:
        return self.wait(0)

    def clear(self) -> None:
        try:
            while os.read(self._read, 4096):
                pass
        except (BlockingIOError, InterruptedError, OSError):
            pass

    def install(self) -> None:
        """Signals wake the loop even between its check of the flags and its sleep (call on
        the main thread, where Python runs handlers)."""
        self._previous = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._installed = True

    def close(self) -> None:
        if self._installed:
            signal.set_wakeup_fd(self._previous)
            self._installed = False
        fds, self._read, self._write = (self._read, self._write), -1, -1
        for fd in fds:  # never written again: the number may be reused by another file
            if fd >= 0:
                os.close(fd)


@dataclass(slots=True)
class Signals:
    """What signal handlers (in cli.py) record, the triggers watchers fire (from their
    threads), and the self-pipe that wakes the loop.

    A handler runs on the loop's own thread between any two bytecodes, so it only stores:
    ``stop`` (the signal's number), and one more in ``reloads``. The loop never resets the
    count; it remembers how many it has seen (``take_reload``), so a SIGHUP that lands
    between reading and acknowledging is still a reload."""

    wake: Wakeup = field(default_factory=Wakeup)
    stop: int | bool = False
    reloads: int = 0
    _reloads_seen: int = 0
    _triggers: list[Trigger] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def request_stop(self, signum: int = 0) -> None:
        self.stop = signum or True
        self.wake.set()

    def request_reload(self) -> None:
        self.reloads += 1
        self.wake.set()

    @property
    def reload(self) -> bool:
        """A reload was asked for and not yet taken."""
        return self.reloads != self._reloads_seen

    def take_reload(self) -> int:
        """How many reloads were asked for since the last take (handlers only add)."""
        seen = self.reloads
        new, self._reloads_seen = seen - self._reloads_seen, seen
        return new

    def close(self) -> None:
        self.wake.close()

    def fire(self, trigger: Trigger) -> None:
        """A watcher saw a change (thread-safe)."""
        with self._lock:
            self._triggers.append(trigger)
        self.wake.set()

    def take(self, now: float, window: float = COALESCE) -> tuple[list[Trigger], float | None]:
        """The pending triggers once the first is ``window`` old (and the time that will be,
        while it is younger): a burst becomes one cycle."""
        with self._lock:
            if not self._triggers:
                return [], None
            ready_at = min(t.at for t in self._triggers) + window
            if now < ready_at:
                return [], ready_at
            taken, self._triggers = self._triggers, []
        return taken, None
