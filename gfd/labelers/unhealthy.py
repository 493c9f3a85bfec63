"""``gpu.unhealthy``: how many GPUs answered NVML with a fatal error (``GPU is lost``)."""

from __future__ import annotations

from gfd.facts.gpus import unhealthy as lost_gpus
from gfd.labelers.base import Label, LabelDoc, Result, key
from gfd.labelers.options import LabelOptions
from gfd.snapshot import Snapshot

LABELS: tuple[LabelDoc, ...] = (
    LabelDoc(key="gpu.unhealthy", value="integer", example="1",
             source="NVML: a GPU lost (GPU_IS_LOST, no handle), or a critical Xid or "
                    "GPU-unavailable event", when="at least one",
             set="extended"),
)


def unhealthy(snapshot: Snapshot, options: LabelOptions, /) -> Result:
    lost = lost_gpus(snapshot)
    if not lost:
        return Result()
    return Result({key("gpu.unhealthy"): Label(
        value=str(len(lost)), source="NVML per-GPU errors",
        raw="; ".join(f"GPU {g.index}: {g.error}" for g in lost),
        rules=("GPUs that answered a fatal error such as 'GPU is lost'",))})
