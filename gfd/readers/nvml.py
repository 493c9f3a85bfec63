"""The NVML reader: the only module that talks to the NVIDIA driver (through pynvml).

``NvmlReader.read()`` returns the NVML part of a Snapshot: driver and CUDA versions
and, per GPU, the identity, memory, compute capability, MIG state and devices,
NVLink and fabric facts. Host facts (machine type, vGPU, PCI class) and the
nvidia-smi timeslice are left None for the other readers to fill in.

The error policy (docs/nvml-errors.md has the table of every call):

- NOT_SUPPORTED and FUNCTION_NOT_FOUND (an older driver without the symbol) mean
  "feature absent": the field is None/False, never an exception.
- GPU_IS_LOST from any call, or a GPU whose handle, UUID or name cannot be had and was
  never known: the GPU is lost -- ``Gpu(index=i, error=...)``, left out of the resource
  labels and counted in ``gpu.unhealthy``; the other GPUs are still read. A known GPU whose
  handle or UUID fails otherwise keeps its last read (a held ``identity`` fact) until the
  failure has lasted ``freshness.LOST_AFTER_READS`` reads and ``LOST_AFTER_SECONDS``.
- Any other error (UNKNOWN, NO_PERMISSION, text that is not UTF-8...) from a query about
  one GPU makes that *fact* unknown for this read: the value from the GPU's last good read
  is used (``Degraded(held=True)``, so the labels derived from it stay as published), or,
  when none is known, the fact is marked unknown (``Degraded(held=False)``) and the
  labelers leave out what they would derive from it. Never a default in its place.
- An error from a system query (driver version, CUDA version, device count) fails the
  whole read with a one-line DiscoveryError: nothing is published, everything stays, and
  the next read starts a fresh NVML session -- except TIMEOUT or UNKNOWN, which keep the
  last values for as long as a GPU that does not answer is kept.

What a read asks (docs/nvml-reads.md, ``gfd.readers.freshness``): each cycle the device
count and, per GPU, its handle, UUID, MIG mode and compute mode, whether a MIG-enabled GPU's
MIG devices are still the same (one call per MIG slot, ``nvmlmig.unchanged``; all their
details again when not), and the fabric while it is starting; the static facts
(``_read_static``, the one place a per-GPU static query goes) when a GPU is first seen and
again only for a reason. Events only make a change visible sooner: what a cycle asks does not
depend on them.

``NvmlEvents`` (``nvmlevents``, re-exported here) listens for NVML events (MIG
reconfiguration, Xid errors, a GPU becoming unavailable) in its own session, from one
thread, while NvmlReader reads in another. A GPU that cannot be registered is only not
listened to: its state is the reader's to report. NVML's session and calls, and the error
codes this policy tells apart, are ``nvmlcall``'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from ctypes import byref
from dataclasses import dataclass, fields, replace
from types import MappingProxyType
from typing import Any, TypeVar

import pynvml

from gfd.errors import DiscoveryError
from gfd.logs import Once
from gfd.readers.failure import CallFailed
from gfd.readers.freshness import (
    FULL_READ_INTERVAL,
    STATIC_FACTS,
    Changes,
    Taken,
    Unanswered,
    fabric_settled,
)
from gfd.readers.nvmlcall import (
    ABSENT,
    BAD_VALUE,
    LOST,
    VERSION_MISMATCH,
    binding,
    decoded,
    end_session,
    nvml_call,
    nvml_failure,
    optional,
    start_session,
)
from gfd.readers.nvmlevents import EVENT_TYPES, NvmlEvent, NvmlEvents
from gfd.readers.nvmlmig import (
    Layout,
    ProfileTables,
    Tables,
    read_gi_profiles,
    read_mig_layout,
    unchanged,
)
from gfd.snapshot import (
    ADDRESSING_MODES,
    COMPUTE_MODES,
    FABRIC_STATES,
    Degraded,
    Fabric,
    GiProfile,
    Gpu,
    MigDevice,
    Snapshot,
)

log = logging.getLogger(__name__)

DEVICE_FACTS = ("minor", "architecture", "addressing_mode", "mig_profiles")
"""The facts (``snapshot.FACTS``) only the DRA driver's devices use: read with
``NvmlReader(device_facts=True)``."""

_ARCH_NAMES = (
    ("KEPLER", "kepler"),
    ("MAXWELL", "maxwell"),
    ("PASCAL", "pascal"),
    ("VOLTA", "volta"),
    ("TURING", "turing"),
    ("AMPERE", "ampere"),
    ("ADA", "ada"),
    ("HOPPER", "hopper"),
    ("BLACKWELL", "blackwell"),
    ("RUBIN", "rubin"),
    ("UNKNOWN", "unknown"),  # 0xffffffff: what NVML says of a GPU it cannot place
)
_ARCHITECTURES: MappingProxyType[int, str] = MappingProxyType(
    {
        int(getattr(pynvml, f"NVML_DEVICE_ARCH_{const}")): name
        for const, name in _ARCH_NAMES
        if hasattr(pynvml, f"NVML_DEVICE_ARCH_{const}")
    }
)

_BRAND_NAMES = (
    "UNKNOWN",  # 0: an answer, which go-nvlib names "Unknown" (GetBrandAsString)
    "QUADRO",
    "TESLA",
    "NVS",
    "GRID",
    "GEFORCE",
    "TITAN",
    "NVIDIA_VAPPS",
    "NVIDIA_VPC",
    "NVIDIA_VCS",
    "NVIDIA_VWS",
    "NVIDIA_CLOUD_GAMING",
    "QUADRO_RTX",
    "NVIDIA_RTX",
    "NVIDIA",
    "GEFORCE_RTX",
    "TITAN_RTX",
)
_BRANDS: MappingProxyType[int, str] = MappingProxyType(
    {
        int(getattr(pynvml, f"NVML_BRAND_{const}")): const.lower().replace("_", "-")
        for const in _BRAND_NAMES
        if hasattr(pynvml, f"NVML_BRAND_{const}")
    }
)

class NvmlReader:
    """Owns the NVML session: initialised on first read, kept between reads,
    re-initialised after an error. Not thread-safe (its ``Changes`` are).

    The first read of a session, a read after ``refresh()``, and one every
    FULL_READ_INTERVAL read everything; the reads in between ask each GPU what can change
    without a restart or an event gfd is sure to get, events registered or not
    (``gfd.readers.freshness``, docs/nvml-reads.md).

    ``device_facts``: also read what only the DRA driver's devices show (``gfd devices``,
    and ``gfd snapshot`` that records them): each GPU's minor number, architecture and
    addressing mode, and each MIG-capable GPU's GPU-instance profiles with their possible
    placements (``DEVICE_FACTS``). No label, feature or duty of the agent uses them, and
    the profiles alone are about as many calls as the rest of a DGX A100's read, so the
    agent and the other commands leave them out."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic,
                 device_facts: bool = False) -> None:
        self._initialised = False
        self._clock = clock
        self._device_facts = device_facts
        self._last: dict[int, Gpu] = {}
        """Each GPU's last read (by index), for the facts a later read cannot get."""
        self._tables: Tables = {}
        """MIG profile tables per GPU, kept until the next full read."""
        self._layouts: dict[str, Layout] = {}
        """Each MIG-enabled GPU's MIG devices and their handles (by GPU uuid), from its last
        enumeration in this session: what each read checks again."""
        self._system: tuple[str, int] | None = None
        """Driver and CUDA versions, read by a full read."""
        self._count: int | None = None
        """The device count of the last read."""
        self._next_full = 0.0
        self._full_due = True
        self._changes = Changes()
        self._unanswered = Unanswered()
        self._reported = Once(log)

    def __enter__(self) -> NvmlReader:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def read(self) -> Snapshot:
        """Read the NVML part of a snapshot (host facts and timeslice stay None)."""
        if not self._initialised:
            self._init()
        try:
            return self._read()
        except CallFailed as failed:
            self.close()
            raise DiscoveryError(failed.describe()) from failed.error
        except DiscoveryError:
            self.close()
            raise

    def refresh(self) -> None:
        """Read every GPU's static facts again at the next read (a reload, SIGHUP)."""
        self._full_due = True

    def _report(self, gpus: list[Gpu]) -> None:
        """Each degraded fact logged once: one line per fact, call and error, naming the GPUs."""
        by_cause: dict[tuple[str, str, str, bool], list[int]] = {}
        for gpu in gpus:
            for d in gpu.degraded:
                by_cause.setdefault((d.fact, d.call, d.error, d.held), []).append(gpu.index)
        for (fact, call, error, held), indices in by_cause.items():
            outcome = ("its last value is kept" if held
                       else "the labels derived from it are left out")
            self._reported.warning("GPU %s: %s: NVML %s: %s; %s",
                                   ", ".join(map(str, indices)), fact, call, error, outcome,
                                   key=f"{fact}:{call}:{error}:{held}:{indices}")

    def events(self) -> NvmlEvents:
        """NVML's event sets over these GPUs (their own session; see ``NvmlEvents``). What
        they receive tells this reader which GPUs to read afresh."""
        return NvmlEvents(self._changes)

    def close(self) -> None:
        """nvmlShutdown if initialised; idempotent, never raises."""
        if not self._initialised:
            return
        self._initialised = False
        self._tables = {}
        self._layouts = {}
        self._full_due = True
        end_session()

    # -- session -----------------------------------------------------------------

    def _init(self) -> None:
        start_session()
        self._initialised = True
        self._full_due = True
        log.debug("NVML initialised")

    # -- reading -----------------------------------------------------------------

    def _read(self) -> Snapshot:
        now = self._clock()
        taken = self._changes.take()
        full = self._full_due or now >= self._next_full or taken.everything
        if full or self._system is None:
            self._system = self._read_system()
            self._tables = {}
        count = self._device_count(now)
        self._unanswered.forget_from(count)
        plan = _Plan(full=full, taken=taken, device_facts=self._device_facts)
        gpus = []
        for index in range(count):
            gpu, answered = _read_gpu(index, self._last.get(index), self._tables,
                                      self._layouts, plan)
            gpus.append(self._kept_or_lost(gpu, answered, now))
        enabled = {g.uuid for g in gpus if g.error is None and g.mig_enabled}
        self._layouts = {u: layout for u, layout in self._layouts.items() if u in enabled}
        self._report(gpus)
        self._last = {g.index: g for g in gpus if g.error is None}
        if full:
            self._full_due = False
            self._next_full = now + FULL_READ_INTERVAL
        driver, cuda = self._system
        log.debug("NVML: driver %s, CUDA %d, %d GPU(s)%s", driver, cuda, count,
                  " (full read)" if full else "")
        return Snapshot(
            nvml_available=True,
            driver_version=driver,
            cuda_driver_version=cuda,
            gpus=tuple(gpus),
            source="nvml",
        )

    def _read_system(self) -> tuple[str, int]:
        """Driver and CUDA versions: a transient answer keeps the known ones."""
        try:
            return (decoded(nvml_call(pynvml.nvmlSystemGetDriverVersion)),
                    int(nvml_call(pynvml.nvmlSystemGetCudaDriverVersion)))
        except CallFailed as failed:
            if failed.code not in _TRANSIENT or self._system is None:
                raise
            self._reported.warning("%s; the driver and CUDA versions already read are kept",
                                   failed.describe(), key=f"system:{failed.call}")
            self._full_due = True
            return self._system

    def _device_count(self, now: float) -> int:
        """nvmlDeviceGetCount; a transient answer keeps the last count for as long as a GPU
        that does not answer is kept (freshness.Unanswered)."""
        try:
            count = int(nvml_call(pynvml.nvmlDeviceGetCount))
        except CallFailed as failed:
            if failed.code not in _TRANSIENT or self._count is None:
                raise
            streak = self._unanswered.failed(_COUNT, now)
            if self._unanswered.lost(streak, now):
                raise
            self._reported.warning("%s; the last count (%d) is kept", failed.describe(),
                                   self._count, key=f"count:{failed.call}")
            return self._count
        self._unanswered.answered(_COUNT)
        self._count = count
        return count

    def _kept_or_lost(self, gpu: Gpu, answered: bool, now: float) -> Gpu:
        """A GPU that did not answer keeps its last facts until the failure has lasted
        LOST_AFTER_READS reads and LOST_AFTER_SECONDS; then it is lost."""
        if answered or gpu.error is not None:
            self._unanswered.answered(gpu.index)
            return gpu
        streak = self._unanswered.failed(gpu.index, now)
        if not self._unanswered.lost(streak, now):
            return gpu
        (cause,) = [d for d in gpu.degraded if d.fact == "identity"]
        log.warning("GPU %d is unhealthy: NVML %s: %s (no answer in %d reads over %.0f s)",
                    gpu.index, cause.call, cause.error, streak.reads, now - streak.since)
        return Gpu(index=gpu.index, uuid=gpu.uuid, name=gpu.name, error=cause.error)


_COUNT = -1
"""The Unanswered key of the device count (GPU indices are >= 0)."""

_TRANSIENT = frozenset({pynvml.NVML_ERROR_TIMEOUT, pynvml.NVML_ERROR_UNKNOWN})
"""System answers that may pass: the values already read are kept meanwhile."""


@dataclass(frozen=True, slots=True)
class _Plan:
    """What one read asks again beyond the facts of each cycle."""

    full: bool
    """Every GPU's static facts (a full read)."""
    taken: Taken
    """The event marks since the last read."""
    device_facts: bool
    """Also the facts only ``gfd devices`` shows (DEVICE_FACTS, ``NvmlReader``)."""

    def static_due(self, same: Gpu | None, mig_enabled: bool) -> bool:
        """Read this GPU's static facts: first seen (or a new UUID at its index), a full
        read, an event named it, one of them failed last time, or its MIG mode changed
        (which takes a GPU reset). A fabric state that moved reads them too, once the fabric
        has been asked."""
        return (same is None or self.full or same.uuid in self.taken.stale
                or any(d.fact in STATIC_FACTS for d in same.degraded)
                or same.mig_enabled != mig_enabled)

    def mig_devices_due(self, same: Gpu | None, static: bool) -> bool:
        """Enumerate a MIG-enabled GPU's devices in full: with its static facts (first seen,
        a full read, an event named it, a MIG mode change), or after a failure to enumerate
        them. Otherwise each read asks whether they are still the same (``nvmlmig.unchanged``),
        whether or not the GPU sends MIG-config events: an event makes a change visible
        sooner, the interval sees it all the same."""
        return (static or same is None
                or any(d.fact == "mig_devices" for d in same.degraded))


T = TypeVar("T")


class _Unlabelable(Exception):
    """A GPU that answers but cannot be labelled (its name is unknown)."""

    def __init__(self, failed: CallFailed) -> None:
        super().__init__(failed.describe())
        self.failed = failed


class _Facts:
    """The error policy for one GPU's queries: a failed query makes its fact unknown for
    this read; the last good read's value stands in when there is one."""

    def __init__(self, last: Gpu | None) -> None:
        self.last = last if last is not None and last.error is None else None
        self.degraded: list[Degraded] = []

    def ask(self, fact: str, read: Callable[[], T], *, hold: Callable[[Gpu], T],
            unknown: T) -> T:
        """``read()``; on an error other than a lost GPU, ``hold(last)`` or ``unknown``."""
        try:
            return read()
        except CallFailed as failed:
            if failed.code in LOST:
                raise
            held = self.last is not None and not self.last.unknown(fact)
            self.degraded.append(Degraded(fact=fact, call=failed.call, error=failed.message,
                                          held=held))
            if held:
                assert self.last is not None
                return hold(self.last)
            return unknown


def _lost(index: int, failed: CallFailed, seen: dict[str, str]) -> Gpu:
    log.warning("GPU %d is unhealthy: NVML %s: %s", index, failed.call, failed.message)
    return Gpu(index=index, uuid=seen.get("uuid", ""), name=seen.get("name", ""),
               error=failed.message)


def _unanswered(last: Gpu, failed: CallFailed) -> Gpu:
    """The last read of a GPU that did not answer this time: its facts kept, the failure
    recorded as a held ``identity`` fact."""
    return replace(last, degraded=(
        Degraded(fact="identity", call=failed.call, error=failed.message, held=True),
        *(d for d in last.degraded if d.fact != "identity")))



def _read_gpu(index: int, last: Gpu | None, tables: Tables, layouts: dict[str, Layout],
              plan: _Plan) -> tuple[Gpu, bool]:
    """The GPU at ``index``, and whether it answered (a GPU that did not keeps ``last``)."""
    seen: dict[str, str] = {}
    """The identity read before the GPU was lost, if any."""
    known = last if last is not None and last.error is None else None
    try:
        handle = nvml_call(pynvml.nvmlDeviceGetHandleByIndex, index)
    except CallFailed as failed:  # a handle that cannot be had
        if failed.code in LOST or known is None:
            return _lost(index, failed, seen), True
        return _unanswered(known, failed), False
    try:
        uuid = decoded(nvml_call(pynvml.nvmlDeviceGetUUID, handle))
    except CallFailed as failed:
        if failed.code in LOST or known is None:
            return _lost(index, failed, seen), True
        return _unanswered(known, failed), False
    seen["uuid"] = uuid
    try:
        return _read_gpu_fields(index, handle, uuid, known, seen, tables, layouts,
                                plan), True
    except _Unlabelable as unlabelable:
        return _lost(index, unlabelable.failed, seen), True
    except CallFailed as failed:  # GPU_IS_LOST from any call
        return _lost(index, failed, seen), True


def _read_gpu_fields(index: int, handle: Any, uuid: str, known: Gpu | None,
                     seen: dict[str, str], tables: Tables, layouts: dict[str, Layout],
                     plan: _Plan) -> Gpu:
    # the last read is this GPU's only if it is the same GPU
    same = known if known is not None and known.uuid == uuid else None
    facts = _Facts(same)
    no_mig: tuple[bool, bool, bool | None] = (False, False, None)
    mig_capable, mig_enabled, mig_pending = facts.ask(
        "mig_mode", lambda: _mig_mode(handle),
        hold=lambda g: (g.mig_capable, g.mig_enabled, g.mig_pending_enabled), unknown=no_mig)
    static_due = plan.static_due(same, mig_enabled)
    if static_due or same is None:  # (static_due covers None: this tells mypy)
        tables.pop(uuid, None)  # its MIG profile tables are static facts too
        static = _read_static(handle, same, facts, seen, device_facts=plan.device_facts)
    else:
        static = _Static.of(same)
        seen["name"] = same.name
        if not fabric_settled(same.fabric):
            fabric = facts.ask("fabric", lambda: _fabric(handle), hold=lambda g: g.fabric,
                               unknown=None)
            if fabric == same.fabric or any(d.fact == "fabric" for d in facts.degraded):
                static = replace(static, fabric=fabric)
            else:  # the fabric manager moved it on (registered it): its NVLinks train now
                static = _read_static(handle, same, facts, seen,
                                      device_facts=plan.device_facts)
    mig_devices: tuple[MigDevice, ...] = ()
    mig_profiles: tuple[GiProfile, ...] | None = () if plan.device_facts else None
    if mig_capable and plan.device_facts:  # static: in the tables until a full read
        profile_tables = tables.setdefault(uuid, ProfileTables())
        mig_profiles = facts.ask("mig_profiles",
                                 lambda: read_gi_profiles(handle, profile_tables),
                                 hold=lambda g: g.mig_profiles, unknown=None)
    if mig_enabled:
        mig_devices = _mig_devices(handle, uuid, same, facts, tables, layouts,
                                   due=plan.mig_devices_due(same, static_due))
    return Gpu(
        index=index,
        uuid=uuid,
        **static.fields(),
        mig_capable=mig_capable,
        mig_enabled=mig_enabled,
        mig_pending_enabled=mig_pending,
        compute_mode=facts.ask("compute_mode", lambda: _compute_mode(handle),
                               hold=lambda g: g.compute_mode, unknown=None),
        mig_devices=mig_devices,
        mig_profiles=mig_profiles,
        degraded=tuple(facts.degraded),
    )


def _mig_devices(handle: Any, uuid: str, same: Gpu | None, facts: _Facts, tables: Tables,
                 layouts: dict[str, Layout], *, due: bool) -> tuple[MigDevice, ...]:
    """A MIG-enabled GPU's MIG devices: those of its last read while its layout is unchanged,
    else (or when ``due``) every one read again; ``layouts`` keeps what the next read checks."""
    held = layouts.pop(uuid, None)
    if not due and same is not None and held is not None and unchanged(handle, held):
        layouts[uuid] = held
        return same.mig_devices
    profile_tables = tables.setdefault(uuid, ProfileTables())
    layout = facts.ask("mig_devices", lambda: read_mig_layout(handle, profile_tables),
                       hold=lambda g: Layout(devices=g.mig_devices, handles=()),
                       unknown=Layout(devices=(), handles=()))
    if not any(d.fact == "mig_devices" for d in facts.degraded):  # it answered
        layouts[uuid] = layout
    return layout.devices


@dataclass(frozen=True, slots=True)
class _Static:
    """A GPU's facts that cannot change while it is present (freshness.STATIC_FACTS)."""

    name: str
    minor: int | None
    memory_total_bytes: int | None
    compute_capability: tuple[int, int] | None
    architecture: str | None
    brand: str | None
    pci_bus_id: str
    power_limits_mw: tuple[int, int] | None
    nvlink_active: bool | None
    fabric: Fabric | None
    addressing_mode: str | None

    @classmethod
    def of(cls, gpu: Gpu) -> _Static:
        """The static facts of an earlier read of the GPU."""
        return cls(**{f.name: getattr(gpu, f.name) for f in fields(cls)})

    def fields(self) -> dict[str, Any]:
        """As ``Gpu`` keyword arguments."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _read_static(handle: Any, same: Gpu | None, facts: _Facts,
                 seen: dict[str, str], *, device_facts: bool) -> _Static:
    """Every static fact of one GPU: the one place that asks NVML for them (a new per-GPU
    static query joins here, and freshness.STATIC_FACTS names its fact); those of
    DEVICE_FACTS only with ``device_facts``."""
    try:
        name = decoded(nvml_call(pynvml.nvmlDeviceGetName, handle))
    except CallFailed as failed:
        if failed.code in LOST or same is None:
            raise _Unlabelable(failed) from None
        name = same.name
        facts.degraded.append(Degraded(fact="identity", call=failed.call, error=failed.message,
                                       held=True))
    seen["name"] = name
    minor = facts.ask("minor", lambda: optional(pynvml.nvmlDeviceGetMinorNumber, handle),
                      hold=lambda g: g.minor, unknown=None) if device_facts else None
    # memory and compute capability: GFD's labels need them, so even "not supported" is
    # reported (a degraded fact, said once) rather than silently absent
    return _Static(
        name=name,
        minor=int(minor) if minor is not None else None,
        memory_total_bytes=facts.ask("memory", lambda: _memory_total(handle),
                                     hold=lambda g: g.memory_total_bytes, unknown=None),
        compute_capability=facts.ask("compute_capability", lambda: _capability(handle),
                                     hold=lambda g: g.compute_capability, unknown=None),
        architecture=facts.ask("architecture", lambda: _architecture(handle),
                               hold=lambda g: g.architecture, unknown=None)
        if device_facts else None,
        brand=facts.ask("brand", lambda: _brand(handle), hold=lambda g: g.brand,
                        unknown=None),
        pci_bus_id=facts.ask("pci", lambda: _pci_bus_id(handle), hold=lambda g: g.pci_bus_id,
                             unknown=""),
        power_limits_mw=facts.ask("power_limits", lambda: _power_limits(handle),
                                  hold=lambda g: g.power_limits_mw, unknown=None),
        nvlink_active=facts.ask("nvlink", lambda: _nvlink_active(handle),
                                hold=lambda g: g.nvlink_active, unknown=None),
        fabric=facts.ask("fabric", lambda: _fabric(handle), hold=lambda g: g.fabric,
                         unknown=None),
        addressing_mode=facts.ask("addressing_mode", lambda: _addressing_mode(handle),
                                  hold=lambda g: g.addressing_mode, unknown=None)
        if device_facts else None,
    )


def _architecture(handle: Any) -> str | None:
    code = optional(binding("nvmlDeviceGetArchitecture"), handle)
    return _ARCHITECTURES.get(int(code)) if code is not None else None


def _brand(handle: Any) -> str | None:
    code = optional(pynvml.nvmlDeviceGetBrand, handle)
    return _BRANDS.get(int(code)) if code is not None else None


def _capability(handle: Any) -> tuple[int, int]:
    major, minor = nvml_call(pynvml.nvmlDeviceGetCudaComputeCapability, handle)
    return int(major), int(minor)


def _pci_bus_id(handle: Any) -> str:
    pci = optional(pynvml.nvmlDeviceGetPciInfo, handle)
    return decoded(pci.busId) if pci is not None else ""


def _addressing_mode(handle: Any) -> str | None:
    """nvmlDeviceGetAddressingMode as go-nvlib names it (``None``, ``HMM``, ``ATS``); None
    when the GPU or driver does not support it. A value NVML has not defined is an error,
    as go-nvlib's GetAddressingModeAsString makes it."""
    mode = optional(binding("nvmlDeviceGetAddressingMode"), handle)
    if mode is None:
        return None
    if not 0 <= int(mode) < len(ADDRESSING_MODES):
        raise nvml_failure("nvmlDeviceGetAddressingMode",
                      ValueError(f"unknown addressing mode {int(mode)}"), BAD_VALUE)
    return ADDRESSING_MODES[int(mode)]


def _mig_mode(handle: Any) -> tuple[bool, bool, bool | None]:
    """(capable, enabled, pending enabled) from nvmlDeviceGetMigMode; not capable when the
    call is not supported or absent."""
    mode = optional(binding("nvmlDeviceGetMigMode"), handle)
    if mode is None:
        return False, False, None
    enable = pynvml.NVML_DEVICE_MIG_ENABLE
    return True, int(mode[0]) == enable, int(mode[1]) == enable


def _memory_total(handle: Any) -> int:
    """Total bytes from the v1 nvmlDeviceGetMemoryInfo (as GFD)."""
    return int(nvml_call(pynvml.nvmlDeviceGetMemoryInfo, handle).total)


def _compute_mode(handle: Any) -> str | None:
    mode = optional(pynvml.nvmlDeviceGetComputeMode, handle)
    if mode is None or not 0 <= int(mode) < len(COMPUTE_MODES):
        return None
    return COMPUTE_MODES[int(mode)]


def _power_limits(handle: Any) -> tuple[int, int] | None:
    """(min, max) milliwatts from nvmlDeviceGetPowerManagementLimitConstraints; None when the
    GPU or the driver does not support the query."""
    limits = optional(binding("nvmlDeviceGetPowerManagementLimitConstraints"), handle)
    if limits is None:
        return None
    low, high = int(limits[0]), int(limits[1])
    if not 0 <= low <= high:
        raise nvml_failure("nvmlDeviceGetPowerManagementLimitConstraints",
                      ValueError(f"returned min {low} mW above max {high} mW"), BAD_VALUE)
    return low, high


def _nvlink_active(handle: Any) -> bool | None:
    """True if any NVLink is active, False if none, None if NVLink is not supported."""
    get_state = binding("nvmlDeviceGetNvLinkState")
    for link in range(int(pynvml.NVML_NVLINK_MAX_LINKS)):
        try:
            state = nvml_call(get_state, handle, link)
        except CallFailed as failed:
            if link == 0 and failed.code in ABSENT:
                return None
            if failed.code in ABSENT or failed.code == pynvml.NVML_ERROR_INVALID_ARGUMENT:
                break  # past the GPU's last link
            raise
        if int(state) == pynvml.NVML_FEATURE_ENABLED:
            return True
    return False


def _uuid(raw: bytes) -> str:
    import uuid  # (only a GPU in an NVLink fabric has a cluster UUID: not on every start)

    return str(uuid.UUID(bytes=raw))


def _fabric(handle: Any) -> Fabric | None:
    info = _fabric_info(handle)
    if info is None:
        return None
    state = int(info.state) & 0xFF  # a C unsigned char that pynvml declares as c_uint
    return Fabric(
        state=FABRIC_STATES[state] if state < len(FABRIC_STATES) else FABRIC_STATES[0],
        status_ok=int(info.status) == pynvml.NVML_SUCCESS,
        cluster_uuid=_uuid(bytes(info.clusterUuid)),
        clique_id=int(info.cliqueId),
    )


def _fabric_info(handle: Any) -> Any:
    """The fabric info struct: the versioned call where binding and driver have it."""
    struct_v = getattr(pynvml, "c_nvmlGpuFabricInfoV_t", None)
    if struct_v is not None:
        info = struct_v()
        try:
            nvml_call(binding("nvmlDeviceGetGpuFabricInfoV"), handle, byref(info))
            return info
        except CallFailed as failed:
            if failed.code == pynvml.NVML_ERROR_NOT_SUPPORTED:
                return None
            if failed.code not in (pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, VERSION_MISMATCH):
                raise
    struct = getattr(pynvml, "c_nvmlGpuFabricInfo_t", None)
    if struct is None:
        return None
    info = struct()
    if optional(binding("nvmlDeviceGetGpuFabricInfo"), handle, byref(info)) is None:
        return None
    return info


def device_names() -> list[str] | None:
    """The names NVML gives its devices, or None when NVML does not start: what the ``auto``
    platform rule looks at (a Tegra integrated GPU names itself ``... (nvgpu)``). A device
    that does not answer is left out."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        names = []
        for index in range(int(pynvml.nvmlDeviceGetCount())):
            try:
                names.append(decoded(pynvml.nvmlDeviceGetName(
                    pynvml.nvmlDeviceGetHandleByIndex(index))))
            except (pynvml.NVMLError, UnicodeDecodeError):
                continue
        return names
    except pynvml.NVMLError:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


__all__ = ["DEVICE_FACTS", "EVENT_TYPES", "NvmlEvent", "NvmlEvents", "NvmlReader", "device_names"]
