"""``gfd devices``: each device as the NVIDIA DRA driver publishes it -- names, attribute
names, types and value forms, capacities -- derived by the driver's rules (dra.md section 3;
deviceinfo.go, mig.go), and a device the snapshot cannot describe fully listed with what is
missing instead of a made-up value."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from helpers.builders import gpu, snapshot

from gfd.devices import Device, document, project, published, resource_slice
from gfd.readers.simulate import SIMULATIONS, simulate
from gfd.snapshot import Degraded, MigDevice


def by_name(name: str) -> dict[str, Device]:
    return {d.name: d for d in project(simulate(name).snapshot)}


def test_a_full_gpu_is_named_by_its_minor_with_the_drivers_attributes_and_types() -> None:
    d = by_name("hgx-h100")["gpu-3"]
    assert d.complete and d.type == "gpu" and d.device_class == "gpu.nvidia.com"
    api = d.to_api()
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
        "resource.kubernetes.io/numaNode": {"int": 0},
    }
    assert api["capacity"] == {"memory": {"value": "81559Mi"}}  # 85520809984 bytes


def test_a_mig_enabled_gpu_is_published_through_its_mig_devices_only() -> None:
    devices = by_name("h100-mig")
    assert sorted(devices) == ["gpu-0-mig-1g10gb-me-20-6", "gpu-0-mig-1g20gb-15-4",
                               "gpu-0-mig-3g40gb-9-0", "gpu-1-mig-7g80gb-0-0"]
    me = devices["gpu-0-mig-1g10gb-me-20-6"]
    assert me.device_class == "mig.nvidia.com"
    assert me.attribute("profile") == "1g.10gb+me"
    assert me.attribute("parentUUID") == "GPU-5a1b7c3d-0000-4000-8000-000000000000"
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


@pytest.mark.parametrize("name", sorted(SIMULATIONS))
def test_every_simulated_machine_is_described_fully(name: str) -> None:
    devices = project(simulate(name).snapshot)
    assert all(d.complete for d in devices), [d.missing for d in devices]
    assert len({d.name for d in devices}) == len(devices)
    for d in devices:
        assert len(d.attributes) + len(d.capacity) <= 32, "the API's limit per device"
    doc = document(simulate(name).snapshot)
    assert json.loads(json.dumps(doc)) == doc


def test_what_the_snapshot_does_not_know_is_listed_as_missing_not_invented() -> None:
    lost = gpu(1, error="GPU is lost")
    unknown = replace(gpu(0), minor=None, brand=None,
                      degraded=(Degraded(fact="memory", call="nvmlDeviceGetMemoryInfo",
                                         error="Unknown Error", held=False),))
    snap = snapshot(unknown, lost)
    first, second = project(snap)
    assert first.name == "" and not first.complete
    assert any(m.startswith("name") for m in first.missing)
    assert any(m.startswith("brand") for m in first.missing)
    assert any(m.startswith("memory") for m in first.missing)
    assert first.attribute("brand") is None and first.capacity_of("memory") is None
    assert second.missing == ("the GPU itself (NVML: GPU is lost)",)
    assert published(snap) == ()
    entries = document(snap)["devices"]
    assert [e.get("gpu") for e in entries] == [0, 1] and all("missing" in e for e in entries)


def test_a_mig_device_without_its_placement_or_a_partial_compute_instance_is_incomplete() -> None:
    parent = replace(gpu(0), minor=0, mig_enabled=True, mig_capable=True)
    unplaced = MigDevice(index=0, uuid="MIG-a", profile_name="MIG 1g.5gb", memory_mib=4864,
                         gi_slices=1, ci_slices=1)
    partial = MigDevice(index=1, uuid="MIG-b", profile_name="MIG 1c.3g.20gb", memory_mib=20096,
                        gi_slices=3, ci_slices=1, gi_profile_id=9, placement_start=4,
                        placement_size=4)
    found = {d.attribute("uuid"): d for d in project(
        snapshot(replace(parent, mig_devices=(unplaced, partial))))}
    a, b = found["MIG-a"], found["MIG-b"]
    assert a.name == "" and any("placement" in m for m in a.missing)
    assert any("whole-GPU-instance" in m for m in b.missing)


def test_a_resource_slice_holds_the_complete_devices_in_the_nodes_pool() -> None:
    rs = resource_slice(simulate("dgx-a100-mig-mixed").snapshot, node="node-a")
    spec = rs["spec"]
    assert spec["driver"] == "gpu.nvidia.com" and spec["nodeName"] == "node-a"
    assert spec["pool"] == {"name": "node-a", "generation": 1, "resourceSliceCount": 1}
    names = [d["name"] for d in spec["devices"]]
    assert len(names) == 13 + 4  # 13 MIG devices, 4 whole GPUs
    assert "gpu-1-mig-3g20gb-9-0" in names and "gpu-7" in names and "gpu-0" not in names
