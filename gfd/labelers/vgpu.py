"""``vgpu.present``, ``vgpu.host-driver-version|branch`` from PCI config space."""

from __future__ import annotations

from gfd.labelers.base import Label, LabelDoc, Result, key
from gfd.labelers.options import LabelOptions
from gfd.snapshot import Snapshot

SOURCE = "<sysfs>/bus/pci/devices/*/config (vendor capability 'VF')"

LABELS: tuple[LabelDoc, ...] = (
    LabelDoc(key="vgpu.present", value="`true` / `false`", example="false",
             source="sysfs PCI config space (vendor capability `VF`)",
             when="unless the config-space scan failed", set="compat"),
    LabelDoc(key="vgpu.host-driver-version", value="text", example="550.54.16",
             source="vGPU capability record", when="a vGPU is present", set="compat"),
    LabelDoc(key="vgpu.host-driver-branch", value="text", example="r550_40",
             source="vGPU capability record", when="a vGPU is present", set="compat"),
)


def vgpu(snapshot: Snapshot, options: LabelOptions, /) -> Result:
    info = snapshot.vgpu
    if info is None:  # the scan failed: GFD writes no vgpu label at all
        return Result()
    labels = {key("vgpu.present"): Label(value="true" if info.present else "false", source=SOURCE)}
    if info.present:
        if info.host_driver_version:
            labels[key("vgpu.host-driver-version")] = Label(
                value=info.host_driver_version, source=SOURCE)
        if info.host_driver_branch:
            labels[key("vgpu.host-driver-branch")] = Label(
                value=info.host_driver_branch, source=SOURCE)
    return Result(labels)
