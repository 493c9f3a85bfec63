"""Labels per GPU back end (reference/gfd-behaviour.md §2.5): on vfio the driver, CUDA version
and compute capability are GFD's placeholders, the product is the PCI IDs name and the memory
the BAR total (in MiB, gfd's one deliberate difference); an NVML snapshot that lacks the same
facts gets none of those placeholders."""

from __future__ import annotations

import pytest

from gfd.snapshot import Gpu, Snapshot

from .builders import P, gpu, labelling, labels, snapshot

GA100 = "GA100 [A100 SXM4 40GB]"
BARS_128GIB = 128 * 2**30


def vfio_gpu(index: int = 0, name: str = GA100, memory: int | None = BARS_128GIB) -> Gpu:
    """A GPU as VfioReader reports it: no UUID, capability, MIG or NVLink facts."""
    return Gpu(index=index, name=name, memory_total_bytes=memory,
               pci_bus_id=f"00000000:{0x07 + 8 * index:02X}:00.0", pci_class="0x030200")


def vfio(*gpus: Gpu) -> Snapshot:
    return snapshot(*gpus, driver=None, cuda=None, backend="vfio", source="vfio")


VFIO_VERSIONS = {
    "cuda.driver-version.full": "unknown.unknown.unknown",
    "cuda.driver-version.major": "unknown",
    "cuda.driver-version.minor": "unknown",
    "cuda.driver-version.revision": "unknown",
    "cuda.driver.major": "unknown",
    "cuda.driver.minor": "unknown",
    "cuda.driver.rev": "unknown",
    "cuda.runtime-version.full": "0.0",
    "cuda.runtime-version.major": "0",
    "cuda.runtime-version.minor": "0",
    "cuda.runtime.major": "0",
    "cuda.runtime.minor": "0",
}


def test_vfio_node_gets_exactly_gfds_vfio_labels() -> None:
    got = labels(vfio(vfio_gpu(0), vfio_gpu(1)))
    assert got == VFIO_VERSIONS | {
        "gpu.count": "2",
        "gpu.family": "undefined",
        "gpu.machine": "DGX-A100",
        "gpu.memory": "131072",
        "gpu.mode": "compute",
        "gpu.product": "GA100-A100-SXM4-40GB",
        "gpu.replicas": "1",
        "gpu.sharing-strategy": "none",
        "mig.capable": "false",
        "mps.capable": "false",
        "vgpu.present": "false",
    }


def test_vfio_compute_capability_is_minus_one_and_its_labels_are_dropped() -> None:
    result = labelling(vfio(vfio_gpu()))
    assert result.labels[P + "gpu.family"] == "undefined"
    assert {(r.key, r.value) for r in result.rejected} == {
        (P + "gpu.compute.major", "-1"), (P + "gpu.compute.minor", "-1")}


def test_vfio_memory_is_the_bar_total_in_mib_with_its_provenance() -> None:
    result = labelling(vfio(vfio_gpu()))
    assert result.labels[P + "gpu.memory"] == "131072"
    memory = result.explained[P + "gpu.memory"]
    assert memory.raw == f"{BARS_128GIB} bytes"
    assert "BAR" in memory.source and any("GFD writes the bytes" in r for r in memory.rules)


def test_vfio_versions_name_their_source() -> None:
    explained = labelling(vfio(vfio_gpu())).explained
    assert explained[P + "cuda.driver.major"].source.startswith("vfio back end")
    assert explained[P + "cuda.runtime.major"].source.startswith("vfio back end")
    assert explained[P + "gpu.product"].source.startswith("PCI IDs database")


def test_nvml_gets_no_placeholders() -> None:
    snap = snapshot(gpu(cc=None), driver=None, cuda=None, backend="nvml")
    got = labels(snap)
    assert not [k for k in got if k.startswith("cuda.")]
    assert "gpu.family" not in got and "gpu.compute.major" not in got
    assert got["gpu.product"] == "NVIDIA-A100-SXM4-40GB"


def test_tegra_gets_its_own_driver_placeholder_but_none_of_vfios() -> None:
    snap = snapshot(gpu(cc=None), driver=None, cuda=None, backend="tegra")
    got = labels(snap)
    assert got["cuda.driver-version.full"] == "unknown.unknown.unknown"  # GFD's Tegra rule
    assert not [k for k in got if k.startswith("cuda.runtime")], "no vfio CUDA 0.0"
    assert "gpu.family" not in got and "gpu.compute.major" not in got, "no vfio -1.-1"


def test_vfio_versions_reported_by_the_snapshot_are_used_as_given() -> None:
    snap = snapshot(gpu(cc=(8, 0)), backend="vfio")  # a recorded or future reader's facts
    got = labels(snap)
    assert got["cuda.driver-version.full"] == "550.54.15"
    assert got["cuda.runtime-version.full"] == "12.4"
    assert got["gpu.family"] == "ampere"


def test_vfio_node_writes_no_nvlink_label_but_the_inventory() -> None:
    got = labels(vfio(vfio_gpu(0), vfio_gpu(1)), label_set="extended")
    assert "gpu.nvlink" not in got
    assert got["gpu.product.GA100-A100-SXM4-40GB"] == "2"
    assert got["gpu.memory.min"] == "131072"
    assert got["gpu.accelerator"] == "nvidia-ga100-a100-sxm4-40gb"


def test_nvml_node_without_nvlink_support_still_says_false() -> None:
    assert labels(snapshot(gpu(nvlink_active=None)), label_set="extended")["gpu.nvlink"] == (
        "false")


def test_vfio_node_without_gpus_gets_only_the_vgpu_label() -> None:
    assert labels(vfio()) == {"vgpu.present": "false"}


def test_an_unreadable_vfio_gpu_is_unhealthy_not_a_product() -> None:
    lost = Gpu(index=1, pci_bus_id="00000000:0F:00.0", pci_class="0x030200",
               error="cannot read the PCI device id of 0000:0f:00.0: Is a directory")
    got = labels(vfio(vfio_gpu(0), lost), label_set="extended")
    assert got["gpu.count"] == "1" and got["gpu.unhealthy"] == "1"
