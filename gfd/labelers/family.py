"""``gpu.family`` and ``gpu.compute.major|minor``: the architecture from the compute capability,
by GFD's family table (``gfd.facts.family``, which ``gfd selector --family`` checks too).

On the vfio back end no driver reports a compute capability: GFD uses ``-1.-1`` there, so
``gpu.family=undefined``; ``-1`` is not a valid label value, so validation drops the two
``gpu.compute.*`` labels (as NFD drops GFD's).
"""

from __future__ import annotations

from gfd.facts.family import family
from gfd.labelers.base import Label, LabelDoc, key
from gfd.snapshot import Gpu

SOURCE = "nvmlDeviceGetCudaComputeCapability"
VFIO_SOURCE = "vfio back end (no driver to ask)"
VFIO_CAPABILITY = (-1, -1)
"""The compute capability GFD's vfio back end reports."""
_DOC_SOURCE = f"{SOURCE}; vfio: `-1.-1`"

LABELS: tuple[LabelDoc, ...] = (
    LabelDoc(key="gpu.family", value="architecture from compute capability", example="hopper",
             source=_DOC_SOURCE, when="compute major is not 0 (vfio: `undefined`)",
             set="compat"),
    *(LabelDoc(key=f"gpu.compute.{p}", value="integer", example=e, source=_DOC_SOURCE,
               when="compute major is not 0 (vfio: `-1`, an invalid value, dropped)",
               set="compat")
      for p, e in (("major", "9"), ("minor", "0"))),
)


def capability_labels(gpu: Gpu, *, backend: str = "nvml") -> dict[str, Label]:
    """``gpu.family``, ``gpu.compute.major|minor`` for one GPU; none when the major is 0.
    ``backend`` is the snapshot's: on ``vfio`` an unknown capability is GFD's ``-1.-1``."""
    cc = gpu.compute_capability
    source = SOURCE
    if cc is None and backend == "vfio":
        cc, source = VFIO_CAPABILITY, VFIO_SOURCE
    if cc is None or cc[0] == 0:
        return {}
    major, minor = cc
    return {
        key("gpu.family"): Label(value=family(major, minor), source=source,
                                 raw=f"{major}.{minor}",
                                 rules=("GFD's family table by compute capability",)),
        key("gpu.compute.major"): Label(value=str(major), source=source),
        key("gpu.compute.minor"): Label(value=str(minor), source=source),
    }
