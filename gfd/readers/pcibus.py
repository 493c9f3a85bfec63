"""The NVIDIA GPUs on the PCI bus as the DRA driver's passthrough support reads them: go-nvlib's
``nvpci`` scan of ``<sysfs>/bus/pci/devices`` (every NVIDIA GPU, whatever driver it is bound
to, so a GPU handed to ``vfio-pci`` and invisible to NVML is listed too), and the host's IOMMU.

Follows go-nvlib v0.10.0 (vendored by the driver release ``dra.RELEASE``),
``pkg/nvpci/nvpci.go`` ``GetAllDevices`` / ``getNvidiaDeviceByPciBusID`` / ``GetGPUs``:

- every directory of the devices dir, in name order, has its ``vendor`` read; a device of
  NVIDIA (``0x10de``) or Mellanox (``0x15b3``) also its ``class``, ``device``, ``driver``
  link, ``iommu_group`` link, ``numa_node``, ``resource`` and, for an SR-IOV physical
  function, ``sriov_totalvfs`` / ``sriov_numvfs`` (a virtual function's ``physfn`` too). Any
  of those it cannot read or parse fails the whole scan -- and with it the driver's start:
  ``PciBus.error`` says why, as go-nvlib words it;
- a GPU is an NVIDIA device of class exactly ``0x030000`` or ``0x030200`` that is not a
  virtual function, in the order of its address read as one hexadecimal number;
- its name is the PCI IDs database's device line (go-nvlib's embedded ``pci.ids``, whose
  NVIDIA section gfd ships: the driver's image has no other), ``UNKNOWN_DEVICE`` when absent;
- its addressable memory is ``GetTotalAddressableMemory(true)``'s 64-bit part.

The driver's ``checkIommuFDEnabled`` looks for ``/dev/iommu`` on the host; gfd reads the
same fact from sysfs (``class/misc/iommu``, the misc device the kernel's iommufd registers
and devtmpfs makes ``/dev/iommu`` of), so no host ``/dev`` needs mounting. ``NewVfioPciManager``
refuses a host whose ``kernel/iommu_groups`` is missing or empty (the IOMMU is off).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from gfd.hostfile import FileProblem, read_bytes
from gfd.pcidb import PciIds
from gfd.readers.vfio import bar_memory
from gfd.snapshot import PciBus, PciGpu

log = logging.getLogger(__name__)

NVIDIA = 0x10DE
MELLANOX = 0x15B3
GPU_CLASSES = frozenset({0x030000, 0x030200})
UNKNOWN_DEVICE = "UNKNOWN_DEVICE"
_MAX_BYTES = 4096
"""A sysfs attribute is one page at most."""


class _ScanFailed(Exception):
    """go-nvlib's scan fails: the message as it words it (internal)."""


def scan(sysfs_root: str, database: PciIds, *,
         pcie_root: Callable[[str], str | None]) -> PciBus:
    """The PCI bus's NVIDIA GPUs and the IOMMU facts, read now; never raises (a failure is
    ``PciBus.error``). ``pcie_root`` finds a device's PCIe root from its address."""
    devices_dir = os.path.join(sysfs_root, "bus", "pci", "devices")
    iommufd = _exists(os.path.join(sysfs_root, "class", "misc", "iommu"))
    groups = _not_empty(os.path.join(sysfs_root, "kernel", "iommu_groups"))
    try:
        gpus = _gpus(devices_dir, database, pcie_root)
    except _ScanFailed as exc:
        log.debug("pci bus: %s", exc)
        return PciBus(error=f"error getting all NVIDIA devices: {exc}", iommufd=iommufd,
                      iommu_groups=groups)
    return PciBus(gpus=tuple(gpus), iommufd=iommufd, iommu_groups=groups)


def _gpus(devices_dir: str, database: PciIds,
          pcie_root: Callable[[str], str | None]) -> list[PciGpu]:
    try:
        names = sorted(os.listdir(devices_dir))  # Go's os.ReadDir: sorted by name
    except OSError as exc:
        raise _ScanFailed(f"unable to read PCI bus devices: {exc.strerror or exc}") from exc
    gpus: list[PciGpu] = []
    for name in names:
        try:
            found = _device(devices_dir, name, database, pcie_root)
        except _ScanFailed as exc:
            raise _ScanFailed(f"error constructing NVIDIA PCI device {name}: {exc}") from exc
        if found is not None:
            gpus.append(found)
    gpus.sort(key=lambda g: _address_id(g.address))
    return gpus


def _device(devices_dir: str, address: str, database: PciIds,
            pcie_root: Callable[[str], str | None]) -> PciGpu | None:
    """One device as getNvidiaDeviceByPciBusID reads it; None for another vendor's device and
    for an NVIDIA device that is not a GPU or is a virtual function (GetGPUs drops those)."""
    path = os.path.join(devices_dir, address)
    vendor = _number(path, "vendor", f"PCI device vendor id for {address}", "uint16", 16)
    if vendor not in (NVIDIA, MELLANOX):
        return None
    pci_class = _number(path, "class", f"PCI device class for {address}", "uint32", 32)
    device = _number(path, "device", f"PCI device id for {address}", "uint16", 16)
    driver = _link_name(path, "driver", f"unable to detect driver for {address}") or ""
    group_name = _link_name(path, "iommu_group", f"unable to detect IOMMU group for {address}")
    try:
        group = -1 if group_name is None else int(group_name.strip(), 0)
    except ValueError:
        raise _ScanFailed(f"unable to detect IOMMU group for {address}: unable to convert "
                          f"iommu_group string to int64: {group_name}") from None
    numa_text = _text(path, "numa_node", f"unable to read PCI NUMA node for {address}")
    try:
        numa = int(numa_text.strip(), 0)
    except ValueError:
        raise _ScanFailed("unable to convert NUMA node string to int64: 0") from None
    resource = _text(path, "resource", f"unable to read PCI resource file for {address}")
    for i, line in enumerate(resource.strip().split("\n")):
        if len(line.split(" ")) != 3:
            raise _ScanFailed(f"more than 3 entries in line '{i}' of resource file")
    virtual = _virtual_function(devices_dir, path, address, database, pcie_root)
    if vendor != NVIDIA or pci_class not in GPU_CLASSES or virtual:
        return None
    return PciGpu(address=address, device_id=device,
                  name=database.device_name(NVIDIA, device) or UNKNOWN_DEVICE,
                  driver=driver, numa_node=numa, iommu_group=group,
                  addressable_memory=bar_memory(resource), pcie_root=pcie_root(address))


def _virtual_function(devices_dir: str, path: str, address: str, database: PciIds,
                      pcie_root: Callable[[str], str | None]) -> bool:
    """True for an SR-IOV virtual function (a ``physfn`` link, whose device is read too); a
    physical function's ``sriov_totalvfs`` and ``sriov_numvfs`` must read as numbers."""
    link = os.path.join(path, "physfn")
    try:
        target = os.path.realpath(link, strict=True)
    except FileNotFoundError:
        target = ""
    except OSError as exc:
        raise _ScanFailed(f"unable to read {link}: {exc.strerror or exc}") from exc
    if target:
        try:
            _device(devices_dir, os.path.basename(target), database, pcie_root)
        except _ScanFailed as exc:
            raise _ScanFailed(f"unable to detect physfn for {address}: {exc}") from exc
        return True
    if not os.path.lexists(os.path.join(path, "sriov_totalvfs")):
        return False
    for file in ("sriov_totalvfs", "sriov_numvfs"):
        text = _text(path, file, f"unable to read SRIOV physical function details for {path}: "
                                 f"unable to read {file}")
        if not text.strip().isdigit() or int(text.strip()) > 0xFFFF:
            raise _ScanFailed(f"unable to read SRIOV physical function details for {path}: "
                              f"unable to convert {file} to uint64")
    return False


def _text(path: str, file: str, what: str) -> str:
    try:
        raw = read_bytes(os.path.join(path, file), limit=_MAX_BYTES)
    except FileProblem as exc:
        raise _ScanFailed(f"{what}: {exc.problem}") from exc
    return raw.decode("ascii", errors="replace")


def _number(path: str, file: str, what: str, kind: str, bits: int) -> int:
    """A hexadecimal id file as strconv.ParseUint(text, 0, bits) reads it."""
    text = _text(path, file, f"unable to read {what}").strip()
    try:
        value = int(text, 0)
    except ValueError:
        value = -1
    if not 0 <= value < 2**bits:
        raise _ScanFailed(f"unable to convert {file} string to {kind}: {text}")
    return value


def _link_name(path: str, file: str, what: str) -> str | None:
    """The last component of what a link resolves to; None when there is no such link."""
    try:
        return os.path.basename(os.path.realpath(os.path.join(path, file), strict=True))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _ScanFailed(f"{what}: {exc.strerror or exc}") from exc


def _address_id(address: str) -> int:
    """go-nvlib's sort key: the address without ``:`` and ``.``, read as hexadecimal."""
    try:
        return int(address.replace(":", "").replace(".", ""), 16)
    except ValueError:
        return 0


def _exists(path: str) -> bool | None:
    try:
        os.stat(path)
    except FileNotFoundError:
        return False
    except OSError:
        return None
    return True


def _not_empty(path: str) -> bool | None:
    try:
        return bool(os.listdir(path))
    except FileNotFoundError:
        return False
    except OSError:
        return None
