"""``cuda.driver.*``, ``cuda.driver-version.*``, ``cuda.runtime.*``, ``cuda.runtime-version.*``.

Two rules depend on the GPU back end (docs/gfd-compatibility.md, "Back ends"): where no
driver can be asked -- Tegra (libcuda has no driver version) and vfio (no driver at all) --
GFD reports the driver version ``unknown.unknown.unknown``, and on vfio the CUDA version
``0.0``; on Tegra GFD splits the CUDA version from ``cuDriverGetVersion`` with
``minor = (v % 100) / 10`` instead of NVML's ``(v % 1000) / 10``.
"""

from __future__ import annotations

from gfd.errors import DiscoveryError, show
from gfd.facts.cuda import cuda_version
from gfd.facts.cuda import rule as cuda_rule
from gfd.labelers.base import Label, LabelDoc, Result, key
from gfd.labelers.options import LabelOptions
from gfd.snapshot import Snapshot

DRIVER_SOURCE = "nvmlSystemGetDriverVersion"
CUDA_SOURCE = "nvmlSystemGetCudaDriverVersion"
UNKNOWN_DRIVER = "unknown.unknown.unknown"
"""What GFD reports as the driver version where no driver can be asked (Tegra, vfio)."""
PLACEHOLDER_DRIVER_SOURCES = {
    "tegra": "none on Tegra (libcuda has no driver version)",
    "vfio": "vfio back end (no driver to ask)",
}
TEGRA_CUDA_SOURCE = "cuDriverGetVersion"
VFIO_CUDA_VERSION = 0
"""What GFD's vfio back end reports as the CUDA version (major 0, minor 0)."""
_DRIVER_DOC_SOURCE = f"{DRIVER_SOURCE}; Tegra and vfio: `{UNKNOWN_DRIVER}` (GFD's rule)"
_CUDA_DOC_SOURCE = (f"{CUDA_SOURCE} (newest CUDA the driver supports); Tegra: "
                    f"{TEGRA_CUDA_SOURCE}; vfio: `0.0`")

LABELS: tuple[LabelDoc, ...] = (
    *(LabelDoc(key=f"cuda.driver.{p}", value="driver version part (text)", example=e,
               source=_DRIVER_DOC_SOURCE, when="GPUs present (deprecated key)", set="compat")
      for p, e in (("major", "580"), ("minor", "159"), ("rev", "04"))),
    *(LabelDoc(key=f"cuda.driver-version.{p}", value="driver version part (text)", example=e,
               source=_DRIVER_DOC_SOURCE, when="GPUs present", set="compat")
      for p, e in (("major", "580"), ("minor", "159"), ("revision", "04"),
                   ("full", "580.159.04"))),
    *(LabelDoc(key=f"cuda.runtime.{p}", value=v, example=e, source=_CUDA_DOC_SOURCE,
               when="GPUs present (deprecated key)", set="compat")
      for p, v, e in (("major", "integer: v / 1000", "13"),
                      ("minor", "integer: (v % 1000) / 10; Tegra: (v % 100) / 10", "0"))),
    *(LabelDoc(key=f"cuda.runtime-version.{p}", value=v, example=e, source=_CUDA_DOC_SOURCE,
               when="GPUs present", set="compat")
      for p, v, e in (("major", "integer: v / 1000", "13"),
                      ("minor", "integer: (v % 1000) / 10; Tegra: (v % 100) / 10", "0"),
                      ("full", "`<major>.<minor>`", "13.0"))),
)


def versions(snapshot: Snapshot, options: LabelOptions, /) -> Result:
    labels: dict[str, Label] = {}
    backend = snapshot.backend
    driver = snapshot.driver_version
    driver_source = DRIVER_SOURCE
    if driver is None and backend in PLACEHOLDER_DRIVER_SOURCES:
        driver, driver_source = UNKNOWN_DRIVER, PLACEHOLDER_DRIVER_SOURCES[backend]
    if driver is not None:
        parts = driver.split(".")
        if len(parts) not in (2, 3):
            raise DiscoveryError(
                f"driver version {show(driver)} does not have 2 or 3 dot-separated parts"
            )
        major, minor = parts[0], parts[1]
        rev = parts[2] if len(parts) == 3 else ""
        split: tuple[str, ...] = ("split on '.'; parts kept as text (leading zeros survive)",)
        if driver_source != DRIVER_SOURCE:
            split = (f"{backend} back end: GFD reports {UNKNOWN_DRIVER}", *split)

        def d(value: str) -> Label:
            return Label(value=value, source=driver_source, raw=driver, rules=split)

        labels |= {
            key("cuda.driver.major"): d(major),
            key("cuda.driver.minor"): d(minor),
            key("cuda.driver.rev"): d(rev),
            key("cuda.driver-version.major"): d(major),
            key("cuda.driver-version.minor"): d(minor),
            key("cuda.driver-version.revision"): d(rev),
            key("cuda.driver-version.full"): Label(value=driver, source=driver_source, raw=driver),
        }
    cuda = snapshot.cuda_driver_version
    cuda_source = TEGRA_CUDA_SOURCE if backend == "tegra" else CUDA_SOURCE
    if cuda is None and backend == "vfio":
        cuda, cuda_source = VFIO_CUDA_VERSION, PLACEHOLDER_DRIVER_SOURCES["vfio"]
    if cuda is not None:
        major_n, minor_n = cuda_version(cuda, backend=backend)
        cmajor, cminor = str(major_n), str(minor_n)
        rule = (cuda_rule(backend),)

        def c(value: str) -> Label:
            return Label(value=value, source=cuda_source, raw=str(cuda), rules=rule)

        labels |= {
            key("cuda.runtime.major"): c(cmajor),
            key("cuda.runtime.minor"): c(cminor),
            key("cuda.runtime-version.major"): c(cmajor),
            key("cuda.runtime-version.minor"): c(cminor),
            key("cuda.runtime-version.full"): c(f"{cmajor}.{cminor}"),
        }
    return Result(labels)
