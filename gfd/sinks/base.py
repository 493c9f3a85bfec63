"""The Sink protocol, PublishResult, and the label diff every sink reports."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from gfd.features import Features
from gfd.triggers import Fire


@dataclass(frozen=True, slots=True)
class Change:
    """What differs between two label sets, as sorted keys."""

    added: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    previous: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    """The values the target held for the changed and removed keys, as read there (what
    an Event's ``old -> new`` shows, even for the first change an agent makes)."""

    @property
    def empty(self) -> bool:
        return not (self.added or self.changed or self.removed)

    def summary(self) -> str:
        return f"+{len(self.added)} ~{len(self.changed)} -{len(self.removed)}"


def diff(old: Mapping[str, str], new: Mapping[str, str]) -> Change:
    """Keys added, changed and removed going from ``old`` to ``new``."""
    changed = tuple(sorted(k for k in new if k in old and old[k] != new[k]))
    removed = tuple(sorted(k for k in old if k not in new))
    return Change(
        added=tuple(sorted(k for k in new if k not in old)),
        changed=changed,
        removed=removed,
        previous=tuple((k, old[k]) for k in (*changed, *removed)),
    )


@dataclass(frozen=True, slots=True)
class PublishResult:
    """The outcome of one publish: whether the target was written, what changed, and the
    label keys the target refused this time (their published values were kept)."""

    written: bool
    change: Change = field(default_factory=Change)
    rejected: tuple[str, ...] = ()
    features: Change = field(default_factory=Change)
    """The feature elements (flat names, ``features.flatten``) the write added, changed or
    removed; empty at a target that carries no features."""


class Sink(Protocol):
    """A publish target. Sinks never see GPUs: only sorted ``key -> value`` labels."""

    name: str
    """The kind of target (``file``, ``stdout``, ``node``, ``nodefeature``): metrics and logs
    label by it."""

    @property
    def where(self) -> str:
        """The target itself, for a message: ``feature file /etc/.../gfd``, ``Node n1``."""
        ...

    def publish(self, labels: dict[str, str], *,
                features: Features | None = None) -> PublishResult:
        """Make the target hold exactly these labels (as far as gfd owns them); ``features``:
        the projection's features, for a target that carries them (the NodeFeature; None:
        none given), else ignored."""
        ...

    def published(self, also: Collection[str] = ()) -> dict[str, str]:
        """What gfd has published at the target now (reads it; for ``gfd diff``), and the
        current values of the keys in ``also`` where others may hold them (the Node)."""
        ...

    def published_features(self) -> dict[str, str] | None:
        """gfd's features at the target now, flat (``features.flatten``; reads it, for
        ``gfd diff``); None for a target that carries no features."""
        ...

    def prune(self) -> PublishResult:
        """Remove everything gfd published there (``gfd prune``)."""
        ...

    def refresh(self) -> None:
        """Write the target again at the next publish even if labels are unchanged: the
        loop's periodic duty (API resync that heals drift, feature-file expiry refresh)."""
        ...

    def watch(self, fire: Fire) -> None:
        """Start watching the target: ``fire`` a trigger when someone else changes what gfd
        published there, so the next cycle repairs it (``close()`` stops watching)."""
        ...

    def close(self) -> None:
        """Release what the sink holds (API connections, watchers); published labels stay."""
        ...
