"""Which GPU back end ``--device-discovery-strategy auto`` picks, by GFD's rule (go-nvlib's
platform resolution), first match wins:

1. ``libdxcore.so`` loads: WSL, read through NVML;
2. the Tegra marker files exist and NVML does not load, or an NVML device name says it is
   a Tegra integrated GPU (``(nvgpu)``, ``NVIDIA Thor``): Tegra (libcuda);
3. otherwise NVML (when it does not load either, NVML's own error is the one reported,
   with ``--fail-on-init-error`` deciding what happens).

``vfio`` is never chosen automatically.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

from gfd.readers.tegra import TEGRA_RELEASE_FILE, has_integrated_gpu, has_tegra_files

DXCORE = "libdxcore.so"


def has_dxcore(library: str = DXCORE) -> bool:
    """Whether WSL's DirectX core library loads (what go-nvlib checks for WSL)."""
    try:
        ctypes.CDLL(library)
    except OSError:
        return False
    return True


def resolve(*, sysfs_root: str, nvml_device_names: Callable[[], list[str] | None],
            release_file: str = TEGRA_RELEASE_FILE,
            dxcore: Callable[[], bool] = has_dxcore) -> tuple[str, str]:
    """The back end ``auto`` means on this host, and why (for the log).
    ``nvml_device_names``: the NVML device names, or None when NVML does not load."""
    if dxcore():
        return "nvml", f"{DXCORE} loads (WSL)"
    names = nvml_device_names()
    tegra_files, why = has_tegra_files(release_file=release_file, sysfs_root=sysfs_root)
    if tegra_files and names is None:
        return "tegra", f"{why} and NVML does not load"
    if names:
        integrated, why = has_integrated_gpu(names)
        if integrated:
            return "tegra", why
    if names is None:
        return "nvml", "no Tegra platform found; NVML does not load either"
    return "nvml", f"NVML loads ({len(names)} device(s))"
