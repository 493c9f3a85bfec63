"""A cycle's deadline for its API work: opened by the agent loop, what is left of it is the
opening thread's alone, spent is 0.0, closed is no limit."""

from __future__ import annotations

import threading

from helpers.timing import Clock

from gfd.budget import Budget


def test_what_is_left_counts_down_from_the_opening_to_zero() -> None:
    clock = Clock()
    budget = Budget(clock=clock)
    assert budget.left() is None, "no cycle: no limit"
    budget.open(1.5)
    assert budget.left() == 1.5 and budget.seconds == 1.5
    clock.now += 1.0
    assert budget.left() == 0.5
    clock.now += 1.0
    assert budget.left() == 0.0, "spent, never negative"
    budget.close()
    assert budget.left() is None
    assert budget.seconds == 1.5, "messages may still name it"


def test_another_thread_has_no_limit_from_the_cycle() -> None:
    budget = Budget(clock=Clock())
    budget.open(0.0)
    seen: list[float | None] = []
    other = threading.Thread(target=lambda: seen.append(budget.left()))
    other.start()
    other.join(timeout=30)
    assert seen == [None]
    assert budget.left() == 0.0


def test_each_opening_starts_anew() -> None:
    clock = Clock()
    budget = Budget(clock=clock)
    budget.open(1.0)
    clock.now += 5
    budget.open(2.0)
    assert budget.left() == 2.0

