"""``gpu.machine``: the sanitised DMI product name from --machine-type-file."""

from __future__ import annotations

from gfd.facts.naming import sanitise
from gfd.labelers.base import Label, LabelDoc, Result, key
from gfd.labelers.options import LabelOptions
from gfd.snapshot import Snapshot

LABELS: tuple[LabelDoc, ...] = (
    LabelDoc(key="gpu.machine", value="sanitised DMI product name, `unknown` if unreadable",
             example="DGX-H100", source="--machine-type-file", when="GPUs present",
             set="compat"),
)


def machine(snapshot: Snapshot, options: LabelOptions, /) -> Result:
    raw = snapshot.machine_type
    if raw is None:
        label = Label(value="unknown", source="machine-type file",
                      rules=("file unreadable or not set: 'unknown'",))
    else:
        label = Label(value=sanitise(raw.strip()), source="machine-type file", raw=raw,
                      rules=("trim whitespace", "sanitise"))
    return Result({key("gpu.machine"): label})
