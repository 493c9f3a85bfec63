"""NvmlReader through the real pynvml binding against the fake libnvidia-ml.so.1."""

from __future__ import annotations

import ctypes.util
import json
import re
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pynvml
import pytest
from fakes import profiles
from fakes.fakenvml import (
    Fabric,
    GpuSpec,
    Machine,
    MigTable,
    gpu_uuid,
    mig,
    placements,
    subprocess_env,
)
from helpers.paths import ROOT

from gfd.errors import DiscoveryError, NvmlInitError
from gfd.readers.nvml import DEVICE_FACTS, NvmlReader
from gfd.snapshot import FACTS, GiProfile, Gpu, MigDevice, Placement, Snapshot, validate_types
from gfd.snapshot import Fabric as SnapshotFabric

REPO = Path(__file__).resolve().parents[2]
ZERO_UUID = "00000000-0000-0000-0000-000000000000"


def read(nvml_machine: Any, machine: Machine, *, device_facts: bool = False) -> Snapshot:
    nvml_machine(machine)
    with NvmlReader(device_facts=device_facts) as reader:
        return reader.read()


def gi_profiles(table: MigTable | None) -> tuple[GiProfile, ...]:
    """A MIG-capable GPU's profile table as the reader must report it, placements included."""
    if table is None:
        return ()
    return tuple(GiProfile(
        index=p.index, id=p.id, name=p.name, slices=p.slices, memory_mib=p.memory_mib,
        multiprocessors=p.sms, copy_engines=p.copy_engines, decoders=p.decoders,
        encoders=p.encoders, jpegs=p.jpegs, ofas=p.ofas,
        placements=tuple(Placement(start=a, size=b) for a, b in placements(table, p)))
        for p in sorted(table.gi, key=lambda p: p.index))


def expected(machine: Machine) -> Snapshot:
    """What the reader must report for a machine, derived from its description."""
    gpus = []
    for index, (spec, res) in enumerate(zip(machine.gpus, machine.resolve(), strict=True)):
        if spec.fault:
            error = {"lost": "GPU is lost", "unknown": "Unknown Error"}[spec.fault]
            gpus.append(Gpu(index=index, error=error))
            continue
        enabled = spec.mig_supported and spec.mig_enabled
        pending = spec.mig_enabled if spec.mig_pending is None else spec.mig_pending
        fabric = None
        if spec.fabric is not None:
            fabric = SnapshotFabric(
                state=spec.fabric.state,
                status_ok=spec.fabric.status == "SUCCESS",
                cluster_uuid=spec.fabric.cluster_uuid,
                clique_id=spec.fabric.clique_id,
            )
        devices = tuple(
            MigDevice(
                index=m.slot,
                uuid=m.uuid,
                gpu_instance_id=m.gi_id,
                compute_instance_id=m.ci_id,
                profile_name=m.profile_name,
                memory_mib=m.gi_profile.memory_mib,
                multiprocessors=m.ci_profile.sms,
                gi_slices=m.gi_profile.slices,
                ci_slices=m.ci_profile.slices,
                copy_engines=m.gi_profile.copy_engines,
                decoders=m.gi_profile.decoders,
                encoders=m.gi_profile.encoders,
                jpegs=m.gi_profile.jpegs,
                ofas=m.gi_profile.ofas,
                gi_profile_id=m.gi_profile.id,
                placement_start=m.gi_start,
                placement_size=m.gi_profile.slices,
            )
            for m in res.mig
        )
        gpus.append(
            Gpu(
                index=index,
                uuid=res.uuid,
                minor=index if spec.minor is None else spec.minor,
                name=spec.name,
                memory_total_bytes=spec.memory_bytes,
                compute_capability=spec.compute,
                architecture=spec.architecture,
                brand=spec.brand,
                pci_bus_id=res.pci_bus_id,
                mig_capable=spec.mig_supported,
                mig_enabled=enabled,
                mig_pending_enabled=pending if spec.mig_supported else None,
                compute_mode=spec.compute_mode,
                nvlink_active=None if spec.nvlinks == 0 else spec.nvlinks_active > 0,
                fabric=fabric,
                power_limits_mw=spec.power_limits_mw,
                mig_devices=devices if enabled else (),
                addressing_mode=spec.addressing_mode,
                mig_profiles=gi_profiles(res.table) if spec.mig_supported else (),
            )
        )
    return Snapshot(
        nvml_available=True,
        driver_version=machine.driver,
        cuda_driver_version=machine.cuda,
        gpus=tuple(gpus),
        source="nvml",
    )


READABLE = sorted(set(profiles.MACHINES) - {"driver_not_loaded", "mig_permission_denied"})


@pytest.mark.parametrize("name", READABLE)
def test_every_named_machine_reads_as_described(nvml_machine: Any, name: str) -> None:
    machine = profiles.MACHINES[name]()
    snapshot = read(nvml_machine, machine, device_facts=True)
    assert snapshot == expected(machine)
    validate_types(snapshot)
    assert Snapshot.from_json(snapshot.to_json()) == snapshot


DEVICE_FACT_CALLS = ("nvmlDeviceGetMinorNumber", "nvmlDeviceGetArchitecture",
                     "nvmlDeviceGetAddressingMode",
                     "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
                     "nvmlDeviceGetGpuInstanceProfileInfo")
"""What only the facts of DEVICE_FACTS ask (the V profile call also names MIG devices)."""


@pytest.mark.parametrize("name", ["hgx_h100", "dgx_a100_layout", "a30_mig"])
def test_without_device_facts_a_read_leaves_them_out_and_asks_none_of_their_calls(
        nvml_machine: Any, name: str) -> None:
    """The minor number, the architecture, the addressing mode and the MIG profiles with their
    placements are only ``gfd devices``'s (and ``gfd snapshot``'s): every other read has the
    same snapshot without them."""
    machine = profiles.MACHINES[name]()
    fake = nvml_machine.fake
    snapshot = read(nvml_machine, machine)
    assert {c: fake.call_count(c) for c in DEVICE_FACT_CALLS} == dict.fromkeys(
        DEVICE_FACT_CALLS, 0)
    # a GPU with MIG off asks no profile table at all: nothing of its labels needs one
    off = [g for g in snapshot.gpus if g.mig_capable and not g.mig_enabled]
    if len(off) == len(snapshot.gpus):
        assert fake.call_count("nvmlDeviceGetGpuInstanceProfileInfoV") == 0
    assert snapshot == replace(expected(machine), gpus=tuple(
        replace(g, minor=None, architecture=None, addressing_mode=None, mig_profiles=None)
        for g in expected(machine).gpus))
    assert set(DEVICE_FACTS) <= set(FACTS)


# ----------------------------------------------------------------------------- literal facts


def test_hgx_h100(nvml_machine: Any) -> None:
    snap = read(nvml_machine, profiles.hgx_h100(), device_facts=True)
    assert (snap.driver_version, snap.cuda_driver_version) == ("580.159.04", 13000)
    assert (snap.machine_type, snap.vgpu, snap.source) == (None, None, "nvml")
    assert len(snap.gpus) == 8
    gpu = snap.gpus[0]
    assert gpu.name == "NVIDIA H100 80GB HBM3"
    assert gpu.memory_total_bytes == 85520809984
    assert gpu.memory_mib == 81559
    assert gpu.compute_capability == (9, 0)
    assert (gpu.architecture, gpu.brand) == ("hopper", "nvidia")
    assert gpu.uuid == gpu_uuid("hgx_h100", 0) and gpu.uuid.startswith("GPU-")
    assert [g.pci_bus_id for g in snap.gpus[:2]] == ["00000000:18:00.0", "00000000:2A:00.0"]
    assert (gpu.mig_capable, gpu.mig_enabled, gpu.mig_pending_enabled) == (True, False, False)
    assert gpu.compute_mode == "default"
    assert gpu.nvlink_active is True
    assert gpu.fabric == SnapshotFabric(
        state="completed", status_ok=True, cluster_uuid=ZERO_UUID, clique_id=0
    )
    assert (gpu.pci_class, gpu.timeslice, gpu.mig_devices, gpu.error) == (None, None, (), None)


def test_t4_has_no_mig_and_no_nvlink(nvml_machine: Any) -> None:
    snap = read(nvml_machine, profiles.t4x4(), device_facts=True)
    assert (snap.driver_version, snap.cuda_driver_version) == ("550.54.15", 12040)
    assert [g.name for g in snap.gpus] == ["Tesla T4"] * 4
    gpu = snap.gpus[3]
    assert (gpu.memory_mib, gpu.compute_capability, gpu.architecture) == (15360, (7, 5), "turing")
    assert gpu.pci_bus_id == "00000000:00:1E.0"
    assert (gpu.mig_capable, gpu.mig_enabled, gpu.mig_pending_enabled) == (False, False, None)
    assert (gpu.nvlink_active, gpu.fabric) == (None, None)


def test_mixed_node_and_geforce(nvml_machine: Any) -> None:
    snap = read(nvml_machine, profiles.a100_a10())
    a100, _, a10 = snap.gpus
    assert (a100.name, a100.memory_mib, a100.mig_capable, a100.nvlink_active) == (
        "NVIDIA A100 80GB PCIe",
        81920,
        True,
        False,
    )
    assert (a10.name, a10.compute_capability, a10.mig_capable, a10.nvlink_active) == (
        "NVIDIA A10",
        (8, 6),
        False,
        None,
    )
    (laptop,) = read(nvml_machine, profiles.geforce()).gpus
    assert laptop.name == "NVIDIA GeForce RTX 3060 Laptop GPU"
    assert (laptop.memory_total_bytes, laptop.brand, laptop.compute_mode) == (
        6442450944,
        "geforce",
        "default",
    )


def test_no_gpu(nvml_machine: Any) -> None:
    snap = read(nvml_machine, profiles.no_gpu())
    assert snap.gpus == () and snap.nvml_available and snap.driver_version == "550.54.15"


def test_dgx_a100_layout(nvml_machine: Any) -> None:
    gpus = read(nvml_machine, profiles.dgx_a100_layout()).gpus
    names = [[d.profile_name for d in g.mig_devices] for g in gpus]
    assert names == [
        ["MIG 1g.5gb"] * 7,
        ["MIG 3g.20gb", "MIG 2g.10gb", "MIG 1g.5gb"],
        ["MIG 3g.20gb", "MIG 3g.20gb"],
        ["MIG 7g.40gb"],
        [],
        [],
        [],
        [],
    ]
    assert [g.mig_enabled for g in gpus] == [True] * 5 + [False] * 3
    assert gpus[4].mig_devices == ()
    one = gpus[0].mig_devices[6]
    assert (one.index, one.gpu_instance_id, one.compute_instance_id) == (6, 13, 0)
    assert one.uuid.startswith("MIG-")
    assert (one.memory_mib, one.multiprocessors, one.gi_slices, one.ci_slices) == (4864, 14, 1, 1)
    assert (one.copy_engines, one.decoders, one.encoders, one.jpegs, one.ofas) == (1, 0, 0, 0, 0)
    three = gpus[1].mig_devices[0]
    assert (three.memory_mib, three.multiprocessors, three.gi_slices, three.decoders) == (
        20096,
        42,
        3,
        2,
    )
    full = gpus[3].mig_devices[0]
    assert (full.memory_mib, full.multiprocessors, full.jpegs, full.ofas) == (40448, 98, 1, 1)


def test_gb200_clique_and_conflict(nvml_machine: Any) -> None:
    snap = read(nvml_machine, profiles.gb200_clique(), device_facts=True)
    fabrics = {g.fabric for g in snap.gpus}
    assert fabrics == {
        SnapshotFabric(
            state="completed", status_ok=True, cluster_uuid=profiles.GB200_CLUSTER, clique_id=1
        )
    }
    assert snap.gpus[0].architecture == "blackwell"
    conflict = read(nvml_machine, profiles.clique_conflict())
    assert [g.fabric.clique_id for g in conflict.gpus if g.fabric] == [1, 1, 2, 2]


def test_fabric_state_and_failed_status(nvml_machine: Any) -> None:
    fabric = Fabric(state="in-progress", status="NOT_READY", cluster_uuid=profiles.GB200_CLUSTER)
    (gpu,) = read(nvml_machine, Machine(gpus=[profiles.gb200(fabric=fabric)])).gpus
    assert gpu.fabric == SnapshotFabric(
        state="in-progress", status_ok=False, cluster_uuid=profiles.GB200_CLUSTER, clique_id=0
    )


# ----------------------------------------------------------------------------- absent features


def test_not_supported_and_function_not_found_mean_absent(nvml_machine: Any) -> None:
    spec = GpuSpec(
        name="NVIDIA Mystery",
        memory_bytes=1 << 30,
        compute=(9, 0),
        architecture="unknown",
        brand="unknown",
        compute_mode=None,
        fail={
            "nvmlDeviceGetMemoryInfo": "NOT_SUPPORTED",
            "nvmlDeviceGetCudaComputeCapability": "FUNCTION_NOT_FOUND",
            "nvmlDeviceGetMigMode": "FUNCTION_NOT_FOUND",
        },
    )
    (gpu,) = read(nvml_machine, Machine(gpus=[spec]), device_facts=True).gpus
    assert gpu.error is None and gpu.name == "NVIDIA Mystery"
    assert (gpu.memory_total_bytes, gpu.compute_capability) == (None, None)
    # (the architecture is read for gfd devices) NVML_DEVICE_ARCH_UNKNOWN and BRAND_UNKNOWN
    # are answers (go-nvlib names them "Unknown"), not absences
    assert (gpu.architecture, gpu.brand, gpu.compute_mode) == ("unknown", "unknown", None)
    assert (gpu.mig_capable, gpu.mig_enabled, gpu.mig_pending_enabled) == (False, False, None)
    assert (gpu.nvlink_active, gpu.fabric) == (None, None)


def test_memory_error_is_tolerated(nvml_machine: Any, caplog: pytest.LogCaptureFixture) -> None:
    machine = Machine(gpus=[profiles.h100(fail={"nvmlDeviceGetMemoryInfo": "NO_DATA"})])
    (gpu,) = read(nvml_machine, machine).gpus
    assert gpu.memory_total_bytes is None and gpu.error is None
    assert "nvmlDeviceGetMemoryInfo" in caplog.text


def test_pending_mig_mode(nvml_machine: Any) -> None:
    (gpu,) = read(nvml_machine, Machine(gpus=[profiles.h100(mig_pending=True)])).gpus
    assert (gpu.mig_enabled, gpu.mig_pending_enabled) == (False, True)


def test_old_driver_has_no_profile_names_and_no_fabric(
    fake_nvml_old_lib: Path, tmp_path: Path
) -> None:
    machine = Machine(
        gpus=[
            profiles.a100_40gb(mig_enabled=True, mig_layout=mig("3g.20gb", "1g.5gb")),
            profiles.gb200(fabric=Fabric(cluster_uuid=profiles.GB200_CLUSTER, clique_id=1)),
        ]
    )
    result = run_reader(fake_nvml_old_lib, machine.write(tmp_path / "old.nvml"))
    snap = Snapshot.from_json(result)
    a100, gb200 = snap.gpus
    assert [d.profile_name for d in a100.mig_devices] == ["", ""]
    assert [d.memory_mib for d in a100.mig_devices] == [20096, 4864]
    assert gb200.fabric is None and gb200.name == "NVIDIA GB200"


# ----------------------------------------------------------------------------- errors


def test_driver_not_loaded(nvml_machine: Any) -> None:
    nvml_machine(profiles.driver_not_loaded())
    reader = NvmlReader()
    with pytest.raises(NvmlInitError) as info:
        reader.read()
    message = str(info.value)
    assert message.startswith("NVML could not start: Driver Not Loaded (")
    assert "modprobe nvidia" in message and "\n" not in message
    assert isinstance(info.value.__cause__, pynvml.NVMLError_DriverNotLoaded)
    nvml_machine(profiles.no_gpu())  # the driver comes up: the next read starts NVML
    assert reader.read().gpus == ()
    reader.close()


@pytest.mark.parametrize(
    ("error", "text"),
    [
        ("NO_PERMISSION", "Insufficient Permissions (the process may not open /dev/nvidia*"),
        ("LIB_RM_VERSION_MISMATCH", "RM has detected an NVML/RM version mismatch (the driver"),
        ("UNKNOWN", "Unknown Error (check the driver with nvidia-smi"),
    ],
)
def test_init_errors_name_problem_and_fix(nvml_machine: Any, error: str, text: str) -> None:
    nvml_machine(Machine(init_error=error))
    with pytest.raises(NvmlInitError, match=r"^NVML could not start: ") as info:
        NvmlReader().read()
    assert text in str(info.value)


def test_library_not_found(tmp_path: Path) -> None:
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("a real NVML library is installed on this machine")
    result = json.loads(run_reader(None, None))
    assert result["error"] == "NvmlInitError"
    assert result["message"].startswith(
        "NVML could not start: libnvidia-ml.so.1 not found (is the NVIDIA driver installed"
    )


def test_lost_gpu_is_data_not_an_error(nvml_machine: Any) -> None:
    snap = read(nvml_machine, profiles.one_gpu_lost())
    assert snap.gpus[3] == Gpu(index=3, error="GPU is lost")
    assert [g.error for g in snap.gpus] == [None, None, None, "GPU is lost"] + [None] * 4
    assert snap.gpus[4].name == "NVIDIA H100 80GB HBM3"


def test_gpu_lost_midway_keeps_what_was_read(nvml_machine: Any) -> None:
    machine = Machine(
        gpus=[
            profiles.h100(fail={"nvmlDeviceGetPciInfo_v3": "GPU_IS_LOST"}),
            profiles.h100(fault="unknown"),
        ],
        seed="midway",
    )
    first, second = read(nvml_machine, machine).gpus
    assert first == Gpu(
        index=0, uuid=gpu_uuid("midway", 0), name="NVIDIA H100 80GB HBM3", error="GPU is lost"
    )
    assert second == Gpu(index=1, error="Unknown Error")


def test_a_refused_mig_enumeration_is_a_degraded_fact_naming_the_fix(nvml_machine: Any) -> None:
    """MIG devices that may not be read (no NVIDIA_MIG_MONITOR_DEVICES) leave the MIG labels
    out, say why once, and let every other fact through: not a failed read."""
    nvml_machine(profiles.mig_permission_denied())
    reader = NvmlReader()
    snap = reader.read()
    (degraded,) = snap.gpus[0].degraded
    assert (degraded.fact, degraded.held) == ("mig_devices", False)
    assert degraded.error == ("Insufficient Permissions: reading MIG devices was refused; run "
                              "the container with NVIDIA_MIG_MONITOR_DEVICES=all and "
                              "CAP_SYS_ADMIN")
    assert snap.gpus[0].unknown("mig_devices") and snap.gpus[0].error is None
    assert snap.gpus[0].mig_enabled and snap.gpus[0].memory_total_bytes
    assert nvml_machine.fake.refcount() == 1  # the session stays
    reader.close()


def test_a_side_query_error_makes_one_fact_unknown_then_held(nvml_machine: Any) -> None:
    """nvmlDeviceGetMigMode answering TIMEOUT: that GPU stays (never "lost"), its MIG mode is
    unknown on a first read, and later reads hold the last good value; the session stays."""
    broken = profiles.hgx_h100()
    broken.gpus[2].fail["nvmlDeviceGetMigMode"] = "TIMEOUT"
    nvml_machine(broken)
    reader = NvmlReader()
    first = reader.read()
    assert [g.error for g in first.gpus] == [None] * 8
    gpu = first.gpus[2]
    assert [(d.fact, d.call, d.error, d.held) for d in gpu.degraded] == [
        ("mig_mode", "nvmlDeviceGetMigMode", "Timeout", False)]
    assert gpu.unknown("mig_mode") and not first.gpus[1].degraded
    nvml_machine(profiles.hgx_h100())
    good = reader.read()
    assert not good.gpus[2].degraded and good.gpus[2].mig_capable
    nvml_machine(broken)
    held = reader.read().gpus[2]
    assert [(d.fact, d.held) for d in held.degraded] == [("mig_mode", True)]
    assert held.mig_capable and not held.unknown("mig_mode"), "the last good value stands"
    assert nvml_machine.fake.init_count() == 1, "never re-initialised for a side query"
    reader.close()


# call -> (fact, whether NOT_SUPPORTED is reported as degraded rather than silently absent)
SIDE_QUERIES = {
    "nvmlDeviceGetMemoryInfo": ("memory", True),
    "nvmlDeviceGetCudaComputeCapability": ("compute_capability", True),
    "nvmlDeviceGetArchitecture": ("architecture", False),
    "nvmlDeviceGetBrand": ("brand", False),
    "nvmlDeviceGetPciInfo_v3": ("pci", False),
    "nvmlDeviceGetMigMode": ("mig_mode", False),
    "nvmlDeviceGetComputeMode": ("compute_mode", False),
    "nvmlDeviceGetNvLinkState": ("nvlink", False),
    "nvmlDeviceGetGpuFabricInfoV": ("fabric", False),
    "nvmlDeviceGetPowerManagementLimitConstraints": ("power_limits", False),
}


@pytest.mark.parametrize("call", sorted(SIDE_QUERIES))
@pytest.mark.parametrize("error", ["UNKNOWN", "NO_PERMISSION", "INSUFFICIENT_POWER"])
def test_every_side_query_error_is_one_unknown_fact_of_one_gpu(nvml_machine: Any, call: str,
                                                               error: str) -> None:
    machine = profiles.hgx_h100()
    machine.gpus[3].fail[call] = error
    nvml_machine(machine)
    with NvmlReader(device_facts=True) as reader:  # every query
        snap = reader.read()
    assert len(snap.gpus) == 8 and all(g.error is None for g in snap.gpus), "no GPU lost"
    assert [d.fact for d in snap.gpus[3].degraded] == [SIDE_QUERIES[call][0]]
    assert snap.gpus[3].unknown(SIDE_QUERIES[call][0])
    assert all(not g.degraded for i, g in enumerate(snap.gpus) if i != 3)


@pytest.mark.parametrize("call", [*sorted(SIDE_QUERIES), "nvmlDeviceGetName",
                                  "nvmlDeviceGetUUID"])
def test_gpu_is_lost_from_any_query_loses_the_gpu(nvml_machine: Any, call: str) -> None:
    machine = profiles.hgx_h100()
    machine.gpus[3].fail[call] = "GPU_IS_LOST"
    nvml_machine(machine)
    with NvmlReader(device_facts=True) as reader:  # every query
        snap = reader.read()
    assert snap.gpus[3].error == "GPU is lost"
    assert [g.index for g in snap.gpus if g.error] == [3]


@pytest.mark.parametrize("call", sorted(SIDE_QUERIES))
def test_not_supported_is_absent_except_where_gfds_labels_need_the_fact(nvml_machine: Any,
                                                                          call: str) -> None:
    machine = profiles.hgx_h100()
    machine.gpus[3].fail[call] = "NOT_SUPPORTED"
    nvml_machine(machine)
    with NvmlReader(device_facts=True) as reader:  # every query
        gpu = reader.read().gpus[3]
    fact, reported = SIDE_QUERIES[call]
    assert gpu.error is None
    assert [d.fact for d in gpu.degraded] == ([fact] if reported else [])


def test_power_limits_are_read_in_milliwatts_per_gpu(nvml_machine: Any) -> None:
    machine = profiles.a100_a10()
    snap = read(nvml_machine, machine)
    assert [g.power_limits_mw for g in snap.gpus] == [
        (150000, 300000), (150000, 300000), (100000, 150000)]


@pytest.mark.parametrize("error", ["NOT_SUPPORTED", "FUNCTION_NOT_FOUND"])
def test_power_limits_the_gpu_or_driver_lacks_are_absent_not_degraded(nvml_machine: Any,
                                                                        error: str) -> None:
    machine = profiles.hgx_h100()
    machine.gpus[5].fail["nvmlDeviceGetPowerManagementLimitConstraints"] = error
    snap = read(nvml_machine, machine)
    assert snap.gpus[5].power_limits_mw is None and not snap.gpus[5].degraded
    assert snap.gpus[4].power_limits_mw == (200000, 700000)


def test_power_limits_with_min_above_max_are_an_unknown_fact(nvml_machine: Any) -> None:
    machine = profiles.hgx_h100()
    machine.gpus[1].power_limits_mw = (700000, 200000)
    gpu = read(nvml_machine, machine).gpus[1]
    assert gpu.power_limits_mw is None and gpu.unknown("power_limits")
    assert [d.error for d in gpu.degraded] == ["returned min 700000 mW above max 200000 mW"]


def test_a_name_that_cannot_be_read_on_a_first_read_loses_the_gpu_later_holds_it(
        nvml_machine: Any) -> None:
    machine = profiles.hgx_h100()
    machine.gpus[1].fail["nvmlDeviceGetName"] = "UNKNOWN"
    nvml_machine(machine)
    reader = NvmlReader()
    assert reader.read().gpus[1].error == "Unknown Error"
    nvml_machine(profiles.hgx_h100())
    assert reader.read().gpus[1].name == "NVIDIA H100 80GB HBM3"
    nvml_machine(machine)
    assert not reader.read().gpus[1].degraded, "a steady read does not ask the name again"
    reader.refresh()  # a full read asks it
    held = reader.read().gpus[1]
    assert held.error is None and held.name == "NVIDIA H100 80GB HBM3"
    assert [(d.fact, d.held) for d in held.degraded] == [("identity", True)]
    reader.close()


def test_system_query_failure(nvml_machine: Any) -> None:
    nvml_machine(Machine(fail={"nvmlSystemGetCudaDriverVersion": "UNKNOWN"}))
    reader = NvmlReader()
    with pytest.raises(DiscoveryError, match=r"^NVML nvmlSystemGetCudaDriverVersion failed: "):
        reader.read()
    assert nvml_machine.fake.refcount() == 0


# ----------------------------------------------------------------------------- session


def test_session_is_kept_between_reads(nvml_machine: Any) -> None:
    nvml_machine(profiles.dgx_a100_layout())
    fake = nvml_machine.fake
    reader = NvmlReader()
    first = reader.read()
    assert reader.read() == first
    assert fake.init_count() == 1 and fake.call_count("nvmlInitWithFlags") == 1
    assert fake.refcount() == 1
    reader.close()
    assert fake.refcount() == 0 and fake.call_count("nvmlShutdown") == 1


def test_the_minor_number_and_each_gpu_instances_placement_are_read(nvml_machine: Any) -> None:
    machine = profiles.dgx_a100_layout()
    machine.gpus[0] = replace(machine.gpus[0], minor=5)
    snap = read(nvml_machine, machine, device_facts=True)
    assert snap.gpus[0].minor == 5 and snap.gpus[1].minor == 1
    resolved = {m.uuid: m for g in machine.resolve() for m in g.mig}
    placed = [m for g in snap.gpus for m in g.mig_devices]
    assert placed, "the layout has MIG devices"
    for device in placed:
        want = resolved[device.uuid]
        assert (device.gi_profile_id, device.placement_start, device.placement_size) == (
            want.gi_profile.id, want.gi_start, want.gi_profile.slices)
    starts = {(m.gpu_instance_id, m.placement_start) for m in snap.gpus[0].mig_devices}
    assert len({s for _, s in starts}) == len(starts), "GPU instances do not overlap"


def test_machine_change_is_seen_without_reinit(nvml_machine: Any) -> None:
    nvml_machine(profiles.hgx_h100())
    reader = NvmlReader()
    assert len(reader.read().gpus) == 8
    nvml_machine(profiles.t4x4())
    assert [g.name for g in reader.read().gpus] == ["Tesla T4"] * 4
    nvml_machine(profiles.dgx_a100_layout())
    assert reader.read().gpus[1].mig_devices[1].profile_name == "MIG 2g.10gb"
    assert nvml_machine.fake.init_count() == 1
    assert nvml_machine.fake.load_count() == 3
    reader.close()


def test_close_is_idempotent(nvml_machine: Any) -> None:
    nvml_machine(profiles.no_gpu())
    reader = NvmlReader()
    reader.close()
    reader.read()
    reader.close()
    reader.close()
    assert nvml_machine.fake.call_count("nvmlShutdown") == 1


def test_close_swallows_shutdown_errors(nvml_machine: Any) -> None:
    nvml_machine(profiles.no_gpu())
    reader = NvmlReader()
    reader.read()
    nvml_machine.fake.shutdown_all()  # someone else ended the session
    reader.close()  # nvmlShutdown now answers Uninitialized: ignored


def test_delay_slows_the_named_call(nvml_machine: Any) -> None:
    machine = profiles.t4x4()
    machine.delay = ("nvmlDeviceGetName", 30)
    nvml_machine(machine)
    start = time.monotonic()
    with NvmlReader() as reader:
        reader.read()
    assert time.monotonic() - start >= 4 * 0.03


# ----------------------------------------------------------------------------- the fake itself


def test_fake_models_nvml_handles_and_lifecycle(nvml_machine: Any) -> None:
    nvml_machine(profiles.dgx_a100_layout())
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()
    pynvml.nvmlInit()
    try:
        gpu = pynvml.nvmlDeviceGetHandleByIndex(1)
        migdev = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 2)
        assert pynvml.nvmlDeviceIsMigDeviceHandle(migdev).value == 1
        assert pynvml.nvmlDeviceIsMigDeviceHandle(gpu).value == 0
        parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(migdev)
        assert pynvml.nvmlDeviceGetUUID(parent) == pynvml.nvmlDeviceGetUUID(gpu)
        with pytest.raises(pynvml.NVMLError_NotFound):
            pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 3)
        with pytest.raises(pynvml.NVMLError_InvalidArgument):
            pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 7)
        with pytest.raises(pynvml.NVMLError_InvalidArgument):
            pynvml.nvmlDeviceGetHandleByIndex(8)
        with pytest.raises(pynvml.NVMLError_NotFound):
            pynvml.nvmlDeviceGetGpuInstanceById(gpu, 12)
        with pytest.raises(pynvml.NVMLError_NotSupported):  # full GPUs have no attributes
            pynvml.nvmlDeviceGetAttributes(gpu)
        one_slice = pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE
        info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(gpu, one_slice)
        # pynvml decodes char arrays of its printable structs to str
        assert (info.id, info.memorySizeMB, info.name) == (19, 4864, "MIG 1g.5gb")
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetGpuInstanceProfileInfo(
                gpu, pynvml.NVML_GPU_INSTANCE_PROFILE_8_SLICE
            )
    finally:
        pynvml.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlShutdown()
    assert pynvml.nvmlErrorString(pynvml.NVML_ERROR_GPU_IS_LOST) == "GPU is lost"
    assert str(pynvml.NVMLError(4242)) == "Unknown Error"  # unknown codes ask nvmlErrorString


# ----------------------------------------------------------------------------- helpers


READER_SCRIPT = """
import json
from gfd.errors import GfdError
from gfd.readers.nvml import NvmlReader
try:
    snapshot = NvmlReader().read()
except GfdError as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
else:
    print(snapshot.to_json())
"""


def run_reader(lib_dir: Path | None, profile: Path | None) -> str:
    """Run NvmlReader().read() in a child process (its own pynvml, its own library)."""
    env = subprocess_env(lib_dir, profile)
    env["PYTHONPATH"] = str(REPO)
    result = subprocess.run(
        [sys.executable, "-c", READER_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_every_nvml_call_the_reader_makes_is_in_the_error_table() -> None:
    """docs/nvml-errors.md says what an error of each call means; a new call needs a row."""
    source = "".join(p.read_text() for p in (ROOT / "gfd" / "readers").glob("nvml*.py"))
    calls = set(re.findall(r'pynvml\.(nvml[A-Za-z0-9_]+)\b', source))
    calls |= set(re.findall(r'binding\("(nvml[A-Za-z0-9_]+)"\)', source))
    table = (ROOT / "docs" / "nvml-errors.md").read_text()
    missing = sorted(c for c in calls if f"`{c}`" not in table)
    assert len(calls) > 20 and missing == [], f"add rows to docs/nvml-errors.md for {missing}"
