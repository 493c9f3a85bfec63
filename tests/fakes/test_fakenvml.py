"""The fake libnvidia-ml.so.1 answers like the real one where gfd depends on it: event sets
(nvml.h, "Event Handling Methods") and the live mode, through the real pynvml binding."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pynvml
import pytest

from fakes import profiles
from fakes.fakenvml import (
    EVENT_TYPES,
    NO_INSTANCE,
    EventPipe,
    GpuSpec,
    Machine,
    default_events,
    event_mask,
    mig,
    subprocess_env,
)

XID = pynvml.nvmlEventTypeXidCriticalError
MIG_CHANGE = pynvml.nvmlEventMigConfigChange
UNAVAILABLE = pynvml.nvmlEventTypeGpuUnavailableError


@pytest.fixture
def session(nvml_machine: Any) -> Iterator[Any]:
    """An open pynvml session on a two-GPU H100 machine plus a T4 that supports only Xid
    events; yields the fixture (call it to change the machine)."""
    nvml_machine(machine())
    pynvml.nvmlInit()
    yield nvml_machine
    nvml_machine.fake.shutdown_all()


def t4(**overrides: Any) -> GpuSpec:
    return replace(profiles.t4x4().gpus[0], **overrides)


def machine() -> Machine:
    return Machine(gpus=[profiles.h100(), profiles.h100(), t4(events=event_mask("xid"))],
                   seed="events")


def address(handle: Any) -> int | None:
    return ctypes.cast(handle, ctypes.c_void_p).value


def handle(index: int) -> Any:
    return pynvml.nvmlDeviceGetHandleByIndex(index)


def event_set(*registrations: tuple[int, int]) -> Any:
    """A new event set with each (GPU index, mask) registered."""
    created = pynvml.nvmlEventSetCreate()
    for index, mask in registrations:
        pynvml.nvmlDeviceRegisterEvents(handle(index), mask, created)
    return created


def no_event(created: Any, timeout_ms: int = 30) -> bool:
    try:
        pynvml.nvmlEventSetWait_v2(created, timeout_ms)
    except pynvml.NVMLError_Timeout:
        return True
    return False


# ----------------------------------------------------------------------------- support


def test_supported_event_types_come_from_the_profile(session: Any) -> None:
    geforce = profiles.geforce().gpus[0]
    session(Machine(gpus=[profiles.h100(), t4(), geforce, profiles.h100(events=0)]))
    pynvml.nvmlDeviceGetCount()
    supported = [pynvml.nvmlDeviceGetSupportedEventTypes(handle(i)) for i in range(4)]
    assert supported == [0x411F, 0x401F, 0x401C, 0]
    assert supported[0] == (pynvml.nvmlEventTypeSingleBitEccError
                            | pynvml.nvmlEventTypeDoubleBitEccError | pynvml.nvmlEventTypePState
                            | pynvml.nvmlEventTypeClock | XID | UNAVAILABLE | MIG_CHANGE)


def test_default_events_add_mig_changes_only_on_mig_capable_gpus() -> None:
    assert default_events(profiles.h100()) & MIG_CHANGE
    assert not default_events(t4()) & MIG_CHANGE
    assert all(default_events(spec) & XID and default_events(spec) & UNAVAILABLE
               for name in profiles.MACHINES for spec in profiles.MACHINES[name]().gpus)
    assert EVENT_TYPES["mig-config-change"] == MIG_CHANGE and EVENT_TYPES["xid"] == XID
    assert EVENT_TYPES["gpu-unavailable"] == UNAVAILABLE


def test_a_mask_with_an_unsupported_type_registers_none_of_it(session: Any,
                                                             nvml_events: EventPipe) -> None:
    """nvml.h: NOT_SUPPORTED "if ... some of requested event types" are not supported, and then
    "None of the requested eventTypes are registered"; the set can still be used."""
    created = event_set()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceRegisterEvents(handle(2), XID | MIG_CHANGE, created)
    nvml_events.send(2, "xid", 79)
    assert no_event(created), "the supported half was not registered either"
    pynvml.nvmlDeviceRegisterEvents(handle(2), XID, created)
    nvml_events.send(2, "xid", 79)
    assert pynvml.nvmlEventSetWait_v2(created, 1000).eventData == 79
    pynvml.nvmlEventSetFree(created)


def test_an_empty_mask_registers_nothing_and_succeeds(session: Any) -> None:
    created = event_set((0, 0))
    assert no_event(created, 0)
    pynvml.nvmlEventSetFree(created)


def test_invalid_arguments(session: Any) -> None:
    created = event_set()
    with pytest.raises(pynvml.NVMLError_InvalidArgument):  # a bit outside nvmlEventTypeAll
        pynvml.nvmlDeviceRegisterEvents(handle(0), 1 << 40, created)
    null_set = pynvml.c_nvmlEventSet_t()
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceRegisterEvents(handle(0), XID, null_set)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlEventSetWait_v2(null_set, 0)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlEventSetFree(null_set)
    pynvml.nvmlEventSetFree(created)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):  # freed
        pynvml.nvmlEventSetWait_v2(created, 0)


def test_a_lost_gpu_answers_gpu_is_lost_and_an_injected_error_is_returned(session: Any) -> None:
    gpus = [handle(0), handle(1)]
    created = event_set()
    lost = machine()
    lost.gpus[0].fault = "lost"
    lost.gpus[1].fail["nvmlDeviceGetSupportedEventTypes"] = "NOT_SUPPORTED"
    session(lost)
    pynvml.nvmlDeviceGetCount()
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetSupportedEventTypes(gpus[0])
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceRegisterEvents(gpus[0], XID, created)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetSupportedEventTypes(gpus[1])
    pynvml.nvmlDeviceRegisterEvents(gpus[1], XID, created)  # only the query was made to fail
    pynvml.nvmlEventSetFree(created)


def test_event_calls_need_an_nvml_session(nvml_machine: Any) -> None:
    nvml_machine(machine())
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlEventSetCreate()


# ----------------------------------------------------------------------------- delivery


def test_an_event_carries_nvmls_fields(session: Any, nvml_events: EventPipe) -> None:
    created = event_set((1, XID | MIG_CHANGE))
    nvml_events.send(1, "xid", 79)
    data = pynvml.nvmlEventSetWait_v2(created, 1000)
    assert address(data.device) == address(handle(1))
    assert pynvml.nvmlDeviceGetUUID(data.device) == pynvml.nvmlDeviceGetUUID(handle(1))
    assert (data.eventType, data.eventData) == (XID, 79)
    assert (data.gpuInstanceId, data.computeInstanceId) == (NO_INSTANCE, NO_INSTANCE)
    nvml_events.send(1, MIG_CHANGE)
    data = pynvml.nvmlEventSetWait(created, 1000)  # pynvml's alias of _v2
    assert (data.eventType, data.eventData) == (MIG_CHANGE, 0)
    nvml_events.send(1, "xid", 31, gpu_instance=1, compute_instance=0)
    data = pynvml.nvmlEventSetWait_v2(created, 1000)
    assert (data.eventData, data.gpuInstanceId, data.computeInstanceId) == (31, 1, 0)
    raw = os.open(nvml_events.path, os.O_WRONLY | os.O_NONBLOCK)
    os.write(raw, b"1 0x8\n")  # the short form: no data, no instance ids
    os.close(raw)
    data = pynvml.nvmlEventSetWait_v2(created, 1000)
    assert (data.eventData, data.gpuInstanceId, data.computeInstanceId) == (0, NO_INSTANCE,
                                                                            NO_INSTANCE)
    pynvml.nvmlEventSetFree(created)


def test_events_come_in_order_and_unregistered_ones_are_discarded(
        session: Any, nvml_events: EventPipe, capfd: pytest.CaptureFixture[str]) -> None:
    created = event_set((0, XID), (2, XID))
    nvml_events.send(1, "xid", 1)  # GPU 1 not registered
    nvml_events.send(0, "pstate")  # type not registered
    nvml_events.send(7, "xid", 2)  # no such GPU
    other_writer = os.open(nvml_events.path, os.O_WRONLY | os.O_NONBLOCK)
    os.write(other_writer, b"not an event\n")
    os.close(other_writer)
    nvml_events.send(2, "xid", 48)
    nvml_events.send(0, "xid", 79)
    assert pynvml.nvmlEventSetWait_v2(created, 1000).eventData == 48
    second = pynvml.nvmlEventSetWait_v2(created, 1000)
    assert (address(second.device), second.eventData) == (address(handle(0)), 79)
    assert no_event(created)
    assert "bad event line" in capfd.readouterr().err
    pynvml.nvmlEventSetFree(created)


def test_events_from_before_the_first_set_are_not_recorded(session: Any,
                                                           nvml_events: EventPipe) -> None:
    nvml_events.send(0, "xid", 13)
    created = event_set((0, XID))
    assert no_event(created)
    pynvml.nvmlEventSetFree(created)


def test_a_wait_without_an_event_times_out_after_its_timeout(session: Any,
                                                            nvml_events: EventPipe) -> None:
    created = event_set((0, XID))
    start = time.monotonic()
    assert no_event(created, 0)
    assert time.monotonic() - start < 5  # at once (generous: a loaded machine)
    start = time.monotonic()
    assert no_event(created, 150)
    assert 0.15 <= time.monotonic() - start < 10  # its timeout, not forever
    pynvml.nvmlEventSetFree(created)


def test_without_a_fifo_a_set_never_sees_an_event(session: Any,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FAKE_NVML_EVENTS", raising=False)
    created = event_set((0, XID))
    assert no_event(created, 50)
    pynvml.nvmlEventSetFree(created)


def test_a_path_that_is_not_a_fifo_fails_the_set(session: Any, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "plain").write_text("0 0x8 79\n")
    monkeypatch.setenv("FAKE_NVML_EVENTS", str(tmp_path / "plain"))
    with pytest.raises(pynvml.NVMLError_Unknown):
        pynvml.nvmlEventSetCreate()


def test_each_set_gets_its_own_copy_of_an_event(session: Any, nvml_events: EventPipe) -> None:
    first = event_set((0, XID))
    second = event_set((0, XID | MIG_CHANGE))
    nvml_events.send(0, "xid", 94)
    nvml_events.send(0, "mig-config-change")
    assert pynvml.nvmlEventSetWait_v2(first, 1000).eventData == 94
    assert no_event(first)
    assert pynvml.nvmlEventSetWait_v2(second, 1000).eventData == 94
    assert pynvml.nvmlEventSetWait_v2(second, 1000).eventType == MIG_CHANGE
    pynvml.nvmlEventSetFree(first)
    pynvml.nvmlEventSetFree(second)


def test_a_set_is_woken_by_an_event_another_threads_wait_read(session: Any,
                                                              nvml_events: EventPipe) -> None:
    """Two waiters on one FIFO: whichever reads the line, the set it is for wakes by the event
    (long before its own minute-long timeout, which would end the wait with no data)."""
    mine, theirs = event_set((0, XID)), event_set((1, XID))
    got: list[int] = []

    def wait_theirs() -> None:
        data = pynvml.nvmlEventSetWait_v2(theirs, 60_000)
        got.append(int(data.eventData))

    waiter = threading.Thread(target=wait_theirs)
    waiter.start()
    time.sleep(0.05)
    for _ in range(20):  # each of these waits may be the one that reads the line
        nvml_events.send(1, "xid", 62)
        assert no_event(mine, 10)
        if got:
            break
    waiter.join(30)
    assert got and got[0] == 62
    pynvml.nvmlEventSetFree(mine)
    pynvml.nvmlEventSetFree(theirs)


# ----------------------------------------------------------------------------- blocking


def test_a_blocked_wait_uses_no_cpu_and_returns_when_an_event_comes(
        session: Any, nvml_events: EventPipe) -> None:
    created = event_set((0, XID))
    writer = os.open(nvml_events.path, os.O_WRONLY)  # a writer coming and going is no EOF
    os.close(writer)
    timer = threading.Timer(0.3, nvml_events.send, args=(0, "xid", 79))
    timer.start()
    cpu, start = time.thread_time(), time.monotonic()
    data = pynvml.nvmlEventSetWait_v2(created, 10_000)
    elapsed, cpu = time.monotonic() - start, time.thread_time() - cpu
    timer.join()
    assert data.eventData == 79
    assert 0.25 <= elapsed < 8  # woken by the event at 0.3 s, not by the 10 s timeout
    assert cpu < 0.05, f"{cpu:.3f}s of CPU in a {elapsed:.3f}s wait"
    pynvml.nvmlEventSetFree(created)


def test_other_calls_and_a_reload_proceed_while_a_wait_blocks(session: Any,
                                                              nvml_events: EventPipe) -> None:
    created = event_set((0, XID))
    result: list[Any] = []
    waiter = threading.Thread(target=lambda: result.append(
        pynvml.nvmlEventSetWait_v2(created, 10_000)))
    waiter.start()
    time.sleep(0.05)
    start = time.monotonic()
    session(profiles.t4x4())  # the machine changes under the open session
    assert pynvml.nvmlDeviceGetCount() == 4
    assert pynvml.nvmlDeviceGetName(handle(0)) == "Tesla T4"
    assert time.monotonic() - start < 8  # not held up until the 10 s wait ends
    assert waiter.is_alive()
    nvml_events.send(0, "xid", 79)
    waiter.join(5)
    assert result and result[0].eventData == 79
    pynvml.nvmlEventSetFree(created)


def test_a_signal_ends_a_wait_with_timeout(session: Any, nvml_events: EventPipe) -> None:
    """nvml.h: TIMEOUT "if no event arrived in specified timeout or interrupt arrived"."""
    created = event_set((0, XID))
    previous = signal.signal(signal.SIGUSR1, lambda *_: None)
    main = threading.get_ident()
    timer = threading.Timer(0.1, signal.pthread_kill, args=(main, signal.SIGUSR1))
    try:
        timer.start()
        start = time.monotonic()
        assert no_event(created, 10_000)
        assert time.monotonic() - start < 5.0
    finally:
        timer.join()
        signal.signal(signal.SIGUSR1, previous)
    pynvml.nvmlEventSetFree(created)


def test_freeing_a_set_being_waited_on_is_refused(session: Any, nvml_events: EventPipe,
                                                  capfd: pytest.CaptureFixture[str]) -> None:
    created = event_set((0, XID))
    sets = session.fake.event_sets()
    waiter = threading.Thread(target=no_event, args=(created, 5000))
    waiter.start()
    time.sleep(0.1)
    with pytest.raises(pynvml.NVMLError_InUse):
        pynvml.nvmlEventSetFree(created)
    assert "undefined in NVML" in capfd.readouterr().err
    nvml_events.send(0, "xid", 1)
    waiter.join(5)
    pynvml.nvmlEventSetFree(created)
    assert session.fake.event_sets() == sets - 1


def test_events_reach_another_process_through_subprocess_env(
        fake_nvml_lib: Path, tmp_path: Path) -> None:
    profile = machine().write(tmp_path / "machine.nvml")
    script = (
        "import pynvml\n"
        "pynvml.nvmlInit()\n"
        "s = pynvml.nvmlEventSetCreate()\n"
        "pynvml.nvmlDeviceRegisterEvents(pynvml.nvmlDeviceGetHandleByIndex(1), 8, s)\n"
        "print('ready', flush=True)\n"
        "d = pynvml.nvmlEventSetWait_v2(s, 10000)\n"
        "print(pynvml.nvmlDeviceGetIndex(d.device), d.eventType, d.eventData, flush=True)\n"
    )
    with EventPipe(tmp_path / "events.fifo") as pipe:
        env = subprocess_env(fake_nvml_lib, profile, events=pipe.path)
        with subprocess.Popen([sys.executable, "-c", script], env=env, text=True,
                              stdout=subprocess.PIPE) as child:
            assert child.stdout is not None
            assert child.stdout.readline() == "ready\n"
            pipe.send(1, "xid", 79)
            out, _ = child.communicate(timeout=20)
    assert (child.returncode, out) == (0, "1 8 79\n")


# ----------------------------------------------------------------------------- live mode


def test_an_open_session_sees_a_mig_reconfiguration(session: Any) -> None:
    """Real NVML answers an open session with the hardware's current state."""
    before = Machine(gpus=[profiles.a100_40gb(mig_enabled=True,
                                              mig_layout=mig("3g.20gb", "2g.10gb", "1g.5gb"))],
                     seed="live")
    after = Machine(gpus=[profiles.a100_40gb(mig_enabled=True, mig_layout=mig("7g.40gb"))],
                    seed="live")
    session(before)
    assert pynvml.nvmlDeviceGetCount() == 1
    gpu = handle(0)
    third = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 2)
    assert pynvml.nvmlDeviceGetUUID(third) == before.resolve()[0].mig[2].uuid
    session(after)
    assert pynvml.nvmlDeviceGetCount() == 1  # the count re-reads the changed machine
    assert session.fake.init_count() == 1
    whole = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0)  # the old handle still works
    assert pynvml.nvmlDeviceGetUUID(whole) == after.resolve()[0].mig[0].uuid
    assert pynvml.nvmlDeviceGetAttributes(whole).gpuInstanceSliceCount == 7
    with pytest.raises(pynvml.NVMLError_NotFound):  # that MIG device is gone
        pynvml.nvmlDeviceGetUUID(third)
    session(Machine(gpus=[], seed="live"))
    assert pynvml.nvmlDeviceGetCount() == 0
    with pytest.raises(pynvml.NVMLError_GpuIsLost):  # the GPU is gone
        pynvml.nvmlDeviceGetName(gpu)


def test_a_gpu_spec_can_support_no_event_at_all(session: Any) -> None:
    session(Machine(gpus=[GpuSpec(name="NVIDIA Old", memory_bytes=1 << 30, compute=(3, 5),
                                  architecture="kepler", events=0)]))
    pynvml.nvmlDeviceGetCount()
    assert pynvml.nvmlDeviceGetSupportedEventTypes(handle(0)) == 0
    created = event_set()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceRegisterEvents(handle(0), XID, created)
    pynvml.nvmlEventSetFree(created)


def test_the_call_log_counts_every_call_up_to_each_device_count(
        session: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    session(profiles.t4x4())
    log = tmp_path / "calls"
    monkeypatch.setenv("FAKE_NVML_CALL_LOG", str(log))
    pynvml.nvmlDeviceGetCount()
    for i in range(4):
        pynvml.nvmlDeviceGetName(handle(i))  # 2 calls each: the handle, the name
    pynvml.nvmlDeviceGetCount()
    rows = [line.split() for line in log.read_text().splitlines()]
    assert len(rows) == 2
    (t1, c1), (t2, c2) = ((float(t), int(c)) for t, c in rows)
    assert c2 - c1 == 4 * 2 + 1 and t2 >= t1


def test_a_reload_that_changes_a_gpus_instances_sends_it_a_mig_config_event(
        session: Any) -> None:
    """As the driver does when GPU or compute instances are created or destroyed: to every
    set registered for it, without a FIFO; a reload that changes nothing sends none."""
    before = Machine(gpus=[profiles.a100_40gb(mig_enabled=True, mig_layout=mig("7g.40gb")),
                           profiles.a100_40gb(mig_enabled=True, mig_layout=mig("7g.40gb"))],
                     seed="relayout")
    after = replace(before, gpus=[before.gpus[0], profiles.a100_40gb(
        mig_enabled=True, mig_layout=mig("3g.20gb", "3g.20gb"))])
    session(before)
    pynvml.nvmlDeviceGetCount()
    mig_only, xid_only = event_set((0, MIG_CHANGE), (1, MIG_CHANGE)), event_set((1, XID))
    session(before)  # rewritten, unchanged
    pynvml.nvmlDeviceGetCount()
    assert no_event(mig_only)
    session(after)
    pynvml.nvmlDeviceGetCount()
    data = pynvml.nvmlEventSetWait_v2(mig_only, 1000)
    assert (address(data.device), data.eventType) == (address(handle(1)), MIG_CHANGE)
    assert no_event(mig_only), "GPU 0 kept its instances"
    assert no_event(xid_only), "not registered for MIG changes"
    for created in (mig_only, xid_only):
        pynvml.nvmlEventSetFree(created)


def test_a_gpu_whose_instance_changes_are_not_announced_sends_no_event(session: Any) -> None:
    """``mig_events=False``: it accepts the registration, and its new instances are seen at
    once, but no MIG-config event reports them (a driver that never delivers one)."""
    before = Machine(gpus=[profiles.a100_40gb(mig_enabled=True, mig_layout=mig("7g.40gb"),
                                              mig_events=False)], seed="unannounced")
    after = replace(before, gpus=[profiles.a100_40gb(
        mig_enabled=True, mig_layout=mig("3g.20gb", "3g.20gb"), mig_events=False)])
    session(before)
    pynvml.nvmlDeviceGetCount()
    registered = event_set((0, MIG_CHANGE))
    session(after)
    pynvml.nvmlDeviceGetCount()
    assert no_event(registered)
    assert pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle(0), 1) is not None, "seen at once"
    pynvml.nvmlEventSetFree(registered)


def test_flaky_answers_an_error_to_a_share_of_the_calls(session: Any) -> None:
    flaky = replace(profiles.t4x4(), flaky=("TIMEOUT", 10.0))
    session(flaky)
    answers = {"ok": 0, "timeout": 0}
    for _ in range(2000):
        try:
            pynvml.nvmlDeviceGetCount()
            answers["ok"] += 1
        except pynvml.NVMLError_Timeout:
            answers["timeout"] += 1
    assert 100 <= answers["timeout"] <= 300, answers
    created = event_set()  # the event-set calls never fail
    for _ in range(50):
        assert no_event(created, 0)
    pynvml.nvmlEventSetFree(created)
    pynvml.nvmlInit()  # nor do nvmlInit and nvmlShutdown
    pynvml.nvmlShutdown()


# ----------------------------------------------------------------------------- power limits


def test_power_limit_constraints_come_from_the_profile_in_milliwatts(session: Any) -> None:
    assert pynvml.nvmlDeviceGetPowerManagementLimitConstraints(handle(0)) == [200000, 700000]
    assert pynvml.nvmlDeviceGetPowerManagementLimitConstraints(handle(2)) == [60000, 70000]


def test_power_limit_constraints_are_not_supported_without_a_range(session: Any) -> None:
    session(Machine(gpus=[profiles.h100(power_limits_mw=None), t4()], seed="power"))
    pynvml.nvmlDeviceGetCount()  # the open session sees the new machine from here
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetPowerManagementLimitConstraints(handle(0))
    assert pynvml.nvmlDeviceGetPowerManagementLimitConstraints(handle(1)) == [60000, 70000]


def test_power_limit_constraints_need_both_pointers(session: Any) -> None:
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetPowerManagementLimitConstraints")
    low = ctypes.c_uint()
    assert fn(handle(0), ctypes.byref(low), None) == pynvml.NVML_ERROR_INVALID_ARGUMENT


def test_the_addressing_mode_comes_from_the_profile_and_checks_the_struct_version(
        session: Any) -> None:
    assert pynvml.nvmlDeviceGetAddressingMode(handle(0)) == pynvml.NVML_DEVICE_ADDRESSING_MODE_HMM
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetAddressingMode(handle(2))  # the T4
    mode = pynvml.c_nvmlDeviceAddressingMode_t()
    mode.version = 0
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetAddressingMode")
    assert fn(handle(0), ctypes.byref(mode)) == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH


def test_possible_placements_are_counted_then_listed_whatever_the_mig_mode(
        session: Any) -> None:
    count = ctypes.c_uint()
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle(0), 14, None, ctypes.byref(count))
    assert count.value == 3  # 2g.20gb on an H100 (MIG off): starts 0, 2, 4
    small = (pynvml.c_nvmlGpuInstancePlacement_t * 2)()
    count.value = 2
    with pytest.raises(pynvml.NVMLError_InsufficientSize):
        pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle(0), 14, small,
                                                          ctypes.byref(count))
    places = (pynvml.c_nvmlGpuInstancePlacement_t * 3)()
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle(0), 14, places, ctypes.byref(count))
    assert [(p.start, p.size) for p in places] == [(0, 2), (2, 2), (4, 2)]
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle(0), 99, None,
                                                          ctypes.byref(count))
    with pytest.raises(pynvml.NVMLError_NotSupported):  # the T4 has no MIG
        pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle(2), 14, None,
                                                          ctypes.byref(count))


def test_a_profile_rewritten_under_a_reader_is_never_seen_half_written(tmp_path: Path) -> None:
    """An agent's cycle reads the profile whenever it likes: a rewrite must show it the old
    machine or the new one. A truncated file is a machine with no GPU, a cut one a machine
    with fewer: a loaded machine let readers see both, and a test saw GPUs come and go."""
    path = tmp_path / "machine.nvml"
    small, big = profiles.t4x4(), profiles.hgx_h100()
    small.write(path)
    seen: set[str] = set()
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            seen.add(path.read_text())

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(100):
            (big if i % 2 else small).write(path)
    finally:
        stop.set()
        reader.join(30)
    assert seen <= {small.render(), big.render()}
    assert path.read_text() == big.render()
