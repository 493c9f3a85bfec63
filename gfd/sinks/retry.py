"""The API sinks' request retry policy: 429, 5xx and lost connections, with jittered backoff."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from gfd.backoff import backoff
from gfd.budget import Budget
from gfd.errors import ApiError

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(slots=True)
class Retry:
    """Retries 429, 5xx and connection errors with jittered backoff, honouring Retry-After.

    Conflicts (409) are not retried here: the sinks re-read and retry them themselves.
    After ``attempts`` the error goes up, the cycle fails, and the agent backs off (growing
    to minutes while it lasts), so one retry here is enough: it rides out a blip, and an
    outage costs two requests per cycle, not four.

    ``budget``: the cycle's deadline for its API work (``gfd.budget``); a retry whose wait
    would reach it is not made, the error goes up at once.
    """

    attempts: int = 2
    cap: float = 30.0
    sleep: Callable[[float], None] = time.sleep
    rand: Callable[[], float] = field(default=random.random)
    budget: Budget | None = None

    def run(self, operation: Callable[[], T]) -> T:
        for attempt in range(1, self.attempts + 1):
            try:
                return operation()
            except ApiError as exc:
                if not exc.retriable or attempt == self.attempts:
                    raise
                delay = exc.retry_after if exc.retry_after is not None else backoff(
                    attempt, self.cap, self.rand, start=0.5)
                delay = min(delay, self.cap)
                left = self.budget.left() if self.budget is not None else None
                if left is not None and delay >= left:
                    log.debug("API request failed (%s); no retry: %.2fs left of the cycle's "
                              "API budget", exc, left)
                    raise
                log.debug("API request failed (%s); retry %d in %.2fs", exc, attempt, delay)
                self.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover
