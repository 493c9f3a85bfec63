"""The one ordered list of labelers, and compute_labels(): snapshot + options -> labels.

Order follows GFD's merge (reference §4.1): timestamp; machine, versions, mig.capable,
sharing, resources (full GPUs, then MIG), mode, clique; vGPU; then gfd's extended set.
"""

from __future__ import annotations

from dataclasses import dataclass

from gfd.labelers.base import Label, Labeler, Result, flatten, merge
from gfd.labelers.clique import clique
from gfd.labelers.extended import extended
from gfd.labelers.gpu import full_gpus
from gfd.labelers.machine import machine
from gfd.labelers.mig import mig_capable, mig_extended, mig_resources
from gfd.labelers.mode import mode
from gfd.labelers.options import LabelOptions
from gfd.labelers.sharing import mps_capable
from gfd.labelers.timestamp import timestamp
from gfd.labelers.validate import Rejection, validate
from gfd.labelers.versions import versions
from gfd.labelers.vgpu import vgpu
from gfd.snapshot import Snapshot

LABELERS: tuple[Labeler, ...] = (
    timestamp,
    machine,
    versions,
    mig_capable,
    mps_capable,
    full_gpus,
    mig_resources,
    mode,
    clique,
    vgpu,
    mig_extended,
    extended,
)


@dataclass(frozen=True, slots=True)
class Labelling:
    """The outcome of labelling one snapshot."""

    labels: dict[str, str]
    """Valid labels, sorted by key: what gets published."""
    explained: dict[str, Label]
    """Every computed label with its provenance (including rejected ones)."""
    rejected: tuple[Rejection, ...]
    warnings: tuple[str, ...]


def compute_labels(snapshot: Snapshot, options: LabelOptions) -> Labelling:
    """Run every labeler in order, merge, validate. Pure: no I/O, no clock."""
    merged: Result = merge(labeler(snapshot, options) for labeler in LABELERS)
    good, rejected = validate(flatten(merged.labels))
    return Labelling(good, merged.labels, rejected, merged.warnings)
