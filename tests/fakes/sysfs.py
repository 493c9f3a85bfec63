"""Builds sysfs trees laid out like a host's: PCI class, vendor and config space per device;
for the vfio back end and the DRA driver's passthrough scan also the device id, the ``driver``
and ``iommu_group`` links, ``numa_node``, the BARs (``resource``) and the host's IOMMU."""

from __future__ import annotations

import os
from pathlib import Path

COMPUTE = "0x030200"
GRAPHICS = "0x030000"
NVSWITCH = "0x068000"
AUDIO = "0x040300"

VFIO = "vfio-pci"
NVIDIA = "nvidia"

A100_SXM4_40GB = "0x20b0"

_IOMEM_32 = 0x40200
"""sysfs flags of a 32-bit, non-prefetchable memory BAR (IORESOURCE_MEM | SIZEALIGN)."""
_IOMEM_64_PREFETCH = 0x14220C
"""A 64-bit prefetchable memory BAR (IORESOURCE_MEM_64 | SIZEALIGN | PREFETCH | MEM, and the
BAR's low bits: type 64-bit, prefetchable)."""
_ROM = 0x46200
"""The expansion ROM (IORESOURCE_READONLY | SIZEALIGN | PREFETCH | MEM)."""

Region = tuple[int, int, int]
"""(start, size in bytes, flags); size 0 is an unused line of zeros."""

MiB, GiB = 2**20, 2**30


def resource_text(*regions: Region) -> str:
    """A sysfs ``resource`` file: one ``start end flags`` line per region, as the kernel
    prints them (``0x%016llx``), 13 lines for an endpoint (6 BARs, ROM, 6 SR-IOV BARs)."""
    lines = []
    for start, size, flags in (*regions, *[(0, 0, 0)] * (13 - len(regions))):
        end = start + size - 1 if size else 0
        start = start if size else 0
        lines.append(f"0x{start:016x} 0x{end:016x} 0x{flags if size else 0:016x}\n")
    return "".join(lines)


def a100_sxm4_40gb_bars(n: int = 0) -> str:
    """An A100-SXM4-40GB's ``resource`` (the n-th GPU's addresses): BAR0 16 MiB 32-bit,
    BAR1 64 GiB and BAR3 32 MiB 64-bit prefetchable (each 64-bit BAR takes two slots), a
    512 KiB ROM, and SR-IOV BARs. go-nvlib's total: 64 GiB + 32 MiB, rounded up: 128 GiB."""
    high = 0x238000000000 + n * 0x10000000000
    low = 0xBC000000 - n * 0x20000000
    return resource_text(
        (low, 16 * MiB, _IOMEM_32),  # BAR0
        (high, 64 * GiB, _IOMEM_64_PREFETCH),  # BAR1
        (0, 0, 0),  # upper half of BAR1
        (high + 64 * GiB, 32 * MiB, _IOMEM_64_PREFETCH),  # BAR3
        (0, 0, 0),  # upper half of BAR3
        (0, 0, 0),  # BAR5 unused
        (low + 16 * MiB, 512 * 1024, _ROM),  # expansion ROM: not a BAR
        (low + 32 * MiB, 16 * 16 * MiB, _IOMEM_32),  # SR-IOV BARs: not counted either
        (high - 32 * GiB, 32 * GiB, _IOMEM_64_PREFETCH),
        (0, 0, 0),
        (high - 64 * GiB, 512 * MiB, _IOMEM_64_PREFETCH),
    )


def config_space(*, vgpu: tuple[str, str] | None = None, full: bool = True) -> bytes:
    """A PCI config space with a capability list: power management, MSI, and for a vGPU the
    vendor-specific capability with the ``VF`` signature and a host-driver record."""
    space = bytearray(256)
    space[0:2] = b"\xde\x10"
    space[0x06] = 0x10  # status: capabilities list present
    space[0x34] = 0x60
    space[0x60:0x63] = bytes([0x01, 0x68, 0x08])  # power management
    space[0x68:0x6B] = bytes([0x05, 0x78 if vgpu else 0x00, 0x0E])  # MSI
    if vgpu:
        version, branch = (s.encode().ljust(10, b"\0") for s in vgpu)
        cap = bytes([0x09, 0x00, 27]) + b"VF" + bytes([0x00, 22]) + version + branch
        space[0x78:0x78 + len(cap)] = cap
    return bytes(space if full else space[:64])


def sysfs_name(bus_id: str) -> str:
    """``00000000:3B:00.0`` (NVML) or ``0000:3b:00.0`` -> ``0000:3b:00.0`` (sysfs)."""
    domain, _, rest = bus_id.lower().partition(":")
    return f"{domain[-4:]}:{rest}"


def pci_device(root: Path, bus_id: str, *, pci_class: str = COMPUTE, vendor: str = "0x10de",
               config: bytes | None = None, device: str | None = None,
               driver: str | None = None, resource: str | None = None,
               physfn: str | None = None, numa_node: int | None = None,
               iommu_group: int | None = None) -> Path:
    """One device under ``<root>/bus/pci/devices/<bus id>`` (sysfs: 4-digit domain).

    ``driver`` links ``driver`` to ``<root>/bus/pci/drivers/<driver>`` as the kernel does
    for a bound device; ``physfn`` (a bus id) makes it an SR-IOV virtual function of that
    device. ``device`` (the device id file), ``resource`` and ``numa_node`` are written when
    given; ``iommu_group`` links ``iommu_group`` to ``<root>/kernel/iommu_groups/<n>``."""
    path = root / "bus" / "pci" / "devices" / sysfs_name(bus_id)
    path.mkdir(parents=True, exist_ok=True)
    (path / "class").write_text(pci_class + "\n")
    (path / "vendor").write_text(vendor + "\n")
    (path / "config").write_bytes(config if config is not None else config_space())
    if device is not None:
        (path / "device").write_text(device + "\n")
    if resource is not None:
        (path / "resource").write_text(resource)
    if driver is not None:
        (root / "bus" / "pci" / "drivers" / driver).mkdir(parents=True, exist_ok=True)
        os.symlink(root / "bus" / "pci" / "drivers" / driver, path / "driver")
    if physfn is not None:
        os.symlink(os.path.join("..", sysfs_name(physfn)), path / "physfn")
    if numa_node is not None:
        (path / "numa_node").write_text(f"{numa_node}\n")
    if iommu_group is not None:
        group = root / "kernel" / "iommu_groups" / str(iommu_group)
        group.mkdir(parents=True, exist_ok=True)
        os.symlink(group, path / "iommu_group")
    return path


def passthrough_gpu(root: Path, bus_id: str, n: int = 0, *, driver: str | None = VFIO,
                    numa_node: int = 0, iommu_group: int | None = None,
                    device: str = A100_SXM4_40GB, **kwargs: object) -> Path:
    """An NVIDIA GPU (an A100-SXM4-40GB unless ``device`` says) with every file go-nvlib's
    nvpci reads of it: ids, driver link, IOMMU group, NUMA node, BARs (``kwargs`` go to
    ``pci_device``)."""
    return pci_device(root, bus_id, device=device, driver=driver,
                      resource=a100_sxm4_40gb_bars(n), numa_node=numa_node,
                      iommu_group=30 + n if iommu_group is None else iommu_group,
                      **kwargs)  # type: ignore[arg-type]


def iommu(root: Path, *, iommufd: bool = True, groups: bool = True) -> None:
    """The host's IOMMU in sysfs: the iommufd misc device (``/dev/iommu``) and the kernel's
    IOMMU groups directory (one group, or empty)."""
    if iommufd:
        (root / "class" / "misc" / "iommu").mkdir(parents=True, exist_ok=True)
    groups_dir = root / "kernel" / "iommu_groups"
    groups_dir.mkdir(parents=True, exist_ok=True)
    if groups:
        (groups_dir / "0").mkdir(exist_ok=True)


def linked_device(root: Path, bus_id: str, *, pcie_root: str, bridges: tuple[str, ...] = (),
                  numa_node: int | None = None, **kwargs: object) -> Path:
    """A device laid out as the kernel does it: the directory under
    ``devices/<pcie_root>/<bridges...>/<bus id>`` and ``bus/pci/devices/<bus id>`` a relative
    link to it; ``numa_node`` written when given. ``kwargs`` go to ``pci_device``."""
    name = sysfs_name(bus_id)
    root.joinpath("devices", pcie_root, *bridges, name).mkdir(parents=True, exist_ok=True)
    link = root / "bus" / "pci" / "devices" / name
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.join("..", "..", "..", "devices", pcie_root, *bridges, name), link)
    path = pci_device(root, bus_id, **kwargs)  # type: ignore[arg-type]
    if numa_node is not None:
        (path / "numa_node").write_text(f"{numa_node}\n")
    return path


def a100(root: Path, bus_id: str, n: int = 0, *, driver: str | None = VFIO) -> Path:
    """An A100-SXM4-40GB (``10de:20b0``, 3D controller) bound to ``driver``."""
    return pci_device(root, bus_id, device=A100_SXM4_40GB, driver=driver,
                      resource=a100_sxm4_40gb_bars(n))


def gpu_tree(root: Path, bus_ids: list[str], *, pci_class: str = COMPUTE,
             vgpu: tuple[str, str] | None = None) -> Path:
    """A sysfs root holding these GPUs plus one non-NVIDIA device (a NIC)."""
    for bus in bus_ids:
        pci_device(root, bus, pci_class=pci_class, config=config_space(vgpu=vgpu))
    pci_device(root, "00000000:00:1f.6", pci_class="0x020000", vendor="0x8086")
    return root
