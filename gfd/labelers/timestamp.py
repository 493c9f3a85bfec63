"""``gfd.timestamp``: the time the agent started (from options, never from a clock)."""

from __future__ import annotations

from gfd.labelers.base import Label, LabelDoc, Result, key
from gfd.labelers.options import LabelOptions
from gfd.snapshot import Snapshot

LABELS: tuple[LabelDoc, ...] = (
    LabelDoc(key="gfd.timestamp", value="Unix seconds", example="1724632719",
             source="clock, once at agent start", when="always, unless --no-timestamp",
             set="compat"),
)


def timestamp(snapshot: Snapshot, options: LabelOptions, /) -> Result:
    if options.timestamp is None:
        return Result()
    return Result({key("gfd.timestamp"): Label(
        value=str(options.timestamp), source="wall clock at agent start",
        rules=("Unix seconds; stable for the life of the process (--no-timestamp omits it)",),
    )})
