"""``gpu.nvlink``: whether any NVLink of any GPU is active. Not written on the vfio back end,
which cannot see links (``false`` would be a guess)."""

from __future__ import annotations

from gfd.facts.gpus import healthy
from gfd.labelers.base import Label, LabelDoc, Result, key
from gfd.labelers.options import LabelOptions
from gfd.snapshot import Snapshot

LABELS: tuple[LabelDoc, ...] = (
    LabelDoc(key="gpu.nvlink", value="`true` / `false`", example="true",
             source="nvmlDeviceGetNvLinkState", when="GPUs present (not on vfio)",
             set="extended"),
)


def nvlink(snapshot: Snapshot, options: LabelOptions, /) -> Result:
    gpus = healthy(snapshot)
    if not gpus or snapshot.backend == "vfio":
        return Result()
    active = any(g.nvlink_active for g in gpus)
    if not active and any(g.unknown("nvlink") for g in gpus):
        return Result()  # "false" would be computed from a failed answer
    return Result({key("gpu.nvlink"): Label(
        value="true" if active else "false",
        source="nvmlDeviceGetNvLinkState", rules=("true when any link of any GPU is active",))})
