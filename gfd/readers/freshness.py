"""When the NVML reader asks a GPU again: which facts each cycle, which only for a reason.

Each cycle asks what can change on a running node without a signal gfd is sure to get
(:data:`CYCLE_FACTS`), whether or not NVML events are registered: an event makes a change
visible sooner, never the interval blind (a driver may take the registration and never send
a MigConfigChange). A GPU's static facts (:data:`STATIC_FACTS`, and the MIG profile tables)
cannot change without a restart of the NVML session or an event, so they are read when the
GPU is first seen and again only for a reason (a :class:`Changes` mark from an NVML event, a
new UUID at the index, an error, a GPU reset seen as a MIG mode change, a fabric state that
moved, a reload, a new NVML session, or the full read every :data:`FULL_READ_INTERVAL`).
docs/nvml-reads.md lists every fact and why it is asked or held.

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
"""Facts (``snapshot.FACTS``) read when the GPU is first seen and then only for a reason.
Why each is held (docs/nvml-reads.md, "Held"): name, memory, compute capability, brand, PCI
bus id and the power-limit constraints are the board's (another board is another UUID; a
VBIOS flash or an ECC mode change needs the driver unloaded, a GPU reset or a reboot, none
of which an open NVML session outlives); NVLinks are trained when the driver starts the GPU
or by the fabric manager as it registers it (read again when the fabric state moves), and
one that goes down raises Xid 74; a settled fabric holds until a GPU reset; minor,
architecture and addressing mode are read only by ``gfd devices`` and ``gfd snapshot``."""

CYCLE_FACTS = ("uuid", "mig_mode", "compute_mode", "mig_devices")
"""Asked every cycle of every GPU (with the device count and each index's handle), events or
not: the MIG devices of a MIG-enabled GPU as a check, one call per empty slot and two per
device (``nvmlmig.unchanged``), read in full when it shows a change; the fabric too while it
is not settled."""


def fabric_settled(fabric: Fabric | None) -> bool:
    """True when the fabric state cannot move without a GPU reset: not supported (None or
    ``not-supported``), or registration completed with success. A fabric still starting
    (``not-started``, ``in-progress``) or completed with an error is asked every cycle."""
    if fabric is None or fabric.state == "not-supported":
        return True
    return fabric.state == "completed" and fabric.status_ok


class Changes:
    """What NVML events say changed, from the event thread to the reader (thread-safe).

    The event set records each event's GPU (``changed``); the reader ``take``s the marks at
    the start of a read. The marks only make a read come sooner and ask more: what a read asks
    every cycle does not depend on whether events are registered or arrive (a driver may
    accept the registration and never send a MigConfigChange)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stale: set[str] = set()
        self._everything = False

    def changed(self, uuid: str) -> None:
        """An event for this GPU ("": a device the set did not register: every GPU)."""
        with self._lock:
            if uuid:
                self._stale.add(uuid)
            else:
                self._everything = True

    def take(self) -> Taken:
        """The marks since the last take (which clears them)."""
        with self._lock:
            taken = Taken(stale=frozenset(self._stale), everything=self._everything)
            self._stale.clear()
            self._everything = False
            return taken


@dataclass(frozen=True, slots=True)
class Taken:
    """One read's view of the events: see :meth:`Changes.take`."""

    stale: frozenset[str]
    """UUIDs an event named since the last read: every fact of these is read again."""
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
