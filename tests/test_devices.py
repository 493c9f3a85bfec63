"""``gfd devices``: each device as the NVIDIA DRA driver publishes it, gate for gate -- names,
attribute names, types and value forms, capacities, counters -- derived by the driver's rules
(dra.md section 3; nvlib.go, deviceinfo.go, mig.go, partitions.go, driver.go of release
v0.4.0), the driver's failure rules (the plugin would not start), and a device the snapshot
cannot describe fully listed with what is missing instead of a made-up value."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fakes import profiles
from helpers.builders import gpu, snapshot

from gfd import dra
from gfd.devices import (
    Device,
    document,
    project,
    publication,
    published,
    resource_slice,
    resource_slices,
    would_not_start,
)
from gfd.readers.nvml import NvmlReader
from gfd.readers.simulate import SIMULATIONS, simulate
from gfd.snapshot import Degraded, MigDevice, Snapshot, load_snapshot

RELEASE = json.loads((Path(__file__).parent / "data" / "dra" / f"{dra.RELEASE}.json")
                     .read_text())
"""What the driver release gfd follows publishes, written from its source (file:line)."""

DYNAMIC = {dra.DYNAMIC_MIG: True}
PASSTHROUGH = {dra.PASSTHROUGH_SUPPORT: True}
GATE_SETS: list[dict[str, bool]] = [{}, DYNAMIC, PASSTHROUGH]


def by_name(name: str, gates: dict[str, bool] | None = None) -> dict[str, Device]:
    return {d.name: d for d in project(simulate(name).snapshot, gates)}


def read(nvml_machine: Any, machine: profiles.Machine) -> Snapshot:
    nvml_machine(machine)
    with NvmlReader(device_facts=True) as reader:  # as gfd devices reads
        return reader.read()


# -- default gates -------------------------------------------------------------------------


def test_a_full_gpu_is_named_by_its_minor_with_the_drivers_attributes_and_types() -> None:
    d = by_name("hgx-h100")["gpu-3"]
    assert d.complete and d.type == "gpu" and d.device_class == "gpu.nvidia.com"
    api = d.to_api()
    # GpuInfo.Attributes(): no NUMA attribute on a GPU (the sysfs numa_node of the
    # simulated machine is 0; the driver publishes `numa` on passthrough devices only)
    assert api["attributes"] == {
        "type": {"string": "gpu"},
        "uuid": {"string": "GPU-5a1b7c3d-0000-4000-8000-000000000003"},
        "productName": {"string": "NVIDIA H100 80GB HBM3"},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": "Hopper"},
        "cudaComputeCapability": {"version": "9.0.0"},
        "driverVersion": {"version": "580.159.4"},
        "cudaDriverVersion": {"version": "13.0.0"},
        "resource.kubernetes.io/pciBusID": {"string": "0000:48:00.0"},
        "resource.kubernetes.io/pcieRoot": {"string": "pci0000:30"},
        "addressingMode": {"string": "HMM"},
    }
    assert api["capacity"] == {"memory": {"value": "81559Mi"}}  # 85520809984 bytes
    assert "consumesCounters" not in api


def test_addressing_mode_is_published_where_nvml_answers_and_absent_where_it_does_not() -> None:
    assert {d.attribute("addressingMode") for d in project(simulate("gb200-nvl").snapshot)} == {
        "ATS"}
    t4 = project(simulate("t4-time-sliced").snapshot)  # driver 550: no such call
    assert t4 and all(d.attribute("addressingMode") is None for d in t4)
    migs = by_name("h100-mig")
    assert migs["gpu-1-mig-7g80gb-0-0"].attribute("addressingMode") == "HMM"


def test_a_mig_enabled_gpu_is_published_through_its_mig_devices_only() -> None:
    devices = by_name("h100-mig")
    assert sorted(devices) == ["gpu-0-mig-1g10gb-me-20-6", "gpu-0-mig-1g20gb-15-4",
                               "gpu-0-mig-3g40gb-9-0", "gpu-1-mig-7g80gb-0-0"]
    me = devices["gpu-0-mig-1g10gb-me-20-6"]
    assert me.device_class == "mig.nvidia.com"
    assert me.attribute("profile") == "1g.10gb+me"
    assert me.attribute("parentUUID") == "GPU-5a1b7c3d-0000-4000-8000-000000000000"
    assert me.attribute("uuid") == "MIG-5a1b7c3d-0000-4000-8000-000000000000"
    assert me.attribute("productName") == "NVIDIA H100 80GB HBM3"
    assert dict(me.capacity) == {"multiprocessors": 16, "copyEngines": 1, "decoders": 1,
                                 "encoders": 0, "jpegEngines": 1, "ofaEngines": 1,
                                 "memory": 9856 * 2**20, "memorySlice6": 1}
    assert {k for k, _ in devices["gpu-0-mig-3g40gb-9-0"].capacity if "Slice" in k} == {
        "memorySlice0", "memorySlice1", "memorySlice2", "memorySlice3"}


def test_a_mixed_node_lists_each_model_with_its_own_facts() -> None:
    devices = by_name("mixed-a100-a10")
    assert devices["gpu-2"].attribute("productName") == "NVIDIA A10"
    assert devices["gpu-2"].attribute("cudaComputeCapability") == "8.6.0"
    assert devices["gpu-0"].attribute("cudaComputeCapability") == "8.0.0"
    assert devices["gpu-2"].capacity_of("memory") == 24146608128


@pytest.mark.parametrize("gates", GATE_SETS, ids=["default", "DynamicMIG", "Passthrough"])
@pytest.mark.parametrize("name", sorted(SIMULATIONS))
def test_every_attribute_and_capacity_is_one_the_release_publishes(
        name: str, gates: dict[str, bool]) -> None:
    pub = publication(simulate(name).snapshot, gates)
    assert pub.refusal == ""
    for d in pub.devices:
        listed = RELEASE[d.type]
        unknown = {a.name for a in d.attributes} - set(listed["attributes"])
        caps = {"memorySlice<N>" if n.startswith("memorySlice") else n for n, _ in d.capacity}
        assert unknown == set() and caps <= set(listed["capacity"]), (d.name, unknown, caps)
        attrs, capacities = dra.published_names(d.type, gates)
        assert {a.name for a in d.attributes} <= attrs and caps <= capacities
        assert len(d.attributes) + len(d.capacity) <= 32, "the API's limit per device"
    named = [d.name for d in pub.devices if d.name]
    assert len(set(named)) == len(named)
    doc = document(simulate(name).snapshot, gates)
    assert json.loads(json.dumps(doc)) == doc and doc["release"] == dra.RELEASE


@pytest.mark.parametrize("name", sorted(SIMULATIONS))
def test_every_simulated_machine_is_described_fully_under_the_default_gates(name: str) -> None:
    devices = project(simulate(name).snapshot)
    assert all(d.complete for d in devices), [d.missing for d in devices]


def test_the_release_list_names_no_attribute_the_vocabulary_does_not_know() -> None:
    for kind in ("gpu", "mig", "vfio"):
        attrs, caps = dra.published_names(kind, {**DYNAMIC, **PASSTHROUGH})
        dynamic_attrs, _ = dra.published_names(kind, DYNAMIC)
        default_attrs, default_caps = dra.published_names(kind, PASSTHROUGH)
        assert set(RELEASE[kind]["attributes"]) == attrs | dynamic_attrs | default_attrs
        assert set(RELEASE[kind]["capacity"]) >= caps | default_caps


# -- the driver's failure rules ------------------------------------------------------------


def test_a_lost_gpu_stops_the_plugin_and_nothing_is_published(nvml_machine: Any) -> None:
    snap = read(nvml_machine, profiles.one_gpu_lost())  # GPU 3: every call GPU_IS_LOST
    why = would_not_start(snap)
    assert why == "error visiting device 3: GPU is lost"
    assert project(snap) == () and published(snap) == () and resource_slices(snap, node="n") == []
    doc = document(snap)
    assert doc["wouldNotStart"] == why and doc["devices"] == []


def test_a_gpu_whose_memory_query_is_not_supported_is_published_without_memory(
        nvml_machine: Any) -> None:
    machine = profiles.hgx_h100()
    machine.gpus[2] = replace(machine.gpus[2], fail={"nvmlDeviceGetMemoryInfo": "NOT_SUPPORTED"})
    snap = read(nvml_machine, machine)
    devices = {d.name: d for d in project(snap)}
    assert would_not_start(snap) == "" and len(devices) == 8
    assert devices["gpu-2"].complete and devices["gpu-2"].capacity == ()
    assert devices["gpu-1"].capacity == (("memory", 85520809984),)
    assert devices["gpu-2"].attribute("addressingMode") == "HMM"  # what the fake answers


def test_any_other_error_on_a_fact_the_driver_reads_stops_it(nvml_machine: Any) -> None:
    machine = profiles.hgx_h100()
    machine.gpus[5] = replace(machine.gpus[5], fail={"nvmlDeviceGetMemoryInfo": "UNKNOWN"})
    snap = read(nvml_machine, machine)
    assert would_not_start(snap) == ("error getting memory info for device 5: "
                                     "nvmlDeviceGetMemoryInfo: Unknown Error")
    machine.gpus[5] = replace(machine.gpus[5], fail={"nvmlDeviceGetAddressingMode": "UNKNOWN"})
    assert "addressing mode for device 5" in would_not_start(read(nvml_machine, machine))


def test_a_mig_device_with_a_smaller_compute_instance_stops_the_plugin(
        nvml_machine: Any) -> None:
    snap = read(nvml_machine, profiles.a100_compute_split())  # 1c.3g.20gb
    why = would_not_start(snap)
    assert why.startswith("error getting profile info for MIG device: MIG-")
    assert "1 of its GPU instance's 3 slices" in why and project(snap) == ()
    # under DynamicMIG the driver never lists the GPU's MIG devices: it partitions it afresh
    # (an A100 with MIG on: 25 partitions, no full GPU)
    assert would_not_start(snap, DYNAMIC) == "" and len(project(snap, DYNAMIC)) == 25


def test_a_dgx_display_is_skipped_and_a_minor_number_error_stops_the_plugin() -> None:
    display = replace(gpu(1, name="DGX Display"), minor=None)
    good = replace(gpu(0), minor=0, architecture="ampere", brand="nvidia")
    assert [d.name for d in project(snapshot(good, display))] == ["gpu-0"]
    failed = replace(good, index=2, minor=None, degraded=(Degraded(
        fact="minor", call="nvmlDeviceGetMinorNumber", error="Unknown Error", held=False),))
    assert would_not_start(snapshot(good, failed)) == (
        "error getting minor number for device 2: nvmlDeviceGetMinorNumber: Unknown Error")
    # a snapshot recorded before gfd read minor numbers: the name is missing, not invented
    old = replace(good, index=3, minor=None)
    devices = project(snapshot(good, old))
    assert would_not_start(snapshot(good, old)) == "" and devices[1].name == ""
    assert devices[1].missing[0].startswith("name (the minor number")


def test_a_version_semver_cannot_parse_or_an_architecture_the_release_cannot_name_stops_it(
        ) -> None:
    good = replace(gpu(0), minor=0, architecture="ampere", brand="nvidia")
    assert would_not_start(snapshot(good, driver="550.54.15.01")) == (
        "the driver version '550.54.15.01' is not a semantic version (the plugin's "
        "semver.MustParse panics)")
    # go-nvlib v0.10.0, vendored by v0.4.0, names no Rubin
    assert would_not_start(snapshot(replace(good, architecture="rubin"))) == (
        "error getting architecture for device 0: error interpreting device architecture as "
        "string (rubin: go-nvlib of v0.4.0 has no name for it)")


def test_a_held_fact_is_the_one_the_running_plugin_started_with() -> None:
    held = replace(gpu(0), minor=0, architecture="ampere", brand="nvidia",
                   degraded=(Degraded(fact="brand", call="nvmlDeviceGetBrand",
                                      error="Unknown Error", held=True),))
    assert [d.attribute("brand") for d in project(snapshot(held))] == ["Nvidia"]


def test_an_event_marked_gpu_is_still_enumerated_by_the_driver() -> None:
    snap = simulate("hgx-h100").snapshot
    xid = replace(snap, gpus=(replace(snap.gpus[0], error="Xid 79: GPU has fallen off the bus"),
                              *snap.gpus[1:]))
    assert len(project(xid)) == 8


# -- feature gates -------------------------------------------------------------------------


def test_the_drivers_gate_syntax_and_its_refusals() -> None:
    assert dra.parse_gates("DynamicMIG=true")[dra.DYNAMIC_MIG] is True
    assert dra.parse_gates(" PassthroughSupport=True , ")[dra.PASSTHROUGH_SUPPORT] is True
    with pytest.raises(ValueError, match="unrecognized feature gate 'Dynamic=true'"):
        dra.parse_gates("Dynamic=true")
    with pytest.raises(ValueError, match="invalid value of DynamicMIG=yes"):
        dra.parse_gates("DynamicMIG=yes")
    both = dra.parse_gates("DynamicMIG=true,PassthroughSupport=true")
    pub = publication(simulate("hgx-h100").snapshot, both)
    assert pub.refusal == "feature gate DynamicMIG is currently mutually exclusive with " \
                          "PassthroughSupport" and pub.devices == ()


def test_dynamic_mig_makes_every_profile_and_placement_a_device_on_a_hopper() -> None:
    devices = by_name("h100-mig", DYNAMIC)
    # per H100: 7 x 1g.10gb, 7 x 1g.10gb+me, 4 x 1g.20gb, 3 x 2g.20gb, 2 x 3g.40gb,
    # 1 x 4g.40gb, 1 x 7g.80gb, and the full GPU (Hopper toggles MIG without a reset)
    assert len(devices) == 2 * (7 + 7 + 4 + 3 + 2 + 1 + 1 + 1)
    full = devices["gpu-0"]
    assert full.attribute("uuid") == "GPU-5a1b7c3d-0000-4000-8000-000000000000"
    assert dict(full.capacity) == {"multiprocessors": 132, "copyEngines": 8, "decoders": 7,
                                   "encoders": 0, "jpegEngines": 7, "ofaEngines": 1,
                                   "memory": 80384 * 2**20}
    assert full.counter_set == "gpu-0-counter-set"
    assert dict(full.consumes) == {
        "multiprocessors": 132, "copy-engines": 8, "decoders": 7, "encoders": 0,
        "jpeg-engines": 7, "ofa-engines": 1, "memory": 80384 * 2**20,
        **{f"memory-slice-{i}": 1 for i in range(8)}}
    part = devices["gpu-1-mig-3g40gb-9-4"]
    assert part.attribute("uuid") is None and part.attribute("profile") == "3g.40gb"
    assert not any(n.startswith("memorySlice") for n, _ in part.capacity)
    assert dict(part.consumes) == {
        "multiprocessors": 60, "copy-engines": 3, "decoders": 3, "encoders": 0,
        "jpeg-engines": 3, "ofa-engines": 0, "memory": 40192 * 2**20,
        **{f"memory-slice-{i}": 1 for i in range(4, 8)}}
    assert part.counter_set == "gpu-1-counter-set"
    assert "gpu-0-mig-1g10gb-me-20-3" in devices and "gpu-0-mig-1g20gb-15-6" in devices


def test_dynamic_mig_from_what_nvml_answers(nvml_machine: Any) -> None:
    """Through the real binding over the fake libnvidia-ml: the profile tables and possible
    placements the reader gets make the same devices, named by go-nvlib's rule from the
    profile's memory (H100, 81559 MiB: 9984 MiB is 1/8, "1g.10gb")."""
    snap = read(nvml_machine, profiles.hgx_h100())
    devices = {d.name: d for d in project(snap, DYNAMIC)}
    assert len(devices) == 8 * 26 and all(d.complete for d in devices.values())
    assert devices["gpu-7"].capacity_of("memory") == 81152 * 2**20  # 7g.80gb's
    assert devices["gpu-7"].capacity_of("multiprocessors") == 132
    assert dict(devices["gpu-3-mig-1g20gb-15-6"].consumes)["memory-slice-7"] == 1
    assert devices["gpu-0-mig-1g10gb-me-20-0"].attribute("profile") == "1g.10gb+me"


def test_dynamic_mig_on_ampere_publishes_partitions_only_where_mig_is_on() -> None:
    pub = publication(simulate("dgx-a100-mig-mixed").snapshot, DYNAMIC)
    names = [d.name for d in pub.devices]
    # GPUs 0-3 have MIG on: 25 partitions each, no full GPU (Ampere cannot toggle without a
    # reset); GPUs 4-7 have MIG off: not DynamicMIG-capable, the plain full GPU
    assert len(names) == 4 * 25 + 4
    assert "gpu-0" not in names and "gpu-4" in names
    assert [c.name for c in pub.counter_sets] == [f"gpu-{i}-counter-set" for i in range(4)]
    plain = next(d for d in pub.devices if d.name == "gpu-4")
    assert plain.counter_set == "" and dict(plain.capacity) == {"memory": 42949672960}
    sets = {c.name: dict(c.counters) for c in pub.counter_sets}
    assert sets["gpu-0-counter-set"]["memory"] == 40192 * 2**20
    assert len(project(simulate("dgx-a100-mig-single").snapshot, DYNAMIC)) == 8 * 25


def test_dynamic_mig_needs_the_profile_tables_a_recorded_snapshot_may_lack() -> None:
    """A snapshot recorded before gfd read the profile tables has no ``mig_profiles`` field:
    it loads as not read (None), never as a GPU that offers none."""
    data = simulate("hgx-h100").snapshot.to_dict()
    for g in data["gpus"]:
        del g["mig_profiles"]
    old = load_snapshot(json.dumps(data), source="file:old.json")
    devices = project(old, DYNAMIC)
    assert len(devices) == 8 and all(d.missing == (
        "the GPU's MIG profiles and placements (the snapshot predates them: record it again "
        "with this gfd)",) for d in devices)


NO_PROFILE = {"gb200": profiles.gb200_clique, "h100": profiles.hgx_h100}
"""A GB200-like and an H100-like machine: MIG-capable GPUs that toggle MIG without a reset.
The fake has no GB200 profile table, so every profile query on a GB200 answers
NOT_SUPPORTED, as on the GB200 the driver was tried on; each H100 offers the H100's."""

PROFILE_CALLS = ("nvmlDeviceGetGpuInstanceProfileInfoV", "nvmlDeviceGetGpuInstanceProfileInfo")
"""The GPU-instance profile queries (gfd asks the named V call first, go-nvml the other)."""


def offering_no_profile(machine: profiles.Machine, index: int, error: str,
                        calls: tuple[str, ...] = PROFILE_CALLS) -> profiles.Machine:
    """``machine`` with GPU ``index`` answering ``error`` to every one of ``calls``."""
    machine.gpus[index] = replace(machine.gpus[index], fail=dict.fromkeys(calls, error))
    return machine


@pytest.mark.parametrize("calls", [PROFILE_CALLS,
                                   ("nvmlDeviceGetGpuInstancePossiblePlacements_v2",)],
                         ids=["profile-info", "placements"])
@pytest.mark.parametrize("error", ["NOT_SUPPORTED", "INVALID_ARGUMENT"])
@pytest.mark.parametrize("model", sorted(NO_PROFILE))
def test_dynamic_mig_publishes_a_gpu_whose_profiles_nvml_does_not_offer_whole(
        nvml_machine: Any, model: str, error: str, calls: tuple[str, ...]) -> None:
    """The driver skips a profile NVML answers NOT_SUPPORTED or INVALID_ARGUMENT for, in
    getGpuInfo (nvlib.go:547-568), in go-nvlib's VisitMigProfiles (vendor/github.com/NVIDIA/
    go-nvlib/pkg/nvlib/device/device.go:368-375) and in inspectMigProfilesAndPlacements
    (nvlib.go:1217-1234), so a GPU that offers none has no MigSpec and empty maxCapacities
    (nvlib.go:1275). DynamicMIG still adds its full GPU where MIG is off or toggles
    (nvlib.go:271-273), published by PartGetDevice (partitions.go:102-117) with the plain
    memory capacity (PartCapacities, partitions.go:53-58) and no consumesCounters
    (partitions.go:89-94), and no shared counter set for it (partitions.go:70-78,
    driver.go:234-236): the whole GPU, no partitions."""
    machine = offering_no_profile(NO_PROFILE[model](), 1, error, calls)
    memory = machine.gpus[1].memory_bytes
    snap = read(nvml_machine, machine)
    offer_none = {g.index for g in snap.gpus if g.mig_profiles == ()}
    assert offer_none == ({0, 1, 2, 3} if model == "gb200" else {1})
    assert all(g.mig_capable and not g.degraded for g in snap.gpus)
    pub = publication(snap, DYNAMIC)
    assert pub.refusal == "" and all(d.complete for d in pub.devices)
    mine = [d for d in pub.devices if d.gpu == 1]
    assert [d.name for d in mine] == ["gpu-1"]
    assert mine[0].capacity == (("memory", memory),)
    assert mine[0].counter_set == "" and mine[0].consumes == ()
    assert "consumesCounters" not in mine[0].to_api()
    assert mine[0] == {d.name: d for d in project(snap)}["gpu-1"]  # as under the default gates
    partitioned = [g.index for g in snap.gpus if g.index not in offer_none]
    assert [c.name for c in pub.counter_sets] == [f"gpu-{i}-counter-set" for i in partitioned]
    assert len(pub.devices) == len(offer_none) + 26 * len(partitioned)  # 25 + the full GPU
    # the driver's split slices: no counter set names it, its GPU's slice holds it alone
    slices = resource_slices(snap, node="n", gates=DYNAMIC)
    assert [c["name"] for c in slices[0]["spec"]["sharedCounters"]] == [
        c.name for c in pub.counter_sets]
    assert [[d["name"] for d in s["spec"]["devices"]] for s in slices[1:]][1] == ["gpu-1"]


@pytest.mark.parametrize("model", sorted(NO_PROFILE))
def test_any_other_error_on_a_profile_query_stops_the_plugin(nvml_machine: Any,
                                                             model: str) -> None:
    """Any other answer to a profile query fails getGpuInfo under every gate
    (nvlib.go:555-556, "error retrieving GpuInstanceProfileInfo for profile %d on GPU %v";
    its placements: nvlib.go:566-567) and, under DynamicMIG,
    inspectMigProfilesAndPlacements (nvlib.go:1224-1226, 1235-1237): the plugin does not
    start."""
    snap = read(nvml_machine, offering_no_profile(NO_PROFILE[model](), 1, "UNKNOWN"))
    assert snap.gpus[1].mig_profiles is None
    for gates in ({}, DYNAMIC):
        assert re.fullmatch(r"error getting MIG profiles and their placements for device 1: "
                            r"nvmlDeviceGetGpuInstanceProfileInfoV?: Unknown Error",
                            would_not_start(snap, gates))
        assert project(snap, gates) == ()


def test_an_incomplete_device_says_why_in_words_true_for_where_it_came_from() -> None:
    """What a snapshot lacks is its recording's doing only for a recorded one: a read of this
    machine (a library caller's, without the device facts) or a simulated machine says so in
    its own words, never that a snapshot predates anything."""
    sim = simulate("hgx-h100").snapshot
    lacking = [  # (what the snapshot lacks, the gates that need it)
        (replace(sim, gpus=(replace(sim.gpus[0], mig_profiles=None),)), DYNAMIC),
        (replace(sim, gpus=(replace(sim.gpus[0], minor=None),)), {}),
        (replace(sim, pci=None, gpus=sim.gpus[:1]), PASSTHROUGH)]

    def why(source: str) -> list[str]:
        return [next(d for d in project(replace(snap, source=source), gates)
                     if d.missing).missing[0] for snap, gates in lacking]

    recorded = [
        "the GPU's MIG profiles and placements (the snapshot predates them: record it again "
        "with this gfd)",
        "name (the minor number, nvmlDeviceGetMinorNumber: the snapshot predates it: record "
        "it again with this gfd)",
        "deviceID, numa, productName, iommuFDEnabled, addressableMemory (the PCI bus scan: "
        "the snapshot predates it: record it again with this gfd)"]
    assert why("file:/tmp/old.json") == why("stdin") == recorded
    assert why("nvml") == [
        "the GPU's MIG profiles and placements (this read did not ask for them: gfd devices "
        "and gfd snapshot do)",
        "name (the minor number, nvmlDeviceGetMinorNumber: this read did not ask for it: gfd "
        "devices and gfd snapshot do)",
        "deviceID, numa, productName, iommuFDEnabled, addressableMemory (the PCI bus scan: "
        "this read did not ask for it: gfd devices and gfd snapshot do)"]
    assert all("the simulated machine does not describe" in w and "snapshot" not in w
               for w in why("simulate:hgx-h100"))


def test_dynamic_mig_on_a_gb200_names_its_profiles_by_go_nvlibs_rule() -> None:
    """The simulated GB200 (190464 MiB) carries the MIG user guide's GB200 profiles. go-nvlib
    names each from its memory (getMigMemorySizeGB: eighths of the GPU, rounded up, times its
    186 GiB, math.Round): 23808 MiB is 1/8 -> 23.25 -> 1g.23gb; 47616 MiB is 2/8 -> 46.5 ->
    47 (Go rounds halves away from zero) -> 2g.47gb; 95232 -> 93; 190464 -> 186."""
    pub = publication(simulate("gb200-nvl").snapshot, DYNAMIC)
    assert pub.refusal == "" and all(d.complete for d in pub.devices)
    per_gpu = {d.name.split("-", 2)[-1] for d in pub.devices if d.name.startswith("gpu-2-")}
    assert per_gpu == {*(f"mig-1g23gb-19-{i}" for i in range(7)),
                       *(f"mig-1g23gb-me-20-{i}" for i in range(7)),
                       *(f"mig-1g47gb-15-{i}" for i in (0, 2, 4, 6)),
                       *(f"mig-2g47gb-14-{i}" for i in (0, 2, 4)),
                       "mig-3g93gb-9-0", "mig-3g93gb-9-4", "mig-4g93gb-5-0", "mig-7g186gb-0-0"}
    assert len(pub.devices) == 4 * 26 and len(pub.counter_sets) == 4
    full = next(d for d in pub.devices if d.name == "gpu-0")  # Blackwell toggles MIG
    assert full.capacity_of("memory") == 190464 * 2**20 and full.attribute("architecture") == (
        "Blackwell")
    me = next(d for d in pub.devices if d.name == "gpu-0-mig-1g23gb-me-20-3")
    assert me.attribute("profile") == "1g.23gb+me" and dict(me.capacity)["ofaEngines"] == 1



def test_passthrough_publishes_a_gpu_bound_to_vfio_pci_as_the_driver_does() -> None:
    """mixed-a100-a10's fourth GPU, an A10 (10de:2236) at 0000:48:00.0 bound to vfio-pci:
    NVML cannot see it, go-nvlib's PCI scan can. Each value from the driver's rules."""
    pub = publication(simulate("mixed-a100-a10").snapshot, PASSTHROUGH)
    assert pub.refusal == ""
    devices = {d.name: d for d in pub.devices}
    # the three NVML GPUs as full GPUs, and every GPU on the bus as a passthrough device
    # (nvlib.go:621-661 enumerateGpuVfioDevices), i its place in nvpci's GetGPUs
    assert sorted(devices) == ["gpu-0", "gpu-1", "gpu-2", "gpu-vfio-0", "gpu-vfio-1",
                               "gpu-vfio-2", "gpu-vfio-3"]
    passed = devices["gpu-vfio-3"]
    assert passed.device_class == "vfio.gpu.nvidia.com" and passed.complete
    assert passed.to_api() == {
        "name": "gpu-vfio-3",  # deviceinfo.go:141-143, index 3 (nvlib.go:630)
        "attributes": {
            "type": {"string": "vfio"},  # deviceinfo.go:238
            # uuid.NewSHA1(uuid.NameSpaceDNS, address) (nvlib.go:687): RFC 4122 version 5
            "uuid": {"string": "9c646a79-8658-5680-ad31-f59ce1138fa9"},
            "deviceID": {"string": "0x2236"},  # fmt.Sprintf("0x%04x", device) nvlib.go:695
            "vendorID": {"string": "0x10de"},  # nvlib.go:696
            "numa": {"int": 0},  # sysfs numa_node as read (nvlib.go:697, nvpci.go:317-325)
            # the device line of pci.ids (nvlib.go:691, nvpci.go:357-363): go-nvlib's
            # embedded copy, the driver's image (distroless) having no other
            "productName": {"string": "GA102GL [A10]"},
            "iommuFDEnabled": {"bool": True},  # /dev/iommu exists (vfio-device.go:346-356)
            "resource.kubernetes.io/pciBusID": {"string": "0000:48:00.0"},
            "resource.kubernetes.io/pcieRoot": {"string": "pci0000:30"},
        },
        # GetTotalAddressableMemory(true) (nvlib.go:683, resources.go:89): the A10's BAR1
        # of 32 GiB and BAR3 of 32 MiB, rounded up to the next power of two
        "capacity": {"addressableMemory": {"value": "64Gi"}},
    }
    assert passed.gpu == -1  # no NVML GPU
    # a GPU NVML sees has a passthrough device too, numbered on the bus
    assert devices["gpu-vfio-2"].attribute("deviceID") == "0x2236"
    assert devices["gpu-vfio-2"].attribute("resource.kubernetes.io/pciBusID") == "0000:38:00.0"
    assert devices["gpu-vfio-0"].attribute("productName") == "GA100 [A100 PCIe 80GB]"
    assert devices["gpu-vfio-0"].capacity_of("addressableMemory") == 256 * 2**30
    # the default gates: nothing of it
    assert all(d.type != "vfio" for d in project(simulate("mixed-a100-a10").snapshot))


def test_a_gpu_with_mig_devices_is_a_passthrough_device_too() -> None:
    """The driver skips a GPU whose full-GPU device is not vfio-enabled (nvlib.go:634), but
    looks for it among full-GPU devices only (allocatable.go:224-235), and a MIG-enabled GPU
    has none: so every GPU on the bus is listed, the four with MIG devices included."""
    devices = by_name("dgx-a100-mig-mixed", PASSTHROUGH)
    vfio = sorted(n for n in devices if n.startswith("gpu-vfio-"))
    assert vfio == [f"gpu-vfio-{i}" for i in range(8)]
    d = devices["gpu-vfio-4"]
    assert d.attribute("uuid") == str(uuid.uuid5(uuid.NAMESPACE_DNS, "0000:58:00.0"))
    assert d.attribute("numa") == 1 and d.attribute("productName") == "GA100 [A100 SXM4 40GB]"
    assert d.capacity_of("addressableMemory") == 128 * 2**30 and d.complete
    assert "gpu-0-mig-1g5gb-19-0" in devices
    names = {x.name for x in published(simulate("dgx-a100-mig-mixed").snapshot, PASSTHROUGH)}
    assert "gpu-vfio-0" in names


def test_passthrough_failure_rules() -> None:
    snap = simulate("hgx-h100").snapshot
    assert snap.pci is not None
    # go-nvlib's scan fails: enumerateAllPossibleDevices fails (nvlib.go:180-186)
    broken = replace(snap, pci=replace(snap.pci, gpus=(), error=(
        "error getting all NVIDIA devices: error constructing NVIDIA PCI device 0000:18:00.0: "
        "unable to read PCI NUMA node for 0000:18:00.0: no such file")))
    why = would_not_start(broken, PASSTHROUGH)
    assert why.startswith("error enumerating GPU PCI devices: error getting GPU PCI devices: "
                          "error getting all NVIDIA devices: ")
    assert project(broken, PASSTHROUGH) == ()
    assert would_not_start(broken) == ""  # the scan is made under the gate only
    # no IOMMU: NewVfioPciManager refuses (vfio-device.go:70-77)
    off = replace(snap, pci=replace(snap.pci, iommu_groups=False))
    assert would_not_start(off, PASSTHROUGH) == (
        "unable to create vfio pci manager: IOMMU is not enabled in the kernel "
        "(sysfs kernel/iommu_groups is empty or missing)")
    # no /dev/iommu: iommuFDEnabled false, still published
    legacy = project(replace(snap, pci=replace(snap.pci, iommufd=False)), PASSTHROUGH)
    assert {d.attribute("iommuFDEnabled") for d in legacy if d.type == "vfio"} == {False}


def test_a_snapshot_without_the_pci_scan_lists_what_it_lacks() -> None:
    old = replace(simulate("hgx-h100").snapshot, pci=None)
    vfio = [d for d in project(old, PASSTHROUGH) if d.type == "vfio"]
    assert [d.name for d in vfio] == [f"gpu-vfio-{i}" for i in range(8)]
    assert all(not d.complete and "the PCI bus scan" in d.missing[0] for d in vfio)
    assert all(not d.name.startswith("gpu-vfio") for d in published(old, PASSTHROUGH))


def test_passthrough_from_a_real_sysfs_scan_beside_nvml(tmp_path: Path) -> None:
    """The host reader's scan of a sysfs tree: one GPU NVML sees (bound to nvidia) and one
    bound to vfio-pci that it cannot see."""
    from fakes import sysfs

    from gfd.readers.host import HostReader

    sysfs.linked_device(tmp_path, "0000:18:00.0", pcie_root="pci0000:10", device="0x20b0",
                        driver=sysfs.NVIDIA, resource=sysfs.a100_sxm4_40gb_bars(0),
                        numa_node=0, iommu_group=40)
    sysfs.linked_device(tmp_path, "0000:86:00.0", pcie_root="pci0000:85", device="0x20b0",
                        driver=sysfs.VFIO, resource=sysfs.a100_sxm4_40gb_bars(1),
                        numa_node=1, iommu_group=41)
    sysfs.iommu(tmp_path, iommufd=False)
    bus = HostReader(machine_type_file="", sysfs_root=str(tmp_path)).pci_bus()
    nvml_gpu = replace(gpu(0), minor=0, architecture="ampere", brand="nvidia",
                       pci_bus_id="00000000:18:00.0")
    snap = replace(snapshot(nvml_gpu), pci=bus)
    devices = {d.name: d for d in project(snap, PASSTHROUGH)}
    assert sorted(devices) == ["gpu-0", "gpu-vfio-0", "gpu-vfio-1"]
    assert devices["gpu-vfio-0"].gpu == 0 and devices["gpu-vfio-1"].gpu == -1
    assert devices["gpu-vfio-1"].to_api()["attributes"] == {
        "type": {"string": "vfio"},
        "uuid": {"string": str(uuid.uuid5(uuid.NAMESPACE_DNS, "0000:86:00.0"))},
        "deviceID": {"string": "0x20b0"}, "vendorID": {"string": "0x10de"},
        "numa": {"int": 1}, "productName": {"string": "GA100 [A100 SXM4 40GB]"},
        "iommuFDEnabled": {"bool": False},
        "resource.kubernetes.io/pciBusID": {"string": "0000:86:00.0"},
        "resource.kubernetes.io/pcieRoot": {"string": "pci0000:85"},
    }
    assert devices["gpu-vfio-1"].to_api()["capacity"] == {
        "addressableMemory": {"value": "128Gi"}}  # 64 GiB + 32 MiB, rounded up


# -- architectures go-nvlib names ----------------------------------------------------------


def test_an_unknown_architecture_is_published_as_unknown(nvml_machine: Any) -> None:
    """go-nvlib's GetArchitectureAsString names NVML_DEVICE_ARCH_UNKNOWN "Unknown"
    (vendor/github.com/NVIDIA/go-nvlib/pkg/nvlib/device/device.go:96-97 in the driver's
    tree): the driver publishes it; a value it has no case for still stops the plugin."""
    machine = profiles.hgx_h100()
    machine.gpus[1] = replace(machine.gpus[1], architecture="unknown")
    snap = read(nvml_machine, machine)
    assert would_not_start(snap) == ""
    devices = {d.name: d for d in project(snap)}
    assert devices["gpu-1"].attribute("architecture") == "Unknown" and devices["gpu-1"].complete
    assert devices["gpu-0"].attribute("architecture") == "Hopper"
    # supportsMIGModeToggle is arch >= HOPPER on NVML's number: 0xffffffff is (nvlib.go:1469)
    assert "gpu-1" in {d.name for d in project(snap, DYNAMIC)}


def test_an_unknown_brand_is_published_as_unknown(nvml_machine: Any) -> None:
    """go-nvlib's GetBrandAsString names NVML_BRAND_UNKNOWN (0) "Unknown" (device.go, the
    case before BRAND_QUADRO): an answer the driver publishes, not a failure."""
    machine = profiles.hgx_h100()
    machine.gpus[2] = replace(machine.gpus[2], brand="unknown")
    snap = read(nvml_machine, machine)
    assert would_not_start(snap) == ""
    devices = {d.name: d for d in project(snap)}
    assert devices["gpu-2"].attribute("brand") == "Unknown" and devices["gpu-2"].complete
    assert devices["gpu-0"].attribute("brand") != "Unknown"
    good = replace(gpu(0), minor=0, brand="nvidia")
    assert "go-nvlib of v0.4.0 has no name" in would_not_start(
        snapshot(replace(good, architecture="rubin")))


# -- ResourceSlices ------------------------------------------------------------------------


def test_a_resource_slice_holds_the_complete_devices_in_the_nodes_pool() -> None:
    rs = resource_slice(simulate("dgx-a100-mig-mixed").snapshot, node="node-a")
    spec = rs["spec"]
    assert spec["driver"] == "gpu.nvidia.com" and spec["nodeName"] == "node-a"
    assert spec["pool"] == {"name": "node-a", "generation": 1, "resourceSliceCount": 1}
    names = [d["name"] for d in spec["devices"]]
    assert len(names) == 13 + 4  # 13 MIG devices, 4 whole GPUs
    assert "gpu-1-mig-3g20gb-9-0" in names and "gpu-7" in names and "gpu-0" not in names


def test_dynamic_mig_slices_are_split_as_the_driver_writes_them_for_1_35_and_later() -> None:
    slices = resource_slices(simulate("h100-mig").snapshot, node="n", gates=DYNAMIC)
    assert len(slices) == 3
    assert all(s["spec"]["pool"] == {"name": "n", "generation": 1, "resourceSliceCount": 3}
               for s in slices)
    counters = slices[0]["spec"]
    assert "devices" not in counters
    assert [c["name"] for c in counters["sharedCounters"]] == ["gpu-0-counter-set",
                                                               "gpu-1-counter-set"]
    first = slices[1]["spec"]["devices"]
    assert [d["name"] for d in first] == sorted(d["name"] for d in first)
    assert first[0]["name"] == "gpu-0" and len(first) == 26
    assert first[1]["consumesCounters"][0]["counterSet"] == "gpu-0-counter-set"
    assert first[1]["consumesCounters"][0]["counters"]["memory-slice-0"] == {"value": "1"}


def test_the_document_names_the_gates_that_differ_from_the_drivers_defaults() -> None:
    doc = document(simulate("h100-mig").snapshot, DYNAMIC)
    assert doc["featureGates"] == {"DynamicMIG": True}
    assert [c["name"] for c in doc["sharedCounters"]] == ["gpu-0-counter-set",
                                                          "gpu-1-counter-set"]
    assert "featureGates" not in document(simulate("h100-mig").snapshot)


def test_an_unplaced_mig_device_is_listed_with_what_is_missing() -> None:
    parent = replace(gpu(0), minor=0, mig_enabled=True, mig_capable=True, architecture="ampere",
                     brand="nvidia")
    unplaced = MigDevice(index=0, uuid="MIG-a", profile_name="MIG 1g.5gb", memory_mib=4864,
                         gi_slices=1, ci_slices=1)
    (a,) = project(snapshot(replace(parent, mig_devices=(unplaced,))))
    assert a.name == "" and any("placement" in m for m in a.missing) and not a.complete
    entry = document(snapshot(replace(parent, mig_devices=(unplaced,))))["devices"][0]
    assert entry["gpu"] == 0 and entry["missing"]


def test_gfd_devices_lists_a_gpu_nvml_cannot_see_from_the_hosts_sysfs(
        nvml_machine: Any, tmp_path: Path) -> None:
    """``gfd devices --feature-gates PassthroughSupport=true`` on a node: the real binding
    over the fake libnvidia-ml (2 x A100 80GB PCIe, 1 x A10) and a sysfs tree holding those
    three bound to nvidia and a fourth GPU, an A10, bound to vfio-pci."""
    from click.testing import CliRunner
    from fakes import sysfs

    from gfd.cli import cli

    nvml_machine(profiles.a100_a10())
    root = tmp_path / "sys"
    for n, (bus, device, driver) in enumerate([
            ("0000:17:00.0", "0x20b5", sysfs.NVIDIA), ("0000:65:00.0", "0x20b5", sysfs.NVIDIA),
            ("0000:ca:00.0", "0x2236", sysfs.NVIDIA), ("0000:e3:00.0", "0x2236", sysfs.VFIO)]):
        sysfs.linked_device(root, bus, pcie_root=f"pci0000:{bus[5:7]}", device=device,
                            driver=driver, resource=sysfs.a100_sxm4_40gb_bars(n),
                            numa_node=n // 2, iommu_group=50 + n)
    sysfs.iommu(root)
    result = CliRunner().invoke(cli, ["devices", "--sysfs-root", str(root), "-o", "json",
                                      "--feature-gates", "PassthroughSupport=true"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["featureGates"] == {"PassthroughSupport": True}
    assert [d["name"] for d in doc["devices"]] == [
        "gpu-0", "gpu-1", "gpu-2", "gpu-vfio-0", "gpu-vfio-1", "gpu-vfio-2", "gpu-vfio-3"]
    hidden = doc["devices"][6]
    assert hidden == {
        "name": "gpu-vfio-3",
        "attributes": {
            "type": {"string": "vfio"},
            "uuid": {"string": str(uuid.uuid5(uuid.NAMESPACE_DNS, "0000:e3:00.0"))},
            "deviceID": {"string": "0x2236"}, "vendorID": {"string": "0x10de"},
            "numa": {"int": 1}, "productName": {"string": "GA102GL [A10]"},
            "iommuFDEnabled": {"bool": True},
            "resource.kubernetes.io/pciBusID": {"string": "0000:e3:00.0"},
            "resource.kubernetes.io/pcieRoot": {"string": "pci0000:e3"},
        },
        "capacity": {"addressableMemory": {"value": "128Gi"}},  # the fake's BARs: 64G+32M
    }
    assert doc["devices"][3]["attributes"]["productName"] == {"string": "GA100 [A100 PCIe 80GB]"}
