"""Signals and wake-ups: handlers only record, watchers' triggers coalesce, the self-pipe wakes
the loop even when a signal lands inside its wait."""

from __future__ import annotations

import threading
import time

import pytest

from gfd.signals import Signals
from gfd.triggers import Trigger


def test_signals_set_their_flag_and_wake_the_loop() -> None:
    signals = Signals()
    signals.request_reload()
    assert signals.reload and signals.wake.is_set() and not signals.stop
    signals.wake.clear()
    signals.request_stop()
    assert signals.stop and signals.wake.is_set()


def test_take_holds_a_trigger_until_the_coalescing_window_has_passed() -> None:
    signals = Signals()
    signals.fire(Trigger(source="nvml", kind="xid", at=10.0))
    signals.fire(Trigger(source="nvml", kind="mig-config-change", at=10.05))
    assert signals.wake.is_set()
    assert signals.take(10.05) == ([], pytest.approx(10.1))
    taken, later = signals.take(10.1)
    assert [t.kind for t in taken] == ["xid", "mig-config-change"] and later is None
    assert signals.take(20.0) == ([], None), "taken once"


_SIGNAL_STORM = """
import signal, sys, threading, time
from gfd.signals import Signals
from gfd.triggers import Trigger

signals = Signals()
asked = 0

def handler(signum, frame):
    global asked
    asked += 1
    signals.request_reload()

signal.signal(signal.SIGALRM, handler)
stop = threading.Event()

def watcher():  # a watcher thread firing at the same time, as NVML events do
    while not stop.is_set():
        signals.fire(Trigger(source="nvml", kind="xid", at=time.monotonic()))
        time.sleep(0.0005)

thread = threading.Thread(target=watcher, daemon=True)
thread.start()
signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)  # 1 kHz: many land inside wait/clear
end = time.monotonic() + 1.5
turns = taken = 0
while time.monotonic() < end:
    signals.wake.wait(0.0003)
    signals.wake.clear()
    signals.take(time.monotonic(), 0.0)
    taken += signals.take_reload()
    turns += 1
signal.setitimer(signal.ITIMER_REAL, 0, 0)
stop.set()
thread.join()
taken += signals.take_reload()
print(turns, asked, taken)
"""


def test_signals_landing_inside_the_loops_wait_and_clear_never_hang_it() -> None:
    """The handler runs on the loop's own thread, between any two bytecodes: one that took a
    lock the interrupted wait holds would block forever (reproduced with threading.Event)."""
    import subprocess
    import sys

    try:
        done = subprocess.run([sys.executable, "-c", _SIGNAL_STORM], capture_output=True,
                              text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("the loop hung: a signal handler blocked inside the loop's wait")
    assert done.returncode == 0, done.stderr
    turns, asked, taken = map(int, done.stdout.split())
    assert asked > 500, "the signals really arrived during the loop"
    assert turns > 100, "the loop kept turning"
    assert taken == asked, "every reload asked for was taken: none lost between read and reset"


def test_a_reload_asked_while_one_is_taken_stays_pending() -> None:
    signals = Signals()
    signals.request_reload()
    signals.request_reload()
    assert signals.take_reload() == 2 and not signals.reload
    signals.request_reload()  # lands after the take: the next turn sees it
    assert signals.reload and signals.take_reload() == 1 and signals.take_reload() == 0


def test_an_installed_wakeup_wakes_on_a_signal_and_is_given_back_on_close() -> None:
    """The interpreter's C-level handler writes to the pipe: a signal whose Python handler
    writes nothing still ends the wait (else the poll is retried after the handler)."""
    import os
    import signal

    signals = Signals()
    handled: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: handled.append(signum))
    try:
        signals.wake.install()
        threading.Timer(0.05, os.kill, args=(os.getpid(), signal.SIGUSR1)).start()
        started = time.monotonic()
        assert signals.wake.wait(30) and time.monotonic() - started < 20  # not the 30 s
        assert handled == [signal.SIGUSR1]
    finally:
        signals.close()
        signal.signal(signal.SIGUSR1, previous)
    assert signal.set_wakeup_fd(-1) == -1, "the process's wakeup fd is given back"
