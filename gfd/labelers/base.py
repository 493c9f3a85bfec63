"""What a labeler is, the Label it produces (value plus provenance), merge(), and LabelDoc:
the reference entry each area module declares for every label it computes."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from gfd.labelers.options import LabelOptions
from gfd.snapshot import RESOURCE_MANAGERS, Snapshot

PREFIX = "nvidia.com/"


@dataclass(frozen=True, slots=True, kw_only=True)
class Label:
    """One label value and where it came from (``gfd explain`` prints the provenance)."""

    value: str
    source: str = ""
    """What it was read from: an NVML call, a file, a config field."""
    raw: str = ""
    """The raw input before any rule was applied."""
    rules: tuple[str, ...] = ()
    """The rules applied to turn ``raw`` into ``value``, in order."""


@dataclass(frozen=True, slots=True)
class Result:
    """What a labeler returns: labels keyed by full key, and warnings for the log."""

    labels: dict[str, Label] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class LabelDoc:
    """One label in the reference (``docs/labels.md``), declared in the module computing it."""

    key: str
    """Key without ``nvidia.com/``; ``<R>`` is a resource (``gpu`` or ``mig-<profile>``),
    ``<model>`` a sanitised model name."""
    value: str
    example: str
    source: str
    when: str
    set: str
    """``compat`` (GFD's label, same rule) or ``extended`` (gfd's own)."""
    managers: tuple[str, ...] = RESOURCE_MANAGERS
    """The resource managers under which it is published (``device-plugin``, ``dra``): a
    label that describes a device-plugin resource (replicas, sharing, MIG strategy) is not
    published where the DRA driver hands out the GPUs. Under ``dra``, ``<R>`` is ``gpu``
    only: ``mig-<profile>`` resources exist only with the device plugin."""
    dra: str = ""
    """What the label means under ``dra`` where that differs from its ``value`` column."""
    module: str = ""
    """The labeler module(s) that compute it, short names joined with `` / ``
    (``gfd/labelers/<module>.py``). Left blank where declared: the catalogue fills it in
    from the modules whose ``LABELS`` list the entry."""


class Labeler(Protocol):
    """A labeler is one function: snapshot and options in, labels out. No I/O, no clock."""

    def __call__(self, snapshot: Snapshot, options: LabelOptions, /) -> Result: ...


def key(name: str) -> str:
    """The full label key for a name under ``nvidia.com/``."""
    return PREFIX + name


def merge(results: Iterable[Result]) -> Result:
    """Fold results in order; a later labeler overwrites an earlier one for the same key."""
    labels: dict[str, Label] = {}
    warnings: list[str] = []
    for result in results:
        labels.update(result.labels)
        warnings.extend(result.warnings)
    return Result(labels, tuple(warnings))


def flatten(labels: dict[str, Label]) -> dict[str, str]:
    """Plain ``key -> value`` labels, sorted by key."""
    return {k: labels[k].value for k in sorted(labels)}
