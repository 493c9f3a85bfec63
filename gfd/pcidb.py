"""The PCI IDs database (``pci.ids``) as data: one vendor's device names parsed as go-nvlib
reads them, and the NVIDIA section gfd ships (``gfd/data/pci.ids.nvidia``, with the upstream
header and licence notice), so that naming a GPU never depends on what the image or the host
has installed. Only vendor and device lines matter: go-nvlib names a device by its device
line alone (``GA100 [A100 SXM4 40GB]``), never with the vendor name and never from the
subsystem lines (two tabs) under it. Reading a ``--pci-ids`` file is the vfio reader's
(``gfd.readers.pciids``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from gfd.errors import BackendInitError

NVIDIA = 0x10DE
BUNDLED = "data/pci.ids.nvidia"
"""The shipped database, relative to the ``gfd`` package."""

_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True, slots=True, kw_only=True)
class PciIds:
    """Device names of one vendor from a ``pci.ids`` file."""

    vendor: int
    names: Mapping[int, str]
    """Device id -> the device line's name, e.g. ``0x20b0 -> 'GA100 [A100 SXM4 40GB]'``."""
    version: str = ""
    """The file's ``Version:`` header (``2023.04.10``); empty when it has none."""

    def device_name(self, vendor: int, device: int) -> str | None:
        """The device's name, or None when the database does not know it."""
        if vendor != self.vendor:
            return None
        return self.names.get(device)



def parse_pci_ids(text: str, *, vendor: int = NVIDIA) -> PciIds:
    """Read ``vendor``'s device lines from ``pci.ids`` text; the rest is skipped.

    Lines as go-nvlib tells them apart: a vendor line starts with a lowercase hex digit, a
    device line with one tab, a subsystem line with two; ``#`` comments and blank lines are
    skipped, and a ``C`` line starts the class section, where no vendor's devices follow.
    The first four characters (after the tabs) are the id, the rest, trimmed, the name; a
    device listed twice keeps its last name.
    """
    names: dict[int, str] = {}
    version = ""
    current: int | None = None
    for line in text.splitlines():
        if not line:
            continue
        first = line[0]
        if first == "#":
            if not version and line.startswith("#\tVersion:"):
                version = line.partition(":")[2].strip()
            continue
        if first in _HEX:
            current = _hex_id(line)
            if current is not None and current > vendor and names:
                break  # vendors are sorted: this one's section is over
            continue
        if first == "C":
            break  # the class section: no more vendors
        if first != "\t" or line.startswith("\t\t") or current != vendor:
            continue  # a subsystem line, or a device of another vendor
        entry = line.strip()
        device = _hex_id(entry)
        if device is not None:
            names[device] = entry[4:].strip()
    return PciIds(vendor=vendor, names=MappingProxyType(names), version=version)


def _hex_id(entry: str) -> int | None:
    try:
        return int(entry[:4], 16)
    except ValueError:
        return None


def load_bundled() -> PciIds:
    """The NVIDIA section of ``pci.ids`` that ships with gfd."""
    import importlib.resources  # (only a read that needs PCI names: not on every start)

    resource = importlib.resources.files("gfd").joinpath(BUNDLED)
    try:
        text = resource.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BackendInitError(
            f"vfio: cannot read gfd's PCI IDs database gfd/{BUNDLED} ({exc}); "
            "reinstall gfd: the package data is missing or damaged") from exc
    return parse_pci_ids(text, vendor=NVIDIA)
