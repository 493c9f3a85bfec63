"""``gpu.timeslice``: the compute-policy timeslice, when every GPU reports the same one."""

from __future__ import annotations

from gfd.facts.gpus import healthy
from gfd.labelers.base import Label, LabelDoc, Result, key
from gfd.labelers.options import LabelOptions
from gfd.snapshot import Snapshot

LABELS: tuple[LabelDoc, ...] = (
    LabelDoc(key="gpu.timeslice", value="`default` / `short` / `medium` / `long`",
             example="default", source="nvidia-smi compute-policy --list",
             when="every GPU reports the same policy", set="extended"),
)


def timeslice(snapshot: Snapshot, options: LabelOptions, /) -> Result:
    policies = {g.timeslice for g in healthy(snapshot)}
    if len(policies) != 1 or None in policies:
        return Result()
    return Result({key("gpu.timeslice"): Label(
        value=str(next(iter(policies))), source="nvidia-smi compute-policy --list",
        rules=("present when every GPU reports the same timeslice policy",))})
