"""The device plugin's sharing configuration (time-slicing / MPS) after GFD's normalisation.

Plain data shared by the config-file parser, the simulated machines and the labelers:
it lives below all three so none of them has to import another.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class SharedResource:
    """One entry of a device-plugin sharing section, after GFD's normalisation."""

    name: str
    """Full resource name, e.g. ``nvidia.com/gpu`` or ``nvidia.com/mig-1g.5gb``."""
    replicas: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Sharing:
    """The sharing settings that shape labels (GFD's rules, docs/gfd-compatibility.md)."""

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
