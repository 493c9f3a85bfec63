"""The PCI bus scan the DRA driver's passthrough support makes (go-nvlib v0.10.0 as vendored by
dra-driver-nvidia-gpu v0.4.0, ``vendor/github.com/NVIDIA/go-nvlib/pkg/nvpci/nvpci.go``): every
NVIDIA GPU whatever driver it is bound to, its ids, NUMA node, IOMMU group and BARs, and the
scan failing as go-nvlib fails it -- over sysfs trees laid out like a host's."""

from __future__ import annotations

from pathlib import Path

from fakes import sysfs

from gfd.pcidb import load_bundled
from gfd.readers.host import HostReader
from gfd.readers.pcibus import scan
from gfd.snapshot import PciBus, PciGpu

GiB = 2**30


def read(root: Path) -> PciBus:
    bus = HostReader(machine_type_file="", sysfs_root=str(root)).pci_bus()
    assert bus is not None
    return bus


def test_every_nvidia_gpu_on_the_bus_is_listed_whatever_its_driver(tmp_path: Path) -> None:
    # nvpci.go:469-484 GetGPUs: NVIDIA, class 0x030000/0x030200 exactly, not a VF; sorted by
    # the address read as hex (nvpci.go:225-234)
    sysfs.linked_device(tmp_path, "0000:3b:00.0", pcie_root="pci0000:3a", device="0x20b0",
                        driver=sysfs.NVIDIA, resource=sysfs.a100_sxm4_40gb_bars(1),
                        numa_node=1, iommu_group=31)
    sysfs.passthrough_gpu(tmp_path, "0000:1a:00.0", 0, numa_node=-1)  # bound to vfio-pci
    sysfs.passthrough_gpu(tmp_path, "0000:5e:00.0", 2, driver=None, device="0x9999",
                          pci_class=sysfs.GRAPHICS)  # no driver, an id pci.ids lacks
    sysfs.passthrough_gpu(tmp_path, "0000:1a:00.4", 3, physfn="0000:1a:00.0")  # a VF
    sysfs.passthrough_gpu(tmp_path, "0000:07:00.0", 4, pci_class=sysfs.NVSWITCH)
    sysfs.passthrough_gpu(tmp_path, "0000:3b:00.1", 5, pci_class=sysfs.AUDIO)
    sysfs.pci_device(tmp_path, "0000:00:1f.6", pci_class="0x020000", vendor="0x8086")
    sysfs.iommu(tmp_path)
    bus = read(tmp_path)
    assert bus.error == ""
    assert bus.iommufd is True and bus.iommu_groups is True
    assert bus.gpus == (
        PciGpu(address="0000:1a:00.0", device_id=0x20B0, name="GA100 [A100 SXM4 40GB]",
               driver="vfio-pci", numa_node=-1, iommu_group=30,
               addressable_memory=128 * GiB),  # 64 GiB + 32 MiB, to the next power of two
        PciGpu(address="0000:3b:00.0", device_id=0x20B0, name="GA100 [A100 SXM4 40GB]",
               driver="nvidia", numa_node=1, iommu_group=31, addressable_memory=128 * GiB,
               pcie_root="pci0000:3a"),
        PciGpu(address="0000:5e:00.0", device_id=0x9999, name="UNKNOWN_DEVICE",
               driver="", numa_node=0, iommu_group=32, addressable_memory=128 * GiB),
    )


def test_a_file_go_nvlib_cannot_read_fails_the_whole_scan_as_it_words_it(
        tmp_path: Path) -> None:
    sysfs.passthrough_gpu(tmp_path, "0000:1a:00.0", 0)
    broken = sysfs.pci_device(tmp_path, "0000:3b:00.0", device="0x20b0", driver=sysfs.NVIDIA,
                              resource=sysfs.a100_sxm4_40gb_bars(1))  # no numa_node
    sysfs.iommu(tmp_path)
    bus = read(tmp_path)
    assert bus.gpus == () and bus.error.startswith(
        "error getting all NVIDIA devices: error constructing NVIDIA PCI device 0000:3b:00.0: "
        "unable to read PCI NUMA node for 0000:3b:00.0: ")
    (broken / "numa_node").write_text("0\n")
    (broken / "resource").write_text("0x0 0x0\n")  # nvpci.go:339-341
    assert read(tmp_path).error.endswith(
        "0000:3b:00.0: more than 3 entries in line '0' of resource file")
    (broken / "resource").write_text(sysfs.a100_sxm4_40gb_bars(1))
    assert read(tmp_path).error == ""


def test_any_device_whose_vendor_cannot_be_read_fails_it_another_vendors_files_do_not(
        tmp_path: Path) -> None:
    sysfs.passthrough_gpu(tmp_path, "0000:1a:00.0", 0)
    nic = sysfs.pci_device(tmp_path, "0000:00:1f.6", pci_class="0x020000", vendor="0x8086")
    (nic / "class").unlink()  # go-nvlib reads no more of a device not NVIDIA's or Mellanox's
    assert read(tmp_path).error == ""
    (nic / "vendor").write_text("intel\n")
    assert read(tmp_path).error.endswith(
        "0000:00:1f.6: unable to convert vendor string to uint16: intel")


def test_an_sr_iov_physical_function_needs_readable_vf_counts(tmp_path: Path) -> None:
    gpu = sysfs.passthrough_gpu(tmp_path, "0000:1a:00.0", 0)
    (gpu / "sriov_totalvfs").write_text("16\n")
    (gpu / "sriov_numvfs").write_text("0\n")
    assert [g.address for g in read(tmp_path).gpus] == ["0000:1a:00.0"]
    (gpu / "sriov_numvfs").write_text("many\n")
    assert "unable to convert sriov_numvfs" in read(tmp_path).error


def test_the_iommu_facts_the_driver_checks(tmp_path: Path) -> None:
    sysfs.pci_device(tmp_path, "0000:00:1f.6", pci_class="0x020000", vendor="0x8086")
    bus = read(tmp_path)  # no class/misc/iommu, no kernel/iommu_groups
    assert (bus.iommufd, bus.iommu_groups) == (False, False)
    sysfs.iommu(tmp_path, iommufd=False, groups=False)  # the directory, empty: IOMMU off
    assert (read(tmp_path).iommufd, read(tmp_path).iommu_groups) == (False, False)
    sysfs.iommu(tmp_path)
    bus = read(tmp_path)
    assert (bus.iommufd, bus.iommu_groups) == (True, True)


def test_a_devices_dir_that_cannot_be_listed_is_a_failed_scan_not_a_crash(
        tmp_path: Path) -> None:
    bus = scan(str(tmp_path / "missing"), load_bundled(), pcie_root=lambda _: None)
    assert bus.gpus == () and bus.error.startswith(
        "error getting all NVIDIA devices: unable to read PCI bus devices: ")
