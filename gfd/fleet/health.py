"""How complete and current a view of the fleet is: per collection read (nodes, pods,
resourceslices, resourceclaims, deviceclasses), whether its first LIST is in, whether it is
refused or failing now, and how often its watch restarted; and when the view's numbers last
changed. Plain values: the served view keeps them, the metrics and the page show them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Collection:
    name: str
    """``nodes``, ``pods``, ``resourceslices``, ``resourceclaims`` or ``deviceclasses``."""
    synced: bool = False
    """Its first LIST is in."""
    refused: str = ""
    """One line while its LIST or WATCH is refused or failing ("" when it is not)."""
    restarts: int = 0
    """Watch restarts (a dropped connection, a 410 Gone relist) since the start."""
    relists: int = 0
    """LISTs after the first (a watch that expired: 410 Gone)."""

    @property
    def current(self) -> bool:
        return self.synced and not self.refused


@dataclass(frozen=True, slots=True, kw_only=True)
class ViewHealth:
    collections: tuple[Collection, ...]
    last_change: float = 0.0
    """Unix seconds of the last change to the view's numbers (0: none yet)."""

    @property
    def complete(self) -> bool:
        """Every collection synced and none refused or failing."""
        return bool(self.collections) and all(c.current for c in self.collections)

    @property
    def ready(self) -> bool:
        """Every collection's first LIST is in."""
        return bool(self.collections) and all(c.synced for c in self.collections)
