"""``gpu.mode``: compute or graphics, from each GPU's PCI class in sysfs (always ``unknown``
on the Tegra back end, as in GFD)."""

from __future__ import annotations

from gfd.facts.gpus import healthy
from gfd.labelers.base import Label, LabelDoc, Result, key
from gfd.labelers.options import LabelOptions
from gfd.snapshot import Snapshot

_MODES = {"0x030200": "compute", "0x030000": "graphics"}

LABELS: tuple[LabelDoc, ...] = (
    LabelDoc(key="gpu.mode", value="`compute` / `graphics` / `unknown`", example="compute",
             source="sysfs PCI class of each GPU", when="GPUs present", set="compat"),
)


def mode(snapshot: Snapshot, options: LabelOptions, /) -> Result:
    if snapshot.backend == "tegra":
        return Result({key("gpu.mode"): Label(
            value="unknown", source="none on Tegra (the integrated GPU is no PCI device)",
            rules=("GFD's Tegra back end reports PCI class 0 -> unknown",))})
    # A lost GPU cannot be read: its class says nothing about the node's mode.
    unknown = [g.index for g in healthy(snapshot) if g.unknown("pci")]
    if unknown:  # NVML gave no bus id: "unknown" would be computed from the failed answer
        return Result(warnings=(f"gpu.mode left out: NVML gave no PCI bus id for GPU(s) "
                                f"{', '.join(map(str, unknown))}",))
    classes = {g.pci_class for g in healthy(snapshot)} or {None}
    only = next(iter(classes)) if len(classes) == 1 else None
    value = _MODES.get(only or "", "unknown")
    raw = ",".join(sorted(c or "unreadable" for c in classes))
    return Result({key("gpu.mode"): Label(
        value=value, source="<sysfs>/bus/pci/devices/<bus id>/class", raw=raw,
        rules=("0x030200 -> compute, 0x030000 -> graphics; differing or other -> unknown",),
    )})
