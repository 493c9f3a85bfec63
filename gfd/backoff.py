"""Capped exponential backoff with jitter, shared by the agent loop and the API sinks."""

from __future__ import annotations

from collections.abc import Callable

BACKOFF_START = 1.0


def backoff(failures: int, cap: float, rand: Callable[[], float] | None = None,
            start: float = BACKOFF_START) -> float:
    """Delay before retry number ``failures`` (1-based): ``start * 2^(n-1)`` capped at ``cap``,
    with full-step jitter in [50 %, 100 %] so a fleet does not retry in lockstep."""
    if rand is None:
        import random  # (imported on the first retry, not on every start)

        rand = random.random
    step = min(cap, start * float(2 ** max(failures - 1, 0)))
    return step * (0.5 + 0.5 * rand())
