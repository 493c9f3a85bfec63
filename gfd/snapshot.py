"""The data model: one frozen Snapshot of what a node's GPUs are, with a JSON round-trip.

Readers build a Snapshot; labelers only ever read one. Every field is plain data
(no handles, no clocks), so a snapshot can be recorded on a node (``gfd snapshot``)
and fed back (``--snapshot FILE``) to reproduce its labels anywhere.

Conventions: ``None`` means "not known / not reported" (the NVML call was not
supported, the file was unreadable); it is never an error by itself. Per-GPU read
errors are data too (``Gpu.error``), never an exception.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, dataclass, fields, is_dataclass, replace
from typing import Any, TypeVar

from gfd.errors import DiscoveryError, one_line, show

SCHEMA_VERSION = 1

# Compute modes as gfd names them (NVML_COMPUTEMODE_* 0, 2, 3; 1 is long deprecated).
COMPUTE_MODES = ("default", "exclusive-thread", "prohibited", "exclusive-process")

# GPU back ends (--device-discovery-strategy, once resolved).
BACKENDS = ("nvml", "tegra", "vfio")

# Fabric (multi-node NVLink) states, NVML_GPU_FABRIC_STATE_* 0..3.
FABRIC_STATES = ("not-supported", "not-started", "in-progress", "completed")


@dataclass(frozen=True, slots=True, kw_only=True)
class MigDevice:
    """One MIG device (a GPU instance + compute instance) on a MIG-enabled GPU."""

    index: int
    """Slot index on the parent, as given to nvmlDeviceGetMigDeviceHandleByIndex."""
    uuid: str = ""
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    profile_name: str = ""
    """NVML's profile name, raw: ``MIG 1g.5gb``, ``MIG 1c.3g.20gb``, ``MIG 1g.10gb+me``;
    empty when NVML did not give one (gfd then derives it by GFD's eighths rule)."""
    memory_mib: int = 0
    """``memorySizeMB`` from nvmlDeviceGetAttributes (NVML documents it in MiB)."""
    multiprocessors: int = 0
    gi_slices: int = 0
    ci_slices: int = 0
    copy_engines: int = 0
    decoders: int = 0
    encoders: int = 0
    jpegs: int = 0
    ofas: int = 0
    gi_profile_id: int | None = None
    """The GPU instance's profile id (nvmlGpuInstanceGetInfo ``profileId``); None when not
    read. Part of the DRA driver's device name."""
    placement_start: int | None = None
    """The GPU instance's placement start, in memory slices (nvmlGpuInstanceGetInfo)."""
    placement_size: int | None = None
    """The GPU instance's placement size, in memory slices."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Fabric:
    """GPU fabric (multi-node NVLink) info from nvmlDeviceGetGpuFabricInfo."""

    state: str
    """One of FABRIC_STATES."""
    status_ok: bool
    """True when the fabric status is NVML_SUCCESS."""
    cluster_uuid: str
    """The 16-byte cluster UUID in canonical 8-4-4-4-12 form (all zeros when unset)."""
    clique_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """One possible placement of a GPU instance profile, in memory slices
    (nvmlDeviceGetGpuInstancePossiblePlacements_v2)."""

    start: int
    size: int


@dataclass(frozen=True, slots=True, kw_only=True)
class GiProfile:
    """One GPU instance profile the GPU offers, with every placement it may take
    (nvmlDeviceGetGpuInstanceProfileInfoV and ..._PossiblePlacements_v2): what the DRA
    driver's DynamicMIG gate turns into devices."""

    index: int
    """NVML_GPU_INSTANCE_PROFILE_* (the index it is queried by: 7 is ``+me``)."""
    id: int
    """The profile id (``nvidia-smi mig -lgip`` ID, 19 for 1g.10gb on H100)."""
    name: str = ""
    """NVML's name, raw (``MIG 1g.10gb+me``); empty on drivers without the V call."""
    slices: int = 0
    memory_mib: int = 0
    multiprocessors: int = 0
    copy_engines: int = 0
    decoders: int = 0
    encoders: int = 0
    jpegs: int = 0
    ofas: int = 0
    placements: tuple[Placement, ...] = ()


ADDRESSING_MODES = ("None", "HMM", "ATS")
"""nvmlDeviceGetAddressingMode's NVML_DEVICE_ADDRESSING_MODE_* 0..2, as go-nvlib names them."""

FACTS = ("identity", "minor", "memory", "compute_capability", "architecture", "brand", "pci",
         "mig_mode", "mig_devices", "compute_mode", "nvlink", "fabric", "power_limits",
         "addressing_mode", "mig_profiles")
"""What NVML is asked about each GPU, one name per query (docs/nvml-errors.md)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Degraded:
    """A fact NVML could not give for one GPU in this read (an error other than "not
    supported" or "GPU is lost"). Labels derived from it are never computed from the failed
    answer: they come from the last good read (``held``) or are left out."""

    fact: str
    """One of FACTS."""
    call: str
    """The NVML call that failed."""
    error: str
    """Its error, one line."""
    held: bool
    """True: the value from this GPU's last good read is used; False: none is known."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Gpu:
    """One full (physical) GPU as NVML and the host describe it."""

    index: int
    uuid: str = ""
    minor: int | None = None
    """nvmlDeviceGetMinorNumber: the N of ``/dev/nvidiaN`` (the DRA driver names the GPU
    ``gpu-<minor>``); None when not read (only ``gfd devices`` and ``gfd snapshot`` read it)."""
    name: str = ""
    """nvmlDeviceGetName, e.g. ``NVIDIA H100 80GB HBM3`` (raw, unsanitised); vfio: the PCI
    IDs database's device name, e.g. ``GA100 [A100 SXM4 40GB]``."""
    memory_total_bytes: int | None = None
    """NVML: the framebuffer total (nvmlDeviceGetMemoryInfo). vfio: the 64-bit BAR
    apertures' total rounded up to a power of two, what go-nvlib reports for the GPU."""
    compute_capability: tuple[int, int] | None = None
    architecture: str | None = None
    """nvmlDeviceGetArchitecture as a name (``hopper``, ``ampere`` ...); None when not
    supported or not read (only ``gfd devices`` and ``gfd snapshot`` read it)."""
    brand: str | None = None
    """nvmlDeviceGetBrand as a name (``nvidia``, ``tesla``, ``geforce`` ...)."""
    pci_bus_id: str = ""
    """NVML's bus id, 8-digit domain: ``00000000:18:00.0``."""
    pci_class: str | None = None
    """PCI class from sysfs, e.g. ``0x030200``; None when unreadable."""
    numa_node: int | None = None
    """The PCI device's NUMA node from sysfs (``numa_node``); None when unreadable or -1."""
    pcie_root: str | None = None
    """The PCIe root complex from sysfs, e.g. ``pci0000:00`` (the first ``devices/`` component
    of the device's link under ``bus/pci/devices``); None when unreadable."""
    mig_capable: bool = False
    mig_enabled: bool = False
    """Current MIG mode."""
    mig_pending_enabled: bool | None = None
    """Pending MIG mode (takes effect after a GPU reset); None when not reported."""
    compute_mode: str | None = None
    """One of COMPUTE_MODES."""
    nvlink_active: bool | None = None
    """True when any NVLink of this GPU is active; None when NVLink is not supported."""
    timeslice: str | None = None
    """Compute timeslice policy from ``nvidia-smi compute-policy --list``
    (``default``/``short``/``medium``/``long``); None when unsupported or unknown."""
    fabric: Fabric | None = None
    power_limits_mw: tuple[int, int] | None = None
    """(min, max) power management limit in milliwatts that the GPU accepts
    (nvmlDeviceGetPowerManagementLimitConstraints); None when not supported."""
    mig_devices: tuple[MigDevice, ...] = ()
    addressing_mode: str | None = None
    """nvmlDeviceGetAddressingMode, one of ADDRESSING_MODES; None when not supported (or the
    driver lacks the call), or not read (only ``gfd devices`` and ``gfd snapshot`` read it)."""
    mig_profiles: tuple[GiProfile, ...] | None = None
    """The GPU instance profiles of a MIG-capable GPU with their possible placements (read
    whatever the MIG mode); empty when it offers none (not MIG-capable, or NVML answered
    every profile query NOT_SUPPORTED or INVALID_ARGUMENT); None when not read (only ``gfd
    devices`` and ``gfd snapshot`` read them; a snapshot recorded before gfd did has none)."""
    error: str | None = None
    """A fatal read error for this GPU (e.g. ``GPU is lost``): the GPU is unhealthy."""
    degraded: tuple[Degraded, ...] = ()
    """Facts NVML could not give in this read (held from the last good read, or unknown)."""

    def unknown(self, fact: str) -> bool:
        """True when ``fact`` could not be read and no earlier value is known: labels derived
        from it must be left out, never computed from a default."""
        return any(d.fact == fact and not d.held for d in self.degraded)

    @property
    def memory_mib(self) -> int | None:
        """Total memory in MiB (bytes // 2**20) as GFD computes it; None when unknown."""
        if self.memory_total_bytes is None:
            return None
        return self.memory_total_bytes // 1048576


@dataclass(frozen=True, slots=True, kw_only=True)
class Vgpu:
    """Result of the vGPU scan of PCI config space (GFD's vgpu labels)."""

    present: bool
    host_driver_version: str = ""
    host_driver_branch: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class PciGpu:
    """An NVIDIA GPU on the PCI bus as go-nvlib's ``nvpci`` reads it from sysfs (what the DRA
    driver's PassthroughSupport gate publishes as ``gpu-vfio-<i>``), whatever driver it is
    bound to: a GPU handed to ``vfio-pci`` is here although NVML cannot see it."""

    address: str
    """The sysfs name, 4-digit domain, lower case: ``0000:3b:00.0``."""
    device_id: int
    """The PCI device id (``device``), e.g. ``0x20b0``."""
    name: str
    """The PCI IDs database's name of the device (``GA100 [A100 SXM4 40GB]``), or
    ``UNKNOWN_DEVICE`` where the database does not list it."""
    driver: str = ""
    """The driver it is bound to (``nvidia``, ``vfio-pci``); "" when none."""
    numa_node: int = -1
    """sysfs ``numa_node`` as written (-1: no NUMA affinity)."""
    iommu_group: int = -1
    """The ``iommu_group`` link's number; -1 when the device has none."""
    addressable_memory: int = 0
    """go-nvlib's GetTotalAddressableMemory(roundUp), the 64-bit part: the 64-bit memory BARs
    among the first six, summed and rounded up to a power of two (bytes)."""
    pcie_root: str | None = None
    """The PCIe root complex (``pci0000:00``); None when it cannot be told."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PciBus:
    """The NVIDIA GPUs on the PCI bus and the host's IOMMU, as the DRA driver's passthrough
    support reads them (go-nvlib ``nvpci.GetGPUs``, ``/dev/iommu``, the kernel's IOMMU
    groups)."""

    gpus: tuple[PciGpu, ...] = ()
    """In go-nvlib's order (the address read as a hexadecimal number)."""
    error: str = ""
    """Why go-nvlib's scan fails on this host (an unreadable file of an NVIDIA device, a
    ``resource`` line it cannot split): the driver then does not start. "" when it succeeds."""
    iommufd: bool | None = None
    """Whether the IOMMUFD device ``/dev/iommu`` exists (its misc device in sysfs); None when
    that cannot be told."""
    iommu_groups: bool | None = None
    """Whether the kernel has IOMMU groups (``/sys/kernel/iommu_groups`` is not empty): the
    IOMMU is on. None when that cannot be told."""


RESOURCE_MANAGERS = ("device-plugin", "dra")
"""What hands out a node's GPUs to pods: the NVIDIA device plugin (extended resources
``nvidia.com/gpu``, ``nvidia.com/mig-<profile>``) or the NVIDIA DRA driver (ResourceSlices
of its driver)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceManager:
    """Which resource manager runs on the node, and the evidence it was decided from."""

    name: str = "device-plugin"
    """One of RESOURCE_MANAGERS."""
    evidence: str = ""
    """Why, one line: ``--resource-manager dra``, ``<dir>/<the driver's socket> is a
    socket``, ``2 ResourceSlices of driver <the driver>``, ``no sign of DRA ...``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """Everything gfd knows about a node's GPUs at one moment."""

    nvml_available: bool = True
    """False when NVML (or the chosen back end) could not start: only labels that need no
    GPU back end apply."""
    nvml_error: str = ""
    """Why NVML was unavailable, for logs and ``explain``."""
    driver_version: str | None = None
    """nvmlSystemGetDriverVersion, e.g. ``550.54.15``."""
    cuda_driver_version: int | None = None
    """nvmlSystemGetCudaDriverVersion, e.g. ``12040``."""
    machine_type: str | None = None
    """Raw content of the machine-type file; None when unreadable."""
    vgpu: Vgpu | None = None
    """None when the vGPU scan failed (then no vgpu labels at all)."""
    gpus: tuple[Gpu, ...] = ()
    source: str = ""
    """Where the snapshot came from: ``nvml``, ``simulate:<name>``, ``file:<path>``."""
    backend: str = "nvml"
    """The GPU back end that read it: ``nvml``, ``tegra`` (CUDA driver API) or ``vfio``
    (PCI devices bound to vfio-pci). GFD derives a few labels differently per back end."""
    resource_manager: ResourceManager = ResourceManager()
    """What hands the GPUs to pods (``--resource-manager``, or what ``auto`` found on the
    node); the pipeline keeps the labels documented for it."""
    pci: PciBus | None = None
    """The NVIDIA GPUs on the PCI bus, NVML's or not (``gfd devices`` under the DRA driver's
    PassthroughSupport gate); None when not read (a snapshot recorded before gfd read it)."""

    @property
    def recorded(self) -> bool:
        """Whether it is a recorded snapshot (``--snapshot``: a file or standard input), not
        a read of this machine or a simulated one: what it lacks, its recording lacked."""
        return self.source.startswith("file:") or self.source == "stdin"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, with the schema version."""
        data = _to_plain(self)
        assert isinstance(data, dict)
        return {"schema": SCHEMA_VERSION, **data}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, data: Any) -> Snapshot:
        """Build a snapshot from parsed JSON; a clear DiscoveryError on bad input."""
        if not isinstance(data, dict):
            raise DiscoveryError("snapshot: expected a JSON object (a YAML mapping) at the top "
                                 f"level, got {_kind(data)}")
        schema = data.get("schema", SCHEMA_VERSION)
        if schema != SCHEMA_VERSION:
            raise DiscoveryError(
                f"snapshot: schema {show(schema)} is not supported (this gfd reads "
                f"{SCHEMA_VERSION})"
            )
        body = {k: v for k, v in data.items() if k != "schema"}
        return _from_plain(cls, body, "snapshot")

    @classmethod
    def from_json(cls, text: str) -> Snapshot:
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise DiscoveryError(f"snapshot: not valid JSON: {exc}") from exc
        return cls.from_dict(data)

    @classmethod
    def from_text(cls, text: str) -> Snapshot:
        """A snapshot as ``gfd snapshot`` writes it, in either form, told apart by content:
        text whose first character (after white space) is ``{`` or ``[`` is JSON, anything
        else YAML (``gfd snapshot -o yaml``)."""
        body = text.lstrip("\ufeff \t\r\n")
        if body.startswith(("{", "[")):
            return cls.from_json(body)
        if not body:
            raise DiscoveryError("snapshot: empty, so not a snapshot (write one with "
                                 "`gfd snapshot > FILE`)")
        return cls.from_dict(_load_yaml(body))


def _to_plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _to_plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, tuple):
        return [_to_plain(v) for v in value]
    return value


_T = TypeVar("_T")

_REQUIRED: dict[type, tuple[str, ...]] = {Snapshot: ("gpus",)}
"""Fields a snapshot file must name although the class has a default: ``{}`` is no
snapshot (it was read as a machine without GPUs)."""
_EMPTY_HINT: dict[type, str] = {Snapshot: '; a machine without GPUs has "gpus": []'}


def _from_plain(cls: type[_T], data: Any, where: str) -> _T:
    if not isinstance(data, dict):
        raise DiscoveryError(f"{where}: expected an object, got {type(data).__name__}")
    known = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(known))
    if unknown:
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        raise DiscoveryError(f"{where}: unknown field(s) "
                             f"{', '.join(show(u) for u in unknown[:5])}{more}")
    missing = [name for name, f in known.items() if name not in data and (
        name in _REQUIRED.get(cls, ()) or (f.default is MISSING and f.default_factory is MISSING))]
    if missing:
        raise DiscoveryError(f"{where}: missing field(s) {', '.join(show(m) for m in missing)} "
                             f"(`gfd snapshot` writes every field{_EMPTY_HINT.get(cls, '')})")
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        kwargs[name] = _convert(cls, name, value, f"{where}.{name}")
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise DiscoveryError(f"{where}: {exc}") from exc


def _convert(cls: type, name: str, value: Any, where: str) -> Any:
    spec = _FIELD_SPECS.get((cls, name))
    if spec is None:
        return value
    kind, target = spec
    if value is None:
        if kind.endswith("?"):
            return None
        raise DiscoveryError(f"{where}: must not be null")
    if kind.startswith("obj"):
        return _from_plain(target, value, where)
    if kind.startswith("list"):
        if not isinstance(value, list):
            raise DiscoveryError(f"{where}: expected a list")
        return tuple(_from_plain(target, v, f"{where}[{i}]") for i, v in enumerate(value))
    if kind.startswith("pair"):
        if (
            not isinstance(value, list)
            or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        ):
            raise DiscoveryError(f"{where}: expected {_PAIR_NAMES.get(name, '[a, b]')} integers")
        return (value[0], value[1])
    raise AssertionError(kind)  # pragma: no cover


_PAIR_NAMES = {"compute_capability": "[major, minor]", "power_limits_mw": "[min, max]"}
"""How a refusal names the two integers of each pair field."""

_FIELD_SPECS: dict[tuple[type, str], tuple[str, type]] = {
    (Snapshot, "gpus"): ("list", Gpu),
    (Snapshot, "vgpu"): ("obj?", Vgpu),
    (Snapshot, "resource_manager"): ("obj", ResourceManager),
    (Snapshot, "pci"): ("obj?", PciBus),
    (PciBus, "gpus"): ("list", PciGpu),
    (Gpu, "mig_devices"): ("list", MigDevice),
    (Gpu, "degraded"): ("list", Degraded),
    (Gpu, "mig_profiles"): ("list?", GiProfile),
    (GiProfile, "placements"): ("list", Placement),
    (Gpu, "fabric"): ("obj?", Fabric),
    (Gpu, "compute_capability"): ("pair?", int),
    (Gpu, "power_limits_mw"): ("pair?", int),
}


def validate_types(snapshot: Snapshot) -> None:
    """Check every scalar field has its declared type (snapshots from files are untrusted)."""
    _check(snapshot, "snapshot")
    for gpu in snapshot.gpus:
        for d in gpu.degraded:
            if d.fact not in FACTS:
                raise DiscoveryError(f"snapshot: GPU {gpu.index}: degraded fact {show(d.fact)} is "
                                     f"not one of {', '.join(FACTS)}")
        if gpu.addressing_mode is not None and gpu.addressing_mode not in ADDRESSING_MODES:
            raise DiscoveryError(f"snapshot: GPU {gpu.index}: addressing_mode "
                                 f"{show(gpu.addressing_mode)} is not one of "
                                 f"{', '.join(ADDRESSING_MODES)}")
    if snapshot.resource_manager.name not in RESOURCE_MANAGERS:
        raise DiscoveryError(f"snapshot.resource_manager.name: must be one of "
                             f"{', '.join(RESOURCE_MANAGERS)}, got "
                             f"{snapshot.resource_manager.name!r}")
    if snapshot.backend not in BACKENDS:
        raise DiscoveryError(f"snapshot.backend: must be one of {', '.join(BACKENDS)}, got "
                             f"{show(snapshot.backend)}")


def _check(obj: Any, where: str) -> None:
    for f in fields(obj):
        value = getattr(obj, f.name)
        here = f"{where}.{f.name}"
        if is_dataclass(value):
            _check(value, here)
        elif isinstance(value, tuple) and value and is_dataclass(value[0]):
            for i, item in enumerate(value):
                _check(item, f"{here}[{i}]")
        else:
            _check_scalar(f.type, value, here)


def _check_scalar(declared: Any, value: Any, where: str) -> None:
    text = str(declared)  # annotations are strings here: "int | None", "bool" ...
    allowed: list[type] = []
    if "None" in text and value is None:
        return
    if text.startswith("bool"):
        allowed = [bool]
    elif text.startswith("int"):
        allowed = [int]
    elif text.startswith("str"):
        allowed = [str]
    elif text.startswith("tuple[int, int]"):
        return
    else:
        return
    if not isinstance(value, tuple(allowed)) or (int in allowed and isinstance(value, bool)):
        raise DiscoveryError(f"{where}: expected {text}, got {show(value)}")


def _kind(value: object) -> str:
    """``a list``, ``a string``... for a top-level document that is not a mapping."""
    names = {list: "a list", str: "a string", bool: "a boolean", int: "a number",
             float: "a number", type(None): "nothing (null)"}
    return names.get(type(value), f"a {type(value).__name__}")


class _YamlRefused(Exception):
    """A YAML construct a snapshot has no use for (``gfd snapshot -o yaml`` writes none)."""


def _yaml_loader() -> type:
    """A safe YAML loader that refuses aliases (a few bytes could stand for a huge
    snapshot) and a key given twice in one mapping (the later value would silently win)."""
    import yaml

    class Loader(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event: yaml.Event = self.peek_event()  # type: ignore[no-untyped-call]
                line = event.start_mark.line + 1 if event.start_mark else "?"
                raise _YamlRefused(f"line {line}: a YAML alias; write the value out "
                                   "(as `gfd snapshot -o yaml` does)")
            return super().compose_node(parent, index)

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[object] = set()
            for key_node, _ in node.value:
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
                if key is not None and key in seen:
                    raise _YamlRefused(f"line {key_node.start_mark.line + 1}: key {show(key)} "
                                       "is given twice")
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return Loader


def _load_yaml(text: str) -> Any:
    """The YAML document of a snapshot file; a one-line DiscoveryError if it is not one."""
    import yaml

    try:
        return yaml.load(text, Loader=_yaml_loader())  # (a SafeLoader subclass)
    except _YamlRefused as exc:
        raise DiscoveryError(f"snapshot: {exc}") from None
    except RecursionError:
        raise DiscoveryError("snapshot: not valid YAML: nested too deeply") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = one_line(f"{exc.context + ': ' if exc.context else ''}{exc.problem}{where}")
        raise DiscoveryError(f"snapshot: not valid YAML (nor JSON): {problem}") from None
    except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
        raise DiscoveryError(f"snapshot: not valid YAML (nor JSON): "
                             f"{one_line(str(exc)) or type(exc).__name__}") from None


def load_snapshot(text: str, *, source: str) -> Snapshot:
    """Parse and type-check a recorded snapshot, JSON or YAML (``Snapshot.from_text``)."""
    snap = Snapshot.from_text(text)
    validate_types(snap)
    return replace(snap, source=source)


__all__ = [
    "ADDRESSING_MODES",
    "BACKENDS",
    "COMPUTE_MODES",
    "FABRIC_STATES",
    "FACTS",
    "RESOURCE_MANAGERS",
    "SCHEMA_VERSION",
    "Degraded",
    "Fabric",
    "GiProfile",
    "Gpu",
    "MigDevice",
    "PciBus",
    "PciGpu",
    "Placement",
    "ResourceManager",
    "Snapshot",
    "Vgpu",
    "load_snapshot",
]
