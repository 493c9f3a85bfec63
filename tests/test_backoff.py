"""Capped exponential backoff with jitter (the agent loop and the API sinks share it)."""

from __future__ import annotations

import pytest

from gfd.backoff import backoff


def test_failures_back_off_exponentially_capped_with_jitter() -> None:
    assert backoff(1, 300, rand=lambda: 1.0) == 1.0
    assert backoff(4, 300, rand=lambda: 1.0) == 8.0
    assert backoff(30, 300, rand=lambda: 1.0) == 300.0
    assert backoff(4, 300, rand=lambda: 0.0) == 4.0
    assert backoff(20, 10, rand=lambda: 1.0) == 10.0


STEPS = [
    ("first-failure-is-the-start", 1, 1.0, 300, 1.0),
    ("doubles", 3, 1.0, 300, 4.0),
    ("capped", 12, 1.0, 300, 300.0),
    ("no-failure-yet-counts-as-the-first", 0, 1.0, 300, 1.0),
    ("another-start", 3, 0.5, 30, 2.0),
    ("cap-below-the-start", 1, 1.0, 0.25, 0.25),
]


@pytest.mark.parametrize("failures, start, cap, step", [s[1:] for s in STEPS],
                         ids=[s[0] for s in STEPS])
def test_the_step_doubles_from_the_start_up_to_the_cap(failures: int, start: float, cap: float,
                                                       step: float) -> None:
    assert backoff(failures, cap, rand=lambda: 1.0, start=start) == step
    assert backoff(failures, cap, rand=lambda: 0.0, start=start) == step / 2


def test_the_jitter_stays_between_half_and_the_whole_step() -> None:
    delays = {backoff(4, 300) for _ in range(200)}
    assert all(4.0 <= d <= 8.0 for d in delays)
    assert len(delays) > 100, "a fleet does not retry in lockstep"
