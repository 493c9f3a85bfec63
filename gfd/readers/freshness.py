"""When the NVML reader asks a GPU again: which facts each cycle, which only for a reason.

A GPU's static facts (identity, memory, compute capability, PCI identity, power-limit
constraints, NVLink, a settled fabric, MIG profile tables) cannot change while the GPU is
present, so they are read when the GPU is first seen and again only for a reason (a
:class:`Changes` mark from an NVML event, a new UUID at the index, an error, a GPU reset
seen as a MIG mode change, a reload, a new NVML session, or the full read every
:data:`FULL_READ_INTERVAL`). Each cycle reads only what can change silently
(:data:`CYCLE_FACTS`). docs/nvml-reads.md lists every fact and why.

A GPU that stops answering for a moment (a handle or UUID answered with anything but
GPU_IS_LOST) keeps its last known facts until :class:`Unanswered` says the failure has
lasted :data:`LOST_AFTER_READS` reads and :data:`LOST_AFTER_SECONDS` seconds.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from gfd.snapshot import Fabric

FULL_READ_INTERVAL = 3600.0
"""Seconds between two full reads of every GPU's static facts in one NVML session."""

LOST_AFTER_READS = 3
"""A GPU that answers nothing but errors (other than GPU_IS_LOST) is lost after this many
reads in a row ..."""
LOST_AFTER_SECONDS = 30.0
"""... spanning at least this many seconds (both must hold)."""

STATIC_FACTS = frozenset({"identity", "minor", "memory", "compute_capability", "architecture",
                          "brand", "pci", "power_limits", "nvlink", "fabric",
                          "addressing_mode"})
"""Facts (``snapshot.FACTS``) read when the GPU is first seen and then only for a reason."""

CYCLE_FACTS = ("uuid", "mig_mode", "compute_mode")
"""Asked every cycle of every GPU (with the device count and each index's handle); the MIG
devices too on a MIG-enabled GPU that is not registered for MIG-config events, and the
fabric while it is not settled."""


def fabric_settled(fabric: Fabric | None) -> bool:
    """True when the fabric state cannot move without a GPU reset: not supported (None or
    ``not-supported``), or registration completed with success. A fabric still starting
    (``not-started``, ``in-progress``) or completed with an error is asked every cycle."""
    if fabric is None or fabric.state == "not-supported":
        return True
    return fabric.state == "completed" and fabric.status_ok


class Changes:
    """What NVML events say changed, from the event thread to the reader (thread-safe).

    The event set records the GPUs registered for MIG-config events (``listening``) and each
    event's GPU (``changed``); the reader ``take``s both at the start of a read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listened: frozenset[str] = frozenset()
        self._stale: set[str] = set()
        self._relayout: set[str] = set()
        self._everything = False

    def listening(self, uuids: frozenset[str]) -> None:
        """These GPUs send MIG-config events from now on; the MIG devices of each are read
        once more (a change made before the registration sent no event)."""
        with self._lock:
            self._listened = uuids
            self._relayout |= uuids

    def stopped(self) -> None:
        """The event set is closed: no GPU's MIG layout can wait for an event."""
        with self._lock:
            self._listened = frozenset()

    def changed(self, uuid: str) -> None:
        """An event for this GPU ("": a device the set did not register: every GPU)."""
        with self._lock:
            if uuid:
                self._stale.add(uuid)
            else:
                self._everything = True

    def take(self) -> Taken:
        """The GPUs listened to, and the marks since the last take (which clears them)."""
        with self._lock:
            taken = Taken(listened=self._listened, stale=frozenset(self._stale),
                          relayout=frozenset(self._relayout), everything=self._everything)
            self._stale.clear()
            self._relayout.clear()
            self._everything = False
            return taken


@dataclass(frozen=True, slots=True)
class Taken:
    """One read's view of the events: see :meth:`Changes.take`."""

    listened: frozenset[str]
    """UUIDs of the GPUs registered for MIG-config events."""
    stale: frozenset[str]
    """UUIDs an event named since the last read: every fact of these is read again."""
    relayout: frozenset[str]
    """UUIDs registered since the last read: their MIG devices are read again."""
    everything: bool
    """An event named a device the set did not know: read every GPU afresh."""


@dataclass(frozen=True, slots=True)
class Streak:
    """A GPU's run of reads without an answer."""

    since: float
    reads: int


class Unanswered:
    """Counts, per GPU index, the reads in a row in which it did not answer."""

    def __init__(self, *, reads: int = LOST_AFTER_READS,
                 seconds: float = LOST_AFTER_SECONDS) -> None:
        self._reads = reads
        self._seconds = seconds
        self._streaks: dict[int, Streak] = {}

    def failed(self, index: int, now: float) -> Streak:
        """One more read without an answer; the streak so far."""
        old = self._streaks.get(index)
        streak = Streak(since=old.since if old else now, reads=(old.reads if old else 0) + 1)
        self._streaks[index] = streak
        return streak

    def lost(self, streak: Streak, now: float) -> bool:
        """True once the streak has lasted long enough to call the GPU lost."""
        return streak.reads >= self._reads and now - streak.since >= self._seconds

    def answered(self, index: int) -> None:
        self._streaks.pop(index, None)

    def forget_from(self, count: int) -> None:
        """Indices at or past ``count`` are gone: their streaks end."""
        for index in [i for i in self._streaks if i >= count]:
            del self._streaks[index]


__all__ = ["CYCLE_FACTS", "FULL_READ_INTERVAL", "LOST_AFTER_READS", "LOST_AFTER_SECONDS",
           "STATIC_FACTS", "Changes", "Streak", "Taken", "Unanswered", "fabric_settled"]
