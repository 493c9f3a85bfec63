"""Builds sysfs trees laid out like a host's: PCI class, vendor and config space per device."""

from __future__ import annotations

from pathlib import Path

COMPUTE = "0x030200"
GRAPHICS = "0x030000"


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


def pci_device(root: Path, bus_id: str, *, pci_class: str = COMPUTE, vendor: str = "0x10de",
               config: bytes | None = None) -> Path:
    """One device under ``<root>/bus/pci/devices/<bus id>`` (sysfs: 4-digit domain)."""
    domain, _, rest = bus_id.lower().partition(":")
    name = f"{domain[-4:]}:{rest}"
    device = root / "bus" / "pci" / "devices" / name
    device.mkdir(parents=True, exist_ok=True)
    (device / "class").write_text(pci_class + "\n")
    (device / "vendor").write_text(vendor + "\n")
    (device / "config").write_bytes(config if config is not None else config_space())
    return device


def gpu_tree(root: Path, bus_ids: list[str], *, pci_class: str = COMPUTE,
             vgpu: tuple[str, str] | None = None) -> Path:
    """A sysfs root holding these GPUs plus one non-NVIDIA device (a NIC)."""
    for bus in bus_ids:
        pci_device(root, bus, pci_class=pci_class, config=config_space(vgpu=vgpu))
    pci_device(root, "00000000:00:1f.6", pci_class="0x020000", vendor="0x8086")
    return root
