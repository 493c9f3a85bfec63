"""NvmlEvents through the real pynvml binding against the fake libnvidia-ml.so.1: each GPU
registered for the kinds it supports, events named by GPU, the set's lifetime beside a reader
in another thread, and the failures that leave a GPU only not listened to."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from typing import Any

import pynvml
import pytest
from fakes import profiles
from fakes.fakenvml import EventPipe, GpuSpec, Machine, event_mask, mig

from gfd.errors import DiscoveryError, NvmlInitError
from gfd.readers.nvml import NvmlReader
from gfd.readers.nvmlevents import EVENT_TYPES, NvmlEvent, NvmlEvents

ALL_KINDS = frozenset(EVENT_TYPES)


def t4(**overrides: Any) -> GpuSpec:
    return replace(profiles.t4x4().gpus[0], **overrides)


def event_machine() -> Machine:
    """GPU 0: H100 (every kind); 1: T4 (no MIG: xid, gpu-unavailable); 2: H100 again."""
    return Machine(gpus=[profiles.h100(), t4(), profiles.h100()], seed="events")


def uuids(machine: Machine) -> list[str]:
    return [gpu.uuid for gpu in machine.resolve()]


def test_event_types_are_pynvmls_bits() -> None:
    assert dict(EVENT_TYPES) == {
        "mig-config-change": pynvml.nvmlEventMigConfigChange,
        "xid": pynvml.nvmlEventTypeXidCriticalError,
        "gpu-unavailable": pynvml.nvmlEventTypeGpuUnavailableError,
    }


def test_events_register_each_gpu_for_the_kinds_it_supports(
        nvml_machine: Any, caplog: pytest.LogCaptureFixture) -> None:
    machine = event_machine()
    machine.gpus += [
        profiles.h100(events=0),  # supports nothing
        profiles.h100(events=event_mask("pstate", "clock")),  # nothing gfd listens to
        profiles.h100(fail={"nvmlDeviceGetSupportedEventTypes": "NOT_SUPPORTED"}),
        profiles.h100(fail={"nvmlDeviceGetSupportedEventTypes": "UNKNOWN"}),
        profiles.h100(fault="lost"),  # no handle: left out
    ]
    nvml_machine(machine)
    ids = uuids(machine)
    with NvmlEvents() as events:
        registered = events.open()
    assert registered == {
        ids[0]: ALL_KINDS,
        ids[1]: frozenset({"xid", "gpu-unavailable"}),
        ids[2]: ALL_KINDS,
        ids[3]: frozenset(),
        ids[4]: frozenset(),
        ids[5]: frozenset(),
        ids[6]: frozenset(),
    }
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == ["NVML nvmlDeviceGetSupportedEventTypes failed for GPU 6: Unknown Error: "
                        "its NVML events are not listened to"]


@pytest.mark.parametrize(("gpu", "kind", "data"), [
    (0, "xid", 79),
    (2, "xid", 48),
    (1, "gpu-unavailable", 0),
    (2, "mig-config-change", 0),
])
def test_an_event_of_each_kind_names_its_gpu(nvml_machine: Any, nvml_events: EventPipe,
                                            gpu: int, kind: str, data: int) -> None:
    machine = event_machine()
    nvml_machine(machine)
    with NvmlEvents() as events:
        events.open()
        nvml_events.send(gpu, kind, data)
        assert events.wait(5.0) == NvmlEvent(kind=kind, gpu_uuid=uuids(machine)[gpu],
                                             gpu_index=gpu, data=data)
        assert events.wait(0.0) is None


def test_events_of_kinds_not_registered_are_not_delivered(nvml_machine: Any,
                                                         nvml_events: EventPipe) -> None:
    nvml_machine(event_machine())
    with NvmlEvents() as events:
        events.open()
        nvml_events.send(1, "mig-config-change")  # the T4 has no MIG
        nvml_events.send(0, "pstate")  # not a kind gfd listens to
        assert events.wait(0.1) is None
        nvml_events.send(1, "xid", 31)
        event = events.wait(5.0)
        assert event is not None and (event.kind, event.gpu_index, event.data) == ("xid", 1, 31)


def test_a_wait_without_an_event_returns_none_after_its_timeout(nvml_machine: Any,
                                                                nvml_events: EventPipe) -> None:
    nvml_machine(event_machine())
    with NvmlEvents() as events:
        events.open()
        start = time.monotonic()
        assert events.wait(0.0) is None
        assert events.wait(-1.0) is None
        assert time.monotonic() - start < 5  # at once: no wait for an event
        start = time.monotonic()
        assert events.wait(0.15) is None
        assert 0.15 <= time.monotonic() - start < 10  # its timeout, not forever


def test_close_frees_the_set_ends_the_session_and_is_idempotent(nvml_machine: Any) -> None:
    nvml_machine(event_machine())
    fake = nvml_machine.fake
    sets = fake.event_sets()
    events = NvmlEvents()
    events.close()  # never opened
    events.open()
    assert (fake.event_sets(), fake.refcount()) == (sets + 1, 1)
    events.open()  # again: the previous set is freed first
    assert (fake.event_sets(), fake.refcount()) == (sets + 1, 1)
    events.close()
    events.close()
    assert (fake.event_sets(), fake.refcount()) == (sets, 0)
    assert fake.call_count("nvmlEventSetFree") == 2
    assert fake.call_count("nvmlShutdown") == 2
    with pytest.raises(DiscoveryError, match=r"^NVML events: wait\(\) called before open\(\)$"):
        events.wait(0.0)


def test_events_coexist_with_a_reader_reading_in_another_thread(
        nvml_machine: Any, nvml_events: EventPipe) -> None:
    """wait() blocks in one thread while an NvmlReader reads, closes and re-opens its own
    session in another; the event still arrives, and nothing waited on the other."""
    machine = event_machine()
    nvml_machine(machine)
    events = NvmlEvents()
    events.open()
    got: list[NvmlEvent | None] = []
    waiter = threading.Thread(target=lambda: got.append(events.wait(10.0)))
    waiter.start()
    start = time.monotonic()
    for _ in range(3):
        with NvmlReader() as reader:
            assert [g.uuid for g in reader.read().gpus] == uuids(machine)
    assert time.monotonic() - start < 5.0 and waiter.is_alive()
    assert nvml_machine.fake.refcount() == 1, "the reader's shutdowns left the events' session"
    nvml_events.send(2, "xid", 94)
    waiter.join(5)
    assert got == [NvmlEvent(kind="xid", gpu_uuid=uuids(machine)[2], gpu_index=2, data=94)]
    events.close()


def test_a_mig_reconfiguration_event_then_a_read_sees_the_new_layout(
        nvml_machine: Any, nvml_events: EventPipe) -> None:
    before = Machine(gpus=[profiles.a100_40gb(mig_enabled=True, mig_layout=mig("3g.20gb"))],
                     seed="reconfigure")
    after = Machine(gpus=[profiles.a100_40gb(mig_enabled=True,
                                             mig_layout=mig("1g.5gb", "1g.5gb"))],
                    seed="reconfigure")
    nvml_machine(before)
    with NvmlEvents() as events, NvmlReader() as reader:
        assert events.open() == {uuids(before)[0]: ALL_KINDS}
        assert [d.profile_name for d in reader.read().gpus[0].mig_devices] == ["MIG 3g.20gb"]
        nvml_machine(after)
        nvml_events.send(0, "mig-config-change")
        event = events.wait(5.0)
        assert event is not None and (event.kind, event.gpu_index) == ("mig-config-change", 0)
        assert [d.profile_name for d in reader.read().gpus[0].mig_devices] == ["MIG 1g.5gb"] * 2
    assert nvml_machine.fake.init_count() == 2, "one session each, neither re-initialised"


def test_a_gpu_lost_while_registering_is_only_not_registered(
        nvml_machine: Any, nvml_events: EventPipe, caplog: pytest.LogCaptureFixture) -> None:
    machine = event_machine()
    machine.gpus[1].fail["nvmlDeviceRegisterEvents"] = "GPU_IS_LOST"
    nvml_machine(machine)
    ids = uuids(machine)
    with NvmlEvents() as events:
        assert events.open() == {ids[0]: ALL_KINDS, ids[1]: frozenset(), ids[2]: ALL_KINDS}
        nvml_events.send(1, "xid", 79)
        nvml_events.send(2, "xid", 79)
        event = events.wait(5.0)
        assert event is not None and event.gpu_index == 2
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], \
        "a lost GPU is the reader's to report"


def test_a_set_spoiled_by_an_unknown_error_is_rebuilt_without_that_gpu(
        nvml_machine: Any, nvml_events: EventPipe, caplog: pytest.LogCaptureFixture) -> None:
    """nvml.h: after UNKNOWN from nvmlDeviceRegisterEvents the set "is in undefined state and
    should be freed"."""
    machine = event_machine()
    machine.gpus[1].fail["nvmlDeviceRegisterEvents"] = "UNKNOWN"
    nvml_machine(machine)
    fake = nvml_machine.fake
    sets = fake.event_sets()
    ids = uuids(machine)
    with NvmlEvents() as events:
        assert events.open() == {ids[0]: ALL_KINDS, ids[1]: frozenset(), ids[2]: ALL_KINDS}
        assert fake.event_sets() == sets + 1 and fake.call_count("nvmlEventSetCreate") == 2
        nvml_events.send(0, "xid", 13)
        event = events.wait(5.0)
        assert event is not None and (event.gpu_index, event.gpu_uuid) == (0, ids[0])
    assert "NVML nvmlDeviceRegisterEvents failed for GPU 1: Unknown Error" in caplog.text


def test_open_failures_are_one_line_and_leave_nothing_open(nvml_machine: Any) -> None:
    fake = nvml_machine.fake
    nvml_machine(profiles.driver_not_loaded())
    with pytest.raises(NvmlInitError, match=r"^NVML could not start: Driver Not Loaded \("):
        NvmlEvents().open()
    for call in ("nvmlDeviceGetCount_v2", "nvmlEventSetCreate"):
        broken = event_machine()
        broken.fail[call] = "UNKNOWN"
        nvml_machine(broken)
        events = NvmlEvents()
        with pytest.raises(DiscoveryError) as info:
            events.open()
        assert str(info.value) == f"NVML {call.removesuffix('_v2')} failed: Unknown Error"
        assert fake.refcount() == 0
        events.close()


def test_a_driver_without_event_sets_registers_nothing_and_waits_quietly(
        nvml_machine: Any) -> None:
    machine = event_machine()
    machine.fail["nvmlEventSetCreate"] = "NOT_SUPPORTED"
    nvml_machine(machine)
    with NvmlEvents() as events:
        assert events.open() == {}
        start = time.monotonic()
        assert events.wait(0.1) is None
        assert time.monotonic() - start >= 0.1


def test_a_wait_error_is_a_one_line_discovery_error(nvml_machine: Any) -> None:
    machine = event_machine()
    machine.fail["nvmlEventSetWait_v2"] = "GPU_IS_LOST"
    nvml_machine(machine)
    with NvmlEvents() as events:
        events.open()
        with pytest.raises(DiscoveryError, match=r"^NVML nvmlEventSetWait_v2 failed: GPU is lost$"):
            events.wait(1.0)
