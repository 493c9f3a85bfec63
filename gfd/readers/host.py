"""Host files: the machine type (DMI), each GPU's PCI class, NUMA node and PCIe root, the vGPU
scan of PCI config space, and the NVIDIA GPUs on the PCI bus (``gfd.readers.pcibus``).

Paths are parameters (``--machine-type-file``, ``--sysfs-root``), so tests point them
at recorded trees laid out like the host's.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from gfd.errors import GfdError
from gfd.hostfile import FileProblem, read_bytes
from gfd.logs import Once
from gfd.pcidb import PciIds, load_bundled
from gfd.readers import pcibus
from gfd.snapshot import PciBus, Vgpu

log = logging.getLogger(__name__)

NVIDIA_VENDOR = "0x10de"
_STATUS = 0x06
_STATUS_CAP_LIST = 0x10
_CAP_POINTER = 0x34
_CAP_VENDOR_SPECIFIC = 0x09
_RECORD_START = 5
_FIELD = 10
MACHINE_TYPE_MAX_BYTES = 65536
"""A DMI product name is a few dozen bytes; more is not a machine-type file."""
SYSFS_ATTRIBUTE_MAX_BYTES = 4096
"""A sysfs attribute (``class``, ``vendor``) is one page at most; PCI Express configuration
space is 4096 bytes."""


class VgpuScanError(Exception):
    """The vGPU scan could not complete (GFD then writes no vgpu labels)."""


def sysfs_bus_id(nvml_bus_id: str) -> str:
    """NVML's ``00000000:18:00.0`` (8-digit domain) as sysfs names it: ``0000:18:00.0``."""
    domain, sep, rest = nvml_bus_id.strip().lower().partition(":")
    if sep and len(domain) == 8:
        domain = domain[4:]
    return f"{domain}{sep}{rest}"


@dataclass(slots=True, kw_only=True)
class HostReader:
    """Reads host files under configurable roots; every failure is data, not an exception.

    Read every cycle, so each distinct problem is logged once, not every cycle. Every file
    is read through ``gfd.hostfile``: a FIFO, socket, directory or device at a path is
    refused (logged, then None), never opened, so no path can block a cycle or fill memory."""

    machine_type_file: str
    sysfs_root: str
    scan_vgpu: bool = True
    """False (``--no-vgpu-labels``): PCI config space is never read, no vgpu fact."""
    _once: Once = field(default_factory=lambda: Once(log), init=False, repr=False)
    _pci_ids: PciIds | None = field(default=None, init=False, repr=False)

    def machine_type(self) -> str | None:
        """The machine-type file's content; None when unset or unreadable (GFD: 'unknown')."""
        if not self.machine_type_file:
            return None
        try:
            raw = read_bytes(self.machine_type_file, limit=MACHINE_TYPE_MAX_BYTES, null_ok=True)
        except FileProblem as exc:
            fix = ("" if exc.reason in ("missing", "denied", "unreadable") else
                   " (point --machine-type-file at the DMI product name, "
                   "/sys/class/dmi/id/product_name)")
            self._once.warning("machine type: cannot read %s: %s%s", exc.path, exc.problem, fix)
            return None
        return raw.decode("utf-8", errors="replace")

    def pci_class(self, nvml_bus_id: str) -> str | None:
        """The PCI class (``0x030200``) of a GPU, or None when unreadable."""
        if not nvml_bus_id:
            return None
        path = os.path.join(self.sysfs_root, "bus/pci/devices", sysfs_bus_id(nvml_bus_id), "class")
        try:
            raw = read_bytes(path, limit=SYSFS_ATTRIBUTE_MAX_BYTES)
        except FileProblem as exc:
            self._once.warning("gpu.mode: cannot read PCI class %s: %s", exc.path, exc.problem)
            return None
        return raw.decode("ascii", errors="replace").strip().lower()

    def numa_node(self, nvml_bus_id: str) -> int | None:
        """The GPU's NUMA node (sysfs ``numa_node``); None when unreadable or ``-1`` (no NUMA
        affinity), as the DRA driver then leaves ``resource.kubernetes.io/numaNode`` out.
        Only ``gfd devices`` uses it, so a problem is logged at debug level."""
        if not nvml_bus_id:
            return None
        path = os.path.join(self.sysfs_root, "bus/pci/devices", sysfs_bus_id(nvml_bus_id),
                            "numa_node")
        try:
            raw = read_bytes(path, limit=SYSFS_ATTRIBUTE_MAX_BYTES)
        except FileProblem as exc:
            log.debug("numa node: cannot read %s: %s", exc.path, exc.problem)
            return None
        try:
            node = int(raw.decode("ascii", errors="replace").strip())
        except ValueError:
            log.debug("numa node: %s does not hold an integer", path)
            return None
        return node if node >= 0 else None

    def pcie_root(self, nvml_bus_id: str) -> str | None:
        """The GPU's PCIe root complex (``pci0000:00``), as Kubernetes' deviceattribute
        package finds it: ``bus/pci/devices/<bus id>`` is a link into ``devices/``, whose
        first component under ``devices/`` is the root. None when that cannot be told."""
        if not nvml_bus_id:
            return None
        bus_id = sysfs_bus_id(nvml_bus_id)
        link = os.path.join("bus", "pci", "devices", bus_id)
        try:
            target = os.readlink(os.path.join(self.sysfs_root, link))
        except OSError as exc:
            log.debug("pcie root: cannot read the link %s: %s",
                               os.path.join(self.sysfs_root, link), exc.strerror or exc)
            return None
        if not os.path.isabs(target):
            target = os.path.normpath(os.path.join(os.path.dirname(link), target))
        parts = target.split(os.sep)
        if len(parts) < 3 or parts[0] != "devices" or not parts[1].startswith("pci") \
                or parts[-1] != bus_id:
            log.debug("pcie root: %s links to %s, not to devices/pci.../%s",
                               link, target, bus_id)
            return None
        return parts[1]

    def pci_bus(self) -> PciBus | None:
        """The NVIDIA GPUs on the PCI bus, NVML's or not, and the IOMMU facts, as the DRA
        driver's passthrough support reads them (``gfd.readers.pcibus``); None when gfd's
        PCI IDs database cannot be read (a damaged install, logged once)."""
        if self._pci_ids is None:
            try:
                self._pci_ids = load_bundled()
            except GfdError as exc:
                self._once.warning("pci bus: %s", exc)
                return None
        return pcibus.scan(self.sysfs_root, self._pci_ids, pcie_root=self.pcie_root)

    def vgpu(self) -> Vgpu | None:
        """Scan NVIDIA PCI devices for the vGPU signature; None when the scan fails or is
        turned off."""
        if not self.scan_vgpu:
            return None
        try:
            return scan_vgpu(os.path.join(self.sysfs_root, "bus/pci/devices"))
        except VgpuScanError as exc:
            self._once.warning("vgpu: %s; no vgpu labels", exc)
            return None


def scan_vgpu(devices_dir: str) -> Vgpu:
    """GFD's scan: vendor 0x10de devices, vendor-specific capability, ``VF`` signature."""
    try:
        names = sorted(os.listdir(devices_dir))
    except OSError as exc:
        raise VgpuScanError(f"cannot list {devices_dir}: {exc.strerror}") from exc
    found: Vgpu | None = None
    for name in names:
        device = os.path.join(devices_dir, name)
        vendor = _read(os.path.join(device, "vendor"), name, "vendor id").decode(
            "ascii", errors="replace").strip()
        if vendor != NVIDIA_VENDOR:
            continue
        config = _read(os.path.join(device, "config"), name, "configuration space")
        capability = vendor_capability(config, name)
        if capability is None or capability[3:5] != b"VF":
            continue
        version, branch = host_driver(capability, name)
        found = Vgpu(present=True, host_driver_version=version, host_driver_branch=branch)
    return found or Vgpu(present=False)


def _read(path: str, device: str, what: str) -> bytes:
    try:
        return read_bytes(path, limit=SYSFS_ATTRIBUTE_MAX_BYTES)
    except FileProblem as exc:
        raise VgpuScanError(f"cannot read PCI {what} of {device}: {exc.problem}") from exc


def vendor_capability(config: bytes, device: str) -> bytes | None:
    """The vendor-specific capability from a PCI config space, or None."""
    if len(config) < 256:
        raise VgpuScanError(
            f"only {len(config)} bytes of PCI configuration space readable for {device} "
            "(run privileged to read all 256)"
        )
    if not config[_STATUS] & _STATUS_CAP_LIST:
        return None
    seen: set[int] = set()
    pos = config[_CAP_POINTER]
    while pos and pos not in seen and pos + 2 < len(config):
        seen.add(pos)
        cap_id, nxt, length = config[pos], config[pos + 1], config[pos + 2]
        if cap_id == 0xFF:
            break
        if cap_id == _CAP_VENDOR_SPECIFIC:
            return config[pos : pos + length]
        pos = nxt
    return None


def host_driver(capability: bytes, device: str) -> tuple[str, str]:
    """Host driver version and branch from the vGPU capability's record with id 0."""
    pos = _RECORD_START
    record = capability[pos] if pos < len(capability) else 0
    while record != 0 and pos + 1 < len(capability):
        step = capability[pos + 1]
        if step == 0:
            break
        pos += step
        record = capability[pos] if pos < len(capability) else 0
    end = pos + 2 + 2 * _FIELD
    if record != 0 or end > len(capability):
        raise VgpuScanError(f"no host driver version record in the vGPU capability of {device}")
    version = capability[pos + 2 : pos + 2 + _FIELD].strip(b"\0").decode("ascii", "replace")
    branch = capability[pos + 2 + _FIELD : end].strip(b"\0").decode("ascii", "replace")
    return version, branch
