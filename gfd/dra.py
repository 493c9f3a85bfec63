"""The NVIDIA DRA driver's vocabulary, spelled once: its name, device classes, attribute and
capacity names, value kinds and forms, architecture and brand names, and naming rules.

Everything gfd says about the driver (``gfd devices``, ``gfd selector --dra``'s claims, the
resource-manager reader's socket and ResourceSlice look-ups) is written from this module.
Source: kubernetes-sigs/dra-driver-nvidia-gpu (formerly NVIDIA/k8s-dra-driver-gpu), release
``RELEASE``: ``cmd/gpu-kubelet-plugin/main.go`` (name), ``deviceinfo.go`` and ``mig.go``
(attributes, capacities, names), the Helm chart's ``templates/deviceclass-*.yaml`` (classes),
go-nvlib's ``GetArchitectureAsString`` / ``GetBrandAsString`` (names), Masterminds/semver v3
(version coercion).
"""

from __future__ import annotations

import math
import re

RELEASE = "v0.4.0"
"""The driver release whose publishing rules gfd follows (HEAD has the same code)."""

DRIVER = "gpu.nvidia.com"
"""The driver's name, and the domain of its own attributes and capacities."""
STANDARD = "resource.kubernetes.io"
"""The domain of Kubernetes' standard device attributes (PCI bus id, PCIe root)."""
REGISTRATION_SOCKET = f"{DRIVER}-reg.sock"
"""The kubelet plugin's registration socket in the kubelet's plugin registry."""

GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"
VFIO_CLASS = "vfio.gpu.nvidia.com"
DEVICE_TYPES: dict[str, str] = {GPU_CLASS: "gpu", MIG_CLASS: "mig", VFIO_CLASS: "vfio"}
"""DeviceClass -> the ``type`` attribute it selects."""
DEVICE_CLASSES: dict[str, str] = {
    name: f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == '{kind}'"
    for name, kind in DEVICE_TYPES.items() if kind != "vfio"
}
"""The DeviceClasses of the driver's Helm chart for full GPUs and MIG devices
(``templates/deviceclass-gpu.yaml``, ``-mig.yaml``): name -> CEL selector."""


EXTENDED_RESOURCES: dict[str, str] = {GPU_CLASS: "nvidia.com/gpu"}
"""The chart's ``extendedResourceName`` of each class (``deviceclass-gpu.yaml`` on
``resource.k8s.io/v1``): a pod asking ``nvidia.com/gpu`` on a node without it allocatable
gets a GPU of that class (``DRAExtendedResource``)."""


def device_class(device_type: str) -> str:
    """The DeviceClass that selects devices of ``device_type`` (``gpu``, ``mig``, ``vfio``)."""
    return next(name for name, kind in DEVICE_TYPES.items() if kind == device_type)


KINDS = ("string", "int", "bool", "version")
"""DeviceAttribute value kinds, as the API names their fields."""

# Attribute names, unqualified in the driver's own domain.
TYPE = "type"
UUID = "uuid"
PARENT_UUID = "parentUUID"
PROFILE = "profile"
PRODUCT_NAME = "productName"
BRAND = "brand"
ARCHITECTURE = "architecture"
CUDA_COMPUTE_CAPABILITY = "cudaComputeCapability"
DRIVER_VERSION = "driverVersion"
CUDA_DRIVER_VERSION = "cudaDriverVersion"
ADDRESSING_MODE = "addressingMode"
# Passthrough (vfio) device attributes (deviceinfo.go, VfioDeviceInfo.GetDevice).
DEVICE_ID = "deviceID"
VENDOR_ID = "vendorID"
NUMA = "numa"
IOMMU_FD_ENABLED = "iommuFDEnabled"
VFIO_VENDOR_ID = "0x10de"
"""A passthrough device's ``vendorID`` (``fmt.Sprintf("0x%04x", device.Vendor)``)."""
# Standard attributes, qualified.
PCI_BUS_ID = f"{STANDARD}/pciBusID"
PCIE_ROOT = f"{STANDARD}/pcieRoot"

# Capacity names.
MEMORY = "memory"
MULTIPROCESSORS = "multiprocessors"
COPY_ENGINES = "copyEngines"
DECODERS = "decoders"
ENCODERS = "encoders"
JPEG_ENGINES = "jpegEngines"
OFA_ENGINES = "ofaEngines"
MEMORY_SLICE = "memorySlice"
"""``memorySlice<N>``: 1 for each memory slice a MIG device holds."""
ADDRESSABLE_MEMORY = "addressableMemory"
"""A passthrough device's capacity: its BARs' total (go-nvpci GetTotalAddressableMemory)."""
MIG_CAPACITIES = (MULTIPROCESSORS, COPY_ENGINES, DECODERS, ENCODERS, JPEG_ENGINES, OFA_ENGINES,
                  MEMORY)
"""A MIG profile's capacities, in the driver's order (mig.go, CommonCapacitiesMig)."""

# Feature gates (pkg/featuregates/featuregates.go) that change what the plugin publishes.
DYNAMIC_MIG = "DynamicMIG"
"""Alpha, off by default: every MIG profile x placement is a partitionable device."""
PASSTHROUGH_SUPPORT = "PassthroughSupport"
"""Alpha, off by default: each NVIDIA GPU on the PCI bus is also a ``gpu-vfio-<i>`` device."""
GATES: dict[str, bool] = {
    "TimeSlicingSettings": False, "MPSSupport": False, "IMEXDaemonsWithDNSNames": True,
    PASSTHROUGH_SUPPORT: False, DYNAMIC_MIG: False, "NVMLDeviceHealthCheck": False,
    "ComputeDomainCliques": True, "CrashOnNVLinkFabricErrors": True, "DeviceMetadata": False,
}
"""The driver's own feature gates with their defaults (``defaultFeatureGates``)."""
_CHECKS = (("requires", "ComputeDomainCliques", "IMEXDaemonsWithDNSNames"),
           ("excludes", DYNAMIC_MIG, PASSTHROUGH_SUPPORT),
           ("excludes", DYNAMIC_MIG, "NVMLDeviceHealthCheck"),
           ("excludes", DYNAMIC_MIG, "MPSSupport"),
           ("excludes", PASSTHROUGH_SUPPORT, "NVMLDeviceHealthCheck"),
           ("requires", "DeviceMetadata", PASSTHROUGH_SUPPORT))
"""ValidateFeatureGates' checks, in its order."""


def parse_gates(text: str) -> dict[str, bool]:
    """``--feature-gates`` as the driver reads it (component-base: ``Name=true,Other=false``)
    -> every gate's value, defaults filled in. ValueError names an unknown gate or value."""
    gates = dict(GATES)
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, eq, value = item.partition("=")
        name, value = name.strip(), value.strip().lower()
        if not eq or name not in GATES:
            known = ", ".join(sorted(GATES))
            raise ValueError(f"unrecognized feature gate {item!r}: the driver's gates are "
                             f"{known}, each written Name=true or Name=false")
        if value not in ("true", "false"):
            raise ValueError(f"invalid value of {name}={value}, err: strconv.ParseBool: "
                             f"parsing {value!r}: invalid syntax")
        gates[name] = value == "true"
    return gates


def gate_conflict(gates: dict[str, bool]) -> str:
    """Why the driver refuses these gates at start (ValidateFeatureGates); "" when it
    accepts them."""
    for check, a, b in _CHECKS:
        if check == "requires" and gates.get(a) and not gates.get(b):
            return f"feature gate {a} requires {b} to also be enabled"
        if check == "excludes" and gates.get(a) and gates.get(b):
            return f"feature gate {a} is currently mutually exclusive with {b}"
    return ""


_COMMON = (PRODUCT_NAME, BRAND, ARCHITECTURE, CUDA_COMPUTE_CAPABILITY, DRIVER_VERSION,
           CUDA_DRIVER_VERSION, PCI_BUS_ID, PCIE_ROOT, ADDRESSING_MODE)
"""What a full GPU and its MIG devices share (GpuInfo.Attributes, CommonAttributesMig)."""


def published_names(device_type: str, gates: dict[str, bool] | None = None,
                    ) -> tuple[frozenset[str], frozenset[str]]:
    """(attribute names, capacity names) a device of ``device_type`` (``gpu``, ``mig``,
    ``vfio``) may carry under ``gates`` (defaults when None), as ``RELEASE`` publishes them;
    ``memorySlice<N>`` stands for every memory slice capacity. Some are conditional
    (``pcieRoot``, ``addressingMode``, a GPU's ``memory``): present where the node has them.
    No device of the type exists under these gates: two empty sets."""
    on = {**GATES, **(gates or {})}
    dynamic = on[DYNAMIC_MIG]
    if device_type == "gpu":
        caps = set(MIG_CAPACITIES) if dynamic else {MEMORY}
        return frozenset({TYPE, UUID, *_COMMON}), frozenset(caps)
    if device_type == "mig":
        attrs = {TYPE, PARENT_UUID, PROFILE, *_COMMON} | (set() if dynamic else {UUID})
        caps = set(MIG_CAPACITIES) | (set() if dynamic else {f"{MEMORY_SLICE}<N>"})
        return frozenset(attrs), frozenset(caps)
    if device_type == "vfio" and on[PASSTHROUGH_SUPPORT]:
        return (frozenset({TYPE, UUID, DEVICE_ID, VENDOR_ID, NUMA, PRODUCT_NAME,
                           IOMMU_FD_ENABLED, PCI_BUS_ID, PCIE_ROOT}),
                frozenset({ADDRESSABLE_MEMORY}))
    return frozenset(), frozenset()


def counter_name(capacity_name: str) -> str:
    """A capacity as the counter it is under DynamicMIG (partitions.go, camelToDNSName):
    ``copyEngines`` -> ``copy-engines``."""
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", capacity_name)
    text = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1-\2", text)
    return _rfc1123(text)


def memory_slice_counter(index: int) -> str:
    """The counter of memory slice ``index`` (partitions.go, memsliceCounterName)."""
    return f"memory-slice-{index}"


def counter_set_name(minor: int) -> str:
    """A GPU's one shared counter set (GetSharedCounterSetName): ``gpu-<minor>-counter-set``."""
    return _rfc1123(f"{gpu_name(minor)}-counter-set")


def vfio_name(index: int) -> str:
    """A passthrough device's name: ``gpu-vfio-<i>``, i its place among the node's NVIDIA
    GPUs on the PCI bus (go-nvlib nvpci GetGPUs order)."""
    return f"gpu-vfio-{index}"


# go-nvml's NVML_GPU_INSTANCE_PROFILE_* index -> (slices, attribute suffix), as go-nvlib's
# NewMigProfile names them (mig_profile.go).
_GI_INDEX: dict[int, tuple[int, str]] = {
    0: (1, ""), 1: (2, ""), 2: (3, ""), 3: (4, ""), 4: (7, ""), 5: (8, ""), 6: (6, ""),
    7: (1, "+me"), 8: (2, "+me"), 9: (1, ""), 10: (1, "+gfx"), 11: (2, "+gfx"), 12: (4, "+gfx"),
    13: (1, "-me"), 14: (2, "-me"), 15: (1, "+me.all"), 16: (2, "+me.all"),
}


def mig_profile(index: int, memory_mib: int, total_bytes: int) -> str | None:
    """go-nvlib's MigProfile.String() for a whole-GPU-instance profile: ``<G>g.<GB>gb`` and
    its attribute (``1g.10gb+me``), GB by getMigMemorySizeGB (eighths of the GPU's memory,
    rounded up, times its GiB); None for an index go-nvlib does not know or no memory."""
    if index not in _GI_INDEX or total_bytes <= 0:
        return None
    slices, suffix = _GI_INDEX[index]
    fraction = math.ceil(memory_mib * 1048576 / total_bytes * 8) / 8
    gib = (total_bytes + 2**30 - 1) // 2**30
    gb = int(_round_half_away(fraction * gib))
    return f"{slices}g.{gb}gb{suffix}"


def _round_half_away(value: float) -> float:
    """Go's math.Round (halves away from zero), not Python's banker's round."""
    return math.floor(value + 0.5) if value >= 0 else -math.floor(-value + 0.5)


def _rfc1123(name: str) -> str:
    """mig.go's toRFC1123Compliant."""
    text = re.sub(r"[^a-z0-9-.]", "-", name.lower()).strip("-")
    return text.removesuffix(".")[:253]

ARCHITECTURES: dict[str, str] = {
    "kepler": "Kepler", "maxwell": "Maxwell", "pascal": "Pascal", "volta": "Volta",
    "turing": "Turing", "ampere": "Ampere", "ada": "Ada Lovelace", "hopper": "Hopper",
    "blackwell": "Blackwell", "rubin": "Rubin",
}
"""The snapshot's architecture names -> go-nvlib's GetArchitectureAsString."""
_FAMILY_NAMES = {"ada": "ada-lovelace"}
"""The snapshot's architecture names that gfd's ``gpu.family`` spells differently."""
FAMILY_ARCHITECTURES: dict[str, str] = {
    _FAMILY_NAMES.get(name, name): arch for name, arch in ARCHITECTURES.items()}
"""gfd's ``gpu.family`` values -> the architecture the driver publishes (the families the
driver has a name for; ``tesla`` and ``fermi`` predate go-nvlib's table)."""
RELEASE_LACKS = frozenset({"rubin"})
"""Architectures the release's go-nvlib (v0.10.0) has no name for: its
GetArchitectureAsString fails on them, and with it the plugin's start."""
SKIPPED_NAMES = ("DGX Display", "NVIDIA DGX Display")
"""GPUs the driver never enumerates, by NVML name (go-nvlib's default WithSkippedDevices)."""
ARCHITECTURE_NAMES: tuple[str, ...] = tuple(ARCHITECTURES.values())
UNKNOWN_ARCHITECTURE = "unknown"
"""The snapshot's name for NVML_DEVICE_ARCH_UNKNOWN (0xffffffff), which go-nvlib's
GetArchitectureAsString names ``Unknown`` (device.go:96-97): the driver publishes that. Any
other value it has no name for fails the plugin's start."""


def architecture_name(architecture: str | None) -> str | None:
    """The ``architecture`` attribute of a GPU of the snapshot's ``architecture``; None where
    go-nvlib has no name for it."""
    if architecture == UNKNOWN_ARCHITECTURE:
        return "Unknown"
    return ARCHITECTURES.get(architecture or "")


def toggles_mig(architecture: str | None) -> bool:
    """supportsMIGModeToggle (nvlib.go:1461-1470): ``arch >= DEVICE_ARCH_HOPPER`` on NVML's
    number, so Hopper and later -- and UNKNOWN, 0xffffffff, too."""
    if architecture == UNKNOWN_ARCHITECTURE:
        return True
    order = list(ARCHITECTURES)
    return architecture in order and order.index(architecture) >= order.index("hopper")

BRANDS: dict[str, str] = {
    "unknown": "Unknown", "quadro": "Quadro", "tesla": "Tesla", "nvs": "NVS", "grid": "Grid",
    "geforce": "GeForce",
    "titan": "Titan", "nvidia-vapps": "NvidiaVApps", "nvidia-vpc": "NvidiaVPC",
    "nvidia-vcs": "NvidiaVCS", "nvidia-vws": "NvidiaVWS",
    "nvidia-cloud-gaming": "NvidiaCloudGaming", "quadro-rtx": "QuadroRTX",
    "nvidia-rtx": "NvidiaRTX", "nvidia": "Nvidia", "geforce-rtx": "GeForceRTX",
    "titan-rtx": "TitanRTX",
}
"""The snapshot's brand names -> go-nvlib's GetBrandAsString."""


def attribute(name: str) -> str:
    """CEL for one of the driver's own attributes: ``device.attributes['gpu.nvidia.com'].x``."""
    return f"device.attributes['{DRIVER}'].{name}"


def capacity(name: str) -> str:
    """CEL for one of the driver's capacities: ``device.capacity['gpu.nvidia.com'].x``."""
    return f"device.capacity['{DRIVER}'].{name}"


_SEMVER = re.compile(
    r"v?([0-9]+)(?:\.([0-9]+))?(?:\.([0-9]+))?"
    r"(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?")


def semver(text: str) -> str | None:
    """``text`` as Masterminds/semver v3 (non-strict) parses and prints it; None when it is
    not a version that library accepts (the driver would then publish no device)."""
    match = _SEMVER.fullmatch(text.strip())
    if match is None:
        return None
    major, minor, patch, pre, meta = match.groups()
    out = f"{int(major)}.{int(minor or 0)}.{int(patch or 0)}"
    return out + (f"-{pre}" if pre else "") + (f"+{meta}" if meta else "")


_BINARY = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def quantity(value: int) -> str:
    """An integer as Kubernetes prints a BinarySI quantity: ``42949672960`` -> ``40Gi``,
    ``85520809984`` -> ``81559Mi``, values below 1024 as plain numbers."""
    if -1024 < value < 1024:
        return str(value)
    exponent = 0
    while value % 1024 == 0 and exponent < len(_BINARY) - 1:
        value //= 1024
        exponent += 1
    return f"{value}{_BINARY[exponent]}"


def bus_id(nvml_bus_id: str) -> str | None:
    """go-nvlib's GetPCIBusID: lower case, an 8-digit ``0000xxxx`` domain cut to 4 digits;
    None unless it is a bus id Kubernetes accepts (``dddd:bb:dd.f``)."""
    text = nvml_bus_id.strip().lower()
    if re.match(r"0{4}[0-9a-f]{4}:", text):
        text = text[4:]
    return text if re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]", text) else None


def profile_part(profile: str) -> str:
    """A MIG profile as the driver puts it in a device name: toRFC1123Compliant of the profile
    without dots (``1g.10gb+me`` -> ``1g10gb-me``)."""
    return _rfc1123(profile.replace(".", ""))


def gpu_name(minor: int) -> str:
    """A full GPU's device name: ``gpu-<minor>``."""
    return f"gpu-{minor}"


def mig_name(parent_minor: int, profile: str, profile_id: int, placement_start: int) -> str:
    """A MIG device's name: ``gpu-<parentMinor>-mig-<profile>-<profileId>-<placementStart>``."""
    return f"gpu-{parent_minor}-mig-{profile_part(profile)}-{profile_id}-{placement_start}"
