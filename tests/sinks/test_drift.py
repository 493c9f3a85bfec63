"""Drift: a drift fires an ``api`` trigger at once; one that keeps coming back within the
fight window is repaired after a growing pause, said once; closing cancels what is pending."""

from __future__ import annotations

import logging
import threading

import pytest
from helpers.process import wait_for
from helpers.timing import Clock
from helpers.triggers import FiredList

from gfd.sinks import drift
from gfd.sinks.drift import FIGHT_WINDOW, FREE_REPAIRS, Drift


def repaired() -> None:
    pass


def test_a_drift_fires_an_api_trigger_at_once_with_the_sinks_action() -> None:
    fired, clock = FiredList(), Clock()
    Drift(fired, "Node n", repaired, clock=clock).report("changed", "Node n: x changed")
    [trigger] = fired
    assert (trigger.source, trigger.kind, trigger.at) == ("api", "changed", 1000.0)
    assert trigger.action is repaired and trigger.detail == "Node n: x changed"


def test_drifts_far_apart_are_each_repaired_at_once() -> None:
    fired, clock = FiredList(), Clock()
    watch = Drift(fired, "Node n", repaired, clock=clock)
    for _ in range(5):
        watch.report("changed", "")
        clock.now += FIGHT_WINDOW + 1
    assert len(fired) == 5


def test_a_writer_fighting_gfd_is_repaired_after_a_growing_pause_said_once(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    pauses: list[float] = []
    monkeypatch.setattr(drift, "backoff", lambda n, cap, rand: pauses.append(n) or 0.05)
    fired, clock = FiredList(), Clock()
    watch = Drift(fired, "Node n", repaired, clock=clock)
    with caplog.at_level(logging.WARNING, logger="gfd.sinks.drift"):
        for _ in range(FREE_REPAIRS):
            watch.report("changed", "")
            clock.now += 1
        assert len(fired) == FREE_REPAIRS
        watch.report("changed", "")  # the same writer again: a pause first
        watch.report("changed", "")  # while one is pending: nothing more is scheduled
        assert len(fired) == FREE_REPAIRS
        wait_for(lambda: len(fired) == FREE_REPAIRS + 1, timeout=2)
    assert pauses == [1]
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "Node n keeps being changed by another writer" in said[0]


def test_close_cancels_a_pending_repair_and_ignores_later_reports(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(drift, "backoff", lambda n, cap, rand: 0.2)
    fired, clock = FiredList(), Clock()
    watch = Drift(fired, "Node n", repaired, clock=clock)
    for _ in range(FREE_REPAIRS + 1):
        watch.report("changed", "")
    watch.close()
    watch.report("deleted", "")
    threading.Event().wait(0.4)
    assert len(fired) == FREE_REPAIRS
