"""``gpu.family`` and ``gpu.compute.major|minor``: the architecture from the compute capability,
by GFD's family table (the one ``gfd selector --family`` checks against too)."""

from __future__ import annotations

from gfd.labelers.base import Label, LabelDoc, key
from gfd.snapshot import Gpu

_BY_MAJOR = {1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 9: "hopper",
             10: "blackwell", 12: "blackwell", 13: "rubin"}

SOURCE = "nvmlDeviceGetCudaComputeCapability"

LABELS: tuple[LabelDoc, ...] = (
    LabelDoc(key="gpu.family", value="architecture from compute capability", example="hopper",
             source=SOURCE, when="compute major is not 0", set="compat"),
    *(LabelDoc(key=f"gpu.compute.{p}", value="integer", example=e, source=SOURCE,
               when="compute major is not 0", set="compat")
      for p, e in (("major", "9"), ("minor", "0"))),
)


def family(major: int, minor: int) -> str:
    """GFD's architecture family for a compute capability
    (docs/gfd-compatibility.md, "Architecture family")."""
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ada-lovelace" if minor == 9 else "ampere"
    return _BY_MAJOR.get(major, "undefined")


FAMILIES: tuple[str, ...] = tuple(dict.fromkeys(
    name for major in range(1, max(_BY_MAJOR) + 1) for minor in range(10)
    if (name := family(major, minor)) != "undefined"))
"""Every family the table names, oldest first (``undefined`` aside)."""


def capability_labels(gpu: Gpu) -> dict[str, Label]:
    """``gpu.family``, ``gpu.compute.major|minor`` for one GPU; none when the major is 0."""
    cc = gpu.compute_capability
    if cc is None or cc[0] == 0:
        return {}
    major, minor = cc
    return {
        key("gpu.family"): Label(value=family(major, minor), source=SOURCE,
                                 raw=f"{major}.{minor}",
                                 rules=("GFD's family table by compute capability",)),
        key("gpu.compute.major"): Label(value=str(major), source=SOURCE),
        key("gpu.compute.minor"): Label(value=str(minor), source=SOURCE),
    }
