"""Time without waiting: a settable clock, a sleep that only records what it was asked, and
simulated time for the agent loop."""

from __future__ import annotations

from typing import Any

from gfd.triggers import Trigger


class Clock:
    """A clock that stands still until the test moves it (``clock.now += 10``)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Sleeps(list[float]):
    """A ``sleep`` that never sleeps: it appends each delay it is given."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


class LoopTime:
    """Simulated time for ``daemon.Agent.run``: stands in for ``Signals.wake`` so that each
    wait moves ``clock`` by its timeout instead of waiting (and is recorded in ``waits``); a
    wait that reaches ``until`` (or has no timeout) stops the loop. ``sleep`` moves the
    clock too (for the sinks' retry sleeps)."""

    def __init__(self, clock: Clock, signals: Any, until: float) -> None:
        self.clock = clock
        self.signals = signals
        self.until = until
        self.waits: list[float | None] = []
        signals.wake = self

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        if timeout is None or self.clock.now + timeout >= self.until:
            self.signals.stop = True
            return True
        self.clock.now += timeout
        return False

    def set(self) -> None:
        pass

    def clear(self) -> None:
        pass

    def sleep(self, seconds: float) -> None:
        self.clock.now += seconds


class BusyTime(LoopTime):
    """Simulated time in a busy neighbourhood, in steps of 0.1 s: at each step ``neighbour``
    does its part (a watcher firing, a file written beside the config), every second an
    ``api`` watch event arrives, every 7 s a SIGHUP; each of them may wake the loop early."""

    def __init__(self, clock: Clock, signals: Any, until: float) -> None:
        super().__init__(clock, signals, until)
        self.ticks = 0

    def neighbour(self, now: float) -> None:
        """What happens beside gfd at every step (nothing here)."""

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        step = 0.1 if timeout is None else min(timeout, 0.1)
        if self.clock.now + step >= self.until:
            self.signals.stop = True
            return True
        self.clock.now += step
        self.ticks += 1
        now = self.clock.now
        self.neighbour(now)
        if self.ticks % 10 == 0:
            self.signals.fire(Trigger(source="api", kind="changed", at=now))
        if self.ticks % 70 == 0:
            self.signals.request_reload()
        return True
