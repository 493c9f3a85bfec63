"""The loop's schedule: each duty at its interval, kept across a reload unless it changed."""

from __future__ import annotations

from gfd.schedule import Duty, Schedule


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
