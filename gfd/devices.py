"""Each device of the node as the NVIDIA DRA driver publishes it (``gfd devices``), gate for gate.

A pure projection of the snapshot by the rules of the driver release ``dra.RELEASE``
(kubernetes-sigs/dra-driver-nvidia-gpu, ``cmd/gpu-kubelet-plugin/nvlib.go``
``GetPerGpuAllocatableDevices`` and ``getGpuInfo``, ``deviceinfo.go``, ``mig.go``,
``partitions.go``, ``driver.go``; go-nvlib for names and the skipped "DGX Display").

- Default gates: a GPU with MIG disabled is one ``gpu`` device named ``gpu-<minor>``; a GPU
  with MIG enabled is published through its MIG devices only,
  ``gpu-<parentMinor>-mig-<profile>-<giProfileId>-<placementStart>``. A GPU whose memory
  query is NOT_SUPPORTED has no ``memory`` capacity. No NUMA attribute (only passthrough
  devices carry ``numa``); ``addressingMode`` wherever NVML answered the call.
- ``DynamicMIG``: on a MIG-capable GPU (Hopper and later whatever its MIG mode; Ampere only
  with MIG on; never in a vGPU guest) every GPU instance profile x possible placement is a
  ``mig`` device without ``uuid`` or ``memorySlice<N>``, consuming counters from the shared
  counter set ``gpu-<minor>-counter-set``; the full GPU (not on Ampere with MIG on) carries
  the largest profile's capacities and consumes every counter. A GPU that offers no profile
  (NVML answers NOT_SUPPORTED or INVALID_ARGUMENT to each query) has no partitions and no
  counter set: its full GPU is published as under the default gates.
- ``PassthroughSupport``: every NVIDIA GPU on the PCI bus (``Snapshot.pci``, go-nvlib's scan)
  is also ``gpu-vfio-<i>``, whatever its MIG mode or driver: a GPU bound to ``vfio-pci``,
  which NVML cannot see, too; no IOMMU on the host, no start.
- The driver's failure rules: where its enumeration fails (a lost GPU, a MIG device whose
  compute instance is smaller than its GPU instance, an NVML error on a fact it reads,
  refused gates), the plugin does not start and publishes nothing: ``refusal`` says why.

A device whose facts the snapshot does not hold (a snapshot recorded before gfd read them)
is listed with ``missing`` instead of a made-up value, and ``published()`` leaves it out;
what it lacks is said in words true for where the snapshot came from (a recording, a
simulated machine, or a read of this one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gfd import dra
from gfd.dra import DRIVER, quantity, semver
from gfd.facts.cuda import cuda_text
from gfd.facts.mig import profile_name
from gfd.snapshot import GiProfile, Gpu, MigDevice, PciGpu, Snapshot

_NOT_SUPPORTED = "Not Supported"
"""NVML's text for NVML_ERROR_NOT_SUPPORTED, as a degraded fact records it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Attribute:
    name: str
    """As the driver writes it: unqualified in its own domain (``productName``), qualified
    otherwise (``resource.kubernetes.io/pciBusID``)."""
    kind: str
    """One of KINDS."""
    value: str | int | bool

    @property
    def domain(self) -> str:
        return self.name.split("/", 1)[0] if "/" in self.name else DRIVER

    @property
    def short(self) -> str:
        """The name within its domain (what CEL writes after the domain's map)."""
        return self.name.rsplit("/", 1)[-1]


@dataclass(frozen=True, slots=True, kw_only=True)
class Device:
    """One device as the driver would publish it in the node's ResourceSlice."""

    name: str
    """``gpu-0``, ``gpu-3-mig-1g5gb-19-6``, ``gpu-vfio-2``; "" when the facts naming it are
    missing."""
    type: str
    """``gpu``, ``mig`` or ``vfio``."""
    gpu: int
    """The (parent) GPU's NVML index."""
    attributes: tuple[Attribute, ...]
    capacity: tuple[tuple[str, int], ...]
    """Capacity name -> integer (bytes for ``memory``)."""
    counter_set: str = ""
    """DynamicMIG: the shared counter set this device consumes from ("" when none)."""
    consumes: tuple[tuple[str, int], ...] = ()
    """DynamicMIG: counter name -> what the device consumes of it."""
    missing: tuple[str, ...] = ()
    """What the snapshot does not know that the driver publishes (empty: complete)."""

    @property
    def complete(self) -> bool:
        return not self.missing

    def attribute(self, name: str) -> str | int | bool | None:
        for a in self.attributes:
            if a.name == name:
                return a.value
        return None

    def capacity_of(self, name: str) -> int | None:
        return dict(self.capacity).get(name)

    @property
    def device_class(self) -> str:
        return dra.device_class(self.type)

    def to_api(self) -> dict[str, Any]:
        """The ResourceSlice ``spec.devices[]`` entry (resource.k8s.io/v1)."""
        body: dict[str, Any] = {
            "name": self.name,
            "attributes": {a.name: {a.kind: a.value} for a in self.attributes},
            "capacity": {n: {"value": quantity(v)} for n, v in self.capacity},
        }
        if self.counter_set:
            body["consumesCounters"] = [{
                "counterSet": self.counter_set,
                "counters": {n: {"value": quantity(v)} for n, v in self.consumes},
            }]
        return body


@dataclass(frozen=True, slots=True, kw_only=True)
class CounterSet:
    """A shared counter set (DynamicMIG): one per MIG-capable GPU."""

    name: str
    counters: tuple[tuple[str, int], ...]

    def to_api(self) -> dict[str, Any]:
        return {"name": self.name,
                "counters": {n: {"value": quantity(v)} for n, v in self.counters}}


@dataclass(frozen=True, slots=True, kw_only=True)
class Publication:
    """What the plugin publishes for one snapshot under one set of gates."""

    gates: dict[str, bool] = field(default_factory=lambda: dict(dra.GATES))
    refusal: str = ""
    """Why the plugin would not start ("" when it starts); then there are no devices."""
    devices: tuple[Device, ...] = ()
    counter_sets: tuple[CounterSet, ...] = ()

    @property
    def dynamic(self) -> bool:
        return self.gates[dra.DYNAMIC_MIG]


class _Refused(Exception):
    """The driver's enumeration fails: the plugin does not start (internal)."""


def _gate_set(gates: dict[str, bool] | None) -> dict[str, bool]:
    return {**dra.GATES, **(gates or {})}


def _fact_error(gpu: Gpu, fact: str) -> str | None:
    """The NVML error of a fact this read could not give (None: read, or held)."""
    for d in gpu.degraded:
        if d.fact == fact and not d.held:
            return f"{d.call}: {d.error}"
    return None


def _require(gpu: Gpu, fact: str, what: str, *, present: bool = True) -> None:
    """The driver fails on an error of any query it makes about a GPU."""
    error = _fact_error(gpu, fact)
    if error is not None:
        raise _Refused(f"error getting {what} for device {gpu.index}: {error}")
    if not present:
        raise _Refused(f"error getting {what} for device {gpu.index}: NVML gave none")


def _check_gpu(gpu: Gpu, snapshot: Snapshot) -> None:
    """getGpuInfo's queries, in its order: any error fails the whole enumeration."""
    if gpu.error is not None and gpu.minor is None:  # a read that failed, not an event
        raise _Refused(f"error visiting device {gpu.index}: {gpu.error}")
    _require(gpu, "minor", "minor number")
    _require(gpu, "identity", "UUID", present=bool(gpu.uuid))
    _require(gpu, "mig_mode", "MIG mode")
    memory_error = _fact_error(gpu, "memory")
    if memory_error is not None and not memory_error.endswith(_NOT_SUPPORTED):
        raise _Refused(f"error getting memory info for device {gpu.index}: {memory_error}")
    _require(gpu, "architecture", "architecture",
             present=dra.architecture_name(gpu.architecture) is not None)
    if gpu.architecture in dra.RELEASE_LACKS:
        raise _Refused(f"error getting architecture for device {gpu.index}: error interpreting "
                       f"device architecture as string ({gpu.architecture}: go-nvlib of "
                       f"{dra.RELEASE} has no name for it)")
    _require(gpu, "brand", "brand", present=gpu.brand in dra.BRANDS)
    _require(gpu, "compute_capability", "CUDA compute capability",
             present=gpu.compute_capability is not None)
    _require(gpu, "pci", "PCI bus ID", present=dra.bus_id(gpu.pci_bus_id) is not None)
    for what, text in (("driver version", snapshot.driver_version or ""),
                       ("CUDA driver version", _cuda(snapshot))):
        if semver(text) is None:  # semver.MustParse in Attributes(): a panic
            raise _Refused(f"the {what} {text!r} is not a semantic version "
                           "(the plugin's semver.MustParse panics)")
    _require(gpu, "addressing_mode", "addressing mode")
    if gpu.mig_capable:
        _require(gpu, "mig_profiles", "MIG profiles and their placements")


def _check_migs(gpu: Gpu) -> None:
    """discoverMigDevicesByGPU (not reached for a GPU DynamicMIG partitions): a MIG device
    whose profile is not a whole-GPU-instance one fails the enumeration."""
    if not gpu.mig_enabled:
        return
    _require(gpu, "mig_devices", "MIG devices")
    for mig in gpu.mig_devices:
        if mig.ci_slices != mig.gi_slices:
            raise _Refused(
                f"error getting profile info for MIG device: {mig.uuid or mig.index} (its "
                f"compute instance has {mig.ci_slices} of its GPU instance's "
                f"{mig.gi_slices} slices; the driver knows only whole-GPU-instance profiles)")


def _cuda(snapshot: Snapshot) -> str:
    """The CUDA driver version as getGpuInfo writes it: ``<major>.<minor>``."""
    cuda = snapshot.cuda_driver_version
    return cuda_text(cuda, backend=snapshot.backend) if cuda is not None else ""


def _common(gpu: Gpu, snapshot: Snapshot, missing: list[str]) -> list[Attribute]:
    """The attributes a GPU and its MIG devices share (GpuInfo.Attributes,
    CommonAttributesMig)."""
    attrs: list[Attribute] = []

    def add(name: str, kind: str, value: str | int | bool | None, why: str) -> None:
        if value is None or value == "":
            missing.append(f"{name} ({why})")
        else:
            attrs.append(Attribute(name=name, kind=kind, value=value))

    add(dra.PRODUCT_NAME, "string", gpu.name, "nvmlDeviceGetName")
    add(dra.BRAND, "string", dra.BRANDS.get(gpu.brand or ""), "nvmlDeviceGetBrand")
    add(dra.ARCHITECTURE, "string", dra.architecture_name(gpu.architecture),
        "nvmlDeviceGetArchitecture")
    cc = gpu.compute_capability
    add(dra.CUDA_COMPUTE_CAPABILITY, "version", semver(f"{cc[0]}.{cc[1]}") if cc else None,
        "nvmlDeviceGetCudaComputeCapability")
    add(dra.DRIVER_VERSION, "version", semver(snapshot.driver_version or ""),
        "nvmlSystemGetDriverVersion")
    add(dra.CUDA_DRIVER_VERSION, "version", semver(_cuda(snapshot)),
        "nvmlSystemGetCudaDriverVersion")
    add(dra.PCI_BUS_ID, "string", dra.bus_id(gpu.pci_bus_id), "nvmlDeviceGetPciInfo")
    if gpu.pcie_root:
        attrs.append(Attribute(name=dra.PCIE_ROOT, kind="string", value=gpu.pcie_root))
    if gpu.addressing_mode is not None:
        attrs.append(Attribute(name=dra.ADDRESSING_MODE, kind="string",
                               value=gpu.addressing_mode))
    return attrs


def _memory(gpu: Gpu) -> list[tuple[str, int]]:
    """A full GPU's ``memory``: absent where NVML does not support the query."""
    if gpu.memory_total_bytes is None or gpu.unknown("memory"):
        return []
    return [(dra.MEMORY, gpu.memory_total_bytes)]


def _gpu_device(gpu: Gpu, snapshot: Snapshot, *, capacity: list[tuple[str, int]] | None = None,
                counter_set: str = "", consumes: tuple[tuple[str, int], ...] = ()) -> Device:
    missing: list[str] = []
    attrs = [Attribute(name=dra.TYPE, kind="string", value="gpu"),
             Attribute(name=dra.UUID, kind="string", value=gpu.uuid)]
    attrs += _common(gpu, snapshot, missing)
    assert gpu.minor is not None
    return Device(name=dra.gpu_name(gpu.minor), type="gpu", gpu=gpu.index,
                  attributes=tuple(attrs),
                  capacity=tuple(_memory(gpu) if capacity is None else capacity),
                  counter_set=counter_set, consumes=consumes, missing=tuple(missing))


def dra_profile(mig: MigDevice, parent: Gpu) -> str | None:
    """The profile as go-nvlib prints it (``1g.5gb``, ``1g.10gb+me``): NVML's name without
    ``MIG ``, else GFD's eighths rule; None when neither can be had."""
    if mig.profile_name:
        return mig.profile_name.removeprefix("MIG ").strip()
    named = profile_name(mig, parent)
    return named[0] if named else None


def _mig_device(mig: MigDevice, gpu: Gpu, snapshot: Snapshot) -> Device:
    """A MIG device that exists (default gates: mig.go, MigDeviceInfo.GetDevice)."""
    missing: list[str] = []
    profile = dra_profile(mig, gpu)
    placed = None not in (mig.gi_profile_id, mig.placement_start)
    if not placed or profile is None:
        missing.append("name (GPU instance profile id and placement: nvmlGpuInstanceGetInfo)")
    attrs = [Attribute(name=dra.TYPE, kind="string", value="mig"),
             Attribute(name=dra.PARENT_UUID, kind="string", value=gpu.uuid)]
    if profile is not None:
        attrs.append(Attribute(name=dra.PROFILE, kind="string", value=profile))
    else:
        missing.append("profile (MIG profile name)")
    attrs += _common(gpu, snapshot, missing)
    if mig.uuid:
        attrs.append(Attribute(name=dra.UUID, kind="string", value=mig.uuid))
    else:
        missing.append("uuid (nvmlDeviceGetUUID)")
    capacity = [
        (dra.MULTIPROCESSORS, mig.multiprocessors), (dra.COPY_ENGINES, mig.copy_engines),
        (dra.DECODERS, mig.decoders), (dra.ENCODERS, mig.encoders), (dra.JPEG_ENGINES, mig.jpegs),
        (dra.OFA_ENGINES, mig.ofas), (dra.MEMORY, mig.memory_mib * 1048576),
    ]
    if mig.placement_start is not None and mig.placement_size is not None:
        capacity += [(f"{dra.MEMORY_SLICE}{i}", 1) for i in
                     range(mig.placement_start, mig.placement_start + mig.placement_size)]
    else:
        missing.append("memorySlice<N> (the placement: nvmlGpuInstanceGetInfo)")
    name = ""
    if placed and profile is not None:
        assert gpu.minor is not None and mig.gi_profile_id is not None
        assert mig.placement_start is not None
        name = dra.mig_name(gpu.minor, profile, mig.gi_profile_id, mig.placement_start)
    return Device(name=name, type="mig", gpu=gpu.index, attributes=tuple(attrs),
                  capacity=tuple(capacity), missing=tuple(missing))


# -- DynamicMIG ------------------------------------------------------------------------------


def _profile_capacity(p: GiProfile) -> list[tuple[str, int]]:
    """CommonCapacitiesMig of a GPU instance profile."""
    return [(dra.MULTIPROCESSORS, p.multiprocessors), (dra.COPY_ENGINES, p.copy_engines),
            (dra.DECODERS, p.decoders), (dra.ENCODERS, p.encoders), (dra.JPEG_ENGINES, p.jpegs),
            (dra.OFA_ENGINES, p.ofas), (dra.MEMORY, p.memory_mib * 1048576)]


def _counters(capacity: list[tuple[str, int]], start: int,
              size: int) -> tuple[tuple[str, int], ...]:
    """capacitiesToCounters + addCountersForMemSlices."""
    return (*((dra.counter_name(n), v) for n, v in capacity),
            *((dra.memory_slice_counter(i), 1) for i in range(start, start + size)))


def _dynamic_capable(gpu: Gpu, snapshot: Snapshot) -> bool:
    """isDynamicMIGCapable: MIG-capable, not a vGPU guest, and Hopper or later (MIG mode can
    be toggled without a reset) or MIG already on."""
    if not gpu.mig_capable or (snapshot.vgpu is not None and snapshot.vgpu.present):
        return False
    return _toggles(gpu) or gpu.mig_enabled


def _toggles(gpu: Gpu) -> bool:
    """supportsMIGModeToggle: architecture Hopper or later (NVML's UNKNOWN counts as later)."""
    return dra.toggles_mig(gpu.architecture)


def _dynamic(gpu: Gpu, snapshot: Snapshot) -> tuple[list[Device], CounterSet | None]:
    """inspectMigProfilesAndPlacements (nvlib.go:1202-1277) and the partitionable devices of
    one GPU. A GPU that offers no profile with a placement (NVML answered every profile query
    NOT_SUPPORTED or INVALID_ARGUMENT, which the driver skips: nvlib.go:1218-1234) has no
    partitions: the driver publishes the full GPU alone, its capacity the plain ``memory``
    and no counters (partitions.go:53-58, 76-78, 92-94: maxCapacities stays empty), or
    nothing where MIG is on and cannot be toggled (nvlib.go:271-273)."""
    if gpu.mig_profiles is None:
        return [Device(name="", type="mig", gpu=gpu.index, attributes=(), capacity=(),
                       missing=("the GPU's MIG profiles and placements "
                                f"({_unread(snapshot, 'them')})",))], None
    if gpu.memory_total_bytes is None or gpu.unknown("memory"):
        raise _Refused(f"error getting MIG info for GPU {gpu.index}: error visiting MIG "
                       "profiles: error getting device memory info")
    assert gpu.minor is not None
    counter_set = dra.counter_set_name(gpu.minor)
    maxima: dict[str, int] = {}
    slices = 0
    migs: list[Device] = []
    for p in sorted(gpu.mig_profiles, key=lambda p: p.index):
        profile = dra.mig_profile(p.index, p.memory_mib, gpu.memory_total_bytes)
        if profile is None:
            raise _Refused(f"error getting MIG info for GPU {gpu.index}: invalid GPU Instance "
                           f"Profile ID: {p.index}")
        capacity = _profile_capacity(p)
        for placement in p.placements:
            missing: list[str] = []
            attrs = [Attribute(name=dra.TYPE, kind="string", value="mig"),
                     Attribute(name=dra.PARENT_UUID, kind="string", value=gpu.uuid),
                     Attribute(name=dra.PROFILE, kind="string", value=profile),
                     *_common(gpu, snapshot, missing)]
            migs.append(Device(
                name=dra.mig_name(gpu.minor, profile, p.id, placement.start), type="mig",
                gpu=gpu.index, attributes=tuple(attrs), capacity=tuple(capacity),
                counter_set=counter_set,
                consumes=_counters(capacity, placement.start, placement.size),
                missing=tuple(missing)))
            slices = max(slices, placement.size)
            for name, value in capacity:
                maxima[name] = max(maxima.get(name, value), value)
    whole = not gpu.mig_enabled or _toggles(gpu)  # (Ampere with MIG on: partitions only)
    if not maxima:  # no partition: the full GPU with its memory, no counters, no counter set
        return [_gpu_device(gpu, snapshot)] if whole else [], None
    largest = [(n, maxima[n]) for n in dra.MIG_CAPACITIES]
    everything = _counters(largest, 0, slices)
    devices = [_gpu_device(gpu, snapshot, capacity=largest, counter_set=counter_set,
                           consumes=everything)] if whole else []
    return devices + migs, CounterSet(name=counter_set, counters=everything)


# -- passthrough -----------------------------------------------------------------------------


def _vfio_device(position: int, pci: PciGpu, *, iommufd: bool | None,
                 gpu: Gpu | None) -> Device:
    """getVfioDeviceInfo and VfioDeviceInfo.GetDevice (nvlib.go:663-703, deviceinfo.go:234-275)
    for one NVIDIA GPU on the PCI bus, bound to whatever driver."""
    import uuid as uuidlib

    attrs = [Attribute(name=dra.TYPE, kind="string", value="vfio"),
             Attribute(name=dra.UUID, kind="string",
                       value=str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, pci.address))),
             Attribute(name=dra.DEVICE_ID, kind="string", value=f"0x{pci.device_id:04x}"),
             Attribute(name=dra.VENDOR_ID, kind="string", value=dra.VFIO_VENDOR_ID),
             Attribute(name=dra.NUMA, kind="int", value=pci.numa_node),
             Attribute(name=dra.PRODUCT_NAME, kind="string", value=pci.name)]
    missing: list[str] = []
    if iommufd is None:
        missing.append("iommuFDEnabled (whether /dev/iommu exists: sysfs class/misc/iommu "
                       "could not be looked at)")
    else:
        attrs.append(Attribute(name=dra.IOMMU_FD_ENABLED, kind="bool", value=iommufd))
    attrs.append(Attribute(name=dra.PCI_BUS_ID, kind="string", value=pci.address))
    if pci.pcie_root:
        attrs.append(Attribute(name=dra.PCIE_ROOT, kind="string", value=pci.pcie_root))
    return Device(name=dra.vfio_name(position), type="vfio",
                  gpu=gpu.index if gpu is not None else -1, attributes=tuple(attrs),
                  capacity=((dra.ADDRESSABLE_MEMORY, pci.addressable_memory),),
                  missing=tuple(missing))


def _passthrough(snapshot: Snapshot) -> list[Device]:
    """enumerateGpuVfioDevices (nvlib.go:621-661): a ``gpu-vfio-<i>`` device for every NVIDIA
    GPU go-nvlib finds on the PCI bus, i its place in that list. The skip it has for a GPU
    whose full-GPU device is not vfio-enabled never applies in this release: that device
    exists only for a GPU without MIG devices, which is always vfio-enabled (nvlib.go:296-299,
    allocatable.go GetGPUDeviceByPCIBusID looks at full-GPU devices only) -- so a GPU with MIG
    devices, one NVML cannot see (bound to vfio-pci) and a skipped DGX Display are listed too.
    Then the vfio PCI manager's check (NewVfioPciManager, vfio-device.go:59-79): no IOMMU,
    no start."""
    pci = snapshot.pci
    if pci is None:
        return _passthrough_unscanned(snapshot)
    if pci.error:
        raise _Refused("error enumerating GPU PCI devices: error getting GPU PCI devices: "
                       f"{pci.error}")
    by_bus = {dra.bus_id(g.pci_bus_id): g for g in snapshot.gpus}
    devices = []
    for position, found in enumerate(pci.gpus):
        if dra.bus_id(found.address) != found.address:
            raise _Refused(f"error getting GPU info from PCI device: error getting PCI bus ID "
                           f"for device {found.address}: not a PCI bus ID Kubernetes accepts")
        devices.append(_vfio_device(position, found, iommufd=pci.iommufd,
                                    gpu=by_bus.get(found.address)))
    if pci.iommu_groups is False:
        raise _Refused("unable to create vfio pci manager: IOMMU is not enabled in the kernel "
                       "(sysfs kernel/iommu_groups is empty or missing)")
    return devices


def _passthrough_unscanned(snapshot: Snapshot) -> list[Device]:
    """A snapshot without the PCI bus scan (recorded before gfd made it): NVML's GPUs, in bus
    order, with what only the scan can tell listed as missing (and GPUs NVML cannot see not
    at all)."""
    import uuid as uuidlib

    devices = []
    on_bus = sorted(snapshot.gpus, key=lambda g: dra.bus_id(g.pci_bus_id) or "")
    for position, gpu in enumerate(on_bus):
        bus = dra.bus_id(gpu.pci_bus_id) or ""
        attrs = [Attribute(name=dra.TYPE, kind="string", value="vfio"),
                 Attribute(name=dra.UUID, kind="string",
                           value=str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, bus))),
                 Attribute(name=dra.VENDOR_ID, kind="string", value=dra.VFIO_VENDOR_ID),
                 Attribute(name=dra.PCI_BUS_ID, kind="string", value=bus)]
        devices.append(Device(
            name=dra.vfio_name(position), type="vfio", gpu=gpu.index, attributes=tuple(attrs),
            capacity=(), missing=("deviceID, numa, productName, iommuFDEnabled, "
                                  "addressableMemory (the PCI bus scan: "
                                  f"{_unread(snapshot, 'it')})",)))
    return devices


# -- the whole node --------------------------------------------------------------------------


def _unread(snapshot: Snapshot, it: str) -> str:
    """Why the snapshot lacks a fact, in words true for where it came from: ``it`` names the
    fact (``it``, ``them``)."""
    if snapshot.recorded:
        return f"the snapshot predates {it}: record it again with this gfd"
    if snapshot.source.startswith("simulate:"):
        return f"the simulated machine does not describe {it}"
    return f"this read did not ask for {it}: gfd devices and gfd snapshot do"


def _skipped(gpu: Gpu) -> bool:
    return gpu.name in dra.SKIPPED_NAMES


def publication(snapshot: Snapshot, gates: dict[str, bool] | None = None) -> Publication:
    """What the plugin publishes for ``snapshot`` under ``gates`` (the driver's defaults for
    those not given), or why it would not start."""
    on = _gate_set(gates)
    conflict = dra.gate_conflict(on)
    if conflict:
        return Publication(gates=on, refusal=conflict)
    if not snapshot.nvml_available:
        return Publication(gates=on, refusal=f"error initializing NVML: {snapshot.nvml_error}")
    if snapshot.backend != "nvml":
        return Publication(gates=on)
    try:
        devices, sets = _enumerate(snapshot, on)
    except _Refused as refused:
        return Publication(gates=on, refusal=str(refused))
    return Publication(gates=on, devices=tuple(devices), counter_sets=tuple(sets))


def _enumerate(snapshot: Snapshot, on: dict[str, bool]) -> tuple[list[Device], list[CounterSet]]:
    devices: list[Device] = []
    sets: list[CounterSet] = []
    for gpu in sorted(snapshot.gpus, key=lambda g: g.index):
        if _skipped(gpu) and gpu.error is None:
            continue
        _check_gpu(gpu, snapshot)
        if gpu.minor is None:  # a snapshot recorded before gfd read it: every name needs it
            devices.append(Device(name="", type="mig" if gpu.mig_enabled else "gpu",
                                  gpu=gpu.index, attributes=(), capacity=(), missing=(
                                      "name (the minor number, nvmlDeviceGetMinorNumber: "
                                      f"{_unread(snapshot, 'it')})",)))
            continue
        if on[dra.DYNAMIC_MIG] and _dynamic_capable(gpu, snapshot):
            found, counter_set = _dynamic(gpu, snapshot)
            devices += sorted(found, key=lambda d: d.name)
            sets += [counter_set] if counter_set is not None else []
            continue
        _check_migs(gpu)
        if gpu.mig_enabled and on[dra.DYNAMIC_MIG] and gpu.mig_devices:
            raise _Refused("PartGetDevice() called for MigStaticDeviceType: static MIG devices "
                           f"of GPU {gpu.index} (a vGPU guest) under DynamicMIG")
        if not gpu.mig_enabled:
            devices.append(_gpu_device(gpu, snapshot))
            continue
        migs = sorted(gpu.mig_devices, key=lambda m: (m.placement_start is None,
                                                      m.placement_start or 0, m.index))
        devices += [_mig_device(m, gpu, snapshot) for m in migs]
    if on[dra.PASSTHROUGH_SUPPORT]:
        devices += _passthrough(snapshot)
    return devices, sets


def project(snapshot: Snapshot, gates: dict[str, bool] | None = None) -> tuple[Device, ...]:
    """Every device the driver would publish for this snapshot, complete or not, in the
    driver's order; none where the plugin would not start (``would_not_start`` says why)."""
    return publication(snapshot, gates).devices


def would_not_start(snapshot: Snapshot, gates: dict[str, bool] | None = None) -> str:
    """Why the plugin would not start on this node; "" when it would."""
    return publication(snapshot, gates).refusal


def published(snapshot: Snapshot, gates: dict[str, bool] | None = None) -> tuple[Device, ...]:
    """The complete devices: what the ResourceSlices written from this snapshot hold."""
    return tuple(d for d in project(snapshot, gates) if d.complete)


def document(snapshot: Snapshot, gates: dict[str, bool] | None = None) -> dict[str, Any]:
    """What ``gfd devices`` prints: the driver, its release, the gates that differ from its
    defaults, the source, why the plugin would not start (if so), the shared counter sets
    (DynamicMIG) and each device in the ResourceSlice form, an incomplete one with
    ``missing`` instead of a made-up value."""
    pub = publication(snapshot, gates)
    changed = {k: v for k, v in pub.gates.items() if dra.GATES[k] != v}
    doc: dict[str, Any] = {"driver": DRIVER, "release": dra.RELEASE}
    if changed:
        doc["featureGates"] = changed
    doc["source"] = snapshot.source
    if pub.refusal:
        doc["wouldNotStart"] = pub.refusal
    if pub.counter_sets:
        doc["sharedCounters"] = [c.to_api() for c in pub.counter_sets]
    devices = []
    for device in pub.devices:
        entry: dict[str, Any] = {}
        if device.name:
            entry["name"] = device.name
        else:
            entry["gpu"] = device.gpu
        body = device.to_api()
        entry.update({k: v for k, v in body.items() if k != "name"})
        if device.missing:
            entry["missing"] = list(device.missing)
        devices.append(entry)
    doc["devices"] = devices
    return doc


def _slice(node: str, name: str, generation: int, count: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {"driver": DRIVER, "nodeName": node,
                 "pool": {"name": node, "generation": generation, "resourceSliceCount": count},
                 **spec},
    }


def resource_slices(snapshot: Snapshot, *, node: str, gates: dict[str, bool] | None = None,
                    pool_generation: int = 1) -> list[dict[str, Any]]:
    """The ResourceSlices (resource.k8s.io/v1) the driver writes for this node: one slice of
    its complete devices in a pool named after the node; under DynamicMIG the split form of
    Kubernetes 1.35+ (driver.go, generateSplitResourceSlices): first one slice holding every
    shared counter set, then one slice of devices per GPU. None where it would not start."""
    pub = publication(snapshot, gates)
    if pub.refusal:
        return []
    devices = [d for d in pub.devices if d.complete]
    base = f"{node}-{DRIVER}"
    if not pub.dynamic:
        return [_slice(node, base, pool_generation, 1, devices=[d.to_api() for d in devices])]
    per_gpu: dict[int, list[Device]] = {}
    for d in devices:
        per_gpu.setdefault(d.gpu, []).append(d)
    by_bus = sorted(per_gpu, key=lambda i: next(g.pci_bus_id for g in snapshot.gpus
                                                if g.index == i).lower())
    count = 1 + len(by_bus)
    out = [_slice(node, f"{base}-counters", pool_generation, count,
                  sharedCounters=[c.to_api() for c in pub.counter_sets])]
    for n, index in enumerate(by_bus):
        out.append(_slice(node, f"{base}-{n}", pool_generation, count,
                          devices=[d.to_api() for d in sorted(per_gpu[index],
                                                              key=lambda d: d.name)]))
    return out


def resource_slice(snapshot: Snapshot, *, node: str, name: str = "",
                   pool_generation: int = 1) -> dict[str, Any]:
    """The one ResourceSlice (resource.k8s.io/v1) the driver writes for this node under its
    default gates: its complete devices in one pool named after the node."""
    found = resource_slices(snapshot, node=node, pool_generation=pool_generation)
    rs = found[0] if found else _slice(node, "", pool_generation, 1, devices=[])
    rs["metadata"]["name"] = name or f"{node}-{DRIVER}"
    return rs
