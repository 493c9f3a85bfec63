"""A watch on the one object an API sink publishes to, kept open in a daemon thread, so that
drift at the API server (a label overwritten by hand, the NodeFeature deleted, the Node
recreated) is seen within a second instead of at the next resync.

It reads the object with a LIST field-selected to its name (the object and the server's
current resourceVersion), reports that state, then watches from there; it keeps the last
resourceVersion it saw (bookmarks included), so a reconnect resumes where the last stream
ended and replays nothing already seen. A clean end (the watch's timeout) reconnects at
once; 410 Expired reads the object again first; a lost connection or an error retries with
capped, jittered backoff. It decides nothing about the labels: ``on_change`` does.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal, Protocol

from gfd.backoff import backoff
from gfd.errors import ApiError, WatchExpired
from gfd.logs import Once

log = logging.getLogger(__name__)

WATCHED_RESYNC = 24 * 3600.0
"""Seconds between safety resyncs of a sink whose watch is healthy (it sees drift as it
happens; the resync guards against a watch that silently missed something)."""
WATCH_TIMEOUT = 3600.0
"""Seconds a watch request lasts before it is renewed (one request per object per hour)."""

FORBIDDEN_AFTER_ALLOWED = 3
"""Consecutive failures (a 403 among them) on a watch the server allowed before that are
retried with backoff before gfd waits FORBIDDEN_RETRY: a kube-apiserver that has just
restarted serves requests before its RBAC caches are filled and answers 403 for a moment."""

FORBIDDEN_RETRY = 3600.0
"""Seconds before trying again a watch the API server forbids (403: the RBAC grants no
``list``/``watch``, as in GFD's own manifests): drift then heals at the resync, and an
unwatchable object costs one request an hour, not one a minute."""

Kind = Literal["node", "nodefeature"]
Reason = Literal["timeout", "dropped", "expired", "error"]


class Event(Protocol):
    """What ``WatchApi.watch`` yields (``gfd.kube.WatchEvent``)."""

    @property
    def type(self) -> str: ...
    @property
    def object(self) -> dict[str, Any] | None: ...
    @property
    def resource_version(self) -> str: ...


class Stream(Protocol):
    """An open watch (``gfd.kube.WatchStream``): iterable once; ``close()`` from any thread
    ends a blocked iteration."""

    def __iter__(self) -> Iterator[Event]: ...
    def close(self) -> None: ...


class WatchApi(Protocol):
    """What ObjectWatch needs of ``gfd.kube.Kube``."""

    def list_object(self, kind: Kind, name: str, *,
                    namespace: str = "") -> tuple[dict[str, Any] | None, str]: ...
    def watch(self, kind: Kind, name: str, *, namespace: str = "", resource_version: str,
              timeout: float) -> Stream: ...


class ObjectWatch:
    """Keeps one watch on one object open in a daemon thread and reports its state.

    ``on_change(obj)`` gets the object's current state after each read of it (at start and
    after a 410) and after every ADDED or MODIFIED event; ``on_change(None)`` when a read
    finds no object or after a DELETED event. ``on_reconnect(reason)`` is called each time
    the watch has to be opened again: ``"timeout"`` (the server ended it cleanly),
    ``"dropped"`` (the connection was lost mid-stream), ``"expired"`` (410: the object is
    read again) or ``"error"`` (the read or the watch request failed, or an ERROR event).
    ``on_list()``, if given, is called just before each read, so the caller can tell the
    state that read reports (the next ``on_change``) from what it wrote meanwhile. All run
    on the watch thread: they must be quick, must not raise, and may call ``close()``.
    Nothing is counted here; each distinct failure is logged once, and the recovery after it.
    An unexpected error (one of the callbacks raising, say) ends the thread: it is logged
    once at error level and ``on_death(error)`` is called; the sink's resync duty then
    repairs drift (``healthy`` stays False).

    Reconnects after a clean end, and after a first 410, are immediate: a stream that ended
    cleanly having delivered nothing in under half of ``watch_timeout`` counts as a failure,
    so a server that ends every watch at once cannot make it busy-loop. Failures wait
    ``backoff(n, backoff_cap, start=backoff_start)`` (jittered, n the failures in a row,
    reset by a stream that delivered any event). ``clock``, ``sleep`` and ``rand`` are
    injectable for tests; the default ``sleep`` is cut short by ``close()``.
    """

    def __init__(self, kube: WatchApi, kind: Kind, name: str, *, namespace: str = "",
                 on_change: Callable[[dict[str, Any] | None], None],
                 on_reconnect: Callable[[Reason], None] | None = None,
                 on_list: Callable[[], None] | None = None,
                 on_death: Callable[[BaseException], None] | None = None,
                 watch_timeout: float = WATCH_TIMEOUT, backoff_cap: float = 60.0,
                 backoff_start: float = 1.0, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] | None = None,
                 rand: Callable[[], float] = random.random, close_timeout: float = 2.0) -> None:
        self.kube = kube
        self.kind: Kind = kind
        self.name = name
        self.namespace = namespace
        self.watch_timeout = watch_timeout
        self.backoff_cap = backoff_cap
        self.backoff_start = backoff_start
        self._on_change = on_change
        self._on_reconnect = on_reconnect
        self._on_list = on_list
        self._on_death = on_death
        self._clock = clock
        self._sleep = sleep
        self._rand = rand
        self._close_timeout = close_timeout
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._stream: Stream | None = None
        self._thread: threading.Thread | None = None
        self._healthy = False
        self._allowed = False
        self._rv = ""
        self._once = Once(log)
        self.target = f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"
        """How logs name the watched object."""

    @property
    def healthy(self) -> bool:
        """True while a watch stream is open (its request answered 200 and not ended)."""
        return self._healthy

    @property
    def resource_version(self) -> str:
        """The last resourceVersion seen (of a read, an event or a bookmark); "" before."""
        return self._rv

    def start(self) -> None:
        """Start the thread (once; again is a no-op). It reads the object first, so the
        first ``on_change`` comes from the thread, not from this call."""
        with self._lock:
            if self._thread is not None or self._closing.is_set():
                return
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name=f"gfd-watch-{self.kind}-{self.name}")
            self._thread.start()

    def close(self) -> None:
        """Stop watching: ends the open stream and any backoff wait at once and waits up to
        ``close_timeout`` for the thread (a read in flight ends within its own request
        timeout; the thread is a daemon). Idempotent; callable from the callbacks."""
        with self._lock:
            self._closing.set()
            stream, thread = self._stream, self._thread
        if stream is not None:
            stream.close()
        if thread is not None and thread is not threading.current_thread():
            thread.join(self._close_timeout)

    # The thread --------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._serve()
        except Exception as exc:  # a watcher that dies says so; the resync duty remains
            self._healthy = False
            log.error("watch on %s stopped: %s: %s; drift is repaired at the resync instead",
                      self.target, type(exc).__name__, exc)
            log.debug("watch on %s failure", self.target, exc_info=True)
            if self._on_death is not None:
                self._on_death(exc)

    def _serve(self) -> None:
        relist = True
        failures = 0
        while not self._closing.is_set():
            opened_at: float | None = None
            delivered = False
            reason: Reason
            failure: ApiError | None = None
            try:
                if relist:
                    if self._on_list is not None:
                        self._on_list()
                    obj, rv = self.kube.list_object(self.kind, self.name,
                                                    namespace=self.namespace)
                    relist = False
                    self._rv = rv
                    if self._closing.is_set():
                        break
                    self._on_change(obj)
                    if self._closing.is_set():
                        break
                stream = self.kube.watch(self.kind, self.name, namespace=self.namespace,
                                         resource_version=self._rv,
                                         timeout=self.watch_timeout)
                if not self._adopt(stream):
                    break
                opened_at = self._clock()
                self._healthy = self._allowed = True
                if self._once.reset():
                    log.info("watch on %s re-established", self.target)
                for event in stream:
                    delivered = True
                    if event.resource_version:
                        self._rv = event.resource_version
                    if event.type in ("ADDED", "MODIFIED"):
                        self._on_change(event.object)
                    elif event.type == "DELETED":
                        self._on_change(None)
                reason = "timeout"
            except WatchExpired as exc:
                reason, relist = "expired", True
                log.debug("watch on %s: %s; reading it again", self.target, exc)
            except ApiError as exc:
                reason = "dropped" if opened_at is not None and exc.status is None else "error"
                failure = exc
            finally:
                self._healthy = False
                with self._lock:
                    self._stream = None
            if self._closing.is_set():
                break
            if delivered:
                failures = 0
            productive = opened_at is not None and (
                delivered or self._clock() - opened_at >= self.watch_timeout / 2)
            if (reason == "timeout" and productive) or (reason == "expired" and failures == 0):
                delay = 0.0
                failures = 1 if reason == "expired" else 0
            elif failure is not None and failure.status == 403 and (
                    not self._allowed or failures >= FORBIDDEN_AFTER_ALLOWED):
                delay = FORBIDDEN_RETRY
                self._once.warning("cannot watch %s: %s; grant gfd list and watch on it to "
                                   "repair drift at once (until then it is repaired at the "
                                   "resync)", self.target, failure, key=f"forbidden {failure}")
                failure = None
            else:
                failures += 1
                delay = backoff(failures, self.backoff_cap, self._rand, start=self.backoff_start)
            if failure is not None:
                self._once.warning("watch on %s failed: %s (retrying with backoff)",
                                   self.target, failure, key=str(failure))
            elif delay and reason == "timeout":
                self._once.warning("watch on %s ended at once with nothing (retrying with "
                                   "backoff)", self.target)
            log.debug("watch on %s: reconnecting (%s) in %.2fs", self.target, reason, delay)
            if self._on_reconnect is not None:
                self._on_reconnect(reason)
            if delay:
                self._wait(delay)

    def _adopt(self, stream: Stream) -> bool:
        """Make ``stream`` the one ``close()`` ends; False (and closed) when closing."""
        with self._lock:
            if not self._closing.is_set():
                self._stream = stream
                return True
        stream.close()
        return False

    def _wait(self, seconds: float) -> None:
        if self._sleep is not None:
            self._sleep(seconds)
        else:
            self._closing.wait(seconds)
