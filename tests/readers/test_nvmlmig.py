"""NVML's MIG side through the real pynvml binding against the fake libnvidia-ml.so.1: MIG
devices by slot with their profile names (media extensions, a compute instance smaller than
its GPU instance, empty slots), the check of each read that they are still the same (what its
errors do), and the profile tables read once per NVML session."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from fakes import profiles
from fakes.fakenvml import CI, GI, Machine

from gfd.readers.nvml import NvmlReader
from gfd.snapshot import Snapshot


def read(nvml_machine: Any, machine: Machine) -> Snapshot:
    nvml_machine(machine)
    with NvmlReader() as reader:
        return reader.read()


def test_h100_and_a30_media_extension_profiles(nvml_machine: Any) -> None:
    (h100,) = read(nvml_machine, profiles.h100_mig()).gpus
    assert [d.profile_name for d in h100.mig_devices] == [
        "MIG 1g.10gb+me",
        "MIG 1g.20gb",
        "MIG 3g.40gb",
    ]
    me = h100.mig_devices[0]
    assert (me.memory_mib, me.multiprocessors, me.ofas, me.jpegs) == (9984, 16, 1, 1)
    (a30,) = read(nvml_machine, profiles.a30_mig()).gpus
    assert [d.profile_name for d in a30.mig_devices] == [
        "MIG 2g.12gb",
        "MIG 1g.6gb",
        "MIG 1g.6gb+me",
    ]
    assert [d.memory_mib for d in a30.mig_devices] == [11968, 5952, 5952]


def test_compute_instance_smaller_than_its_gpu_instance(nvml_machine: Any) -> None:
    (gpu,) = read(nvml_machine, profiles.a100_compute_split()).gpus
    split, plain = gpu.mig_devices
    assert split.profile_name == "MIG 1c.3g.20gb"
    assert (split.gi_slices, split.ci_slices, split.multiprocessors, split.memory_mib) == (
        3,
        1,
        14,
        20096,
    )
    assert plain.profile_name == "MIG 2g.10gb"


def test_empty_mig_slots_are_skipped(nvml_machine: Any) -> None:
    layout = [GI("3g.20gb", cis=[CI(slot=5)]), GI("1g.5gb", cis=[CI(slot=1)])]
    machine = Machine(gpus=[profiles.a100_40gb(mig_enabled=True, mig_layout=layout)])
    (gpu,) = read(nvml_machine, machine).gpus
    assert [(d.index, d.profile_name) for d in gpu.mig_devices] == [
        (1, "MIG 1g.5gb"),
        (5, "MIG 3g.20gb"),
    ]


TABLE_CALLS = ("nvmlDeviceGetGpuInstanceProfileInfoV",
               "nvmlGpuInstanceGetComputeInstanceProfileInfoV")


def test_mig_profile_tables_are_read_once_per_session(nvml_machine: Any) -> None:
    nvml_machine(profiles.dgx_a100_layout())
    fake = nvml_machine.fake
    reader = NvmlReader()
    first = reader.read()
    tables = sum(fake.call_count(c) for c in TABLE_CALLS)
    assert tables > 0
    assert reader.read() == first
    assert sum(fake.call_count(c) for c in TABLE_CALLS) == tables, "not read again"
    nvml_machine(profiles.dgx_a100_all_1g5gb())  # profiles not seen yet are read once
    second = reader.read()
    assert {m.profile_name for g in second.gpus for m in g.mig_devices} == {"MIG 1g.5gb"}
    tables = sum(fake.call_count(c) for c in TABLE_CALLS)
    assert reader.read() == second
    assert sum(fake.call_count(c) for c in TABLE_CALLS) == tables
    reader.close()  # a new session reads them again
    reader.read()
    assert sum(fake.call_count(c) for c in TABLE_CALLS) > tables
    reader.close()


@pytest.mark.parametrize("error", ["NOT_SUPPORTED", "INVALID_ARGUMENT"])
def test_a_gpu_that_offers_no_profile_reads_as_offering_none_not_as_unread(
        nvml_machine: Any, error: str) -> None:
    """NVML may answer NOT_SUPPORTED (or INVALID_ARGUMENT) to every GPU-instance profile
    query of a MIG-capable GPU: the devices read records an empty table, which a snapshot
    tells from a table not read (None: a read without the device facts)."""
    machine = profiles.hgx_h100()
    machine.gpus[1] = replace(machine.gpus[1], fail={
        "nvmlDeviceGetGpuInstanceProfileInfoV": error,
        "nvmlDeviceGetGpuInstanceProfileInfo": error})
    nvml_machine(machine)
    with NvmlReader(device_facts=True) as reader:
        gpus = reader.read().gpus
    assert gpus[1].mig_capable and gpus[1].mig_profiles == () and gpus[1].degraded == ()
    assert gpus[0].mig_profiles and len(gpus[0].mig_profiles) == 7
    assert [g.mig_profiles for g in read(nvml_machine, machine).gpus] == [None] * 8
    machine.gpus[1] = replace(machine.gpus[1], fail={
        "nvmlDeviceGetGpuInstanceProfileInfoV": "UNKNOWN",
        "nvmlDeviceGetGpuInstanceProfileInfo": "UNKNOWN"})
    nvml_machine(machine)
    with NvmlReader(device_facts=True) as reader:
        failed = reader.read().gpus[1]
    assert failed.mig_profiles is None and [d.fact for d in failed.degraded] == ["mig_profiles"]


def test_a_failed_layout_check_reads_the_devices_again_and_holds_them_if_that_fails(
        nvml_machine: Any) -> None:
    """An error in the check (anything but a lost GPU) is no change and no loss: the devices
    are enumerated again, and where that fails too the last ones are held (a degraded fact)
    until an enumeration answers."""
    machine = profiles.dgx_a100_layout()
    nvml_machine(machine)
    with NvmlReader() as reader:
        good = reader.read()
        assert reader.read() == good
        broken = profiles.dgx_a100_layout()
        broken.gpus[1].fail["nvmlDeviceGetAttributes_v2"] = "UNKNOWN"
        nvml_machine(broken)
        nvml_machine.fake.reset_counts()
        held = reader.read().gpus[1]
        assert nvml_machine.fake.call_count("nvmlDeviceGetMaxMigDeviceCount") == 1, (
            "enumerated again, on this GPU only")
        assert held.mig_devices == good.gpus[1].mig_devices
        assert [(d.fact, d.held) for d in held.degraded] == [("mig_devices", True)]
        nvml_machine(machine)
        nvml_machine.fake.reset_counts()
        assert reader.read() == good
        assert nvml_machine.fake.call_count("nvmlDeviceGetMaxMigDeviceCount") == 1
        nvml_machine.fake.reset_counts()
        assert reader.read() == good
        assert nvml_machine.fake.call_count("nvmlDeviceGetMaxMigDeviceCount") == 0, (
            "checked again once it answered")


@pytest.mark.parametrize("call", ["nvmlDeviceGetMigDeviceHandleByIndex",
                                  "nvmlDeviceGetAttributes_v2"])
def test_a_gpu_lost_during_the_layout_check_is_lost(nvml_machine: Any, call: str) -> None:
    layout = [GI("3g.20gb", cis=[CI(slot=5)]), GI("1g.5gb", cis=[CI(slot=1)])]
    machine = Machine(gpus=[profiles.a100_40gb(mig_enabled=True, mig_layout=layout)])
    nvml_machine(machine)
    with NvmlReader() as reader:
        reader.read()
        lost = Machine(gpus=[profiles.a100_40gb(mig_enabled=True, mig_layout=layout)])
        lost.gpus[0].fail[call] = "GPU_IS_LOST"
        nvml_machine(lost)
        (gpu,) = reader.read().gpus
        assert gpu.error == "GPU is lost"
