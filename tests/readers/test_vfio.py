"""VfioReader on sysfs trees laid out like a host's: which devices are GPUs bound to vfio-pci,
their order, names from the PCI IDs database, memory from the BARs as go-nvlib sums them,
and unreadable entries as data."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
from fakes.sysfs import (
    AUDIO,
    GRAPHICS,
    NVIDIA,
    NVSWITCH,
    VFIO,
    GiB,
    MiB,
    a100,
    a100_sxm4_40gb_bars,
    pci_device,
    resource_text,
)

from gfd.errors import BackendInitError
from gfd.labelers.options import LabelOptions
from gfd.labelers.pipeline import compute_labels
from gfd.readers.pciids import parse_pci_ids
from gfd.readers.vfio import (
    UNKNOWN_DEVICE,
    ResourceFormatError,
    VfioReader,
    bar_memory,
    nvml_bus_id,
)
from gfd.snapshot import Gpu, Snapshot, validate_types

MEM32 = 0x40200
MEM64 = 0x14220C
IO = 0x40101
ROM = 0x46200
A100_BYTES = 128 * GiB  # 64 GiB + 32 MiB of 64-bit BARs, rounded up


def read(root: Path, **kw: object) -> Snapshot:
    reader = VfioReader(str(root), **kw)  # type: ignore[arg-type]
    try:
        return reader.read()
    finally:
        reader.close()


def buses(snap: Snapshot) -> list[str]:
    return [g.pci_bus_id for g in snap.gpus]


# --- which devices ------------------------------------------------------------------------


def test_only_nvidia_gpus_bound_to_vfio_pci_are_read(tmp_path: Path) -> None:
    a100(tmp_path, "0000:07:00.0", 0)
    a100(tmp_path, "0000:0f:00.0", 1)
    a100(tmp_path, "0000:47:00.0", 2, driver=NVIDIA)
    a100(tmp_path, "0000:4e:00.0", 3, driver=None)  # bound to nothing
    pci_device(tmp_path, "0000:c1:00.0", pci_class=NVSWITCH, device="0x1af1", driver=VFIO,
               resource=resource_text((0xE1000000, 32 * MiB, MEM32)))
    pci_device(tmp_path, "0000:0f:00.1", pci_class=AUDIO, device="0x10f1", driver=VFIO,
               resource=resource_text((0xE2000000, 16 * 1024, MEM32)))
    pci_device(tmp_path, "0000:31:00.0", pci_class=GRAPHICS, vendor="0x1a03", device="0x2000",
               driver=VFIO, resource=resource_text((0xE3000000, 16 * MiB, MEM32)))
    snap = read(tmp_path)
    assert buses(snap) == ["00000000:07:00.0", "00000000:0F:00.0"]
    assert [g.index for g in snap.gpus] == [0, 1]


def test_a_vga_class_gpu_counts_like_a_3d_controller(tmp_path: Path) -> None:
    pci_device(tmp_path, "0000:65:00.0", pci_class=GRAPHICS, device="0x2230", driver=VFIO,
               resource=resource_text((0xF0000000, 16 * MiB, MEM32),
                                      (0x38000000000, 256 * MiB, MEM64)))
    (gpu,) = read(tmp_path).gpus
    assert gpu.name == "GA102GL [RTX A6000]"
    assert gpu.pci_class == GRAPHICS
    assert gpu.memory_total_bytes == 256 * MiB


def test_an_sriov_virtual_function_is_not_a_gpu(tmp_path: Path) -> None:
    a100(tmp_path, "0000:07:00.0", 0)
    pci_device(tmp_path, "0000:07:00.4", device="0x20b0", driver=VFIO, physfn="0000:07:00.0",
               resource=resource_text((0x238800000000, 2 * GiB, MEM64)))
    assert buses(read(tmp_path)) == ["00000000:07:00.0"]


def test_gpus_are_numbered_in_pci_address_order(tmp_path: Path) -> None:
    for n, bus in enumerate(["0001:01:00.0", "0000:b1:00.0", "0000:1a:00.0"]):
        a100(tmp_path, bus, n)
    snap = read(tmp_path)
    assert buses(snap) == ["00000000:1A:00.0", "00000000:B1:00.0", "00000001:01:00.0"]
    assert [g.index for g in snap.gpus] == [0, 1, 2]


def test_a_node_without_vfio_gpus_gives_an_empty_snapshot(tmp_path: Path) -> None:
    a100(tmp_path, "0000:07:00.0", 0, driver=NVIDIA)
    snap = read(tmp_path)
    assert snap.gpus == () and snap.backend == "vfio" and snap.nvml_available


def test_a_gpu_is_described_as_gfds_vfio_back_end_describes_it(tmp_path: Path) -> None:
    a100(tmp_path, "0000:07:00.0", 0)
    snap = read(tmp_path)
    assert snap == Snapshot(nvml_available=True, gpus=(Gpu(
        index=0, name="GA100 [A100 SXM4 40GB]", memory_total_bytes=A100_BYTES,
        pci_bus_id="00000000:07:00.0", pci_class="0x030200"),), source="vfio", backend="vfio")
    # nothing NVML would report is invented: no versions, capability, MIG, UUID
    assert snap.driver_version is None and snap.cuda_driver_version is None
    gpu = snap.gpus[0]
    assert gpu.compute_capability is None and not gpu.mig_capable and gpu.uuid == ""
    validate_types(snap)


def test_gpu_bound_elsewhere_is_logged_once_at_info(tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    a100(tmp_path, "0000:47:00.0", 0, driver=NVIDIA)
    caplog.set_level(logging.INFO, logger="gfd.readers.vfio")
    reader = VfioReader(str(tmp_path))
    reader.read()
    reader.read()
    notes = [r for r in caplog.records if "0000:47:00.0" in r.getMessage()]
    assert len(notes) == 1 and notes[0].levelno == logging.INFO
    assert "bound to 'nvidia', not vfio-pci" in notes[0].getMessage()


# --- names ------------------------------------------------------------------------------------


def test_name_comes_from_the_given_pci_ids_database(tmp_path: Path) -> None:
    a100(tmp_path, "0000:07:00.0", 0)
    db = parse_pci_ids("10de  NVIDIA Corporation\n\t20b0  GA100 [A100 custom]\n"
                       "\t\t10de 134f  A100-SXM4-40GB\n")
    assert read(tmp_path, pci_ids=db).gpus[0].name == "GA100 [A100 custom]"


def test_an_h100_sxm5_gets_gfds_product_name(tmp_path: Path) -> None:
    """10de:2330 in GFD v0.20.0's database is ``GH100 [H100 SXM5 80GB]``; GFD's sanitise drops
    the brackets and joins the words: ``GH100-H100-SXM5-80GB`` (gfd-behaviour.md §2.5)."""
    pci_device(tmp_path, "0000:07:00.0", device="0x2330", driver=VFIO,
               resource=a100_sxm4_40gb_bars())
    snap = read(tmp_path)
    assert snap.gpus[0].name == "GH100 [H100 SXM5 80GB]"
    labelled = compute_labels(snap, LabelOptions(label_set="compat")).labels
    assert labelled["nvidia.com/gpu.product"] == "GH100-H100-SXM5-80GB"


def test_a_device_missing_from_the_database_is_unknown_device_with_one_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    pci_device(tmp_path, "0000:07:00.0", device="0x2901", driver=VFIO,
               resource=a100_sxm4_40gb_bars())
    db = parse_pci_ids("#\tVersion: 2023.04.10\n10de  NVIDIA Corporation\n\t20b0  GA100\n")
    reader = VfioReader(str(tmp_path), db)
    first, second = reader.read(), reader.read()
    assert first.gpus[0].name == second.gpus[0].name == UNKNOWN_DEVICE
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "10de:2901" in warnings[0] and "2023.04.10" in warnings[0]


# --- memory: go-nvlib's BAR total ---------------------------------------------------------------

BAR_CASES = [
    ("a100-64GiB-plus-32MiB-rounds-up", a100_sxm4_40gb_bars(), 128 * GiB),
    ("a-power-of-two-stays", resource_text((0, 16 * MiB, MEM32), (1 << 40, 16 * GiB, MEM64)),
     16 * GiB),
    ("two-64-bit-bars-summed-then-rounded",
     resource_text((1 << 40, 256 * MiB, MEM64), (0, 0, 0), (2 << 40, 32 * MiB, MEM64)),
     512 * MiB),
    ("32-bit-bars-do-not-count", resource_text((0xF0000000, 16 * MiB, MEM32)), 0),
    ("an-io-port-bar-does-not-count", resource_text((0x3000, 128, IO)), 0),
    ("the-rom-and-sriov-bars-do-not-count",
     resource_text(*[(0, 0, 0)] * 6, (0xF0000000, 512 * 1024, ROM), (0, 0, 0),
                   (1 << 40, 32 * GiB, MEM64)), 0),
    ("a-region-whose-start-equals-its-end-is-unused",
     "0x0000010000000000 0x0000010000000000 0x000000000014220c\n", 0),
]


@pytest.mark.parametrize(("resource", "total"), [(r, t) for _, r, t in BAR_CASES],
                         ids=[i for i, _, _ in BAR_CASES])
def test_bar_memory(resource: str, total: int) -> None:
    assert bar_memory(resource) == total


@pytest.mark.parametrize("resource", ["", "0x0 0xfff\n", "0x0  0xfff 0x0\n"],
                         ids=["empty", "two-fields", "double-space"])
def test_a_resource_line_without_three_fields_is_an_error(resource: str) -> None:
    with pytest.raises(ResourceFormatError, match="does not have 3 fields"):
        bar_memory(resource)


def test_malformed_bars_leave_memory_unknown_with_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    pci_device(tmp_path, "0000:07:00.0", device="0x20b0", driver=VFIO, resource="garbage\n")
    (gpu,) = read(tmp_path).gpus
    assert gpu.memory_total_bytes is None and gpu.name == "GA100 [A100 SXM4 40GB]"
    assert "cannot read its BARs" in caplog.text and "memory unknown" in caplog.text


# --- unreadable entries and the devices directory -----------------------------------------------


def test_missing_devices_directory_is_one_backend_init_error(tmp_path: Path) -> None:
    with pytest.raises(BackendInitError) as caught:
        read(tmp_path)
    message = str(caught.value)
    assert "\n" not in message
    assert f"cannot list PCI devices in {tmp_path}/bus/pci/devices" in message
    assert "--sysfs-root" in message


def test_an_unreadable_device_id_makes_an_unhealthy_gpu(tmp_path: Path) -> None:
    device = a100(tmp_path, "0000:07:00.0", 0)
    a100(tmp_path, "0000:0f:00.0", 1)
    (device / "device").unlink()
    (device / "device").mkdir()  # reading it fails: EISDIR
    first, second = read(tmp_path).gpus
    assert first.error is not None and first.error.startswith(
        "cannot read the PCI device id of 0000:07:00.0")
    assert first.name == "" and first.pci_bus_id == "00000000:07:00.0"
    assert second.error is None and second.index == 1


def test_a_device_with_an_unreadable_vendor_is_skipped_with_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    broken = a100(tmp_path, "0000:07:00.0", 0)
    a100(tmp_path, "0000:0f:00.0", 1)
    (broken / "vendor").unlink()
    (broken / "vendor").mkdir()
    assert buses(read(tmp_path)) == ["00000000:0F:00.0"]
    assert "skipping PCI device 0000:07:00.0: cannot read its vendor id" in caplog.text


def test_a_device_with_an_unparsable_class_is_skipped_with_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    broken = a100(tmp_path, "0000:07:00.0", 0)
    (broken / "class").write_text("3D controller\n")
    assert read(tmp_path).gpus == ()
    assert "cannot read its class (not a number: '3D controller')" in caplog.text


def test_a_driver_link_to_a_vanished_driver_means_unbound(tmp_path: Path) -> None:
    a100(tmp_path, "0000:07:00.0", 0)
    shutil.rmtree(tmp_path / "bus" / "pci" / "drivers" / VFIO)
    assert read(tmp_path).gpus == ()


@pytest.mark.parametrize(("sysfs", "nvml"), [("0000:3b:00.0", "00000000:3B:00.0"),
                                             ("0001:01:00.1", "00000001:01:00.1")])
def test_bus_ids_are_given_in_nvmls_form(sysfs: str, nvml: str) -> None:
    assert nvml_bus_id(sysfs) == nvml
