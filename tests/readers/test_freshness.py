"""When the NVML reader asks again: each fact changed on the fake NVML (live mode) in turn,
and the read after which the labels (and the snapshot) follow.

The oracle is a fresh NvmlReader on the changed machine: "follows" means the long-lived
reader's snapshot and labels equal the fresh reader's; "not yet" means they equal what they
were before the change. Facts no label derives from (minor, PCI bus id, brand, architecture,
addressing mode) are seen in the snapshot."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
from fakes import profiles
from fakes.fakenvml import CI, GI, EventPipe, Fabric, GpuSpec, Machine, mig
from helpers.timing import Clock

from gfd.errors import DiscoveryError
from gfd.labelers.options import LabelOptions
from gfd.labelers.pipeline import compute_labels
from gfd.readers.freshness import (
    FULL_READ_INTERVAL,
    LOST_AFTER_READS,
    LOST_AFTER_SECONDS,
    Changes,
    Unanswered,
    fabric_settled,
)
from gfd.readers.nvml import NvmlEvents, NvmlReader
from gfd.snapshot import Fabric as SnapshotFabric
from gfd.snapshot import Gpu, Snapshot

MIB = 1024 * 1024
OPTIONS = LabelOptions(mig_strategy="mixed")
CHANGED = 2
"""The GPU whose facts change."""


def plain(snapshot: Snapshot) -> tuple[Gpu, ...]:
    """The GPUs without the per-read error notes."""
    return tuple(replace(g, degraded=()) for g in snapshot.gpus)


def fresh(nvml_machine: Any, machine: Machine, *, device_facts: bool = False,
          ) -> tuple[tuple[Gpu, ...], dict[str, str]]:
    """What a new reader reads of ``machine``: the oracle."""
    nvml_machine(machine)
    with NvmlReader(device_facts=device_facts) as reader:
        snap = reader.read()
    return plain(snap), compute_labels(snap, OPTIONS).labels


class Seen:
    """A long-lived reader (as the agent keeps one) and what its reads give."""

    def __init__(self, reader: NvmlReader) -> None:
        self.reader = reader

    def read(self) -> tuple[tuple[Gpu, ...], dict[str, str]]:
        snap = self.reader.read()
        return plain(snap), compute_labels(snap, OPTIONS).labels


# fact -> how it changes on GPU CHANGED (same UUID, same index)
STATIC_CHANGES: dict[str, Callable[[GpuSpec], None]] = {
    "name": lambda g: setattr(g, "name", "NVIDIA H100 NVL"),
    "minor": lambda g: setattr(g, "minor", 12),
    "memory": lambda g: setattr(g, "memory_bytes", 95830 * MIB),
    "compute_capability": lambda g: setattr(g, "compute", (9, 1)),
    "architecture": lambda g: setattr(g, "architecture", "blackwell"),
    "brand": lambda g: setattr(g, "brand", "tesla"),
    "pci": lambda g: setattr(g, "pci_bus_id", "00000000:F1:00.0"),
    "power_limits": lambda g: setattr(g, "power_limits_mw", (200000, 400000)),
    "nvlink": lambda g: setattr(g, "nvlinks_active", 0),
    "fabric (settled)": lambda g: setattr(g, "fabric", Fabric(clique_id=7)),
    "addressing_mode": lambda g: setattr(g, "addressing_mode", "ATS"),
}

# fact -> how it changes; the next read follows
CYCLE_CHANGES: dict[str, Callable[[Machine], None]] = {
    "compute mode": lambda m: setattr(m.gpus[CHANGED], "compute_mode", "exclusive-process"),
    "MIG mode pending": lambda m: setattr(m.gpus[CHANGED], "mig_pending", True),
    "MIG mode current": lambda m: setattr(m.gpus[CHANGED], "mig_enabled", True),
    "device count": lambda m: m.gpus.pop(),
    "UUID at an index": lambda m: m.gpus.__setitem__(
        CHANGED, profiles.h100(uuid="GPU-0f0f0f0f-0000-4000-8000-000000000002",
                               name="NVIDIA H100 NVL", fabric=Fabric())),
    "fabric not settled": lambda m: setattr(m.gpus[CHANGED], "fabric", Fabric()),
    "NVLink, once the fabric manager registers the GPUs": lambda m: [
        (setattr(g, "fabric", Fabric()), setattr(g, "nvlinks_active", 18)) for g in m.gpus],
}


def machine_before(fact: str) -> Machine:
    machine = profiles.hgx_h100()
    if fact == "fabric not settled":
        machine.gpus[CHANGED].fabric = Fabric(state="in-progress", status="IN_USE")
    if fact.startswith("NVLink"):  # gfd started before the fabric manager trained the links
        for gpu in machine.gpus:
            gpu.fabric = Fabric(state="in-progress", status="IN_USE")
            gpu.nvlinks_active = 0
    return machine


@pytest.fixture
def reader() -> Iterator[NvmlReader]:
    with NvmlReader(clock=Clock()) as nvml:
        yield nvml


@pytest.mark.parametrize("fact", sorted(CYCLE_CHANGES))
def test_a_fact_that_changes_silently_is_read_every_cycle(nvml_machine: Any,
                                                          reader: NvmlReader, fact: str) -> None:
    before = machine_before(fact)
    seen = Seen(reader)
    nvml_machine(before)
    old = seen.read()
    assert seen.read() == old
    after = machine_before(fact)
    CYCLE_CHANGES[fact](after)
    expected = fresh(nvml_machine, after)
    assert expected != old, "the change shows"
    nvml_machine(after)
    assert seen.read() == expected, "the next steady read follows"


@pytest.mark.parametrize("fact", sorted(STATIC_CHANGES))
@pytest.mark.parametrize("reason", ["reload", "full read period", "a handle error",
                                    "a failed read", "an event"])
def test_a_static_fact_is_read_again_only_for_a_reason(nvml_machine: Any,
                                                       nvml_events: EventPipe, fact: str,
                                                       reason: str) -> None:
    clock = Clock()
    reader = NvmlReader(clock=clock, device_facts=True)
    seen = Seen(reader)
    nvml_machine(profiles.hgx_h100())
    events = reader.events()
    try:
        assert events.open(), "the GPUs are listened to"
        old = seen.read()
        after = profiles.hgx_h100()
        STATIC_CHANGES[fact](after.gpus[CHANGED])
        expected = fresh(nvml_machine, after, device_facts=True)  # gfd devices' facts too
        assert expected != old, "the change shows"
        nvml_machine(after)
        for _ in range(3):
            assert seen.read() == old, "a steady read does not ask a static fact"
        clock.now += FULL_READ_INTERVAL - 1
        assert seen.read() == old
        if reason == "reload":
            reader.refresh()
        elif reason == "full read period":
            clock.now += 1
        elif reason == "a handle error":
            broken = profiles.hgx_h100()
            STATIC_CHANGES[fact](broken.gpus[CHANGED])
            broken.gpus[CHANGED].fail["nvmlDeviceGetHandleByIndex_v2"] = "UNKNOWN"
            nvml_machine(broken)
            kept = seen.read()
            assert kept == old, "a GPU that does not answer once keeps its facts"
            nvml_machine(after)
        elif reason == "a failed read":
            broken = replace(after, fail={"nvmlDeviceGetCount_v2": "NO_PERMISSION"})
            nvml_machine(broken)
            with pytest.raises(DiscoveryError, match="nvmlDeviceGetCount"):
                reader.read()
            nvml_machine(after)
        else:
            nvml_events.send(CHANGED, "xid", 13)  # even an application Xid
            event = events.wait(10)
            assert event is not None and event.gpu_index == CHANGED
        assert seen.read() == expected, f"the labels follow after {reason}"
    finally:
        events.close()
        reader.close()


def mig_machine(*layouts: list[GI]) -> Machine:
    """8 x H100 with MIG on, GPU i laid out as ``layouts[i]`` (the rest without devices); no
    event announces a change of its instances, though every GPU accepts the registration."""
    machine = profiles.hgx_h100()
    for i, gpu in enumerate(machine.gpus):
        gpu.mig_enabled = True
        gpu.mig_layout = list(layouts[i]) if i < len(layouts) else []
        gpu.mig_events = False
    return machine


BEFORE_LAYOUT = (mig("3g.40gb", "3g.40gb"), [], [GI("3g.40gb", cis=[CI(slices=1), CI(slices=1)])])
LAYOUT_CHANGES: dict[str, tuple[list[GI], ...]] = {
    "destroyed and others created": (mig("7g.80gb"), [], BEFORE_LAYOUT[2]),
    "the same slots, other profiles": (mig("4g.40gb", "3g.40gb"), [], BEFORE_LAYOUT[2]),
    "created where there was none": (BEFORE_LAYOUT[0], mig("1g.10gb"), BEFORE_LAYOUT[2]),
    "a compute instance destroyed": (BEFORE_LAYOUT[0], [],
                                     [GI("3g.40gb", cis=[CI(slices=1, ci_id=0)])]),
    "a compute instance created": (BEFORE_LAYOUT[0], [], [GI("3g.40gb", cis=[
        CI(slices=1), CI(slices=1), CI(slices=1)])]),
}


@pytest.mark.parametrize("events", [True, False], ids=["events registered", "no events"])
@pytest.mark.parametrize("change", sorted(LAYOUT_CHANGES))
def test_a_mig_layout_change_is_read_by_the_next_read_events_or_not(
        nvml_machine: Any, change: str, events: bool) -> None:
    """No event announces it (a driver that accepts the registration and sends nothing): the
    next read follows all the same -- events make a change visible sooner, never the interval
    blind."""
    machine, other = mig_machine(*BEFORE_LAYOUT), mig_machine(*LAYOUT_CHANGES[change])
    expected_other = fresh(nvml_machine, other)
    expected = fresh(nvml_machine, machine)
    assert expected != expected_other
    reader = NvmlReader()
    seen = Seen(reader)
    listening = reader.events()
    try:
        nvml_machine(machine)
        if events:
            assert all("mig-config-change" in kinds for kinds in listening.open().values())
        assert seen.read() == expected
        assert seen.read() == expected
        nvml_machine(other)
        assert seen.read() == expected_other, "the next read follows, no event taken"
        assert seen.read() == expected_other
    finally:
        listening.close()
        reader.close()


@pytest.mark.parametrize("events", [True, False], ids=["events registered", "no events"])
def test_a_steady_read_asks_each_mig_slot_and_no_device_details(
        nvml_machine: Any, events: bool) -> None:
    """A look at each empty MIG slot of a MIG-enabled GPU, and the UUID and attributes of the
    device each occupied slot held (through its handle). The devices' other details (profile
    names, GPU and compute instances) are read again only when that shows a change."""
    machine = mig_machine(*BEFORE_LAYOUT)
    nvml_machine(machine)
    slots = 8 * machine.gpus[0].max_mig_devices
    devices = 4
    reader = NvmlReader()
    listening = reader.events()
    try:
        if events:
            listening.open()
        reader.read()
        reader.read()
        nvml_machine.fake.reset_counts()
        reader.read()
        fake = nvml_machine.fake
        assert fake.call_count("nvmlDeviceGetMigDeviceHandleByIndex") == slots - devices
        assert fake.call_count("nvmlDeviceGetUUID") == 8 + devices
        assert fake.call_count("nvmlDeviceGetAttributes_v2") == devices
        assert fake.call_count() == 33 + slots + devices
        for detail in ("nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetGpuInstanceId",
                       "nvmlDeviceGetGpuInstanceById", "nvmlGpuInstanceGetComputeInstanceById"):
            assert fake.call_count(detail) == 0, detail
    finally:
        listening.close()
        reader.close()


def test_steady_reads_ask_only_the_cycle_facts(nvml_machine: Any) -> None:
    """8 x H100 with events: the count, and per GPU its handle, UUID, MIG mode and compute
    mode: 33 calls, where the first read asks every fact."""
    nvml_machine(profiles.hgx_h100())
    reader = NvmlReader()
    events = reader.events()
    try:
        events.open()
        nvml_machine.fake.reset_counts()
        reader.read()
        first = nvml_machine.fake.call_count()
        nvml_machine.fake.reset_counts()
        reader.read()
        calls = {symbol: nvml_machine.fake.call_count(symbol) for symbol in (
            "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetUUID",
            "nvmlDeviceGetMigMode", "nvmlDeviceGetComputeMode")}
        assert calls == {"nvmlDeviceGetCount_v2": 1, "nvmlDeviceGetHandleByIndex_v2": 8,
                         "nvmlDeviceGetUUID": 8, "nvmlDeviceGetMigMode": 8,
                         "nvmlDeviceGetComputeMode": 8}
        assert nvml_machine.fake.call_count() == sum(calls.values()) == 33
        assert first > 33 * 2, f"the first read asks everything ({first} calls)"
    finally:
        events.close()
        reader.close()


# ----------------------------------------------------------------------------- no flapping


@pytest.mark.parametrize("call", ["nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetUUID"])
@pytest.mark.parametrize("error", ["TIMEOUT", "UNKNOWN", "NOT_FOUND"])
def test_a_gpu_that_does_not_answer_keeps_its_facts_until_the_failure_lasts(
        nvml_machine: Any, call: str, error: str) -> None:
    clock = Clock()
    healthy = profiles.hgx_h100()
    broken = profiles.hgx_h100()
    broken.gpus[CHANGED].fail[call] = error
    reader = NvmlReader(clock=clock)
    try:
        nvml_machine(healthy)
        good = Seen(reader).read()
        nvml_machine(broken)
        step = LOST_AFTER_SECONDS / (LOST_AFTER_READS * 4)
        reads = 0
        while True:
            snap = reader.read()
            reads += 1
            gpu = snap.gpus[CHANGED]
            if gpu.error is not None:
                break
            assert (plain(snap), compute_labels(snap, OPTIONS).labels) == good
            assert [(d.fact, d.held) for d in gpu.degraded] == [("identity", True)]
            assert call.startswith(gpu.degraded[0].call), "the binding's name for the call"
            clock.now += step
        assert reads > LOST_AFTER_READS, "kept for more than the reads alone"
        assert reads - 1 >= LOST_AFTER_SECONDS / step, "and for the seconds"
        assert gpu.uuid == good[0][CHANGED].uuid and gpu.error
        assert compute_labels(snap, OPTIONS).labels["nvidia.com/gpu.count"] == "7"
        nvml_machine(healthy)
        assert Seen(reader).read() == good, "back when it answers again"
    finally:
        reader.close()


def test_gpu_is_lost_is_lost_at_once_even_after_good_reads(nvml_machine: Any) -> None:
    reader = NvmlReader(clock=Clock())
    try:
        nvml_machine(profiles.hgx_h100())
        reader.read()
        lost = profiles.hgx_h100()
        lost.gpus[CHANGED].fail["nvmlDeviceGetUUID"] = "GPU_IS_LOST"
        nvml_machine(lost)
        assert reader.read().gpus[CHANGED].error == "GPU is lost"
    finally:
        reader.close()


def test_a_device_count_that_times_out_keeps_the_last_count_for_a_while(
        nvml_machine: Any) -> None:
    clock = Clock()
    reader = NvmlReader(clock=clock)
    try:
        nvml_machine(profiles.hgx_h100())
        good = plain(reader.read())
        nvml_machine(replace(profiles.hgx_h100(), fail={"nvmlDeviceGetCount_v2": "TIMEOUT"}))
        for _ in range(LOST_AFTER_READS + 2):
            assert plain(reader.read()) == good
        clock.now += LOST_AFTER_SECONDS
        with pytest.raises(DiscoveryError, match=r"^NVML nvmlDeviceGetCount failed: Timeout$"):
            reader.read()
    finally:
        reader.close()


# ----------------------------------------------------------------------------- units


def test_changes_hand_each_mark_to_one_read() -> None:
    changes = Changes()
    changes.changed("GPU-a")
    taken = changes.take()
    assert (taken.stale, taken.everything) == ({"GPU-a"}, False)
    again = changes.take()
    assert (again.stale, again.everything) == (set(), False)
    changes.changed("")
    assert changes.take().everything


def test_events_tell_the_changes_they_were_made_with(nvml_machine: Any,
                                                    nvml_events: EventPipe) -> None:
    changes = Changes()
    nvml_machine(profiles.hgx_h100())
    with NvmlEvents(changes) as events:
        events.open()
        assert changes.take().stale == frozenset(), "a registration marks nothing"
        nvml_events.send(5, "gpu-unavailable")
        event = events.wait(10)
        assert event is not None
        assert changes.take().stale == {event.gpu_uuid}


def test_unanswered_needs_both_reads_and_seconds() -> None:
    tracker = Unanswered(reads=3, seconds=60.0)
    streak = tracker.failed(1, 0.0)
    assert not tracker.lost(streak, 0.0)
    streak = tracker.failed(1, 100.0)
    assert not tracker.lost(streak, 100.0), "two reads, however long"
    streak = tracker.failed(1, 101.0)
    assert tracker.lost(streak, 101.0)
    tracker.answered(1)
    fast = [tracker.failed(1, t) for t in (0.0, 1.0, 2.0, 3.0)]
    assert not tracker.lost(fast[-1], 3.0), "four reads in three seconds"
    tracker.forget_from(1)
    assert tracker.failed(1, 50.0).reads == 1


@pytest.mark.parametrize(("fabric", "settled"), [
    (None, True),
    (SnapshotFabric(state="not-supported", status_ok=False, cluster_uuid="", clique_id=0),
     True),
    (SnapshotFabric(state="completed", status_ok=True, cluster_uuid="", clique_id=0), True),
    (SnapshotFabric(state="completed", status_ok=False, cluster_uuid="", clique_id=0), False),
    (SnapshotFabric(state="in-progress", status_ok=False, cluster_uuid="", clique_id=0), False),
    (SnapshotFabric(state="not-started", status_ok=True, cluster_uuid="", clique_id=0), False),
])
def test_fabric_settled(fabric: SnapshotFabric | None, settled: bool) -> None:
    assert fabric_settled(fabric) is settled

