"""``gpu.compute-mode``: the NVML compute mode, when every GPU agrees."""

from __future__ import annotations

from gfd.facts.gpus import healthy
from gfd.labelers.base import Label, LabelDoc, Result, key
from gfd.labelers.options import LabelOptions
from gfd.snapshot import Snapshot

LABELS: tuple[LabelDoc, ...] = (
    LabelDoc(key="gpu.compute-mode", value="`default` / `exclusive-process` / `prohibited`",
             example="default", source="nvmlDeviceGetComputeMode", when="all GPUs agree",
             set="extended"),
)


def compute_mode(snapshot: Snapshot, options: LabelOptions, /) -> Result:
    modes = {g.compute_mode for g in healthy(snapshot)}
    if len(modes) != 1 or None in modes:
        return Result()
    return Result({key("gpu.compute-mode"): Label(
        value=str(next(iter(modes))), source="nvmlDeviceGetComputeMode",
        rules=("present when all GPUs agree",))})
