"""The vfio back end: NVIDIA GPUs bound to ``vfio-pci`` (VM passthrough), read from sysfs.

A GPU handed to a virtual machine (KubeVirt) is invisible to NVML, so GFD's vfio back end
(``--device-discovery-strategy vfio``, never chosen automatically) describes it from
``<sysfs>/bus/pci/devices/*`` and the PCI IDs database, the way go-nvlib's ``nvpci`` does:

- a GPU is a device of vendor ``0x10de`` whose class is exactly ``0x030000`` (VGA) or
  ``0x030200`` (3D controller) and that is not an SR-IOV virtual function (no ``physfn``
  link); of those, only the ones whose ``driver`` link resolves to ``vfio-pci`` are
  reported (a GPU bound to ``nvidia``, or to nothing, is logged and left out);
- in PCI address order, numbered from 0;
- named by its device line in the PCI IDs database (``GA100 [A100 SXM4 40GB]``; no vendor,
  no subsystem name), ``UNKNOWN_DEVICE`` when the database lacks the id;
- with memory ``resource`` gives: go-nvlib's addressable memory, the sizes of the 64-bit
  memory BARs among the first six summed and rounded up to a power of two (bytes).

Nothing else is known: no driver or CUDA version, compute capability, MIG, NVLink, fabric
or UUID (those fields stay None/False). The labelers apply GFD's placeholders for them,
keyed on ``Snapshot.backend == "vfio"``.

Unreadable entries are data, never a crash (GFD fails the whole scan on any of them): a
device whose vendor, class or driver link cannot be read is skipped with a warning (it is
not known to be a vfio GPU); a vfio GPU whose device id cannot be read is reported with
``Gpu.error`` (counted in ``gpu.unhealthy``, left out of the resource labels); one whose
``resource`` file cannot be read or parsed has unknown memory (no ``gpu.memory``), with a
warning. Each distinct problem is logged once. A devices directory that cannot be listed
is a :class:`BackendInitError`.
"""

from __future__ import annotations

import logging
import os

from gfd.errors import BackendInitError, show
from gfd.hostfile import FileProblem, read_bytes
from gfd.logs import Once
from gfd.readers.pciids import NVIDIA, PciIds, load_bundled, load_file
from gfd.snapshot import Gpu, Snapshot

log = logging.getLogger(__name__)

ATTRIBUTE_MAX_BYTES = 4096
"""A sysfs attribute (``vendor``, ``class``, ``resource``) is at most one page."""

VFIO_DRIVER = "vfio-pci"
GPU_CLASSES = frozenset({0x030000, 0x030200})
"""VGA controller and 3D controller: what go-nvlib counts as a GPU (exact class match)."""
UNKNOWN_DEVICE = "UNKNOWN_DEVICE"
"""go-nvlib's name for a device the PCI IDs database does not list."""

_BARS = 6
"""Lines 0-5 of ``resource`` are the BARs (then the expansion ROM, SR-IOV BARs ...)."""
_MEM_TYPE_MASK = 0x06
_MEM_TYPE_64 = 0x04
_U64 = (1 << 64) - 1


class ResourceFormatError(ValueError):
    """A ``resource`` file line that is not three fields (internal)."""


def bar_memory(resource: str) -> int:
    """The memory go-nvlib reports for a GPU bound to vfio-pci, in bytes, from its sysfs
    ``resource`` file (``GetTotalAddressableMemory(roundUp=true)``, the 64-bit part).

    Each line is ``start end flags`` in hexadecimal; a line whose start equals its end is
    an unused slot. Of the first six lines (the BARs), the regions whose flags mark a
    64-bit memory BAR (``flags & 0x6 == 0x4``) are summed (``end - start + 1`` each) and
    the sum rounded up to the next power of two. Unsigned 64-bit arithmetic, as in Go.
    Raises ResourceFormatError for a line without exactly three space-separated fields.
    """
    total = 0
    for index, line in enumerate(resource.strip().split("\n")):
        fields = line.split(" ")
        if len(fields) != 3:
            raise ResourceFormatError(f"line {index + 1} does not have 3 fields: {show(line)}")
        if index >= _BARS:
            continue  # still checked for its shape, as go-nvlib does
        start, end, flags = (_u64(f) for f in fields)
        if start == end:
            continue
        if flags & _MEM_TYPE_MASK == _MEM_TYPE_64:
            total = (total + ((end - start + 1) & _U64)) & _U64
    return _next_power_of_two(total)


def _u64(text: str) -> int:
    """Go's ``strconv.ParseUint(text, 0, 64)`` with its error ignored (0)."""
    try:
        value = int(text, 0)
    except ValueError:
        return 0
    return value if 0 <= value <= _U64 else 0


def _next_power_of_two(n: int) -> int:
    """The smallest power of two >= n (0 for 0, and 0 past 2^63 as uint64 overflows)."""
    if n == 0:
        return 0
    return (1 << (n - 1).bit_length()) & _U64


def _address_order(name: str) -> int:
    """go-nvlib's sort key: the address with ``:`` and ``.`` removed, read as hex."""
    try:
        return int(name.replace(":", "").replace(".", ""), 16)
    except ValueError:
        return 0


def nvml_bus_id(address: str) -> str:
    """A sysfs address ``0000:3b:00.0`` in NVML's form ``00000000:3B:00.0``."""
    domain, sep, rest = address.partition(":")
    return f"{domain:0>8}{sep}{rest}".upper() if sep else address.upper()


class _Skip(Exception):
    """This PCI device is not a GPU bound to vfio-pci, or cannot be told to be one."""


class _Unreadable(Exception):
    """An id file that could not be read or parsed (the message says why)."""


class VfioReader:
    """Scans sysfs for NVIDIA GPUs bound to vfio-pci; one Snapshot (``backend="vfio"``)
    per read. Holds no session: ``close()`` has nothing to release."""

    def __init__(self, sysfs_root: str, pci_ids: PciIds | None = None, *,
                 pci_ids_file: str = "") -> None:
        self.sysfs_root = sysfs_root
        self._pci_ids = pci_ids
        """Parsed on the first read when not given (once per reader, not per cycle)."""
        self._pci_ids_file = pci_ids_file
        """``--pci-ids``: a pci.ids file to read instead of the bundled one ("": bundled)."""
        self._once = Once(log)

    @property
    def devices_dir(self) -> str:
        return os.path.join(self.sysfs_root, "bus", "pci", "devices")

    def read(self) -> Snapshot:
        database = self._database()
        try:
            names = os.listdir(self.devices_dir)
        except OSError as exc:
            raise BackendInitError(
                f"vfio: cannot list PCI devices in {self.devices_dir}: {exc.strerror} "
                "(mount the host's /sys, or point --sysfs-root at it)") from exc
        gpus: list[Gpu] = []
        for address in sorted(names, key=lambda n: (_address_order(n), n)):
            try:
                gpus.append(self._gpu(address, len(gpus), database))
            except _Skip:
                continue
        log.debug("vfio: %d GPU(s) bound to %s in %s", len(gpus), VFIO_DRIVER,
                  self.devices_dir)
        return Snapshot(nvml_available=True, gpus=tuple(gpus), source="vfio", backend="vfio")

    def events(self) -> None:
        """None: vfio-pci GPUs have no driver to report events (the next poll sees changes)."""
        return None

    def refresh(self) -> None:
        """Nothing to do: the PCI scan is made afresh at each read."""

    def close(self) -> None:
        """Nothing to release (no library session); idempotent."""

    # -- one device ------------------------------------------------------------------

    def _database(self) -> PciIds:
        if self._pci_ids is None:
            self._pci_ids = (load_file(self._pci_ids_file) if self._pci_ids_file
                             else load_bundled())
        return self._pci_ids

    def _gpu(self, address: str, index: int, database: PciIds) -> Gpu:
        device = os.path.join(self.devices_dir, address)
        vendor = self._id(device, address, "vendor", "vendor id")
        if vendor != NVIDIA:
            raise _Skip
        if os.path.exists(os.path.join(device, "physfn")):
            raise _Skip  # an SR-IOV virtual function: go-nvlib's GPU list leaves it out
        pci_class = self._id(device, address, "class", "class")
        if pci_class not in GPU_CLASSES:
            raise _Skip
        driver = self._driver(device, address)
        if driver != VFIO_DRIVER:
            self._once.log(logging.INFO, "vfio: GPU %s is bound to %s, not %s; not labelled",
                           address, repr(driver) if driver else "no driver", VFIO_DRIVER)
            raise _Skip
        bus_id = nvml_bus_id(address)
        try:
            device_id = self._id(device, address, "device", "device id", quiet=True)
        except _Unreadable as exc:
            return Gpu(index=index, pci_bus_id=bus_id, pci_class=f"0x{pci_class:06x}",
                       error=f"cannot read the PCI device id of {address}: {exc}")
        name = database.device_name(NVIDIA, device_id)
        if name is None:
            self._once.warning(
                "vfio: GPU %s is 10de:%04x, which gfd's PCI IDs database (%s) does not list; "
                "it is named %s, as GFD names it (a newer gfd may know it)", address,
                device_id, database.version or "no version", UNKNOWN_DEVICE)
            name = UNKNOWN_DEVICE
        return Gpu(index=index, name=name, memory_total_bytes=self._memory(device, address),
                   pci_bus_id=bus_id, pci_class=f"0x{pci_class:06x}")

    def _id(self, device: str, address: str, file: str, what: str, *,
            quiet: bool = False) -> int:
        """A hexadecimal id file (``0x10de``); _Skip (warned) or, when quiet, _Unreadable."""
        try:
            text = read_bytes(os.path.join(device, file), limit=ATTRIBUTE_MAX_BYTES).decode(
                "ascii", errors="replace").strip()
        except FileProblem as exc:
            problem = exc.problem
        else:
            try:
                return int(text, 0)
            except ValueError:
                problem = f"not a number: {show(text)}"
        if quiet:
            raise _Unreadable(problem)
        self._once.warning("vfio: skipping PCI device %s: cannot read its %s (%s)", address,
                           what, problem)
        raise _Skip

    def _driver(self, device: str, address: str) -> str:
        """The name of the driver the device is bound to; empty when it has none."""
        try:
            return os.path.basename(os.path.realpath(os.path.join(device, "driver"),
                                                     strict=True))
        except FileNotFoundError:
            return ""
        except OSError as exc:
            self._once.warning("vfio: skipping PCI device %s: cannot resolve its driver "
                               "link (%s)", address, exc.strerror or exc)
            raise _Skip from exc

    def _memory(self, device: str, address: str) -> int | None:
        path = os.path.join(device, "resource")
        try:
            text = read_bytes(path, limit=ATTRIBUTE_MAX_BYTES).decode("ascii", errors="replace")
            return bar_memory(text)
        except FileProblem as exc:
            problem = exc.problem
        except ResourceFormatError as exc:
            problem = str(exc)
        self._once.warning("vfio: GPU %s: cannot read its BARs from %s (%s); memory unknown",
                           address, path, problem)
        return None
