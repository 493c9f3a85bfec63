"""Host files under configurable roots, read from trees laid out like a node's: the machine
type, each GPU's PCI class (NVML's 8-digit PCI domain as sysfs's 4), and the vGPU scan of
PCI config space. Every failure is data (None), logged once -- never an exception."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from fakes.sysfs import (
    COMPUTE,
    GRAPHICS,
    config_space,
    gpu_tree,
    linked_device,
    pci_device,
)

from gfd.readers.host import (
    MACHINE_TYPE_MAX_BYTES,
    HostReader,
    VgpuScanError,
    host_driver,
    scan_vgpu,
    sysfs_bus_id,
    vendor_capability,
)
from gfd.snapshot import Vgpu

BUS = "00000000:18:00.0"


def reader(tmp_path: Path, machine_type_file: str = "") -> HostReader:
    return HostReader(machine_type_file=machine_type_file, sysfs_root=str(tmp_path / "sys"))


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


# ----------------------------------------------------------------------------- machine type


def test_the_machine_type_is_the_files_content_as_is(tmp_path: Path) -> None:
    (tmp_path / "product_name").write_text("DGX H100\n")
    assert reader(tmp_path, str(tmp_path / "product_name")).machine_type() == "DGX H100\n"


def test_an_unreadable_machine_type_file_is_none_and_warned_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    host = reader(tmp_path, str(tmp_path / "missing"))
    assert host.machine_type() is None
    assert host.machine_type() is None
    assert len([w for w in warnings(caplog) if "machine type" in w]) == 1
    assert "missing" in warnings(caplog)[0]


def test_a_directory_as_machine_type_file_is_none(tmp_path: Path) -> None:
    assert reader(tmp_path, str(tmp_path)).machine_type() is None


@pytest.mark.parametrize("kind, what", [("fifo", "a FIFO (named pipe)"),
                                        ("dev-zero", "a character device")])
def test_a_fifo_or_a_device_as_machine_type_file_is_none_and_names_the_fix(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, kind: str, what: str) -> None:
    path = tmp_path / "product_name"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    assert reader(tmp_path, str(path)).machine_type() is None
    assert warnings(caplog) == [
        f"machine type: cannot read {path}: is {what}, not a regular file (point "
        "--machine-type-file at the DMI product name, /sys/class/dmi/id/product_name)"]


def test_dev_null_as_machine_type_file_is_empty(tmp_path: Path) -> None:
    assert reader(tmp_path, os.devnull).machine_type() == ""


def test_a_huge_machine_type_file_is_none(tmp_path: Path) -> None:
    path = tmp_path / "product_name"
    path.write_bytes(b"x" * (MACHINE_TYPE_MAX_BYTES + 1))
    assert reader(tmp_path, str(path)).machine_type() is None


def test_a_fifo_as_pci_class_is_none_not_a_hang(tmp_path: Path) -> None:
    device = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:18:00.0"
    device.mkdir(parents=True)
    os.mkfifo(device / "class")
    assert reader(tmp_path).pci_class(BUS) is None


def test_an_empty_machine_type_path_reads_nothing_and_warns_nothing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert reader(tmp_path, "").machine_type() is None
    assert warnings(caplog) == []


def test_bytes_that_are_not_utf8_are_replaced_not_fatal(tmp_path: Path) -> None:
    (tmp_path / "product_name").write_bytes(b"Power\xffEdge\n")
    assert reader(tmp_path, str(tmp_path / "product_name")).machine_type() == "Power\ufffdEdge\n"


# ----------------------------------------------------------------------------- PCI class

BUS_IDS = [
    ("nvml-8-digit-domain", "00000000:18:00.0", "0000:18:00.0"),
    ("already-4-digit", "0000:18:00.0", "0000:18:00.0"),
    ("upper-case", "00000000:3B:00.0", "0000:3b:00.0"),
    ("surrounding-space", " 00000001:18:00.0\n", "0001:18:00.0"),
    ("no-domain", "18:00.0", "18:00.0"),
]


@pytest.mark.parametrize("nvml, sysfs", [b[1:] for b in BUS_IDS], ids=[b[0] for b in BUS_IDS])
def test_nvml_bus_ids_become_sysfs_names(nvml: str, sysfs: str) -> None:
    assert sysfs_bus_id(nvml) == sysfs


@pytest.mark.parametrize("pci_class", [COMPUTE, GRAPHICS, "0x0302FF"])
def test_the_pci_class_is_read_for_nvmls_bus_id(tmp_path: Path, pci_class: str) -> None:
    pci_device(tmp_path / "sys", BUS, pci_class=pci_class)
    assert reader(tmp_path).pci_class(BUS) == pci_class.lower()


def test_a_gpu_without_a_sysfs_entry_has_no_class_and_is_warned_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    host = reader(tmp_path)
    assert host.pci_class(BUS) is None
    assert host.pci_class(BUS) is None
    assert len(warnings(caplog)) == 1 and "0000:18:00.0" in warnings(caplog)[0]


def test_the_pcie_root_and_numa_node_are_read_as_the_kernel_lays_them_out(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    linked_device(tmp_path / "sys", BUS, pcie_root="pci0000:15",
                  bridges=("0000:15:01.0", "0000:16:00.0"), numa_node=1)
    host = reader(tmp_path)
    assert host.pcie_root(BUS) == "pci0000:15"
    assert host.numa_node(BUS) == 1
    assert host.pci_class(BUS) == COMPUTE  # read through the link
    assert warnings(caplog) == []


@pytest.mark.parametrize("numa", ["-1", "", "zero\n"], ids=["no-affinity", "empty", "text"])
def test_a_numa_node_of_minus_one_or_not_a_number_is_none(tmp_path: Path, numa: str) -> None:
    path = pci_device(tmp_path / "sys", BUS)
    (path / "numa_node").write_text(numa)
    assert reader(tmp_path).numa_node(BUS) is None


def test_a_device_directory_that_is_not_a_link_has_no_pcie_root(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    pci_device(tmp_path / "sys", BUS)  # a plain directory: no root complex to tell
    host = reader(tmp_path)
    assert host.pcie_root(BUS) is None
    assert host.pcie_root("") is None and host.numa_node("") is None
    assert host.numa_node(BUS) is None  # no numa_node file
    assert warnings(caplog) == []


def test_a_link_outside_devices_pci_or_to_another_device_has_no_pcie_root(
        tmp_path: Path) -> None:
    sys = tmp_path / "sys"
    (sys / "elsewhere" / "0000:18:00.0").mkdir(parents=True)
    (sys / "bus" / "pci" / "devices").mkdir(parents=True)
    os.symlink("../../../elsewhere/0000:18:00.0", sys / "bus/pci/devices/0000:18:00.0")
    assert reader(tmp_path).pcie_root(BUS) is None
    linked_device(sys, "0000:19:00.0", pcie_root="pci0000:00")
    os.rename(sys / "devices/pci0000:00/0000:19:00.0", sys / "devices/pci0000:00/0000:1a:00.0")
    os.remove(sys / "bus/pci/devices/0000:19:00.0")
    os.symlink("../../../devices/pci0000:00/0000:1a:00.0", sys / "bus/pci/devices/0000:19:00.0")
    assert reader(tmp_path).pcie_root("00000000:19:00.0") is None


def test_a_gpu_without_a_bus_id_has_no_class(tmp_path: Path,
                                             caplog: pytest.LogCaptureFixture) -> None:
    assert reader(tmp_path).pci_class("") is None
    assert warnings(caplog) == []


# ----------------------------------------------------------------------------- vGPU scan


def test_a_vgpu_guest_is_found_with_its_host_driver(tmp_path: Path) -> None:
    gpu_tree(tmp_path / "sys", [BUS, "00000000:19:00.0"], vgpu=("550.54.16", "r550_40"))
    assert reader(tmp_path).vgpu() == Vgpu(present=True, host_driver_version="550.54.16",
                                           host_driver_branch="r550_40")


def test_without_the_scan_no_config_space_is_read_and_there_is_no_vgpu_fact(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """--no-vgpu-labels: nothing under the devices directory is opened, so an unprivileged
    gfd says nothing about the config space it could not read."""
    gpu_tree(tmp_path / "sys", [BUS], vgpu=("550.54.16", "r550_40"))
    for config in (tmp_path / "sys").glob("bus/pci/devices/*/config"):
        config.unlink()
        os.mkfifo(config)  # opening it would block: it is never opened
    host = HostReader(machine_type_file="", sysfs_root=str(tmp_path / "sys"), scan_vgpu=False)
    assert host.vgpu() is None
    assert warnings(caplog) == []
    assert reader(tmp_path).vgpu() is None, "the scan itself refuses the FIFO"
    assert any("vgpu:" in w for w in warnings(caplog))


def test_plain_gpus_beside_another_vendors_device_are_no_vgpu(tmp_path: Path) -> None:
    gpu_tree(tmp_path / "sys", [BUS])
    assert reader(tmp_path).vgpu() == Vgpu(present=False)


def test_no_pci_device_at_all_is_no_vgpu(tmp_path: Path) -> None:
    (tmp_path / "sys" / "bus" / "pci" / "devices").mkdir(parents=True)
    assert reader(tmp_path).vgpu() == Vgpu(present=False)


def test_an_unlistable_devices_directory_fails_the_scan(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(VgpuScanError, match="cannot list"):
        scan_vgpu(str(tmp_path / "nowhere"))
    host = reader(tmp_path)
    assert host.vgpu() is None and host.vgpu() is None
    assert len(warnings(caplog)) == 1 and "no vgpu labels" in warnings(caplog)[0]


def test_a_short_config_space_fails_the_scan_and_says_to_run_privileged(tmp_path: Path) -> None:
    # Unprivileged readers of sysfs see only the first 64 bytes of PCI config space.
    pci_device(tmp_path / "sys", BUS, config=config_space(full=False))
    with pytest.raises(VgpuScanError, match=r"only 64 bytes .* \(run privileged"):
        scan_vgpu(str(tmp_path / "sys" / "bus" / "pci" / "devices"))
    assert reader(tmp_path).vgpu() is None


def test_another_vendors_config_space_is_never_read(tmp_path: Path) -> None:
    pci_device(tmp_path / "sys", BUS)
    pci_device(tmp_path / "sys", "00000000:00:1f.6", vendor="0x8086", config=b"\x00" * 10)
    assert reader(tmp_path).vgpu() == Vgpu(present=False)


def test_an_nvidia_device_without_a_vendor_file_fails_the_scan(tmp_path: Path) -> None:
    device = pci_device(tmp_path / "sys", BUS)
    (device / "vendor").unlink()
    with pytest.raises(VgpuScanError, match=r"cannot read PCI vendor id of 0000:18:00\.0"):
        scan_vgpu(str(tmp_path / "sys" / "bus" / "pci" / "devices"))


def space(*capabilities: tuple[int, bytes], first: int = 0x40, status: int = 0x10) -> bytes:
    """A 256-byte config space; each capability is (offset, bytes from its id on)."""
    data = bytearray(256)
    data[0x06] = status
    data[0x34] = first
    for offset, body in capabilities:
        data[offset:offset + len(body)] = body
    return bytes(data)


VENDOR = bytes([0x09, 0x00, 8]) + b"VFxyz"

CAPABILITIES = [
    ("no-capability-list", space((0x40, VENDOR), status=0x00), None),
    ("vendor-capability-first", space((0x40, VENDOR)), VENDOR),
    ("vendor-capability-after-two", space((0x40, bytes([0x01, 0x50, 8])),
                                          (0x50, bytes([0x05, 0x60, 8])), (0x60, VENDOR)),
     VENDOR),
    ("list-ends-without-one", space((0x40, bytes([0x01, 0x00, 8]))), None),
    ("terminator-id-0xff", space((0x40, bytes([0xFF, 0x60, 8])), (0x60, VENDOR)), None),
    ("loop-back-to-itself", space((0x40, bytes([0x01, 0x40, 8]))), None),
    ("loop-of-two", space((0x40, bytes([0x01, 0x50, 8])), (0x50, bytes([0x05, 0x40, 8]))),
     None),
    ("pointer-off-the-end", space(first=0xFF), None),
]


@pytest.mark.parametrize("config, found", [c[1:] for c in CAPABILITIES],
                         ids=[c[0] for c in CAPABILITIES])
def test_the_capability_list_is_walked_to_the_vendor_capability(config: bytes,
                                                                found: bytes | None) -> None:
    assert vendor_capability(config, "dev") == found


def record(version: str, branch: str) -> bytes:
    return version.encode().ljust(10, b"\0") + branch.encode().ljust(10, b"\0")


HOST_DRIVERS = [
    ("record-0-first", bytes([0x09, 0, 27]) + b"VF" + bytes([0x00, 22]) + record("550.54.16",
                                                                                  "r550_40"),
     ("550.54.16", "r550_40")),
    ("after-another-record", bytes([0x09, 0, 31]) + b"VF" + bytes([0x01, 4, 0xAA, 0xBB])
     + bytes([0x00, 22]) + record("535.129.03", "r535_00"), ("535.129.03", "r535_00")),
]


@pytest.mark.parametrize("capability, driver", [h[1:] for h in HOST_DRIVERS],
                         ids=[h[0] for h in HOST_DRIVERS])
def test_the_host_driver_is_read_from_record_0(capability: bytes,
                                               driver: tuple[str, str]) -> None:
    assert host_driver(capability, "dev") == driver


BROKEN_RECORDS = [
    ("truncated", bytes([0x09, 0, 12]) + b"VF" + bytes([0x00, 22]) + b"550.5"),
    ("no-record-0", bytes([0x09, 0, 9]) + b"VF" + bytes([0x01, 2, 0x02, 2])),
    ("zero-step", bytes([0x09, 0, 27]) + b"VF" + bytes([0x01, 0]) + record("x", "y")),
]


@pytest.mark.parametrize("capability", [b[1] for b in BROKEN_RECORDS],
                         ids=[b[0] for b in BROKEN_RECORDS])
def test_a_capability_without_a_host_driver_record_fails_the_scan(capability: bytes) -> None:
    with pytest.raises(VgpuScanError, match="no host driver version record"):
        host_driver(capability, "dev")


def test_a_vendor_capability_without_the_vf_signature_is_no_vgpu(tmp_path: Path) -> None:
    config = bytearray(config_space(vgpu=("550.54.16", "r550_40")))
    config[0x78 + 3:0x78 + 5] = b"XX"
    pci_device(tmp_path / "sys", BUS, config=bytes(config))
    assert reader(tmp_path).vgpu() == Vgpu(present=False)
