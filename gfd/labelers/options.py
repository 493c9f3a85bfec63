"""LabelOptions: everything besides the snapshot that decides labels (strategy, sharing, set)."""

from __future__ import annotations

from dataclasses import dataclass, field

MIG_STRATEGIES = ("none", "single", "mixed")
LABEL_SETS = ("compat", "extended")
SHARING_STRATEGIES = ("none", "time-slicing", "mps")


@dataclass(frozen=True, slots=True, kw_only=True)
class SharedResource:
    """One entry of a device-plugin sharing section, after GFD's normalisation."""

    name: str
    """Full resource name, e.g. ``nvidia.com/gpu`` or ``nvidia.com/mig-1g.5gb``."""
    replicas: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Sharing:
    """The sharing settings that shape labels (GFD's rules, reference §6.4)."""

    strategy: str = "none"
    """The active strategy: ``mps`` / ``time-slicing`` / ``none``."""
    rename_by_default: bool = False
    """Renamed resources never get the ``-SHARED`` product suffix."""
    resources: tuple[SharedResource, ...] = ()
    """Entries of the section that supplies replicas (MPS when present, else time-slicing)."""
    source: str = ""
    """Where this came from (``config file F: sharing.timeSlicing``), for ``explain``."""

    def replicas(self, resource: str) -> int:
        """Replicas for a resource name: the matching entry's, else 1."""
        for entry in self.resources:
            if entry.name == resource:
                return entry.replicas
        return 1


@dataclass(frozen=True, slots=True, kw_only=True)
class LabelOptions:
    """Inputs to labelers other than the snapshot; built once by the CLI from flags and config."""

    mig_strategy: str = "none"
    """``none`` / ``single`` / ``mixed`` (GFD's --mig-strategy)."""
    sharing: Sharing = field(default_factory=Sharing)
    label_set: str = "extended"
    """``compat`` (exactly GFD's labels) or ``extended`` (plus gfd's own)."""
    timestamp: int | None = None
    """Value of ``gfd.timestamp`` (taken once at start); None with --no-timestamp."""
    accelerator_label: str | None = None
    """Extra key to mirror ``gpu.accelerator`` under (e.g. ``accelerator``)."""

    @property
    def extended(self) -> bool:
        return self.label_set == "extended"
