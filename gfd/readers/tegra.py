"""The Tegra reader: the only module that talks to the CUDA driver API (``libcuda.so.1``).

Jetson and IGX boards (Tegra SoCs with an integrated GPU) may have no NVML, so GFD's
``tegra`` back end reads the GPU through libcuda instead. ``TegraReader.read()`` returns
the snapshot that back end can fill: per GPU the name, total memory, compute capability
and (when the driver offers it) the UUID, and the CUDA version from ``cuDriverGetVersion``.
Everything NVML alone knows stays unset: no driver version (the labelers apply GFD's
Tegra rule to that), no PCI bus id (so no PCI class: ``gpu.mode=unknown``), no MIG, no
NVLink, no fabric.

Conventions:

- The library is loaded and ``cuInit`` called once per reader session (the first
  read); a failure there is a :class:`~gfd.errors.CudaInitError` (a BackendInitError:
  ``--fail-on-init-error=false`` labels without GPUs and retries the next cycle).
- Any other failed call fails the whole read with a one-line DiscoveryError naming the
  call and the GPU -- except the total memory (GFD only warns and leaves ``gpu.memory``
  out) and the UUID (GFD never reads it).
- Only ``ctypes``: no CUDA Python package at run time.

The module also holds the platform checks GFD's ``auto`` strategy makes (go-nvlib's
platform resolution): :func:`has_tegra_files` and :func:`has_integrated_gpu`.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Callable, Iterable
from types import MappingProxyType
from typing import Any

from gfd.errors import CudaInitError, DiscoveryError, one_line, show
from gfd.hostfile import FileProblem, read_bytes
from gfd.readers.failure import CallFailed
from gfd.snapshot import Gpu, Snapshot

log = logging.getLogger(__name__)

LIBCUDA = "libcuda.so.1"
"""The CUDA driver library's SONAME, as GFD loads it."""

# CUresult values used here (cuda.h, enum cudaError_enum).
CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_NOT_INITIALIZED = 3
CUDA_ERROR_STUB_LIBRARY = 34
CUDA_ERROR_DEVICE_UNAVAILABLE = 46
CUDA_ERROR_NO_DEVICE = 100
CUDA_ERROR_OPERATING_SYSTEM = 304
CUDA_ERROR_NOT_PERMITTED = 800
CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803
CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE = 804

# CUdevice_attribute values (cuda.h).
ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76

_UINT_MAX = 0xFFFFFFFF
_NAME_BUFFER = 256
"""Bytes for cuDeviceGetName (NUL included); GPU names are far shorter."""

_c_int_p = ctypes.POINTER(ctypes.c_int)
_c_uint_p = ctypes.POINTER(ctypes.c_uint)
_c_size_t_p = ctypes.POINTER(ctypes.c_size_t)
_c_char_p_p = ctypes.POINTER(ctypes.c_char_p)


class _CUuuid(ctypes.Structure):
    _fields_ = (("bytes", ctypes.c_ubyte * 16),)


_PROTOTYPES: MappingProxyType[str, tuple[Any, ...]] = MappingProxyType(
    {
        # CUresult cuInit(unsigned int Flags)
        "cuInit": (ctypes.c_uint,),
        # CUresult cuDriverGetVersion(int *driverVersion)
        "cuDriverGetVersion": (_c_int_p,),
        # CUresult cuDeviceGetCount(int *count)
        "cuDeviceGetCount": (_c_int_p,),
        # CUresult cuDeviceGet(CUdevice *device, int ordinal)
        "cuDeviceGet": (_c_int_p, ctypes.c_int),
        # CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
        "cuDeviceGetName": (ctypes.c_char_p, ctypes.c_int, ctypes.c_int),
        # CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
        "cuDeviceTotalMem_v2": (_c_size_t_p, ctypes.c_int),
        # The unversioned symbol is the pre-CUDA-3.2 call: it writes an unsigned int (so it
        # saturates at 4 GiB). cuda.h maps the name to _v2; the library still exports both.
        "cuDeviceTotalMem": (_c_uint_p, ctypes.c_int),
        # CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
        "cuDeviceGetAttribute": (_c_int_p, ctypes.c_int, ctypes.c_int),
        # CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev), and the older cuDeviceGetUuid
        "cuDeviceGetUuid_v2": (ctypes.POINTER(_CUuuid), ctypes.c_int),
        "cuDeviceGetUuid": (ctypes.POINTER(_CUuuid), ctypes.c_int),
        # CUresult cuGetErrorName(CUresult error, const char **pStr), and cuGetErrorString
        "cuGetErrorName": (ctypes.c_int, _c_char_p_p),
        "cuGetErrorString": (ctypes.c_int, _c_char_p_p),
    }
)

_LOAD_FIX = (
    "on a Jetson/IGX run gfd with the NVIDIA container runtime so the L4T driver's "
    "libcuda.so.1 is mounted, or install JetPack/L4T on the host"
)
_DEVICE_FIX = (
    "run the container with the NVIDIA container runtime and NVIDIA_VISIBLE_DEVICES=all so "
    "the GPU device nodes (/dev/nvmap, /dev/nvhost-*, /dev/nvgpu) are visible"
)
_INIT_FIXES: MappingProxyType[int, str] = MappingProxyType(
    {
        CUDA_ERROR_NO_DEVICE: _DEVICE_FIX,
        CUDA_ERROR_DEVICE_UNAVAILABLE: _DEVICE_FIX,
        CUDA_ERROR_NOT_PERMITTED: _DEVICE_FIX,
        CUDA_ERROR_OPERATING_SYSTEM: _DEVICE_FIX,
        CUDA_ERROR_STUB_LIBRARY: (
            "the CUDA toolkit's stub libcuda.so.1 was found instead of the driver's: remove it "
            "from the library path and mount the L4T driver's with the NVIDIA container runtime"
        ),
        CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: (
            "libcuda.so.1 does not match the loaded kernel driver: use the libcuda of the "
            "installed JetPack/L4T release (a CUDA compat package may be shadowing it)"
        ),
        CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE: (
            "a CUDA forward-compatibility libcuda.so.1 is not supported on this board: use "
            "the L4T driver's"
        ),
    }
)
_DEFAULT_INIT_FIX = "check the L4T driver on the host (deviceQuery or tegrastats should work)"


class _Api:
    """libcuda's functions used here, with their prototypes; absent symbols are None."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._fns: dict[str, Callable[..., int] | None] = {}
        for name, argtypes in _PROTOTYPES.items():
            try:
                fn = getattr(lib, name)
            except AttributeError:
                self._fns[name] = None
                continue
            fn.argtypes = argtypes
            fn.restype = ctypes.c_int
            self._fns[name] = fn

    def has(self, name: str) -> bool:
        return self._fns.get(name) is not None

    def call(self, name: str, *args: Any) -> None:
        """Call ``name``; a CUresult other than success raises CallFailed naming it."""
        fn = self._fns[name]
        if fn is None:
            raise CallFailed("CUDA", name, -1,
                             RuntimeError("the symbol is missing from the library"))
        code = int(fn(*args))
        if code != CUDA_SUCCESS:
            raise CallFailed("CUDA", name, code, RuntimeError(self.error_text(code)))

    def error_text(self, code: int) -> str:
        """``CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)`` from the library's own
        cuGetErrorName / cuGetErrorString; ``CUresult <n>`` when it cannot say."""
        name = self._string("cuGetErrorName", code) or f"CUresult {code}"
        text = self._string("cuGetErrorString", code)
        return f"{name} ({text})" if text else name

    def _string(self, fn_name: str, code: int) -> str:
        fn = self._fns.get(fn_name)
        if fn is None:
            return ""
        out = ctypes.c_char_p()
        if int(fn(code, ctypes.byref(out))) != CUDA_SUCCESS or out.value is None:
            return ""
        return one_line(out.value.decode("utf-8", "replace"))


def _load(library: str) -> _Api:
    """Load libcuda and call cuInit(0); any failure is a CudaInitError."""
    try:
        lib = ctypes.CDLL(library)
    except OSError as exc:
        detail = one_line(str(exc)) or "cannot be loaded"
        what = f"{library} not found" if "No such file" in detail else detail
        raise CudaInitError(f"CUDA could not start: {what} ({_LOAD_FIX})") from exc
    api = _Api(lib)
    if not api.has("cuInit"):
        raise CudaInitError(
            f"CUDA could not start: {library} has no cuInit, so it is not the CUDA driver "
            f"library ({_LOAD_FIX})")
    try:
        api.call("cuInit", 0)
    except CallFailed as failed:
        fix = _INIT_FIXES.get(failed.code, _DEFAULT_INIT_FIX)
        raise CudaInitError(f"CUDA could not start: cuInit failed: {failed.message} ({fix})"
                            ) from failed
    return api


class TegraReader:
    """Owns the libcuda session: loaded and initialised on the first read, kept between
    reads (``cuInit`` runs once per session). Not thread-safe."""

    def __init__(self, library: str = LIBCUDA) -> None:
        self._library = library
        self._api: _Api | None = None

    def __enter__(self) -> TegraReader:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def read(self) -> Snapshot:
        """The GPUs libcuda reports, as a ``backend="tegra"`` snapshot."""
        if self._api is None:
            self._api = _load(self._library)
            log.debug("CUDA driver API initialised (%s)", self._library)
        api = self._api
        try:
            version = _int_out(api, "cuDriverGetVersion")
            count = _int_out(api, "cuDeviceGetCount")
        except CallFailed as failed:
            raise DiscoveryError(failed.describe()) from failed
        gpus = []
        for index in range(count):
            try:
                gpus.append(_read_gpu(api, index))
            except CallFailed as failed:
                raise DiscoveryError(failed.describe(index)) from failed
        log.debug("CUDA: version %d, %d GPU(s)", version, count)
        return Snapshot(
            nvml_available=True,
            driver_version=None,
            cuda_driver_version=version,
            gpus=tuple(gpus),
            source="tegra",
            backend="tegra",
        )

    def events(self) -> None:
        """None: CUDA on Tegra has no event sets (changes are seen at the next poll)."""
        return None

    def refresh(self) -> None:
        """Nothing to do: CUDA on Tegra is asked everything at each read."""

    def close(self) -> None:
        """End the session (libcuda has no shutdown call); the next read starts a new one."""
        self._api = None


def _int_out(api: _Api, name: str, *args: Any) -> int:
    value = ctypes.c_int()
    api.call(name, ctypes.byref(value), *args)
    return value.value


def _read_gpu(api: _Api, index: int) -> Gpu:
    device = _int_out(api, "cuDeviceGet", index)
    buffer = ctypes.create_string_buffer(_NAME_BUFFER)
    api.call("cuDeviceGetName", buffer, _NAME_BUFFER, device)
    name = buffer.value.decode("utf-8", "replace")
    major = _int_out(api, "cuDeviceGetAttribute", ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device)
    minor = _int_out(api, "cuDeviceGetAttribute", ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device)
    return Gpu(
        index=index,
        uuid=_uuid(api, index, device),
        name=name,
        memory_total_bytes=_memory_total(api, index, device),
        compute_capability=(major, minor),
    )


def _memory_total(api: _Api, index: int, device: int) -> int | None:
    """Total bytes from cuDeviceTotalMem_v2 (the legacy 32-bit call on a driver without
    it); None, with a warning, when it fails (GFD leaves ``gpu.memory`` out) or when the
    legacy call saturated (the memory is 4 GiB or more, but how much is unknown)."""
    try:
        if api.has("cuDeviceTotalMem_v2"):
            total = ctypes.c_size_t()
            api.call("cuDeviceTotalMem_v2", ctypes.byref(total), device)
            return int(total.value)
        legacy = ctypes.c_uint()
        api.call("cuDeviceTotalMem", ctypes.byref(legacy), device)
    except CallFailed as failed:
        log.warning("GPU %d: memory unavailable: %s", index, failed.describe(index))
        return None
    if legacy.value == _UINT_MAX:
        log.warning("GPU %d: memory unavailable: this libcuda has only the 32-bit "
                    "cuDeviceTotalMem, which saturates at 4 GiB", index)
        return None
    return int(legacy.value)


def _uuid(api: _Api, index: int, device: int) -> str:
    """``GPU-<uuid>`` as NVML writes it; "" when the driver cannot say (GFD never asks)."""
    name = "cuDeviceGetUuid_v2" if api.has("cuDeviceGetUuid_v2") else "cuDeviceGetUuid"
    raw = _CUuuid()
    try:
        api.call(name, ctypes.byref(raw), device)
    except CallFailed as failed:
        log.debug("GPU %d: no UUID: %s", index, failed.describe(index))
        return ""
    import uuid  # (a Tegra board only)

    return f"GPU-{uuid.UUID(bytes=bytes(raw.bytes))}"


# --------------------------------------------------------------------------- platform


TEGRA_RELEASE_FILE = "/etc/nv_tegra_release"
"""Present on an L4T (Jetson/IGX) root file system."""

INTEGRATED_GPU_MARKERS = ("(nvgpu)", "NVIDIA Thor")
"""Substrings of an NVML device name that mean a Tegra integrated GPU (``Orin (nvgpu)``,
``NVIDIA Thor``)."""


def has_tegra_files(*, release_file: str = TEGRA_RELEASE_FILE,
                    sysfs_root: str = "/sys") -> tuple[bool, str]:
    """Whether the Tegra marker files exist, and why (for the log): ``release_file`` is a
    file, or ``<sysfs_root>/devices/soc0/family`` begins with ``tegra`` (any case)."""
    if os.path.isfile(release_file):
        return True, f"{release_file} found"
    family_file = os.path.join(sysfs_root, "devices", "soc0", "family")
    if not os.path.isfile(family_file):
        return False, f"neither {release_file} nor {family_file} found"
    try:
        family = read_bytes(family_file, limit=4096).decode("utf-8", errors="replace")
    except FileProblem as exc:
        return False, f"cannot read {family_file}: {exc.problem}"
    if family.lower().startswith("tegra"):
        return True, f"{family_file} begins with 'tegra'"
    return False, f"{family_file} does not begin with 'tegra' ({show(family)})"


def is_integrated_gpu_name(name: str) -> bool:
    """Whether an NVML device name is a Tegra integrated GPU's."""
    return any(marker in name for marker in INTEGRATED_GPU_MARKERS)


def has_integrated_gpu(names: Iterable[str]) -> tuple[bool, str]:
    """Whether any of these NVML device names is a Tegra integrated GPU's, and why."""
    for name in names:
        if is_integrated_gpu_name(name):
            return True, f"device {show(name)} is an integrated GPU"
    return False, "no integrated GPU among the NVML devices"


__all__ = [
    "INTEGRATED_GPU_MARKERS",
    "LIBCUDA",
    "TEGRA_RELEASE_FILE",
    "TegraReader",
    "has_integrated_gpu",
    "has_tegra_files",
    "is_integrated_gpu_name",
]
