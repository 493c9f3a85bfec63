"""Discovery: compose the readers (NVML, host files, nvidia-smi, simulation, recorded file)
into one Snapshot per cycle, with GFD's --fail-on-init-error semantics."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Protocol

from gfd.errors import BackendInitError, DiscoveryError, InputFileError
from gfd.hostfile import FileProblem, read_bytes, shown
from gfd.logs import Once
from gfd.readers.gpuevents import EventSource, GpuEventWatch
from gfd.readers.host import HostReader
from gfd.readers.resourcemanager import ResourceManagerReader
from gfd.snapshot import PciBus, Snapshot, Vgpu, load_snapshot
from gfd.triggers import Fire

log = logging.getLogger(__name__)


class GpuSource(Protocol):
    """Where the GPU part of a snapshot comes from (NVML in production)."""

    def read(self) -> Snapshot: ...

    def events(self) -> EventSource | None:
        """A source of change events for these GPUs (NVML's event sets), or None."""
        ...

    def refresh(self) -> None:
        """Read every GPU's static facts again at the next read (a back end that reads
        everything each time does nothing)."""
        ...

    def close(self) -> None: ...


class TimesliceSource(Protocol):
    def timeslices(self) -> dict[int, str] | None: ...


class UnusableGpus:
    """GPU uuid -> why an event made it unusable (an Xid, "GPU unavailable"). Held by the
    agent (``app.Factory``) and handed to every Discovery it builds, so a reload that
    replaces the Discovery keeps the marks: unusable until gfd restarts."""

    def __init__(self) -> None:
        self._why: dict[str, str] = {}

    def mark(self, uuid: str, reason: str) -> None:
        """The first reason stays; a GPU without a uuid marks nothing."""
        if uuid:
            self._why.setdefault(uuid, reason)

    def why(self, uuid: str) -> str | None:
        return self._why.get(uuid)

    def __bool__(self) -> bool:
        return bool(self._why)


@dataclass(slots=True)
class Discovery:
    """Reads one full snapshot per call. Owns the NVML session across calls."""

    gpus: GpuSource | None
    """None for --simulate / --snapshot, whose snapshots are complete already."""
    host: HostReader
    smi: TimesliceSource | None = None
    fixed: Snapshot | None = None
    """A complete snapshot (simulation or recorded file) returned as is."""
    fail_on_init_error: bool = True
    manager: ResourceManagerReader | None = None
    """Decides the snapshot's resource manager at each read (None: the snapshot's own)."""
    unusable: UnusableGpus = field(default_factory=UnusableGpus)
    device_facts: bool = False
    """Scan the PCI bus too: only ``gfd devices`` (PassthroughSupport) and ``gfd snapshot``
    use it, as with the NVML reader's ``device_facts``."""
    _init_errors: Once = field(default_factory=lambda: Once(log), init=False)
    _slow: tuple[dict[int, str] | None, Vgpu | None, PciBus | None] | None = field(
        default=None, init=False)
    _slow_key: tuple[str, ...] = field(default=(), init=False)
    _events: GpuEventWatch | None = field(default=None, init=False)

    def refresh(self, *, gpus: bool = False) -> None:
        """Re-read the slow facts at the next read: the facts only an admin changes (the
        compute timeslice policy via nvidia-smi, the vGPU scan of every PCI device, and with
        ``device_facts`` the NVIDIA GPUs on the PCI bus with the driver each is bound to). They are
        read at start, when the set of GPUs changes, and when the loop's host-refresh duty
        (``--host-refresh-interval``) or a SIGHUP calls this -- not every cycle.
        ``gpus`` (SIGHUP): every GPU's static facts too (docs/nvml-reads.md)."""
        self._slow = None
        if gpus and self.gpus is not None:
            self.gpus.refresh()

    @property
    def asks_api(self) -> bool:
        """Whether the resource manager asks the API server (``auto`` beside an API sink): its
        ResourceSlice count then needs the loop's daily recheck."""
        return self.manager is not None and self.manager.slices is not None

    def recheck_resource_manager(self) -> None:
        """Ask the API server for the node's ResourceSlices again at the next read (the
        loop's duty, every ``SLICE_RECHECK``; only where ``auto`` asks the API at all)."""
        if self.manager is not None:
            self.manager.refresh()

    def watch(self, fire: Fire) -> None:
        """Start the GPU back end's event watcher, if it has one (NVML events), and the
        resource manager's watch on the kubelet's plugin registry (``auto``)."""
        if self.manager is not None:
            self.manager.watch(fire)
        if self.gpus is None or self._events is not None:
            return
        source = self.gpus.events()
        if source is not None:
            self._events = GpuEventWatch(source, fire, self.mark_unusable).start()

    def mark_unusable(self, uuid: str, reason: str) -> None:
        """From the next read on, this GPU counts as unhealthy (``reason`` is its error)."""
        self.unusable.mark(uuid, reason)

    def read(self) -> Snapshot:
        snap = self._read()
        if self.manager is None:
            return snap
        return replace(snap, resource_manager=self.manager.read())

    def _read(self) -> Snapshot:
        if self.fixed is not None:
            return self.fixed
        assert self.gpus is not None
        try:
            snap = self.gpus.read()
        except BackendInitError as exc:
            if self.fail_on_init_error:
                raise
            self._init_errors.warning(
                "%s; publishing the labels that need no GPU, retrying each cycle", exc)
            snap = Snapshot(nvml_available=False, nvml_error=str(exc), source="nvml")
        else:
            if self._init_errors.reset():
                log.info("the GPU back end is available now")
            if self.unusable:
                snap = replace(snap, gpus=tuple(
                    replace(g, error=why) if g.error is None and (why := self.unusable.why(g.uuid))
                    else g for g in snap.gpus))
        return self._with_host(snap)

    def _slow_facts(self, snap: Snapshot,
                    ) -> tuple[dict[int, str] | None, Vgpu | None, PciBus | None]:
        key = tuple(f"{g.index}:{g.uuid}:{g.error is None}" for g in snap.gpus)
        if self._slow is None or key != self._slow_key:
            timeslices = self.smi.timeslices() if (self.smi and snap.gpus) else None
            pci = self.host.pci_bus() if self.device_facts else None
            self._slow = (timeslices, self.host.vgpu(), pci)
            self._slow_key = key
        return self._slow

    def _with_host(self, snap: Snapshot) -> Snapshot:
        timeslices, vgpu, pci = self._slow_facts(snap)
        gpus = tuple(
            replace(
                g,
                pci_class=self.host.pci_class(g.pci_bus_id) if g.error is None else None,
                numa_node=self.host.numa_node(g.pci_bus_id) if g.error is None else None,
                pcie_root=self.host.pcie_root(g.pci_bus_id) if g.error is None else None,
                timeslice=(timeslices or {}).get(g.index),
            )
            for g in snap.gpus
        )
        machine_type = self.host.machine_type() if snap.gpus else None
        return replace(snap, gpus=gpus, machine_type=machine_type, vgpu=vgpu, pci=pci)

    def close(self) -> None:
        if self._events is not None:
            self._events.close()
            self._events = None
        if self.gpus is not None:
            self.gpus.close()
        if self.manager is not None:
            self.manager.close()


SNAPSHOT_MAX_BYTES = 16 * 2**20
"""A recorded snapshot is tens of KiB (a few hundred KiB for the largest node); refuse more."""


def read_snapshot_file(path: str) -> Snapshot:
    """A recorded snapshot (``gfd snapshot`` output); a clear error when unreadable. A FIFO,
    socket, directory or device is refused without being opened (``gfd.hostfile``); ``-`` is
    standard input, as ``kubectl -f -`` reads it (``gfd snapshot | gfd labels --snapshot -``)."""
    if path == "-":
        return _parse_snapshot(_read_stdin(), "snapshot on standard input", source="stdin")
    where = f"snapshot file {shown(path)}"
    try:
        raw = read_bytes(path, limit=SNAPSHOT_MAX_BYTES)
    except FileProblem as exc:
        fix = {"missing": " (check --snapshot / GFD_SNAPSHOT; write one with `gfd snapshot > "
                          "FILE`, or give - for standard input)",
               "denied": "", "unreadable": ""}.get(
            exc.reason, " (point --snapshot at a file written by `gfd snapshot`)")
        raise InputFileError(f"{where}: {exc.problem}{fix}") from exc
    return _parse_snapshot(raw, where, source=f"file:{path}")


def _read_stdin() -> bytes:
    import sys

    where = "snapshot on standard input"
    if sys.stdin is None:
        raise InputFileError(f"{where}: there is no standard input")
    try:
        raw = sys.stdin.buffer.read(SNAPSHOT_MAX_BYTES + 1)
    except (OSError, ValueError) as exc:
        raise InputFileError(f"{where}: cannot read it: {exc}") from None
    if len(raw) > SNAPSHOT_MAX_BYTES:
        raise InputFileError(f"{where}: larger than {SNAPSHOT_MAX_BYTES // 2**20} MiB, so not a "
                             "snapshot")
    return raw


def _parse_snapshot(raw: bytes, where: str, *, source: str) -> Snapshot:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(f"{where}: not UTF-8 text (byte {exc.start}), so not a snapshot "
                             "(write one with `gfd snapshot > FILE`)") from None
    try:
        return load_snapshot(text, source=source)
    except DiscoveryError as exc:
        raise InputFileError(f"{where}: {exc}") from exc
