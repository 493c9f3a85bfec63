"""``gpu.devices.full`` and ``gpu.devices.mig-<profile>``: how many devices of each kind the
node offers under its MIG layout -- full GPUs outside MIG, and MIG devices by profile.

``gpu.count`` keeps GFD's meaning (every full GPU, whatever its MIG mode; MIG devices under
``--mig-strategy single``), so a selector cannot tell from it whether a node still has a
whole GPU to give (k8s-device-plugin#1501). These keys say it whatever the MIG strategy: a
full GPU counts when it is healthy and MIG is off; a MIG-enabled GPU offers its MIG devices
instead (none while it has none); profiles are named as the device plugin names resources
(``1g.10gb+me`` -> ``1g.10gb.me``). They live under ``gpu.devices.`` so that no key can
collide with GFD's ``<R>.*`` resource labels.
"""

from __future__ import annotations

from gfd.facts.gpus import healthy
from gfd.facts.mig import layout_unknown, profile_name
from gfd.labelers.base import Label, LabelDoc, Result, key
from gfd.labelers.options import LabelOptions
from gfd.labelers.resource import COUNT_RELATION
from gfd.snapshot import Snapshot

FULL = "gpu.devices.full"
MIG_PREFIX = "gpu.devices.mig-"

LABELS: tuple[LabelDoc, ...] = (
    LabelDoc(key=FULL, value="integer", example="4", source="nvmlDeviceGetMigMode",
             when="GPUs present and their MIG layout known (any --mig-strategy)",
             set="extended"),
    LabelDoc(key=MIG_PREFIX + "<profile>", value="integer", example="7",
             source="MIG devices' profiles (nvmlDeviceGetGpuInstanceProfileInfoV ...)",
             when="one per MIG profile present (any --mig-strategy)", set="extended"),
)


def devices(snapshot: Snapshot, options: LabelOptions, /) -> Result:
    gpus = sorted(healthy(snapshot), key=lambda g: g.index)
    if not gpus:
        return Result()
    why = layout_unknown(snapshot)
    if why:
        return Result(warnings=(f"gpu.devices.* left out: {why}",))
    full = [g.index for g in gpus if not g.mig_enabled]
    labels = {key(FULL): Label(
        value=str(len(full)), source="nvmlDeviceGetMigMode", raw=f"GPUs {full}",
        rules=("healthy GPUs with MIG off; a MIG-enabled GPU offers its MIG devices instead",
               COUNT_RELATION))}
    by_profile: dict[str, list[str]] = {}
    for gpu in gpus:
        if not gpu.mig_enabled:
            continue
        for mig in sorted(gpu.mig_devices, key=lambda m: m.index):
            named = profile_name(mig, gpu)
            assert named is not None, "layout_unknown() checked every profile"
            by_profile.setdefault(named[0], []).append(f"{gpu.index}:{mig.index}")
    for name in sorted(by_profile):
        where = by_profile[name]
        labels[key(MIG_PREFIX + name)] = Label(
            value=str(len(where)), source="MIG devices' profile names", raw=", ".join(where),
            rules=("MIG devices of this profile on healthy GPUs (GPU:slot listed)",
                   "profile named as the device plugin's resource"))
    return Result(labels)
