"""What a labeler is, the Label it produces (value plus provenance), and merge()."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from gfd.labelers.options import LabelOptions
from gfd.snapshot import Snapshot

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
