"""Capped exponential backoff with jitter (the agent loop and the API sinks share it)."""

from __future__ import annotations

from gfd.backoff import backoff


def test_failures_back_off_exponentially_capped_with_jitter() -> None:
    assert backoff(1, 300, rand=lambda: 1.0) == 1.0
    assert backoff(4, 300, rand=lambda: 1.0) == 8.0
    assert backoff(30, 300, rand=lambda: 1.0) == 300.0
    assert backoff(4, 300, rand=lambda: 0.0) == 4.0
    assert backoff(20, 10, rand=lambda: 1.0) == 10.0
