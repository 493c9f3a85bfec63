"""``cuda.driver.*``, ``cuda.driver-version.*``, ``cuda.runtime.*``, ``cuda.runtime-version.*``.

On the vfio back end (``snapshot.backend == "vfio"``) no driver is asked: GFD writes the
driver version ``unknown.unknown.unknown`` and the CUDA version ``0.0`` there.
"""

from __future__ import annotations

from gfd.errors import DiscoveryError
from gfd.labelers.base import Label, LabelDoc, Result, key
from gfd.labelers.options import LabelOptions
from gfd.snapshot import Snapshot

DRIVER_SOURCE = "nvmlSystemGetDriverVersion"
CUDA_SOURCE = "nvmlSystemGetCudaDriverVersion"
VFIO_SOURCE = "vfio back end (no driver to ask)"
VFIO_DRIVER_VERSION = "unknown.unknown.unknown"
"""What GFD's vfio back end reports as the driver version."""
VFIO_CUDA_VERSION = 0
"""What GFD's vfio back end reports as the CUDA version (major 0, minor 0)."""
_DRIVER_DOC_SOURCE = f"{DRIVER_SOURCE}; vfio: version `unknown.unknown.unknown`"
_CUDA_DOC_SOURCE = f"{CUDA_SOURCE} (newest CUDA the driver supports); vfio: `0.0`"

LABELS: tuple[LabelDoc, ...] = (
    *(LabelDoc(key=f"cuda.driver.{p}", value="driver version part (text)", example=e,
               source=_DRIVER_DOC_SOURCE, when="GPUs present (deprecated key)",
               set="compat")
      for p, e in (("major", "580"), ("minor", "159"), ("rev", "04"))),
    *(LabelDoc(key=f"cuda.driver-version.{p}", value="driver version part (text)", example=e,
               source=_DRIVER_DOC_SOURCE, when="GPUs present", set="compat")
      for p, e in (("major", "580"), ("minor", "159"), ("revision", "04"),
                   ("full", "580.159.04"))),
    *(LabelDoc(key=f"cuda.runtime.{p}", value="integer", example=e, source=_CUDA_DOC_SOURCE,
               when="GPUs present (deprecated key)", set="compat")
      for p, e in (("major", "13"), ("minor", "0"))),
    *(LabelDoc(key=f"cuda.runtime-version.{p}", value=v, example=e, source=_CUDA_DOC_SOURCE,
               when="GPUs present", set="compat")
      for p, v, e in (("major", "integer", "13"), ("minor", "integer", "0"),
                      ("full", "`<major>.<minor>`", "13.0"))),
)


def versions(snapshot: Snapshot, options: LabelOptions, /) -> Result:
    labels: dict[str, Label] = {}
    vfio = snapshot.backend == "vfio"
    driver = snapshot.driver_version
    driver_source = DRIVER_SOURCE
    if driver is None and vfio:
        driver, driver_source = VFIO_DRIVER_VERSION, VFIO_SOURCE
    if driver is not None:
        parts = driver.split(".")
        if len(parts) not in (2, 3):
            raise DiscoveryError(
                f"driver version {driver!r} does not have 2 or 3 dot-separated parts"
            )
        major, minor = parts[0], parts[1]
        rev = parts[2] if len(parts) == 3 else ""
        split = ("split on '.'; parts kept as text (leading zeros survive)",)

        def d(value: str) -> Label:
            return Label(value=value, source=driver_source, raw=driver, rules=split)

        labels |= {
            key("cuda.driver.major"): d(major),
            key("cuda.driver.minor"): d(minor),
            key("cuda.driver.rev"): d(rev),
            key("cuda.driver-version.major"): d(major),
            key("cuda.driver-version.minor"): d(minor),
            key("cuda.driver-version.revision"): d(rev),
            key("cuda.driver-version.full"): Label(value=driver, source=driver_source,
                                                   raw=driver),
        }
    cuda = snapshot.cuda_driver_version
    cuda_source = CUDA_SOURCE
    if cuda is None and vfio:
        cuda, cuda_source = VFIO_CUDA_VERSION, VFIO_SOURCE
    if cuda is not None:
        cmajor, cminor = str(cuda // 1000), str((cuda % 1000) // 10)
        rule = ("major = v / 1000, minor = (v % 1000) / 10 (integer division)",)

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
