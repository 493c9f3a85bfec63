"""The one ordered list of labelers, and compute_labels(): snapshot + options -> labels.

The pipeline, not the labelers, applies the rules every label obeys: a labeler that
needs GPUs is skipped when the node has none (NVML down, or no GPU); with
``--label-set compat`` every label the catalogue marks ``extended`` is dropped; and only
the labels the catalogue documents for the node's resource manager (the snapshot's
``resource_manager``) are kept. Under ``dra`` the device plugin's inputs (the sharing
config, the MIG strategy) are set aside first, so no label carries ``-SHARED`` or a MIG
resource's values.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field, replace

from gfd.facts.gpus import has_gpus
from gfd.labelers.accelerator import KEY as ACCELERATOR_KEY
from gfd.labelers.accelerator import accelerator
from gfd.labelers.base import Label, Labeler, Result, flatten, merge
from gfd.labelers.catalog import EXCLUDED_KEYS, EXTENDED_KEY, rules
from gfd.labelers.clique import clique
from gfd.labelers.compute_mode import compute_mode
from gfd.labelers.device_counts import devices
from gfd.labelers.gpu import full_gpus
from gfd.labelers.inventory import models, present
from gfd.labelers.machine import machine
from gfd.labelers.mig import mig_capable, mig_extended, mig_resources
from gfd.labelers.mode import mode
from gfd.labelers.mps import mps_capable
from gfd.labelers.nvlink import nvlink
from gfd.labelers.options import LabelOptions
from gfd.labelers.power import power_limits
from gfd.labelers.timeslice import timeslice
from gfd.labelers.timestamp import timestamp
from gfd.labelers.unhealthy import unhealthy
from gfd.labelers.validate import Rejection, validate
from gfd.labelers.versions import versions
from gfd.labelers.vgpu import vgpu
from gfd.sharing import Sharing
from gfd.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class Step:
    """One labeler in the pipeline, and whether it runs only on a node with GPUs."""

    labeler: Labeler
    _: KW_ONLY
    needs_gpus: bool


# Order follows GFD's merge (docs/gfd-compatibility.md, "Merge order and heterogeneous
# nodes"): timestamp; machine, versions, mig.capable, sharing, resources (full GPUs, then
# MIG), mode, clique; vGPU; then gfd's extended set.
# A later labeler overwrites an earlier one for the same key.
LABELERS: tuple[Step, ...] = (
    Step(timestamp, needs_gpus=False),
    Step(machine, needs_gpus=True),
    Step(versions, needs_gpus=True),
    Step(mig_capable, needs_gpus=True),
    Step(mps_capable, needs_gpus=True),
    Step(full_gpus, needs_gpus=True),
    Step(mig_resources, needs_gpus=True),
    Step(mode, needs_gpus=True),
    Step(clique, needs_gpus=True),
    Step(vgpu, needs_gpus=False),
    Step(mig_extended, needs_gpus=True),
    Step(devices, needs_gpus=True),
    Step(models, needs_gpus=True),
    Step(accelerator, needs_gpus=True),
    Step(compute_mode, needs_gpus=True),
    Step(nvlink, needs_gpus=True),
    Step(power_limits, needs_gpus=True),
    Step(timeslice, needs_gpus=True),
    Step(unhealthy, needs_gpus=True),
    Step(present, needs_gpus=True),
)

SHARING_IGNORED = (
    "the sharing config ({source}) is ignored: the DRA driver hands out this node's GPUs "
    "(resource manager dra), so there are no device-plugin replicas to label; share GPUs "
    "through ResourceClaims, or remove the sharing section")


def for_manager(options: LabelOptions, manager: str) -> tuple[LabelOptions, tuple[str, ...]]:
    """The options the labelers see under a resource manager: under ``dra`` without the
    device plugin's sharing config and MIG strategy (and a warning when a sharing config
    is set aside): the catalogue's rules for that manager say whether they apply."""
    if rules(manager).device_plugin_options:
        return options, ()
    warnings: tuple[str, ...] = ()
    if options.sharing.strategy != "none" or options.sharing.resources:
        warnings = (SHARING_IGNORED.format(source=options.sharing.source or "sharing"),)
    return replace(options, mig_strategy="none", sharing=Sharing()), warnings


@dataclass(frozen=True, slots=True)
class Labelling:
    """The outcome of labelling one snapshot."""

    labels: dict[str, str]
    """Valid labels, sorted by key: what gets published."""
    explained: dict[str, Label]
    """Every computed label with its provenance (including rejected ones)."""
    rejected: tuple[Rejection, ...]
    warnings: tuple[str, ...]
    origin: dict[str, str] = field(default_factory=dict)
    """Each label's key -> the labeler module whose value it is (the last to set it):
    ``gfd explain`` says where it was computed, not where it may have been."""


def compute_labels(snapshot: Snapshot, options: LabelOptions, *,
                   labelers: tuple[Step, ...] = LABELERS) -> Labelling:
    """Run the labelers in order, merge, keep the resource manager's labels and the chosen
    label set, validate. Pure."""
    manager = snapshot.resource_manager.name
    options, notes = for_manager(options, manager)
    gpus = has_gpus(snapshot)
    results = [(step.labeler, step.labeler(snapshot, options)) for step in labelers
               if gpus or not step.needs_gpus]
    merged: Result = merge(result for _, result in results)
    origin = {k: labeler.__module__ for labeler, result in results for k in result.labels}
    excluded = EXCLUDED_KEYS[manager].fullmatch
    labels = {k: label for k, label in merged.labels.items() if not excluded(k)}
    if not options.extended:
        is_extended = EXTENDED_KEY.fullmatch
        labels = {k: label for k, label in labels.items() if not is_extended(k)}
    elif options.accelerator_label and ACCELERATOR_KEY in labels:
        # --accelerator-label KEY: gpu.accelerator again under the operator's key (extended).
        labels[options.accelerator_label] = labels[ACCELERATOR_KEY]
        origin[options.accelerator_label] = origin[ACCELERATOR_KEY]
    good, rejected = validate(flatten(labels))
    return Labelling(good, labels, rejected, notes + merged.warnings,
                     {k: origin[k] for k in labels if k in origin})
