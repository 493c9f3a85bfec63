"""``gpu.accelerator``: a lowercase slug of the primary model (``nvidia-tesla-t4``)."""

from __future__ import annotations

from gfd.facts.gpus import PRIMARY_RULE, model_groups
from gfd.facts.naming import accelerator_slug, sanitise
from gfd.labelers.base import Label, LabelDoc, Result, key
from gfd.labelers.options import LabelOptions
from gfd.snapshot import Snapshot

KEY = key("gpu.accelerator")

LABELS: tuple[LabelDoc, ...] = (
    LabelDoc(key="gpu.accelerator", value="lowercase slug, `nvidia-` prefixed",
             example="nvidia-tesla-t4", source="nvmlDeviceGetName (primary model)",
             when="GPUs present (also under --accelerator-label KEY)", set="extended"),
)


def accelerator(snapshot: Snapshot, options: LabelOptions, /) -> Result:
    groups = model_groups(snapshot)
    if not groups:
        return Result()
    primary = groups[0].name
    if not sanitise(primary):  # a name with nothing labelable: no slug to write
        return Result()
    return Result({KEY: Label(value=accelerator_slug(primary), source="nvmlDeviceGetName",
                              raw=primary,
                              rules=(PRIMARY_RULE, "lowercase slug, 'nvidia-' prefix"))})
