"""Time without waiting: a settable clock and a sleep that only records what it was asked."""

from __future__ import annotations


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
