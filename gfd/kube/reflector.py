"""One collection kept current: a paginated LIST, then a WATCH from the listing's
resourceVersion (bookmarks on, so a reconnect resumes from a recent one), as client-go's
reflector does; the objects go to a ``Consumer``, which knows what they mean.

- A watch the server ends cleanly (its timeout) is opened again at once, from the last
  resourceVersion seen: not a restart (one that ends at once with nothing waits the backoff,
  so a server that ends every watch cannot make it spin).
- A watch that expires (410 Gone: the resourceVersion is older than the server keeps, as
  after a compaction or an API server's restart) lists this collection again, alone, and
  watches from that listing: a restart and a relist.
- A dropped connection, a refused or failed request, or an ERROR event: the watch is opened
  again from the last resourceVersion after gfd's backoff (capped, jittered; reset once a
  watch is open again): a restart. While it is not open the collection has a ``problem``
  (what is held is the last known state).
- A LIST that fails is tried again after the same backoff; the consumer keeps what it held
  (it is handed the pages and takes nothing from a listing that did not end).

Each restart is one line in the log (``gfd.kube.reflector``), each problem once until it
clears. Nothing here knows GPUs."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from gfd.backoff import backoff
from gfd.errors import ApiError, WatchExpired, one_line
from gfd.kube.lists import Lister
from gfd.logs import Once

log = logging.getLogger(__name__)

WATCH_TIMEOUT = 1800.0
"""Seconds a watch request lasts before it is renewed (the API server's
--min-request-timeout: five collections, ten requests an hour)."""
BACKOFF_CAP = 30.0
"""The longest wait before trying a failed watch or LIST again."""
_OBJECT_EVENTS = frozenset({"ADDED", "MODIFIED", "DELETED"})


@dataclass(frozen=True, slots=True)
class State:
    """Where one collection stands."""

    synced: bool = False
    """A LIST of it has been read whole."""
    problem: str = ""
    """One line while its LIST or WATCH is refused or failing ("" while watched)."""
    restarts: int = 0
    """Watches opened again after a drop, an error or a 410 (not after a clean end)."""
    relists: int = 0
    """LISTs after the first (a watch that expired)."""


class Consumer(Protocol):
    """What a reflector feeds (all called on its thread, one at a time per collection)."""

    def replace(self, resource: str, pages: Iterator[list[dict[str, Any]]]) -> None:
        """The whole collection, page by page. An ``ApiError`` raised out of the pages (a
        LIST that failed midway) must leave what is held as it was."""

    def event(self, resource: str, kind: str, obj: dict[str, Any]) -> None:
        """One ``ADDED``, ``MODIFIED`` or ``DELETED`` object."""

    def state(self, resource: str, state: State) -> None:
        """The collection's state changed."""


def refused(verb: str, resource: str, exc: ApiError) -> str:
    """The one line a refused or failed LIST or WATCH of ``resource`` is (a 403 and a
    missing DRA API worded as ``gfd fleet`` words them)."""
    if exc.status == 403:
        return (f"{verb} {resource}: forbidden (grant `{verb}` on {resource} cluster-wide: the "
                "ClusterRole in manifests/fleet)")
    if exc.status == 404 and resource.startswith("resource"):
        return f"{verb} {resource}: the API server serves no resource.k8s.io/v1 (DRA is off)"
    text = one_line(str(exc))
    return text if text.startswith(f"{verb} {resource}: ") else f"{verb} {resource}: {text}"


class Reflector:
    """Keeps one collection (``resource`` at ``path``) current for ``consumer``: ``list()``
    reads it once where the caller wants it read (start-up, in order with the others),
    ``start()`` watches it on a daemon thread from then on, ``close()`` ends that. A LIST
    that ``list()`` could not read is tried again by the thread, with backoff."""

    def __init__(self, lister: Lister, resource: str, path: str, consumer: Consumer, *,
                 field_selector: str = "", label_selector: str = "",
                 watch_timeout: float = WATCH_TIMEOUT, backoff_cap: float = BACKOFF_CAP,
                 backoff_start: float = 1.0, rand: Callable[[], float] = random.random,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.lister = lister
        self.resource = resource
        self.path = path
        self.consumer = consumer
        self.field_selector = field_selector
        self.label_selector = label_selector
        self.watch_timeout = watch_timeout
        self.backoff_cap = backoff_cap
        self.backoff_start = backoff_start
        self._rand = rand
        self._clock = clock
        self.state = State()
        self.resource_version = ""
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._stream: Any = None
        self._thread: threading.Thread | None = None
        self._once = Once(log)

    # ------------------------------------------------------------------ control

    def list(self) -> bool:
        """Read the collection whole and hand it to the consumer; False (the problem in
        ``state``) when the LIST is refused or fails."""
        try:
            pages = self.lister.pages(self.path, self.resource,
                                      field_selector=self.field_selector,
                                      label_selector=self.label_selector)
            self.consumer.replace(self.resource, pages)
        except ApiError as exc:
            self._set(problem=refused("list", self.resource, exc))
            self._once.warning("%s", self.state.problem, key=f"list {exc}")
            return False
        self.resource_version = pages.resource_version
        relists = self.state.relists + (1 if self.state.synced else 0)
        self._set(synced=True, problem="", relists=relists)
        return True

    def start(self) -> None:
        with self._lock:
            if self._thread is not None or self._closing.is_set():
                return
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name=f"gfd-watch-{self.resource}")
            self._thread.start()

    def close(self, timeout: float = 2.0) -> None:
        """End the watch and any wait at once; wait up to ``timeout`` for the thread."""
        with self._lock:
            self._closing.set()
            stream, thread = self._stream, self._thread
        if stream is not None:
            stream.close()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    # ------------------------------------------------------------------ the thread

    def _set(self, **changes: Any) -> None:
        fields = {"synced": self.state.synced, "problem": self.state.problem,
                  "restarts": self.state.restarts, "relists": self.state.relists, **changes}
        state = State(**fields)
        if state != self.state:
            self.state = state
            self.consumer.state(self.resource, state)

    def _run(self) -> None:
        try:
            self._serve()
        except Exception as exc:  # a watcher that dies says so; the view stays incomplete
            self._set(problem=f"watch {self.resource}: stopped: {type(exc).__name__}: {exc}")
            log.error("%s", self.state.problem)
            log.debug("watch %s failure", self.resource, exc_info=True)

    def _serve(self) -> None:
        failures = 0
        while not self._closing.is_set():
            if not self.state.synced or not self.resource_version:
                if not self.list():
                    failures += 1
                    self._wait(failures)
                    continue
                failures = 0
            outcome = self._watch_once()
            if self._closing.is_set():
                return
            if outcome == "ended":
                continue
            if outcome == "quiet":
                failures += 1
                self._wait(failures)
                continue
            if outcome == "expired":
                self.resource_version = ""
                self._set(restarts=self.state.restarts + 1)
                log.info("watch %s: expired (410 Gone: its resourceVersion is no longer kept); "
                         "listing %s again", self.resource, self.resource)
                failures = 0
                continue
            failures = 0 if outcome == "delivered" else failures + 1
            self._set(restarts=self.state.restarts + 1)
            delay = backoff(max(failures, 1), self.backoff_cap, self._rand,
                            start=self.backoff_start) if failures else 0.0
            log.info("watch %s: %s; watching again from resourceVersion %s%s", self.resource,
                     self.state.problem.removeprefix(f"watch {self.resource}: ") or "ended",
                     self.resource_version, f" in {delay:.1f} s" if delay else "")
            if delay:
                self._closing.wait(delay)

    def _watch_once(self) -> str:
        """One watch request and its stream: ``ended`` (cleanly, by its timeout or having
        delivered), ``quiet`` (ended at once with nothing), ``expired`` (410), ``delivered``
        (dropped after delivering: opened again at once), ``failed``."""
        delivered = False
        opened = self._clock()
        try:
            stream = self.lister.watch(self.path, self.resource,
                                       resource_version=self.resource_version,
                                       field_selector=self.field_selector,
                                       label_selector=self.label_selector,
                                       timeout=self.watch_timeout)
            with self._lock:
                if self._closing.is_set():
                    stream.close()
                    return "ended"
                self._stream = stream
            if self.state.problem:
                self._once.reset()
                log.info("watch %s: watching again", self.resource)
            self._set(problem="")
            for event in stream:
                if event.type in _OBJECT_EVENTS and event.object is not None:
                    delivered = True
                    self.consumer.event(self.resource, event.type, event.object)
                if event.resource_version:  # what the consumer has now
                    self.resource_version = event.resource_version
            if delivered or self._closing.is_set() or \
                    self._clock() - opened >= self.watch_timeout / 2:
                return "ended"
            return "quiet"
        except WatchExpired:
            return "expired"
        except ApiError as exc:
            self._set(problem=refused("watch", self.resource, exc))
            self._once.warning("%s", self.state.problem, key=f"watch {exc}")
            return "delivered" if delivered else "failed"
        finally:
            with self._lock:
                stream, self._stream = self._stream, None
            if stream is not None:
                stream.close()  # (idempotent) whatever ended it, its connection is closed

    def _wait(self, failures: int) -> None:
        self._closing.wait(backoff(failures, self.backoff_cap, self._rand,
                                   start=self.backoff_start))
