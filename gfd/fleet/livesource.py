"""The view ``gfd fleet --watch`` prints and ``gfd fleet --serve`` serves: the one-shot kept
current. The five paginated LISTs once, in the one-shot's order, counted by ``count()``
itself; then a WATCH per collection from its listing (``gfd.kube.reflector``: bookmarks on; a
watch that expires lists that collection alone again; a broken one reconnects within gfd's
backoff), each event applied to the held fleet (``gfd.fleet.live``: the node(s) it touches
recounted, their kinds adjusted). A ``ViewSource``: ``read()`` hands out a snapshot of the
view (taken briefly under the lock that changes take; the findings worked out outside it,
once per generation), which changes leave as it is, so readers never hold the watches up;
``wait()`` wakes on a new generation.

What the view says of itself (``View.health``, and the document's ``incomplete``): every
collection whose first LIST is not in yet, or whose LIST or WATCH is refused or failing now,
is one line; while any is, the view is incomplete (``complete: false``) and shows the last
known state of that collection, never a half-read one (a relist is put in place whole, or not
at all)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from gfd.fleet.checks import check
from gfd.fleet.count import count
from gfd.fleet.health import Collection, ViewHealth
from gfd.fleet.live import RESOURCES, LiveFleet, Resource, stage
from gfd.fleet.model import Fleet
from gfd.fleet.placement import DEFAULT_TOLERATED
from gfd.fleet.source import READS, UNFINISHED
from gfd.fleet.view import View
from gfd.kube.lists import Lister
from gfd.kube.reflector import BACKOFF_CAP, WATCH_TIMEOUT, Reflector, State

PATHS = dict(READS)


def not_read(resource: str) -> str:
    return f"list {resource}: not read yet"


class LiveSource:
    """The live view over ``lister``'s API server (``node_selector``: only those Nodes, as
    ``gfd fleet -l``). ``start()`` reads and watches on threads of its own and returns at once;
    ``stop()`` ends them. ``checks``: the view carries ``--check``'s findings (worked out
    when a changed view is first read)."""

    def __init__(self, lister: Lister, *, node_selector: str = "",
                 tolerated: tuple[str, ...] = DEFAULT_TOLERATED, checks: bool = True,
                 watch_timeout: float = WATCH_TIMEOUT, backoff_cap: float = BACKOFF_CAP,
                 backoff_start: float = 1.0, clock: Callable[[], float] = time.time) -> None:
        self.lister = lister
        self.checks = checks
        self._clock = clock
        self._live = LiveFleet(source=lister.server, selected=bool(node_selector),
                               tolerated=tolerated)
        self._cond = threading.Condition(threading.RLock())
        self._making = threading.Lock()
        """Held while a view is made: readers of one generation share one."""
        self._reflectors = [
            Reflector(lister, resource, PATHS[resource], self,
                      field_selector=UNFINISHED if resource == "pods" else "",
                      label_selector=node_selector if resource == "nodes" else "",
                      watch_timeout=watch_timeout, backoff_cap=backoff_cap,
                      backoff_start=backoff_start)
            for resource in RESOURCES]
        self._states: dict[str, State] = {r: State() for r in RESOURCES}
        self._generation = 0
        self._last_change = 0.0
        self._view: View | None = None
        self._stopped = threading.Event()
        self._starter: threading.Thread | None = None
        self._live.set_incomplete([not_read(r) for r in RESOURCES])

    # ------------------------------------------------------------------ control

    def start(self) -> None:
        """Read every collection (on a thread: this returns at once), count, then watch."""
        with self._cond:
            if self._starter is not None:
                return
            self._starter = threading.Thread(target=self._start, name="gfd-fleet-start",
                                             daemon=True)
            self._starter.start()

    def _start(self) -> None:
        for reflector in self._reflectors:
            if self._stopped.is_set():
                return
            reflector.list()
        with self._cond:
            self._live.build()
            self._bump(numbers=True)
        for reflector in self._reflectors:
            if not self._stopped.is_set():
                reflector.start()

    def stop(self) -> None:
        """End every watch and wake every waiter."""
        self._stopped.set()
        for reflector in self._reflectors:
            reflector.close()
        with self._cond:
            self._cond.notify_all()

    @property
    def settled(self) -> bool:
        """Every collection's first LIST was tried, and everything read is counted."""
        with self._cond:
            return self._live.built

    def wait_settled(self, timeout: float) -> bool:
        """Wait until ``settled`` (or ``stop()``); whether it is."""
        with self._cond:
            self._cond.wait_for(lambda: self._live.built or self._stopped.is_set(), timeout)
            return self._live.built

    # ------------------------------------------------------------------ the ViewSource

    @contextmanager
    def read(self) -> Iterator[View]:
        yield self._current()

    def wait(self, after: int, timeout: float) -> int:
        with self._cond:
            self._cond.wait_for(lambda: self._generation > after or self._stopped.is_set(),
                                timeout)
            return self._generation

    @property
    def health(self) -> ViewHealth:
        with self._cond:
            return ViewHealth(
                collections=tuple(Collection(name=r, synced=s.synced, refused=s.problem,
                                             restarts=s.restarts, relists=s.relists)
                                  for r, s in self._states.items()),
                last_change=self._last_change)

    @property
    def generation(self) -> int:
        return self._generation

    def resource_versions(self) -> dict[str, str]:
        """Per collection, the resourceVersion of the last listing or event applied (what a
        test or a benchmark waits for: a write at that version or before is in the view)."""
        return {r.resource: r.resource_version for r in self._reflectors}

    def _current(self) -> View:
        """The view of the current generation: made by the first reader that asks for it
        (the snapshot under the lock, the findings after it), shared by the others."""
        with self._making:
            with self._cond:
                view = self._view
                if view is not None and view.generation == self._generation:
                    return view
                generation, health = self._generation, self.health
                built = self._live.built
                if built:
                    fleet, counted = self._live.view()
                else:
                    fleet = Fleet(nodes={}, pods=[], slices=[], claims={},
                                  incomplete=list(self._live.fleet.incomplete),
                                  source=self._live.fleet.source,
                                  selected=self._live.fleet.selected)
                    counted = count(fleet, tolerated=self._live.tolerated)
            findings = tuple(check(fleet, counted)) if self.checks and built else ()
            view = self._view = View(fleet=fleet, counted=counted, findings=findings,
                                     health=health, generation=generation)
            return view

    def _bump(self, *, numbers: bool) -> None:
        self._generation += 1
        if numbers:
            self._last_change = self._clock()
        self._cond.notify_all()

    # ------------------------------------------------------------------ the reflectors' consumer

    def replace(self, resource: str, pages: Iterator[list[dict[str, Any]]]) -> None:
        """A whole listing, reduced as its pages arrive (outside the lock: readers are not
        held up by the API server), then put in place at once."""
        staged = stage(_resource(resource), (raw for page in pages for raw in page))
        with self._cond:
            if self._live.commit(staged) and self._live.built:
                self._bump(numbers=True)

    def event(self, resource: str, kind: str, obj: dict[str, Any]) -> None:
        with self._cond:
            if self._live.built and self._live.apply(_resource(resource), kind, obj):
                self._bump(numbers=True)

    def state(self, resource: str, state: State) -> None:
        with self._cond:
            self._states[resource] = state
            lines = [s.problem or (not_read(r) if not s.synced else "")
                     for r, s in self._states.items()]
            numbers = self._live.set_incomplete([line for line in lines if line])
            self._bump(numbers=numbers)


def _resource(name: str) -> Resource:
    for resource in RESOURCES:
        if resource == name:
            return resource
    raise ValueError(f"not a collection the fleet reads: {name}")
