"""The CUDA version the driver supports, decoded as GFD decodes it on each back end: one rule
for the ``cuda.driver.*`` / ``cuda.runtime*`` labels, the ``nvidia.driver`` feature and the
DRA devices' ``cudaDriverVersion``, so they agree on every back end."""

from __future__ import annotations

NVML_RULE = "major = v / 1000, minor = (v % 1000) / 10 (integer division)"
TEGRA_RULE = "major = v / 1000, minor = (v % 100) / 10 (integer division; GFD's Tegra rule)"


def cuda_version(version: int, *, backend: str) -> tuple[int, int]:
    """GFD's (major, minor) of an encoded CUDA version (``1000 * major + 10 * minor``).

    NVML: ``minor = (v % 1000) / 10``; Tegra (``cuDriverGetVersion``): ``(v % 100) / 10``.
    They differ only when ``v % 1000 >= 100``, i.e. for a minor version of 10 or more,
    which no CUDA release has had (12020 gives 12.2 either way; 12100 would be 12.10
    under NVML's rule and 12.0 under Tegra's).
    """
    minor = version % 100 // 10 if backend == "tegra" else version % 1000 // 10
    return version // 1000, minor


def cuda_text(version: int, *, backend: str) -> str:
    """``major.minor`` of an encoded CUDA version by the back end's rule (``12.4``)."""
    major, minor = cuda_version(version, backend=backend)
    return f"{major}.{minor}"


def rule(backend: str) -> str:
    """The decoding rule the back end's CUDA version follows, for ``gfd explain``."""
    return TEGRA_RULE if backend == "tegra" else NVML_RULE
