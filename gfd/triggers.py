"""What wakes the agent loop besides its timer: a change seen by a watcher.

Watchers run in their own threads (NVML events, the config file, the feature file's
directory, a watch on gfd's object at the API server, the kubelet's plugin registry). They
never touch the agent's state: each hands the loop a :class:`Trigger`, and the loop runs the
trigger's ``action`` (if any) on its own thread, then one label cycle for every trigger
that arrived within the coalescing window.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

SOURCES = ("nvml", "config", "output", "api", "registry")
"""Where triggers come from (the ``source`` label of ``gfd_events_total``)."""


@dataclass(frozen=True, slots=True)
class Trigger:
    """One change a watcher saw."""

    source: str
    """One of :data:`SOURCES`."""
    kind: str
    """What happened, e.g. ``mig-config-change``, ``xid``, ``changed``, ``drift``."""
    at: float
    """``time.monotonic()`` when the watcher saw it (event-to-publish latency starts here)."""
    action: Callable[[], None] | None = None
    """Run on the loop's thread before the cycle (e.g. mark a GPU unusable after an Xid)."""
    detail: str = ""
    """For the debug log: which GPU, file or object."""
    reload_config: bool = False
    """The config file may have changed: re-read it in this cycle."""


Fire = Callable[[Trigger], None]
"""How a watcher hands a trigger to the loop (thread-safe)."""

WATCHER_DIED = "watcher-died"
"""The ``kind`` of the trigger a watcher's thread fires as it dies of an unexpected error:
the loop counts it (``gfd_watcher_failures_total``) and its duty returns to polling (the
config file is then checked every cycle)."""


def died(source: str, why: BaseException, at: float) -> Trigger:
    """The trigger for a watcher of ``source`` that died of ``why``: it also asks for the
    config to be read at once (the change it was there to see may be what killed it)."""
    return Trigger(source=source, kind=WATCHER_DIED, at=at,
                   detail=f"{type(why).__name__}: {why}", reload_config=source == "config")
