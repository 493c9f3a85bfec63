"""Debounce: at most one pending call; ``restart`` replaces it (a burst ends in one call, the
last), ``start`` keeps it; the call runs on a timer thread; ``close`` cancels it for good."""

from __future__ import annotations

import threading
from collections.abc import Callable

from helpers.process import wait_for

from gfd.debounce import Debounce

LONG = 60.0
"""A delay no test waits for: a call scheduled with it runs only if cancelling failed."""


class Calls:
    """What ran, in order, and on which thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ran: list[str] = []
        self.threads: list[threading.Thread] = []

    def action(self, name: str) -> Callable[[], None]:
        def run() -> None:
            with self.lock:
                self.ran.append(name)
                self.threads.append(threading.current_thread())
        return run

    def names(self) -> list[str]:
        with self.lock:
            return list(self.ran)


def timer_threads_started_by(step: Callable[[], None]) -> list[threading.Thread]:
    """The threads ``step`` started (a Debounce's timers)."""
    before = set(threading.enumerate())
    step()
    return [t for t in threading.enumerate() if t not in before]


def test_a_burst_of_restarts_runs_only_the_last_call_on_a_timer_thread() -> None:
    calls, later = Calls(), Debounce()
    try:
        for index in range(5):
            assert later.restart(LONG, calls.action(f"early {index}"))
        assert later.pending
        assert later.restart(0.01, calls.action("last"))
        wait_for(lambda: calls.names() == ["last"])
        assert not later.pending
        assert calls.threads[0] is not threading.current_thread()
    finally:
        later.close()
    assert calls.names() == ["last"], "the replaced calls never run"


def test_start_keeps_the_pending_call_and_its_time() -> None:
    calls, later = Calls(), Debounce()
    try:
        assert later.start(0.01, calls.action("first"))
        assert not later.start(0.0, calls.action("second")), "one is pending: kept"
        wait_for(lambda: calls.names() == ["first"])
        wait_for(lambda: not later.pending)
        assert later.start(0.0, calls.action("third")), "nothing pending: scheduled again"
        wait_for(lambda: calls.names() == ["first", "third"])
    finally:
        later.close()


def test_close_cancels_the_pending_call_at_once_and_refuses_new_ones() -> None:
    calls, later = Calls(), Debounce()
    timers = timer_threads_started_by(lambda: later.restart(LONG, calls.action("cancelled")))
    assert len(timers) == 1
    later.close()
    timers[0].join(timeout=LONG / 2)
    assert not timers[0].is_alive(), "a cancelled timer ends at once, not at its time"
    assert calls.names() == []
    assert later.closed and not later.pending
    assert not later.restart(0.0, calls.action("after close"))
    assert not later.start(0.0, calls.action("after close"))
    later.close()  # idempotent
    assert timer_threads_started_by(lambda: later.restart(0.0, calls.action("x"))) == []
    assert calls.names() == []


def test_a_replaced_call_ends_its_timer_at_once() -> None:
    calls, later = Calls(), Debounce()
    try:
        first = timer_threads_started_by(lambda: later.restart(LONG, calls.action("replaced")))
        later.restart(LONG, calls.action("pending"))
        first[0].join(timeout=LONG / 2)
        assert not first[0].is_alive()
        assert later.pending and calls.names() == []
    finally:
        later.close()


def test_closing_from_the_action_itself_is_safe() -> None:
    """An owner may close from its own callback (a sink closed by the trigger it fires)."""
    later = Debounce()
    done = threading.Event()

    def close_from_inside() -> None:
        later.close()
        done.set()

    assert later.start(0.0, close_from_inside)
    assert done.wait(timeout=LONG / 2)
    assert later.closed and not later.start(0.0, close_from_inside)
