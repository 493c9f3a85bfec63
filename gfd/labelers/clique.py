"""``gpu.clique``: ``<cluster UUID>.<clique id>`` of fabric-attached GPUs (multi-node NVLink)."""

from __future__ import annotations

from gfd.facts.gpus import counted
from gfd.labelers.base import Label, LabelDoc, Result, key
from gfd.labelers.options import LabelOptions
from gfd.snapshot import Fabric, Snapshot

_ZERO_UUID = "00000000-0000-0000-0000-000000000000"

LABELS: tuple[LabelDoc, ...] = (
    LabelDoc(key="gpu.clique", value="`<cluster UUID>.<clique id>`",
             example="7b968a6d-c8aa-45e1-9e07-e1e51be99c31.1",
             source="nvmlDeviceGetGpuFabricInfo",
             when="fabric-attached GPUs agreeing on one clique", set="compat"),
)


def attached(fabric: Fabric | None) -> bool:
    return (
        fabric is not None
        and fabric.state == "completed"
        and fabric.status_ok
        and fabric.cluster_uuid.replace("-", "").strip("0") != ""
    )


def clique(snapshot: Snapshot, options: LabelOptions, /) -> Result:
    if any(g.error is None and g.unknown("fabric") for g in counted(snapshot)):
        return Result()  # a GPU's fabric membership is unknown: the clique cannot be told
    ids = {
        f"{g.fabric.cluster_uuid}.{g.fabric.clique_id}"
        for g in counted(snapshot)
        if g.fabric is not None and attached(g.fabric)
    }
    if not ids:
        return Result()
    if len(ids) > 1:
        return Result(warnings=(
            f"GPUs report different fabric cliques ({', '.join(sorted(ids))}): "
            "no gpu.clique label",
        ))
    (value,) = ids
    return Result({key("gpu.clique"): Label(
        value=value, source="nvmlDeviceGetGpuFabricInfo", raw=value,
        rules=("fabric state completed, status success, non-zero cluster UUID; "
               "one cluster UUID and clique id across GPUs",),
    )})
