"""GPU events: a thread waiting on the GPU back end's event set (NVML events), so a MIG
reconfiguration or a GPU that fails is labelled at once instead of at the next poll.

Each event becomes a :class:`~gfd.triggers.Trigger`. An Xid in :data:`CRITICAL_XIDS` and a
"GPU unavailable" event also carry an action that marks the GPU unusable: from then on it
is counted in ``gpu.unhealthy`` and left out of the resource labels, like a GPU NVML reports
lost, until gfd restarts (the device plugin keeps such a GPU unhealthy until it restarts
too). Other Xids (application faults such as 13, 31, 43) change no label and are only
logged at debug level.

Without events -- a back end that has none, a GPU or driver that does not support them, an
event set that cannot be created -- nothing changes but the latency: the loop's polling
interval still catches every change.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from gfd.backoff import backoff
from gfd.errors import GfdError
from gfd.logs import Once
from gfd.triggers import Fire, Trigger, died

log = logging.getLogger(__name__)

CRITICAL_XIDS: dict[int, str] = {
    48: "double-bit ECC error",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
}
"""Xids after which a GPU is not fit for new work (NVIDIA's Xid catalog,
docs.nvidia.com/deploy/xid-errors: each needs at least a GPU reset, or a drain)."""

WAIT = 10.0
"""Seconds per wait on the event set: one NVML call per wait while idle (360 an hour), and
the longest ``close()`` leaves the thread running before it notices."""
RETRY_CAP = 300.0
"""Longest pause before trying to open the event set again after a failure."""


class GpuEvent(Protocol):
    """One event from the back end (``readers.nvml.NvmlEvent``)."""

    @property
    def kind(self) -> str:
        """``mig-config-change``, ``xid`` or ``gpu-unavailable``."""
        ...

    @property
    def gpu_uuid(self) -> str: ...

    @property
    def gpu_index(self) -> int | None: ...

    @property
    def data(self) -> int:
        """The Xid for ``xid``."""
        ...


class EventSource(Protocol):
    """An event set over the node's GPUs (``readers.nvml.NvmlEvents``), used by one thread."""

    def open(self) -> dict[str, frozenset[str]]:
        """Register every GPU for the kinds it supports: GPU uuid -> kinds registered."""
        ...

    def wait(self, timeout: float) -> GpuEvent | None:
        """The next event, or None after ``timeout`` seconds without one."""
        ...

    def close(self) -> None: ...


MarkUnusable = Callable[[str, str], None]
"""``mark(gpu_uuid, reason)``: count this GPU unhealthy from the next read on."""


def trigger_for(event: GpuEvent, mark: MarkUnusable, at: float) -> Trigger | None:
    """The trigger an event fires; None for an event that changes no label."""
    where = f"GPU {event.gpu_index if event.gpu_index is not None else '?'} ({event.gpu_uuid})"
    if event.kind == "xid":
        what = CRITICAL_XIDS.get(event.data)
        if what is None:
            log.debug("%s: Xid %d: not one that makes a GPU unusable", where, event.data)
            return None
        reason = f"Xid {event.data} ({what})"
    elif event.kind == "gpu-unavailable":
        reason = "GPU unavailable (NVML event)"
    else:
        return Trigger(source="nvml", kind=event.kind, at=at, detail=where)

    def action() -> None:
        log.warning("%s: %s: counted unhealthy until gfd restarts", where, reason)
        mark(event.gpu_uuid, reason)

    return Trigger(source="nvml", kind=event.kind, at=at, action=action,
                   detail=f"{where}: {reason}")


class GpuEventWatch:
    """Waits on an :class:`EventSource` in a daemon thread and fires a trigger per event."""

    def __init__(self, source: EventSource, fire: Fire, mark: MarkUnusable, *,
                 clock: Callable[[], float] = time.monotonic, wait: float = WAIT) -> None:
        self._source = source
        self._fire = fire
        self._mark = mark
        self._clock = clock
        self._wait = wait
        self._stop = threading.Event()
        self._problems = Once(log)
        self._thread = threading.Thread(target=self._run, name="gfd-gpu-events", daemon=True)

    def start(self) -> GpuEventWatch:
        self._thread.start()
        return self

    def close(self) -> None:
        """Ask the thread to stop; it closes the event set when its current wait ends (at most
        ``wait`` seconds: an NVML wait cannot be interrupted)."""
        self._stop.set()

    def join(self, timeout: float) -> bool:
        """For tests: True once the thread has ended."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        try:
            self._serve()
        except Exception as exc:  # a watcher that dies says so; the loop's polling remains
            log.error("NVML event watch stopped: %s: %s; changes are seen at the next poll",
                      type(exc).__name__, exc)
            log.debug("NVML event watch failure", exc_info=True)
            try:
                self._source.close()
            except Exception:  # already failing: the first error is the one said
                pass
            self._fire(died("nvml", exc, self._clock()))

    def _serve(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                registered = self._source.open()
            except GfdError as exc:
                failures += 1
                self._problems.warning("NVML events unavailable: %s; changes are seen at the "
                                       "next poll", exc, key="open")
                self._stop.wait(backoff(failures, RETRY_CAP))
                continue
            if not any(registered.values()):
                self._source.close()
                log.info("no GPU offers NVML events; changes are seen at the next poll")
                return
            kinds = sorted({k for ks in registered.values() for k in ks})
            log.info("NVML events: %d of %d GPUs registered (%s)",
                     sum(1 for ks in registered.values() if ks), len(registered),
                     ", ".join(kinds))
            failed = self._listen()
            self._source.close()
            if failed:
                failures += 1
                self._stop.wait(backoff(failures, RETRY_CAP))
            else:
                return

    def _listen(self) -> bool:
        """Wait and fire until stopped (False) or the event set fails (True)."""
        while not self._stop.is_set():
            try:
                event = self._source.wait(self._wait)
            except GfdError as exc:
                self._problems.warning("waiting for NVML events failed: %s; opening the "
                                       "event set again", exc, key="wait")
                return True
            if event is None or self._stop.is_set():
                continue
            trigger = trigger_for(event, self._mark, self._clock())
            if trigger is not None:
                self._fire(trigger)
        return False
