"""The loop's clock: each duty at its interval, kept across a reload unless it changed; the
label cycle when due or woken, and what waits for a failing API's retry."""

from __future__ import annotations

from gfd.schedule import Duty, Pace, Schedule, Wake
from gfd.triggers import Trigger


def test_schedule_runs_each_duty_at_its_interval() -> None:
    calls: list[str] = []
    schedule = Schedule()
    schedule.set((Duty("resync", 10.0, lambda: calls.append("resync")),
                  Duty("host refresh", 4.0, lambda: calls.append("host"))), now=0.0)
    assert schedule.next_due() == 4.0
    assert schedule.pop_due(3.9) == []
    assert [d.name for d in schedule.pop_due(4.0)] == ["host refresh"]
    assert schedule.next_due() == 8.0
    assert [d.name for d in schedule.pop_due(10.0)] == ["host refresh", "resync"]
    assert schedule.next_due() == 14.0


def test_schedule_keeps_a_duty_due_time_across_a_reload_unless_its_interval_changed() -> None:
    schedule = Schedule()
    schedule.set((Duty("resync", 10.0, lambda: None),), now=0.0)
    schedule.set((Duty("resync", 10.0, lambda: None), Duty("host refresh", 5.0, lambda: None)),
                 now=3.0)
    assert schedule.next_due() == 8.0  # the new duty: 3 + 5; resync still due at 10
    schedule.set((Duty("resync", 2.0, lambda: None),), now=4.0)
    assert schedule.next_due() == 6.0


def test_an_empty_schedule_is_never_due() -> None:
    schedule = Schedule()
    schedule.set((), now=0.0)
    assert schedule.next_due() is None and schedule.pop_due(1e9) == []


# ------------------------------------------------------------------------ the label cycle's pace

XID = Trigger(source="nvml", kind="xid", at=1.0)
CONFIG = Trigger(source="config", kind="changed", at=2.0, reload_config=True)


def test_a_wake_is_empty_until_something_woke_the_loop() -> None:
    assert not Wake()
    assert Wake(sighup=True) and Wake(duty=True) and Wake((XID,))


def test_two_wakes_join_their_triggers_and_reasons() -> None:
    joined = Wake((XID,), sighup=True) | Wake((CONFIG,), config_changed=True)
    assert joined == Wake((XID, CONFIG), sighup=True, config_changed=True, duty=False)


def test_the_first_cycle_is_due_at_once_and_the_next_one_when_set() -> None:
    pace = Pace(next_cycle=0.0)
    assert pace.admit(Wake(), 0.0, api_backoff=False) == Wake()
    pace.next_cycle = 10.0
    assert pace.admit(Wake(), 9.9, api_backoff=False) is None, "nothing woke it, none due"
    assert pace.admit(Wake(), 10.0, api_backoff=False) == Wake()


def test_with_no_interval_only_a_wake_up_runs_a_cycle() -> None:
    pace = Pace(next_cycle=None)
    assert pace.admit(Wake(), 1e9, api_backoff=False) is None
    assert pace.admit(Wake(duty=True), 1e9, api_backoff=False) == Wake(duty=True)


def test_a_wake_up_runs_a_cycle_at_once_unless_the_api_backs_off() -> None:
    pace = Pace(next_cycle=10.0)
    assert pace.admit(Wake((XID,)), 5.0, api_backoff=False) == Wake((XID,))


def test_what_woke_the_loop_during_the_api_backoff_joins_the_retry() -> None:
    pace = Pace(next_cycle=10.0)
    assert pace.admit(Wake((XID,)), 5.0, api_backoff=True) is None
    assert pace.admit(Wake(sighup=True), 6.0, api_backoff=True) is None
    assert pace.admit(Wake(), 9.0, api_backoff=True) is None
    retry = pace.admit(Wake((CONFIG,), config_changed=True), 10.0, api_backoff=True)
    assert retry == Wake((XID, CONFIG), sighup=True, config_changed=True)
    assert pace.held == Wake(), "taken once"
