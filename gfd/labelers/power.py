"""``gpu.power.limit.min`` / ``gpu.power.limit.max``: the power limits, in milliwatts, that
every GPU of the node accepts (nvmlDeviceGetPowerManagementLimitConstraints).

On a node whose GPUs differ, the range is the one every GPU accepts: the largest of their
minimums and the smallest of their maximums. A power setting a selector validates against
it is then valid on whichever GPU the workload gets, the way ``gpu.memory.min`` holds for
every GPU. Both keys are left out when any GPU does not answer the query (not supported,
a driver without the call, an error with no earlier value) or when no limit suits them all.
"""

from __future__ import annotations

from gfd.facts.gpus import healthy
from gfd.labelers.base import Label, LabelDoc, Result, key
from gfd.labelers.options import LabelOptions
from gfd.snapshot import Snapshot

SOURCE = "nvmlDeviceGetPowerManagementLimitConstraints"

LABELS: tuple[LabelDoc, ...] = (
    LabelDoc(key="gpu.power.limit.min", value="milliwatts", example="100000", source=SOURCE,
             when="every GPU reports its power limit range (not on vfio or Tegra)",
             set="extended"),
    LabelDoc(key="gpu.power.limit.max", value="milliwatts", example="400000", source=SOURCE,
             when="every GPU reports its power limit range (not on vfio or Tegra)",
             set="extended"),
)


def power_limits(snapshot: Snapshot, options: LabelOptions, /) -> Result:
    gpus = healthy(snapshot)
    if not gpus:
        return Result()
    missing = [g.index for g in gpus if g.power_limits_mw is None]
    if missing:
        if any(g.unknown("power_limits") for g in gpus):
            return Result(warnings=(
                f"gpu.power.limit.* left out: the power limits of GPU(s) "
                f"{', '.join(map(str, missing))} are unknown",))
        return Result()  # not supported here: nothing a selector could rely on
    ranges = [g.power_limits_mw for g in gpus if g.power_limits_mw is not None]
    low = max(r[0] for r in ranges)
    high = min(r[1] for r in ranges)
    raw = ", ".join(f"GPU {g.index}: {g.power_limits_mw[0]}-{g.power_limits_mw[1]}"
                    for g in gpus if g.power_limits_mw is not None)
    if low > high:
        return Result(warnings=(
            f"gpu.power.limit.* left out: no power limit suits every GPU ({raw} mW)",))
    return Result({
        key("gpu.power.limit.min"): Label(
            value=str(low), source=SOURCE, raw=raw,
            rules=("the largest of the GPUs' minimum limits, mW",)),
        key("gpu.power.limit.max"): Label(
            value=str(high), source=SOURCE, raw=raw,
            rules=("the smallest of the GPUs' maximum limits, mW",)),
    })
