"""GpuEventWatch and trigger_for: every NVML event becomes a trigger at once; a critical Xid
or "GPU unavailable" also marks the GPU unusable (on the loop's thread); other Xids change
nothing; a failing or event-less back end leaves polling to do the work, without a busy loop.
The same paths through the real binding and the fake libnvidia-ml are in e2e/test_events.py.
"""

from __future__ import annotations

import logging
import queue
from dataclasses import dataclass

import pytest
from helpers.process import wait_for
from helpers.triggers import Fired

from gfd.errors import DiscoveryError, NvmlInitError
from gfd.readers import gpuevents
from gfd.readers.gpuevents import CRITICAL_XIDS, GpuEventWatch, trigger_for


@dataclass(frozen=True)
class Event:
    kind: str
    gpu_uuid: str = "GPU-3"
    gpu_index: int | None = 3
    data: int = 0


class Source:
    """An EventSource fed by the test; ``opens`` answers each open() in turn."""

    def __init__(self, *opens: dict[str, frozenset[str]] | Exception) -> None:
        self.opens = list(opens)
        self.events: queue.Queue[Event | Exception] = queue.Queue()
        self.opened = 0
        self.closed = 0

    def open(self) -> dict[str, frozenset[str]]:
        self.opened += 1
        item = self.opens.pop(0) if len(self.opens) > 1 else self.opens[0]
        if isinstance(item, Exception):
            raise item
        return item

    def wait(self, timeout: float) -> Event | None:
        try:
            item = self.events.get(timeout=timeout)
        except queue.Empty:
            return None
        if isinstance(item, Exception):
            raise item
        return item

    def close(self) -> None:
        self.closed += 1


ALL = {"GPU-3": frozenset({"xid", "mig-config-change", "gpu-unavailable"})}


def marks() -> tuple[list[tuple[str, str]], object]:
    seen: list[tuple[str, str]] = []
    return seen, lambda uuid, reason: seen.append((uuid, reason))


@pytest.mark.parametrize("xid", sorted(CRITICAL_XIDS))
def test_a_critical_xid_marks_its_gpu_when_the_loop_runs_the_action(xid: int) -> None:
    seen, mark = marks()
    trigger = trigger_for(Event("xid", data=xid), mark, at=5.0)
    assert trigger is not None
    assert (trigger.source, trigger.kind, trigger.at) == ("nvml", "xid", 5.0)
    assert seen == [], "nothing changes before the loop runs the action"
    assert trigger.action is not None
    trigger.action()
    assert seen == [("GPU-3", f"Xid {xid} ({CRITICAL_XIDS[xid]})")]


def test_the_critical_xids_are_the_documented_list() -> None:
    assert sorted(CRITICAL_XIDS) == [48, 64, 74, 79, 92, 94, 95]


@pytest.mark.parametrize("xid", [13, 31, 43, 45, 63, 68, 109])
def test_an_application_xid_fires_nothing(xid: int) -> None:
    seen, mark = marks()
    assert trigger_for(Event("xid", data=xid), mark, at=0.0) is None
    assert seen == []


def test_gpu_unavailable_marks_the_gpu() -> None:
    seen, mark = marks()
    trigger = trigger_for(Event("gpu-unavailable"), mark, at=0.0)
    assert trigger is not None and trigger.action is not None
    trigger.action()
    assert seen == [("GPU-3", "GPU unavailable (NVML event)")]


def test_a_mig_reconfiguration_is_a_plain_trigger() -> None:
    trigger = trigger_for(Event("mig-config-change"), marks()[1], at=0.0)
    assert trigger is not None and trigger.action is None
    assert trigger.kind == "mig-config-change" and "GPU 3" in trigger.detail


def test_events_are_fired_as_they_come(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gfd.readers.gpuevents")
    source, fired = Source(ALL), Fired()
    seen, mark = marks()
    watch = GpuEventWatch(source, fired, mark, wait=0.05).start()
    try:
        source.events.put(Event("mig-config-change"))
        source.events.put(Event("xid", data=13))
        source.events.put(Event("xid", data=79))
        wait_for(lambda: len(fired.triggers) == 2, timeout=5)
        assert [t.kind for t in fired.triggers] == ["mig-config-change", "xid"]
        assert seen == [], "marking is the loop's job (the trigger's action)"
        assert "NVML events: 1 of 1 GPUs registered" in caplog.text
    finally:
        watch.close()
    assert watch.join(5) and source.closed == 1


def test_no_gpu_with_events_ends_the_watch_and_says_so(caplog: pytest.LogCaptureFixture,
                                                       ) -> None:
    caplog.set_level(logging.INFO, logger="gfd.readers.gpuevents")
    source = Source({"GPU-0": frozenset(), "GPU-1": frozenset()})
    watch = GpuEventWatch(source, Fired(), marks()[1], wait=0.05).start()
    assert watch.join(5)
    assert source.opened == 1 and source.closed == 1
    assert "no GPU offers NVML events" in caplog.text


def test_a_failing_open_is_retried_with_backoff_and_said_once(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    pauses: list[float] = []
    monkeypatch.setattr(gpuevents, "backoff",
                        lambda failures, cap: pauses.append(cap) or 0.01 * failures)
    source = Source(NvmlInitError("NVML: Driver Not Loaded"), NvmlInitError("again"), ALL)
    fired = Fired()
    watch = GpuEventWatch(source, fired, marks()[1], wait=0.05).start()
    try:
        wait_for(lambda: source.opened == 3, timeout=5)
        source.events.put(Event("mig-config-change"))
        wait_for(lambda: len(fired.triggers) == 1, timeout=5)
    finally:
        watch.close()
    assert watch.join(5)
    assert pauses == [300.0, 300.0]
    assert caplog.text.count("NVML events unavailable") == 1


def test_a_failing_wait_reopens_the_event_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpuevents, "backoff", lambda failures, cap: 0.01)
    source, fired = Source(ALL), Fired()
    source.events.put(DiscoveryError("NVML: nvmlEventSetWait_v2: Unknown Error"))
    watch = GpuEventWatch(source, fired, marks()[1], wait=0.05).start()
    try:
        wait_for(lambda: source.opened == 2, timeout=5)
        assert source.closed == 1, "the failed set was freed before the new one"
        source.events.put(Event("gpu-unavailable"))
        wait_for(lambda: len(fired.triggers) == 1, timeout=5)
    finally:
        watch.close()
    assert watch.join(5)


def test_a_watch_thread_that_dies_says_so_once_and_fires_its_death(
        caplog: pytest.LogCaptureFixture) -> None:
    """An error no one expected (not a GfdError) ends the thread: logged at error level,
    the event set freed, and a trigger the loop counts; polling carries on."""
    source, fired = Source(ALL), Fired()
    source.events.put(RuntimeError("unexpected event layout"))
    watch = GpuEventWatch(source, fired, marks()[1], wait=0.05).start()
    assert watch.join(5)
    assert [(t.source, t.kind) for t in fired.triggers] == [("nvml", "watcher-died")]
    assert "RuntimeError: unexpected event layout" in fired.triggers[0].detail
    assert source.closed == 1
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert errors == ["NVML event watch stopped: RuntimeError: unexpected event layout; "
                      "changes are seen at the next poll"]
