"""``gfd.timestamp``: the time the agent started (from options, never from a clock)."""

from __future__ import annotations

from gfd.labelers.base import Label, Result, key
from gfd.labelers.options import LabelOptions
from gfd.snapshot import Snapshot


def timestamp(snapshot: Snapshot, options: LabelOptions, /) -> Result:
    if options.timestamp is None:
        return Result()
    return Result({key("gfd.timestamp"): Label(
        value=str(options.timestamp), source="wall clock at agent start",
        rules=("Unix seconds; stable for the life of the process (--no-timestamp omits it)",),
    )})
