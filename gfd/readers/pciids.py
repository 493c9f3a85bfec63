"""A ``pci.ids`` file given with ``--pci-ids`` (a newer database mounted from a ConfigMap),
read for the vfio back end; the parsing and the bundled copy are ``gfd.pcidb``'s."""

from __future__ import annotations

from gfd.errors import BackendInitError
from gfd.hostfile import FileProblem, read_bytes
from gfd.pcidb import BUNDLED, NVIDIA, PciIds, load_bundled, parse_pci_ids

__all__ = ["BUNDLED", "MAX_BYTES", "NVIDIA", "PciIds", "load_bundled", "load_file",
           "parse_pci_ids"]

MAX_BYTES = 16 * 2**20
"""The whole pci.ids database is about 1.3 MiB; refuse anything far larger."""


def load_file(path: str) -> PciIds:
    """A ``pci.ids`` file given with ``--pci-ids`` (e.g. a newer one mounted from a
    ConfigMap), instead of the bundled copy; a clear error when it cannot be read."""
    try:
        raw = read_bytes(path, limit=MAX_BYTES)
    except FileProblem as exc:
        if exc.reason == "too-large":
            raise BackendInitError(f"vfio: {path} is larger than {MAX_BYTES // 2**20} MiB: "
                                   "not a pci.ids file (check --pci-ids)") from exc
        raise BackendInitError(f"vfio: cannot read the PCI IDs database {path}: "
                               f"{exc.problem} (check --pci-ids)") from exc
    text = raw.decode("utf-8", errors="replace")
    return parse_pci_ids(text, vendor=NVIDIA)
