"""Python side of the fake libnvidia-ml.so.1: build it, describe machines, load it.

- ``build_library(out_dir)`` compiles ``nvml/fake_nvml.c`` against the real nvml.h
  (wheel ``nvidia-nvml-dev``) into ``out_dir/libnvidia-ml.so.1``;
  ``old_driver=True`` builds the variant without the profile-name and fabric calls.
- ``Machine`` / ``GpuSpec`` / ``GI`` / ``CI`` describe a machine; ``Machine.write(path)``
  writes the profile file that the library reads from ``$FAKE_NVML_PROFILE``.
- ``MIG_TABLES`` holds real MIG profile tables per GPU model (sources below).
- ``load_in_process(lib)`` makes pynvml in this process use the fake (once per
  process: pynvml keeps the first library it loads); ``subprocess_env(...)``
  gives the environment for a child process (LD_LIBRARY_PATH, and the profile and
  event FIFO when given).
- Live mode: rewrite the profile (``Machine.write`` to the same path) under an open
  NVML session; the next ``nvmlDeviceGetCount_v2`` sees the new machine (a MIG
  reconfiguration included) without re-initialising; GPU handles stay valid, a GPU
  gone answers GPU_IS_LOST, an emptied MIG slot NOT_FOUND. A GPU whose GPU or compute
  instances changed sends ``mig-config-change`` to every event set registered for it, as
  the driver does (no FIFO needed) -- unless ``GpuSpec.mig_events`` is False in the new
  machine (a change no event reports: the driver never delivers it).
- ``Machine.flaky = ("TIMEOUT", 2.0)``: 2 % of the calls answer TIMEOUT, at random.
- Events: ``GpuSpec.events`` is what ``nvmlDeviceGetSupportedEventTypes`` answers
  (None: ``default_events(spec)``, a data-centre driver's set); ``EventPipe(path)``
  makes the FIFO that the library reads from ``$FAKE_NVML_EVENTS`` and
  ``.send(gpu, "xid", 79)`` injects one event. Semantics (registration, fan-out to
  several sets, timeouts) are in the "events" section of fake_nvml.c.

Profile file format (line based, ``key fields...``; see parse_line in fake_nvml.c)::

    fake-nvml 1
    driver 550.54.15
    cuda 12040
    gpu
    name NVIDIA A100-SXM4-40GB
    uuid GPU-...
    memory 42949672960
    ...
    gip <index> <id> <slices> <instances> <sms> <ce> <dec> <enc> <jpeg> <ofa> <MiB> <p2p> <name>
    gipp <gi profile id> <start> <size>     (a possible placement, memory slices)
    cip <gi profile id> <index> <id> <slices> <instances> <sms> <name>
    addressing <0 None | 1 HMM | 2 ATS>     (absent: NOT_SUPPORTED)
    minor <n>
    gi <id> <profile id> <start> <size>
    ci <gi id> <ci id> <ci profile id> <slot> <start> <size> <MIG-uuid>
    events 0x411f
    mig_silent                              (GI/CI changes send no mig-config-change)

Event FIFO format (one event a line; ``EventPipe.send`` writes it)::

    <gpu index> <event type bit> [<eventData> [<gpuInstanceId> <computeInstanceId>]]
"""

from __future__ import annotations

import ctypes
import os
import stat
import uuid as uuidlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType

from .cbuild import compile_library, include_dir

SONAME = "libnvidia-ml.so.1"
SOURCE = Path(__file__).parent / "nvml" / "fake_nvml.c"
HEADER_DIR_ENV = "FAKE_NVML_INCLUDE_DIR"
"""Optional override: a directory holding nvml.h."""

# ----------------------------------------------------------------------------- build


def nvml_include_dir() -> Path:
    """The directory of the real nvml.h, from the nvidia-nvml-dev wheel."""
    return include_dir("nvml.h", HEADER_DIR_ENV, "nvidia-nvml-dev")


def build_library(out_dir: Path, *, old_driver: bool = False) -> Path:
    """Compile the fake into ``out_dir/libnvidia-ml.so.1`` and return its path."""
    return compile_library(SOURCE, SONAME, out_dir, include=nvml_include_dir(),
                           what="fake NVML library",
                           flags=["-DFAKE_NVML_OLD_DRIVER"] if old_driver else [])


class FakeNvml:
    """The fake library loaded in this process, with its test hooks."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        self.lib.fake_nvml_init_count.restype = ctypes.c_ulong
        self.lib.fake_nvml_load_count.restype = ctypes.c_ulong
        self.lib.fake_nvml_refcount.restype = ctypes.c_int
        self.lib.fake_nvml_call_count.restype = ctypes.c_ulong
        self.lib.fake_nvml_call_count.argtypes = [ctypes.c_char_p]
        self.lib.fake_nvml_event_set_count.restype = ctypes.c_ulong

    def init_count(self) -> int:
        """Successful nvmlInit calls since the last reset."""
        return int(self.lib.fake_nvml_init_count())

    def load_count(self) -> int:
        """Profile (re)loads since the last reset."""
        return int(self.lib.fake_nvml_load_count())

    def refcount(self) -> int:
        """How many nvmlInit are not yet matched by nvmlShutdown."""
        return int(self.lib.fake_nvml_refcount())

    def call_count(self, symbol: str | None = None) -> int:
        """Calls of ``symbol`` (all NVML calls when None) since the last reset."""
        return int(self.lib.fake_nvml_call_count(symbol.encode() if symbol else None))

    def reset_counts(self) -> None:
        self.lib.fake_nvml_reset_counts()

    def event_sets(self) -> int:
        """Event sets created and not yet freed (nvmlEventSetCreate - nvmlEventSetFree)."""
        return int(self.lib.fake_nvml_event_set_count())

    def shutdown_all(self) -> None:
        """End every open NVML session (test teardown)."""
        while self.refcount() > 0:
            self.lib.nvmlShutdown()


_loaded: dict[str, FakeNvml] = {}


def load_in_process(path: Path) -> FakeNvml:
    """Load the fake so that pynvml's CDLL("libnvidia-ml.so.1") finds it (its SONAME).

    Only one fake can serve a process: pynvml keeps the first library it loads.
    """
    key = str(path)
    if key in _loaded:
        return _loaded[key]
    if _loaded:
        raise RuntimeError(f"another fake NVML is already loaded here: {next(iter(_loaded))}")
    import pynvml

    if pynvml.nvmlLib is not None:
        raise RuntimeError("pynvml already loaded an NVML library in this process")
    fake = FakeNvml(path)
    _loaded[key] = fake
    return fake


def subprocess_env(
    lib_dir: Path | None,
    profile: Path | None,
    base: Mapping[str, str] | None = None,
    *,
    events: Path | None = None,
) -> dict[str, str]:
    """Environment for a child process using the fake in ``lib_dir`` (None: no NVML at all),
    reading events from the FIFO ``events`` (None: no events, whatever ``base`` says)."""
    env = dict(os.environ if base is None else base)
    env.pop("LD_LIBRARY_PATH", None)
    env.pop(EVENTS_ENV, None)
    if lib_dir is not None:
        env["LD_LIBRARY_PATH"] = str(lib_dir)
    if profile is not None:
        env["FAKE_NVML_PROFILE"] = str(profile)
    if events is not None:
        env[EVENTS_ENV] = str(events)
    return env


# ----------------------------------------------------------------------------- events

EVENTS_ENV = "FAKE_NVML_EVENTS"
"""Names the FIFO the library reads events from (read at nvmlEventSetCreate)."""

EVENT_TYPES: Mapping[str, int] = MappingProxyType(
    {
        "single-bit-ecc": 0x0001,  # nvmlEventTypeSingleBitEccError
        "double-bit-ecc": 0x0002,  # nvmlEventTypeDoubleBitEccError
        "pstate": 0x0004,  # nvmlEventTypePState
        "xid": 0x0008,  # nvmlEventTypeXidCriticalError
        "clock": 0x0010,  # nvmlEventTypeClock
        "power-source": 0x0080,  # nvmlEventTypePowerSourceChange
        "mig-config-change": 0x0100,  # nvmlEventMigConfigChange
        "single-bit-ecc-storm": 0x0200,  # nvmlEventTypeSingleBitEccErrorStorm
        "dram-retirement": 0x0400,  # nvmlEventTypeDramRetirementEvent
        "dram-retirement-failure": 0x0800,  # nvmlEventTypeDramRetirementFailure
        "non-fatal-poison": 0x1000,  # nvmlEventTypeNonFatalPoisonError
        "fatal-poison": 0x2000,  # nvmlEventTypeFatalPoisonError
        "gpu-unavailable": 0x4000,  # nvmlEventTypeGpuUnavailableError
        "gpu-recovery-action": 0x8000,  # nvmlEventTypeGpuRecoveryAction
    }
)
"""NVML event type bits (nvml.h, nvmlEventType) by short name."""

NO_INSTANCE = 0xFFFFFFFF
"""gpuInstanceId / computeInstanceId of an event not attributable to a MIG instance."""


def event_mask(*kinds: str) -> int:
    """The bitmask of the named event types: event_mask("xid", "mig-config-change")."""
    mask = 0
    for kind in kinds:
        mask |= EVENT_TYPES[kind]
    return mask


_NO_ECC_BRANDS = frozenset({"geforce", "titan"})


def default_events(spec: GpuSpec) -> int:
    """What a current data-centre driver reports for nvmlDeviceGetSupportedEventTypes:
    ECC (single and double bit; not on GeForce/Titan, which have no ECC), PState, Clock,
    Xid critical errors and GPU-unavailable errors, plus MIG configuration changes on a
    MIG-capable GPU."""
    kinds = ["pstate", "clock", "xid", "gpu-unavailable"]
    if spec.brand not in _NO_ECC_BRANDS:
        kinds += ["single-bit-ecc", "double-bit-ecc"]
    if spec.mig_supported:
        kinds.append("mig-config-change")
    return event_mask(*kinds)


class EventPipe:
    """The FIFO events are injected through: created at ``path`` if missing, held open for
    writing (read-write, so neither side ever blocks on open or sees EOF).

    Point the library at it with ``$FAKE_NVML_EVENTS`` (``subprocess_env(events=path)``,
    or the ``nvml_events`` fixture in this process) before ``nvmlEventSetCreate``: the
    library drops what the FIFO held when its first event set opened it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if not path.exists():
            os.mkfifo(path, 0o600)
        elif not stat.S_ISFIFO(path.stat().st_mode):
            raise ValueError(f"{path} exists and is not a FIFO")
        self._fd: int | None = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)

    def __enter__(self) -> EventPipe:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def send(
        self,
        gpu: int,
        kind: str | int,
        data: int = 0,
        *,
        gpu_instance: int = NO_INSTANCE,
        compute_instance: int = NO_INSTANCE,
    ) -> None:
        """One event of type ``kind`` (a name of EVENT_TYPES or the NVML bit) on GPU index
        ``gpu``; ``data`` is NVML's eventData (the Xid number of an "xid" event)."""
        bit = EVENT_TYPES[kind] if isinstance(kind, str) else kind
        if bit <= 0 or bit & (bit - 1):
            raise ValueError(f"an event has exactly one type bit, not {bit:#x}")
        line = f"{gpu} {bit:#x} {data} {gpu_instance} {compute_instance}\n".encode()
        if self._fd is None:
            raise ValueError("send on a closed EventPipe")
        try:
            os.write(self._fd, line)  # one write of < PIPE_BUF bytes: never interleaved
        except BlockingIOError:
            raise RuntimeError(f"event FIFO {self.path} is full: nothing reads it") from None

    def close(self) -> None:
        """Close the write end (the FIFO file stays; idempotent)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


# ----------------------------------------------------------------------------- MIG tables


@dataclass(frozen=True)
class GiProfile:
    """A GPU-instance profile as nvmlDeviceGetGpuInstanceProfileInfoV reports it."""

    index: int
    """NVML_GPU_INSTANCE_PROFILE_* (the index the profile is queried by)."""
    id: int
    """The profile ID (nvidia-smi mig -lgip "ID")."""
    name: str
    slices: int
    memory_mib: int
    sms: int
    copy_engines: int
    decoders: int
    encoders: int
    jpegs: int
    ofas: int
    instances: int

    @property
    def short(self) -> str:
        """``1g.5gb`` for ``MIG 1g.5gb+me``: the name without prefix and attributes."""
        return self.name.removeprefix("MIG ").split("+")[0]


@dataclass(frozen=True)
class CiProfile:
    """A compute-instance profile of one GPU-instance profile."""

    index: int
    """NVML_COMPUTE_INSTANCE_PROFILE_*."""
    id: int
    name: str
    slices: int
    sms: int
    instances: int


@dataclass(frozen=True)
class MigTable:
    model: str
    slices: int
    """Compute slices of the whole GPU (7 on A100/H100, 4 on A30)."""
    gi: tuple[GiProfile, ...]
    ci: Mapping[int, tuple[CiProfile, ...]]
    """CI profiles by GI profile id."""

    def gi_profile(self, name: str) -> GiProfile:
        wanted = name if name.startswith("MIG ") else f"MIG {name}"
        for profile in self.gi:
            if profile.name == wanted:
                return profile
        raise KeyError(f"{self.model} has no GPU-instance profile {name!r}")

    def ci_profile(self, gi: GiProfile, slices: int | None) -> CiProfile:
        wanted = gi.slices if slices is None else slices
        for profile in self.ci[gi.id]:
            if profile.slices == wanted:
                return profile
        raise KeyError(f"{gi.name} has no {wanted}-slice compute-instance profile")


def placements(table: MigTable, gi: GiProfile) -> list[tuple[int, int]]:
    """(start, size) of each placement NVML offers a GPU instance profile, in memory slices
    (``nvidia-smi mig -lgipp``): the size is the profile's memory over the smallest
    profile's (1g.20gb holds 2 of an H100's 8, 3g.40gb 4, 7g.80gb 8), the starts multiples of
    it, as many as the profile's instances; a media-extension profile (``+me``) may sit
    wherever its plain twin may (A100: 1g.5gb+me at 0..6)."""
    smallest = min(p.memory_mib for p in table.gi)
    size = round(gi.memory_mib / smallest)
    count = table.slices // gi.slices if "+" in gi.name else gi.instances
    return [(k * size, size) for k in range(count)]


ADDRESSING_MODES = ("None", "HMM", "ATS")
"""NVML_DEVICE_ADDRESSING_MODE_* 0..2."""

_CI_INDEX = MappingProxyType({1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6})
"""NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE; real drivers give each CI profile id == index."""

_CI_SLICES = MappingProxyType({1: (1,), 2: (1, 2), 3: (1, 2, 3), 4: (1, 2, 4), 7: (1, 2, 3, 4, 7)})


_Row = tuple[int, int, str, int, int, int, int, int, int, int, int, int]


def _table(model: str, slices: int, sms_per_slice: int, rows: Sequence[_Row]) -> MigTable:
    gis = tuple(GiProfile(*row) for row in rows)
    cis: dict[int, tuple[CiProfile, ...]] = {}
    for gi in gis:
        media = "+" in gi.name  # +me GIs only take the full compute instance
        options = (gi.slices,) if media else _CI_SLICES[gi.slices]
        profiles = []
        for c in options:
            full = c == gi.slices
            profiles.append(
                CiProfile(
                    index=_CI_INDEX[c],
                    id=_CI_INDEX[c],
                    name=f"MIG {gi.short}" if full else f"MIG {c}c.{gi.short}",
                    slices=c,
                    sms=gi.sms if full else c * sms_per_slice,
                    instances=gi.slices // c,
                )
            )
        cis[gi.id] = tuple(profiles)
    return MigTable(model=model, slices=slices, gi=gis, ci=MappingProxyType(cis))


# Rows: index, id, name, slices, MiB, SMs, CE, DEC, ENC, JPEG, OFA, instances.
# Profile IDs, SM/engine counts and memory are nvidia-smi `mig -lgip` outputs
# (what NVML reports), cross-checked with NVIDIA's MIG user guide tables.
# Memory differs slightly between driver branches; where it did we note it.

A100_40GB = _table(
    "A100-40GB",
    7,
    14,
    [
        # R510 `-lgip` on A100-PCIE-40GB: 4.75 / 9.75 / 19.62 / 19.62 / 39.50 GiB.
        # Newer drivers report 2g.10gb 9856, 3g/4g 19968 and 7g 40192 MiB; we keep
        # 20096 for 3g.20gb as GFD's worked MIG examples do.
        (0, 19, "MIG 1g.5gb", 1, 4864, 14, 1, 0, 0, 0, 0, 7),
        (7, 20, "MIG 1g.5gb+me", 1, 4864, 14, 1, 1, 0, 1, 1, 1),
        # 1g.10gb exists from R525 on; values from an R525+ `-lgip` (9.62 GiB).
        (9, 15, "MIG 1g.10gb", 1, 9856, 14, 1, 1, 0, 0, 0, 4),
        (1, 14, "MIG 2g.10gb", 2, 9984, 28, 2, 1, 0, 0, 0, 3),
        (2, 9, "MIG 3g.20gb", 3, 20096, 42, 3, 2, 0, 0, 0, 2),
        (3, 5, "MIG 4g.20gb", 4, 20096, 56, 4, 2, 0, 0, 0, 1),
        (4, 0, "MIG 7g.40gb", 7, 40448, 98, 7, 5, 0, 1, 1, 1),
    ],
)

A100_80GB = _table(
    "A100-80GB",
    7,
    14,
    [
        # `-lgip` on A100 80GB: 9.50 / 19.50 / 39.25 / 79.00 GiB (other drivers: 9.75 /
        # 19.62 / 39.50 / 79.25). The 7g.80gb engine row was cut in our source; its
        # CE/JPEG/OFA follow the MIG user guide (7 CE, 1 JPEG, 1 OFA, 5 NVDEC).
        (0, 19, "MIG 1g.10gb", 1, 9728, 14, 1, 0, 0, 0, 0, 7),
        (7, 20, "MIG 1g.10gb+me", 1, 9728, 14, 1, 1, 0, 1, 1, 1),
        (9, 15, "MIG 1g.20gb", 1, 19968, 14, 1, 1, 0, 0, 0, 4),
        (1, 14, "MIG 2g.20gb", 2, 19968, 28, 2, 1, 0, 0, 0, 3),
        (2, 9, "MIG 3g.40gb", 3, 40192, 42, 3, 2, 0, 0, 0, 2),
        (3, 5, "MIG 4g.40gb", 4, 40192, 56, 4, 2, 0, 0, 0, 1),
        (4, 0, "MIG 7g.80gb", 7, 80896, 98, 7, 5, 0, 1, 1, 1),
    ],
)

H100_80GB = _table(
    "H100-80GB",
    7,
    16,
    [
        # `-lgip` on "NVIDIA H100 80GB HBM3": 9.75 / 19.62 / 39.50 / 79.25 GiB.
        # Sub-CI SM counts (e.g. 1c.3g.40gb = 16) are 16 per compute slice: uncertain.
        (0, 19, "MIG 1g.10gb", 1, 9984, 16, 1, 1, 0, 1, 0, 7),
        (7, 20, "MIG 1g.10gb+me", 1, 9984, 16, 1, 1, 0, 1, 1, 1),
        (9, 15, "MIG 1g.20gb", 1, 20096, 26, 1, 1, 0, 1, 0, 4),
        (1, 14, "MIG 2g.20gb", 2, 20096, 32, 2, 2, 0, 2, 0, 3),
        (2, 9, "MIG 3g.40gb", 3, 40448, 60, 3, 3, 0, 3, 0, 2),
        (3, 5, "MIG 4g.40gb", 4, 40448, 64, 4, 4, 0, 4, 0, 1),
        (4, 0, "MIG 7g.80gb", 7, 81152, 132, 8, 7, 0, 7, 1, 1),
    ],
)

A30_24GB = _table(
    "A30",
    4,
    14,
    [
        # `-lgip` on A30: 5.81 / 11.69 / 23.44 GiB. It reports 1 NVDEC for 1g.6gb
        # where the MIG user guide table says 0; we follow nvidia-smi (NVML).
        (0, 14, "MIG 1g.6gb", 1, 5952, 14, 1, 1, 0, 0, 0, 4),
        (7, 21, "MIG 1g.6gb+me", 1, 5952, 14, 1, 1, 0, 1, 1, 1),
        (1, 5, "MIG 2g.12gb", 2, 11968, 28, 2, 2, 0, 0, 0, 2),
        (8, 6, "MIG 2g.12gb+me", 2, 11968, 28, 2, 2, 0, 1, 1, 1),
        (3, 0, "MIG 4g.24gb", 4, 24000, 56, 4, 4, 0, 1, 1, 1),
    ],
)

MIG_TABLES: Mapping[str, MigTable] = MappingProxyType(
    {
        "NVIDIA A100-SXM4-40GB": A100_40GB,
        "NVIDIA A100-PCIE-40GB": A100_40GB,
        "NVIDIA A100-SXM4-80GB": A100_80GB,
        "NVIDIA A100 80GB PCIe": A100_80GB,
        "NVIDIA A100-PCIE-80GB": A100_80GB,
        "NVIDIA H100 80GB HBM3": H100_80GB,
        "NVIDIA A30": A30_24GB,
    }
)
"""MIG tables by GPU name (nvmlDeviceGetName)."""


def mig_table_for(name: str) -> MigTable | None:
    return MIG_TABLES.get(name.removeprefix("Mock "))


# ----------------------------------------------------------------------------- machines

ARCHITECTURES = MappingProxyType(
    {
        "kepler": 2,
        "maxwell": 3,
        "pascal": 4,
        "volta": 5,
        "turing": 6,
        "ampere": 7,
        "ada": 8,
        "hopper": 9,
        "blackwell": 10,
        "unknown": 0xFFFFFFFF,
    }
)
BRANDS = MappingProxyType(
    {
        "unknown": 0,
        "quadro": 1,
        "tesla": 2,
        "nvs": 3,
        "grid": 4,
        "geforce": 5,
        "titan": 6,
        "nvidia-vapps": 7,
        "nvidia-vpc": 8,
        "nvidia-vcs": 9,
        "nvidia-vws": 10,
        "nvidia-cloud-gaming": 11,
        "quadro-rtx": 12,
        "nvidia-rtx": 13,
        "nvidia": 14,
    }
)
COMPUTE_MODES = MappingProxyType(
    {"default": 0, "exclusive-thread": 1, "prohibited": 2, "exclusive-process": 3}
)
FABRIC_STATES = MappingProxyType(
    {"not-supported": 0, "not-started": 1, "in-progress": 2, "completed": 3}
)
FAULTS = MappingProxyType(
    {"lost": "GPU_IS_LOST", "unknown": "UNKNOWN", "permission": "NO_PERMISSION"}
)
"""Short fault names; any NVML error name (``RESET_REQUIRED``) works as well."""

_NAMESPACE = uuidlib.UUID("6f1c8f36-4d4e-4f59-9b8e-6a3c2f2d0e11")


def gpu_uuid(seed: str, index: int) -> str:
    """The deterministic UUID the builder gives GPU ``index`` of machine ``seed``."""
    return f"GPU-{uuidlib.uuid5(_NAMESPACE, f'{seed}/gpu/{index}')}"


def mig_uuid(parent_uuid: str, gi_id: int, ci_id: int) -> str:
    return f"MIG-{uuidlib.uuid5(_NAMESPACE, f'{parent_uuid}/gi/{gi_id}/ci/{ci_id}')}"


@dataclass
class CI:
    """A compute instance inside a GPU instance; one MIG device."""

    slices: int | None = None
    """Compute slices; None: the whole GPU instance."""
    ci_id: int | None = None
    slot: int | None = None
    """MIG device index on the parent (nvmlDeviceGetMigDeviceHandleByIndex)."""
    uuid: str | None = None


@dataclass
class GI:
    """A GPU instance: a profile (``1g.5gb``, ``1g.10gb+me``) and its compute instances."""

    profile: str
    cis: list[CI] = field(default_factory=lambda: [CI()])
    gi_id: int | None = None


def mig(*profiles: str) -> list[GI]:
    """A layout of GPU instances with one full compute instance each: mig("3g.20gb", "1g.5gb")."""
    return [GI(p) for p in profiles]


@dataclass
class Fabric:
    state: str = "completed"
    status: str = "SUCCESS"
    cluster_uuid: str = "00000000-0000-0000-0000-000000000000"
    clique_id: int = 0


@dataclass
class GpuSpec:
    name: str
    memory_bytes: int
    compute: tuple[int, int]
    architecture: str
    brand: str = "nvidia"
    uuid: str | None = None
    """None: gpu_uuid(machine seed, index)."""
    pci_bus_id: str | None = None
    """None: an HGX-like bus id for the index."""
    pci_device_id: int = 0
    mig_supported: bool = False
    mig_enabled: bool = False
    mig_pending: bool | None = None
    """None: same as mig_enabled."""
    compute_mode: str | None = "default"
    """None: NOT_SUPPORTED."""
    power_limits_mw: tuple[int, int] | None = None
    """nvmlDeviceGetPowerManagementLimitConstraints (min, max) in mW; None: NOT_SUPPORTED."""
    nvlinks: int = 0
    """0: NOT_SUPPORTED."""
    nvlinks_active: int = 0
    fabric: Fabric | None = None
    fault: str | None = None
    """lost, unknown, or an NVML error name: every device call on this GPU fails."""
    mig_fault: str | None = None
    """permission (or an error name): MIG enumeration calls fail."""
    fail: dict[str, str] = field(default_factory=dict)
    """NVML symbol -> error name, for calls on this GPU."""
    mig_layout: list[GI] = field(default_factory=list)
    mig_table: MigTable | None = None
    """None: looked up by name in MIG_TABLES."""
    max_mig_devices: int = 7
    minor: int | None = None
    """nvmlDeviceGetMinorNumber (the N of /dev/nvidiaN). None: the GPU's index."""
    events: int | None = None
    """nvmlDeviceGetSupportedEventTypes (an ``event_mask(...)``; 0: none supported).
    None: ``default_events(self)``."""
    mig_events: bool = True
    """False: a change of its GPU or compute instances sends no ``mig-config-change``, though
    the GPU accepts the registration (a tool whose changes the driver does not report, or a
    driver whose event delivery is unreliable)."""
    addressing_mode: str | None = None
    """nvmlDeviceGetAddressingMode: ``None``, ``HMM`` or ``ATS``; None: NOT_SUPPORTED."""


@dataclass(frozen=True)
class ResolvedMig:
    """A MIG device as the fake will report it (for expectations in tests)."""

    slot: int
    gi_id: int
    ci_id: int
    uuid: str
    gi_profile: GiProfile
    ci_profile: CiProfile
    gi_start: int = 0
    """The GPU instance's placement start (nvmlGpuInstanceGetInfo); its size is
    ``gi_profile.slices``. The fake places GPU instances side by side in gi_id order."""

    @property
    def profile_name(self) -> str:
        """The name a current driver reports: the GI's for a whole-GI CI, else the CI's."""
        if self.ci_profile.slices == self.gi_profile.slices:
            return self.gi_profile.name
        return self.ci_profile.name


@dataclass(frozen=True)
class ResolvedGpu:
    uuid: str
    pci_bus_id: str
    table: MigTable | None
    mig: tuple[ResolvedMig, ...]


_HGX_BUSES = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")


@dataclass
class Machine:
    driver: str = "550.54.15"
    cuda: int = 12040
    gpus: list[GpuSpec] = field(default_factory=list)
    init_error: str | None = None
    """An NVML error name returned by nvmlInitWithFlags (DRIVER_NOT_LOADED ...)."""
    delay: tuple[str, int] | None = None
    """(NVML symbol, milliseconds): every call of that symbol sleeps first."""
    fail: dict[str, str] = field(default_factory=dict)
    """NVML symbol -> error name, for system calls (nvmlSystemGetDriverVersion ...)."""
    seed: str = "fake"
    """Makes generated UUIDs differ between machines."""
    flaky: tuple[str, float] | None = None
    """(NVML error name, percent): that share of all calls but nvmlInit, nvmlShutdown and the
    event-set calls answer the error, at random (a fixed-seed generator per process)."""

    # -- resolution ----------------------------------------------------------------

    def resolve(self) -> list[ResolvedGpu]:
        """UUIDs, bus ids and the MIG devices (slots, ids) the fake will report."""
        return [self._resolve_gpu(i, gpu) for i, gpu in enumerate(self.gpus)]

    def _resolve_gpu(self, index: int, gpu: GpuSpec) -> ResolvedGpu:
        uuid = gpu.uuid or gpu_uuid(self.seed, index)
        if gpu.pci_bus_id is not None:
            bus = gpu.pci_bus_id
        elif index < len(_HGX_BUSES):
            bus = f"00000000:{_HGX_BUSES[index]}:00.0"
        else:
            bus = f"00000000:{0x40 + index:02X}:00.0"
        table = gpu.mig_table or (mig_table_for(gpu.name) if gpu.mig_supported else None)
        return ResolvedGpu(uuid, bus, table, self._resolve_mig(gpu, uuid, table))

    @staticmethod
    def _resolve_mig(gpu: GpuSpec, uuid: str, table: MigTable | None) -> tuple[ResolvedMig, ...]:
        if not gpu.mig_layout:
            return ()
        if table is None or not gpu.mig_supported:
            raise ValueError(f"{gpu.name}: a MIG layout needs a MIG-capable GPU with a MIG table")
        used_ids: set[int] = {gi.gi_id for gi in gpu.mig_layout if gi.gi_id is not None}
        used_slots: set[int] = {
            ci.slot for gi in gpu.mig_layout for ci in gi.cis if ci.slot is not None
        }
        total = 0
        out: list[ResolvedMig] = []
        next_slot = 0
        for gi in gpu.mig_layout:
            profile = table.gi_profile(gi.profile)
            total += profile.slices
            gi_id = gi.gi_id
            if gi_id is None:
                gi_id = next(i for i in _gi_id_candidates(table, profile) if i not in used_ids)
                used_ids.add(gi_id)
            ci_total = 0
            for ci_number, ci in enumerate(gi.cis):
                ci_profile = table.ci_profile(profile, ci.slices)
                ci_total += ci_profile.slices
                slot = ci.slot
                if slot is None:
                    while next_slot in used_slots:
                        next_slot += 1
                    slot = next_slot
                    used_slots.add(slot)
                ci_id = ci_number if ci.ci_id is None else ci.ci_id
                out.append(
                    ResolvedMig(
                        slot=slot,
                        gi_id=gi_id,
                        ci_id=ci_id,
                        uuid=ci.uuid or mig_uuid(uuid, gi_id, ci_id),
                        gi_profile=profile,
                        ci_profile=ci_profile,
                    )
                )
            if ci_total > profile.slices:
                raise ValueError(f"{gi.profile}: compute instances use {ci_total} slices")
        if total > table.slices:
            raise ValueError(f"{gpu.name}: MIG layout uses {total} of {table.slices} slices")
        slots = [m.slot for m in out]
        if len(set(slots)) != len(slots) or max(slots) >= gpu.max_mig_devices:
            raise ValueError(f"{gpu.name}: bad MIG device slots {slots}")
        starts: dict[int, int] = {}
        for m in sorted(out, key=lambda m: m.gi_id):
            if m.gi_id not in starts:
                starts[m.gi_id] = sum(o.gi_profile.slices for o in
                                      {x.gi_id: x for x in out if x.gi_id < m.gi_id}.values())
        out = [replace(m, gi_start=starts[m.gi_id]) for m in out]
        return tuple(sorted(out, key=lambda m: m.slot))

    # -- rendering -----------------------------------------------------------------

    def render(self) -> str:
        """The profile file text."""
        lines = ["fake-nvml 1", f"driver {self.driver}", f"cuda {self.cuda}"]
        if self.init_error:
            lines.append(f"init_error {self.init_error}")
        if self.delay:
            lines.append(f"delay {self.delay[0]} {self.delay[1]}")
        lines.extend(f"fail {symbol} {error}" for symbol, error in self.fail.items())
        if self.flaky:
            lines.append(f"flaky {self.flaky[0]} {self.flaky[1]}")
        for gpu, resolved in zip(self.gpus, self.resolve(), strict=True):
            lines.extend(_render_gpu(gpu, resolved))
        lines.append("end")
        return "\n".join(lines) + "\n"

    def write(self, path: Path) -> Path:
        """Write the profile whole and at once: a file beside it renamed over it, so a
        library reading it meanwhile (an agent's next cycle) sees the old machine or the new
        one, never a half-written file -- which parses as a machine with fewer GPUs, or none
        (a truncated file is an empty machine), and made tests flaky on a loaded machine.
        The change is always visible to the library's mtime/size/inode check."""
        before = path.stat() if path.exists() else None
        new = path.with_name(f".{path.name}.new")
        new.write_text(self.render())
        after = new.stat()
        if before is not None and (before.st_mtime_ns, before.st_size) == (
            after.st_mtime_ns,
            after.st_size,
        ):
            os.utime(new, ns=(after.st_atime_ns, after.st_mtime_ns + 1_000_000))
        os.replace(new, path)
        return path


def _gi_id_candidates(table: MigTable, profile: GiProfile) -> list[int]:
    """GPU-instance ids roughly as drivers hand them out (whole GPU 0, 1-slice GIs 7+)."""
    if profile.slices == table.slices:
        preferred = [0]
    elif table.slices == 4:
        preferred = {2: [1, 2], 1: [3, 4, 5, 6]}.get(profile.slices, [])
    else:
        preferred = {4: [1, 2], 3: [1, 2], 2: [3, 4, 5, 6], 1: list(range(7, 15))}.get(
            profile.slices, []
        )
    return preferred + [i for i in range(32) if i not in preferred]


def _render_gpu(gpu: GpuSpec, resolved: ResolvedGpu) -> list[str]:
    pending = gpu.mig_enabled if gpu.mig_pending is None else gpu.mig_pending
    mode = -1 if gpu.compute_mode is None else COMPUTE_MODES[gpu.compute_mode]
    lines = [
        "gpu",
        f"name {gpu.name}",
        f"uuid {resolved.uuid}",
        f"memory {gpu.memory_bytes}",
        f"cc {gpu.compute[0]} {gpu.compute[1]}",
        f"arch {ARCHITECTURES[gpu.architecture]}",
        f"brand {BRANDS[gpu.brand]}",
        f"pci {resolved.pci_bus_id} {gpu.pci_device_id:08x} 0",
        f"mig {int(gpu.mig_supported)} {int(gpu.mig_enabled)} {int(pending)}",
        f"compute_mode {mode}",
        f"nvlink {gpu.nvlinks} {gpu.nvlinks_active}",
        f"max_mig {gpu.max_mig_devices}",
        *([f"minor {gpu.minor}"] if gpu.minor is not None else []),
        f"events {default_events(gpu) if gpu.events is None else gpu.events:#x}",
        *([] if gpu.mig_events else ["mig_silent"]),
    ]
    if gpu.power_limits_mw is not None:
        lines.append(f"power {gpu.power_limits_mw[0]} {gpu.power_limits_mw[1]}")
    if gpu.addressing_mode is not None:
        lines.append(f"addressing {ADDRESSING_MODES.index(gpu.addressing_mode)}")
    if gpu.fabric is not None:
        f = gpu.fabric
        hex_uuid = uuidlib.UUID(f.cluster_uuid).hex
        lines.append(f"fabric {FABRIC_STATES[f.state]} {f.status} {f.clique_id} {hex_uuid}")
    if gpu.fault:
        lines.append(f"fault {FAULTS.get(gpu.fault, gpu.fault)}")
    if gpu.mig_fault:
        lines.append(f"mig_fault {FAULTS.get(gpu.mig_fault, gpu.mig_fault)}")
    lines.extend(f"fail {symbol} {error}" for symbol, error in gpu.fail.items())
    table = resolved.table
    if table is not None and gpu.mig_supported:
        for p in table.gi:
            lines.append(
                f"gip {p.index} {p.id} {p.slices} {p.instances} {p.sms} {p.copy_engines} "
                f"{p.decoders} {p.encoders} {p.jpegs} {p.ofas} {p.memory_mib} 0 {p.name}"
            )
            lines.extend(f"gipp {p.id} {start} {size}" for start, size in placements(table, p))
        for gi_profile_id, cis in table.ci.items():
            for c in cis:
                lines.append(
                    f"cip {gi_profile_id} {c.index} {c.id} {c.slices} {c.instances} {c.sms} "
                    f"{c.name}"
                )
    seen_gis: set[int] = set()
    gi_lines: list[str] = []
    ci_lines: list[str] = []
    ci_starts: dict[int, int] = {}
    for m in sorted(resolved.mig, key=lambda m: (m.gi_id, m.ci_id)):
        if m.gi_id not in seen_gis:
            seen_gis.add(m.gi_id)
            gi_lines.append(f"gi {m.gi_id} {m.gi_profile.id} {m.gi_start} {m.gi_profile.slices}")
        ci_start = ci_starts.get(m.gi_id, 0)
        ci_starts[m.gi_id] = ci_start + m.ci_profile.slices
        ci_lines.append(
            f"ci {m.gi_id} {m.ci_id} {m.ci_profile.id} {m.slot} {ci_start} "
            f"{m.ci_profile.slices} {m.uuid}"
        )
    return lines + gi_lines + ci_lines
