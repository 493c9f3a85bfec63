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
ARCHITECTURE_NAMES: tuple[str, ...] = tuple(ARCHITECTURES.values())

BRANDS: dict[str, str] = {
    "quadro": "Quadro", "tesla": "Tesla", "nvs": "NVS", "grid": "Grid", "geforce": "GeForce",
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
    return re.sub(r"[^a-z0-9-.]", "-", profile.replace(".", "").lower()).strip("-").rstrip(".")


def gpu_name(minor: int) -> str:
    """A full GPU's device name: ``gpu-<minor>``."""
    return f"gpu-{minor}"


def mig_name(parent_minor: int, profile: str, profile_id: int, placement_start: int) -> str:
    """A MIG device's name: ``gpu-<parentMinor>-mig-<profile>-<profileId>-<placementStart>``."""
    return f"gpu-{parent_minor}-mig-{profile_part(profile)}-{profile_id}-{placement_start}"
