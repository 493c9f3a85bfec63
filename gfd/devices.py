"""Each GPU and MIG device of the node as the NVIDIA DRA driver publishes it (``gfd devices``).

A pure projection of the snapshot: the driver's device names, attribute names, types and
value forms, and capacities (kubernetes-sigs/dra-driver-nvidia-gpu,
``cmd/gpu-kubelet-plugin/deviceinfo.go``, ``mig.go``, ``nvlib.go``; without feature gates).

- A GPU with MIG disabled is one ``gpu`` device named ``gpu-<minor>``; a GPU with MIG enabled
  is published through its MIG devices only, each ``mig`` device named
  ``gpu-<parentMinor>-mig-<profile>-<giProfileId>-<placementStart>`` (the profile without
  dots, RFC 1123: ``1g.10gb+me`` -> ``1g10gb-me``).
- Versions are semver strings coerced as Masterminds/semver v3 does (missing parts 0,
  leading zeros dropped): compute capability ``8.0`` -> ``8.0.0``, driver ``535.183.01`` ->
  ``535.183.1``, CUDA ``12040`` -> ``12.4`` -> ``12.4.0``.
- Capacities are integers: ``memory`` in bytes (a binary quantity), MIG engine counts, and
  ``memorySlice<N>`` = 1 for each memory slice a MIG device holds.

A device the snapshot cannot describe fully is still listed, with ``missing`` saying what
is not known; nothing is invented in its place, and ``published()`` leaves it out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gfd import dra
from gfd.dra import DRIVER, quantity, semver
from gfd.facts.cuda import cuda_text
from gfd.facts.gpus import counted
from gfd.facts.mig import profile_name
from gfd.snapshot import Gpu, MigDevice, Snapshot


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
    """``gpu-0``, ``gpu-3-mig-1g5gb-19-6``; "" when the facts naming it are missing."""
    type: str
    """``gpu`` or ``mig``."""
    gpu: int
    """The (parent) GPU's NVML index."""
    attributes: tuple[Attribute, ...]
    capacity: tuple[tuple[str, int], ...]
    """Capacity name -> integer (bytes for ``memory``)."""
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
        return {
            "name": self.name,
            "attributes": {a.name: {a.kind: a.value} for a in self.attributes},
            "capacity": {n: {"value": quantity(v)} for n, v in self.capacity},
        }


def _common(gpu: Gpu, snapshot: Snapshot, missing: list[str]) -> list[Attribute]:
    """The attributes a GPU and its MIG devices share (the parent's facts)."""
    attrs: list[Attribute] = []

    def add(name: str, kind: str, value: str | int | bool | None, why: str) -> None:
        if value is None or value == "":
            missing.append(f"{name} ({why})")
        else:
            attrs.append(Attribute(name=name, kind=kind, value=value))

    add(dra.PRODUCT_NAME, "string", gpu.name, "nvmlDeviceGetName")
    add(dra.BRAND, "string", dra.BRANDS.get(gpu.brand or ""), "nvmlDeviceGetBrand")
    add(dra.ARCHITECTURE, "string", dra.ARCHITECTURES.get(gpu.architecture or ""),
        "nvmlDeviceGetArchitecture")
    cc = gpu.compute_capability
    add(dra.CUDA_COMPUTE_CAPABILITY, "version", semver(f"{cc[0]}.{cc[1]}") if cc else None,
        "nvmlDeviceGetCudaComputeCapability")
    add(dra.DRIVER_VERSION, "version", semver(snapshot.driver_version or ""),
        "nvmlSystemGetDriverVersion")
    cuda = snapshot.cuda_driver_version
    add(dra.CUDA_DRIVER_VERSION, "version",
        semver(cuda_text(cuda, backend=snapshot.backend)) if cuda is not None else None,
        "nvmlSystemGetCudaDriverVersion")
    bus = dra.bus_id(gpu.pci_bus_id)
    add(dra.PCI_BUS_ID, "string", bus, "nvmlDeviceGetPciInfo")
    if gpu.pcie_root:
        attrs.append(Attribute(name=dra.PCIE_ROOT, kind="string", value=gpu.pcie_root))
    if gpu.numa_node is not None and gpu.numa_node >= 0:
        attrs.append(Attribute(name=f"{dra.STANDARD}/numaNode", kind="int", value=gpu.numa_node))
    return attrs


def _gpu_device(gpu: Gpu, snapshot: Snapshot) -> Device:
    missing: list[str] = []
    if gpu.minor is None:
        missing.append("name (the minor number: nvmlDeviceGetMinorNumber)")
    attrs = [Attribute(name=dra.TYPE, kind="string", value="gpu")]
    if gpu.uuid:
        attrs.append(Attribute(name=dra.UUID, kind="string", value=gpu.uuid))
    else:
        missing.append("uuid (nvmlDeviceGetUUID)")
    attrs += _common(gpu, snapshot, missing)
    capacity: list[tuple[str, int]] = []
    if gpu.memory_total_bytes is not None and not gpu.unknown("memory"):
        capacity.append((dra.MEMORY, gpu.memory_total_bytes))
    else:
        missing.append("memory (nvmlDeviceGetMemoryInfo)")
    return Device(name=dra.gpu_name(gpu.minor) if gpu.minor is not None else "", type="gpu",
                  gpu=gpu.index, attributes=tuple(attrs), capacity=tuple(capacity),
                  missing=tuple(missing))


def dra_profile(mig: MigDevice, parent: Gpu) -> str | None:
    """The profile as go-nvlib prints it (``1g.5gb``, ``1g.10gb+me``): NVML's name without
    ``MIG ``, else GFD's eighths rule; None when neither can be had."""
    if mig.profile_name:
        return mig.profile_name.removeprefix("MIG ").strip()
    named = profile_name(mig, parent)
    return named[0] if named else None


def _mig_device(mig: MigDevice, gpu: Gpu, snapshot: Snapshot) -> Device:
    missing: list[str] = []
    profile = dra_profile(mig, gpu)
    if mig.ci_slices != mig.gi_slices:
        missing.append(f"a whole-GPU-instance compute instance (this one has {mig.ci_slices} "
                       f"of {mig.gi_slices} slices; the DRA driver publishes no such device)")
    placed = None not in (gpu.minor, mig.gi_profile_id, mig.placement_start)
    if not placed or profile is None:
        missing.append("name (parent minor number, GPU instance profile id and placement: "
                       "nvmlDeviceGetMinorNumber, nvmlGpuInstanceGetInfo)")
    attrs = [Attribute(name=dra.TYPE, kind="string", value="mig")]
    if mig.uuid:
        attrs.append(Attribute(name=dra.UUID, kind="string", value=mig.uuid))
    else:
        missing.append("uuid (nvmlDeviceGetUUID)")
    if gpu.uuid:
        attrs.append(Attribute(name=dra.PARENT_UUID, kind="string", value=gpu.uuid))
    else:
        missing.append("parentUUID (nvmlDeviceGetUUID)")
    if profile is not None:
        attrs.append(Attribute(name=dra.PROFILE, kind="string", value=profile))
    else:
        missing.append("profile (MIG profile name)")
    attrs += _common(gpu, snapshot, missing)
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


def project(snapshot: Snapshot) -> tuple[Device, ...]:
    """Every device the driver would publish for this snapshot, complete or not, in the
    driver's order (by GPU, MIG devices by placement). A lost GPU is listed with its error
    as what is missing; a MIG-enabled GPU whose MIG devices are unknown likewise."""
    if not snapshot.nvml_available or snapshot.backend != "nvml":
        return ()
    out: list[Device] = []
    for gpu in sorted(counted(snapshot), key=lambda g: g.index):
        if gpu.error is not None:
            out.append(Device(name="", type="gpu", gpu=gpu.index, attributes=(), capacity=(),
                              missing=(f"the GPU itself (NVML: {gpu.error})",)))
        elif gpu.unknown("mig_mode") or (gpu.mig_enabled and gpu.unknown("mig_devices")):
            out.append(Device(name="", type="mig" if gpu.mig_enabled else "gpu", gpu=gpu.index,
                              attributes=(), capacity=(),
                              missing=("the GPU's MIG mode or MIG devices "
                                       "(nvmlDeviceGetMigMode, MIG device queries)",)))
        elif gpu.mig_enabled:
            migs = sorted(gpu.mig_devices, key=lambda m: (m.placement_start is None,
                                                          m.placement_start or 0, m.index))
            out += [_mig_device(m, gpu, snapshot) for m in migs]
        else:
            out.append(_gpu_device(gpu, snapshot))
    return tuple(out)


def published(snapshot: Snapshot) -> tuple[Device, ...]:
    """The complete devices: what a ResourceSlice written from this snapshot holds."""
    return tuple(d for d in project(snapshot) if d.complete)


def document(snapshot: Snapshot) -> dict[str, Any]:
    """What ``gfd devices`` prints: the driver, the source, and each device in the
    ResourceSlice form, an incomplete one with ``missing`` instead of a made-up value."""
    devices = []
    for device in project(snapshot):
        entry: dict[str, Any] = {}
        if device.name:
            entry["name"] = device.name
        else:
            entry["gpu"] = device.gpu
        body = device.to_api()
        entry["attributes"] = body["attributes"]
        entry["capacity"] = body["capacity"]
        if device.missing:
            entry["missing"] = list(device.missing)
        devices.append(entry)
    return {"driver": DRIVER, "source": snapshot.source, "devices": devices}


def resource_slice(snapshot: Snapshot, *, node: str, name: str = "",
                   pool_generation: int = 1) -> dict[str, Any]:
    """A ResourceSlice (resource.k8s.io/v1) as the driver writes one for this node: its
    complete devices in one pool named after the node."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": pool_generation, "resourceSliceCount": 1},
            "devices": [d.to_api() for d in published(snapshot)],
        },
    }
