"""Watches as the API server streams them: the history of changes, replay from a
resourceVersion, bookmarks, timeouts, 410 after ``compact()``, and dropped, ended or failed
streams."""

from __future__ import annotations

import copy
import json
import re
import secrets
import select
import socket
import ssl
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import ApiError, _bad_request, status_body
from .exchange import _flag, _Request, _Response
from .faults import _Fault, fault_status, take_fault
from .objects import JSON, Resource, _Stored
from .selectors import Requirement, _field_value, _parse_field_selector, parse_label_selector

if TYPE_CHECKING:
    from .server import _Handler


# --------------------------------------------------------------------------- watches

DEFAULT_WATCH_TIMEOUT = 1800.0
"""A watch without ``timeoutSeconds`` (or 0) lasts the API server's --min-request-timeout
(1800 s) times a random factor in [1, 2)."""


@dataclass(frozen=True)
class _Change:
    """One entry of the watch history: an object as rendered before and after one write
    (None: absent), at the resourceVersion the write made."""

    rv: int
    res: Resource
    before: JSON | None
    after: JSON | None


@dataclass(eq=False)
class _Watch:
    """One open watch: what it selects, the events queued for it and when it ends."""

    server: Any  # the _HTTPServer it was opened on: a watch outliving it is dropped
    res: Resource
    namespace: str | None
    labels: list[Requirement]
    fields: list[tuple[str, Requirement]]
    bookmarks: bool
    deadline: float  # time.monotonic()
    next_bookmark: float | None = None
    pending: list[JSON] = field(default_factory=list)
    finish: bool = False  # end cleanly once ``pending`` is sent
    drop: bool = False  # close the connection without the last chunk
    logged: bool = False  # in the request log: only then counted in ``open_watches``

    def selects(self, obj: JSON | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata", {})
        if self.namespace is not None and meta.get("namespace", "") != self.namespace:
            return False
        labels = meta.get("labels") or {}
        return all(r.matches(labels) for r in self.labels) and all(
            r.matches({attr: _field_value(obj, attr)}) for attr, r in self.fields
        )

    def event(self, change: _Change) -> JSON | None:
        """What this watch sees of ``change``: an object entering its selection is ADDED,
        one leaving it (or deleted) DELETED with the resourceVersion of that change, as the
        API server's watch cache sends them."""
        if change.res is not self.res:
            return None
        was, now = self.selects(change.before), self.selects(change.after)
        if was and now:
            return {"type": "MODIFIED", "object": copy.deepcopy(change.after)}
        if now:
            return {"type": "ADDED", "object": copy.deepcopy(change.after)}
        if was:
            gone = copy.deepcopy(change.after if change.after is not None else change.before)
            assert gone is not None
            gone["metadata"]["resourceVersion"] = str(change.rv)
            return {"type": "DELETED", "object": gone}
        return None

    def bookmark(self, rv: int) -> JSON:
        """A BOOKMARK: only kind, apiVersion and metadata.resourceVersion are meaningful (a
        built-in kind also carries Go's zero ``creationTimestamp: null``)."""
        meta: JSON = {"resourceVersion": str(rv)}
        if not self.res.custom:
            meta["creationTimestamp"] = None
        obj = {"kind": self.res.kind, "apiVersion": self.res.api_version, "metadata": meta}
        return {"type": "BOOKMARK", "object": obj}


def _next_bookmark(now: float, deadline: float, interval: float, before: float) -> float | None:
    """The API server's schedule (cacheWatcher.nextBookmarkTime): every ``interval``, or
    ``before`` seconds ahead of the watch's deadline if that comes first; none once that
    moment has passed."""
    beat = now + interval
    if before > 0 and deadline - before < beat:
        beat = deadline - before
    return None if beat < now else beat


@dataclass
class _WatchStart(_Response):
    """The answer to a watch request: stream ``watch``'s events."""

    watch: _Watch | None = None


_WATCH_IDLE = 0.1
"""Seconds a watch waits for something to send before checking that its client is there."""


def _client_gone(conn: socket.socket) -> bool:
    """The client closed a connection it sends nothing else on (TLS: its close_notify)."""
    try:
        poller = select.poll()  # not select(): a busy test process has fds past 1024
        poller.register(conn, select.POLLIN | select.POLLHUP | select.POLLERR)
        if not poller.poll(0):
            return False
        if isinstance(conn, ssl.SSLSocket):
            return True
        return conn.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


def _shutdown(conn: socket.socket) -> None:
    try:  # the plain socket's shutdown, also under TLS: the peer sees the connection end
        socket.socket.shutdown(conn, socket.SHUT_RDWR)
    except OSError:
        pass


def _watch_timeout(value: str | None) -> float:
    """``timeoutSeconds``: whole seconds; absent or 0 is the server's default."""
    if value is None or value == "":
        seconds = 0
    else:
        try:
            seconds = int(value)
        except ValueError as err:
            raise _bad_request(f"invalid timeoutSeconds {value!r}: {err}") from err
    if seconds <= 0:
        return DEFAULT_WATCH_TIMEOUT * (1.0 + secrets.randbelow(1000) / 1000)
    return float(seconds)


def _watch_resource_version(res: Resource, value: str) -> int:
    """A watch's resourceVersion as the storage layer parses it (422 when not a number)."""
    if re.fullmatch(r"[0-9]+", value):
        return int(value)
    raise ApiError(
        422,
        "Invalid",
        f'{res.qualified} "" is invalid: resourceVersion: Invalid value: "{value}": '
        f'strconv.ParseUint: parsing "{value}": invalid syntax',
        {"kind": res.plural, **({"group": res.group} if res.group else {}),
         "causes": [{"reason": "FieldValueInvalid", "field": "resourceVersion",
                     "message": f'Invalid value: "{value}": strconv.ParseUint: parsing '
                                f'"{value}": invalid syntax'}]},
    )  # fmt: skip


class WatchMixin:
    """The change history and the open watches. Uses ``_history``, ``_compacted``,
    ``_watches``, ``_watch_changed`` and ``_watch_faults`` and the bookmark settings, made by
    ``FakeApiServer.__init__``."""

    # ------------------------------------------------------------------ watches

    @property
    def open_watches(self) -> int:
        """Watch streams open now, each already in the request log (a test that waits for
        the count and then reads the log finds the watch there)."""
        with self._lock:
            return sum(1 for w in self._watches if w.logged)

    @property
    def watch_requests(self) -> int:
        """Watch requests in the request log (answered or not; ``clear_log`` resets it)."""
        with self._lock:
            return sum(1 for r in self._log if r.watch)

    def compact(self, resource_version: str | None = None) -> str:
        """Forget the change history up to ``resource_version`` (default: now), as etcd's
        compaction and the watch cache's window do: a watch from an older resourceVersion
        then gets a 410 ``Expired`` ERROR event. Returns the compacted resourceVersion."""
        with self._lock:
            upto = self._rv if resource_version is None else int(resource_version)
            self._history = [c for c in self._history if c.rv > upto]
            self._compacted = max(self._compacted, upto)
            return str(self._compacted)

    def drop_watches(self) -> int:
        """Close every open watch's connection abruptly (no last chunk), as a crashed API
        server or a proxy does; returns how many there were."""
        return self._end_open_watches(drop=True)

    def end_watches(self) -> int:
        """End every open watch cleanly, as its timeout does; returns how many there were."""
        return self._end_open_watches(drop=False)

    def send_watch_error(self, code: int, reason: str, message: str) -> int:
        """Send every open watch an ERROR event with this Status, then end it cleanly (the
        API server's answer to a failure once a watch is streaming); returns how many."""
        with self._watch_changed:
            for w in self._watches:
                w.pending.append({"type": "ERROR", "object": status_body(code, reason, message)})
                w.finish = True
            self._watch_changed.notify_all()
            return len(self._watches)

    def inject_watch(
        self,
        status: int,
        count: int | None = 1,
        *,
        retry_after: int | None = None,
        body: JSON | str | bytes | None = None,
    ) -> None:
        """Answer the next ``count`` watch requests (None: until ``clear_faults``) with
        ``status`` before any streaming, like ``inject`` but for watches only (``inject``
        faults apply to watches too). Checked after authentication and RBAC."""
        with self._lock:
            self._watch_faults.append(
                _Fault(status, count, "GET", None, retry_after, body)
            )

    def _end_open_watches(self, *, drop: bool) -> int:
        with self._watch_changed:
            for w in self._watches:
                if drop:
                    w.drop = True
                else:
                    w.finish = True
            self._watch_changed.notify_all()
            return len(self._watches)

    def _changed(self, res: Resource, before: JSON | None, after: _Stored | None) -> None:
        """Record a write at the current resourceVersion and queue its event for every open
        watch that selects it (called with the lock held, right after the write)."""
        rendered = None if after is None else self._render(res, after)
        change = _Change(self._rv, res, before, rendered)
        self._history.append(change)
        for w in self._watches:
            event = w.event(change)
            if event is not None:
                w.pending.append(event)
        self._watch_changed.notify_all()

    def _take_watch_fault(self) -> _Response | None:
        fault = take_fault(self._watch_faults, lambda _: True)
        if fault is None:
            return None
        headers = {} if fault.retry_after is None else {"Retry-After": str(fault.retry_after)}
        body = fault.body
        if body is None:
            body = fault_status(fault.status)
        return _Response(fault.status, body, headers)

    def _watch(self, res: Resource, namespace: str | None, req: _Request) -> _Response:
        """Open a watch (under the lock, after authorization): queue its initial events --
        the current state for resourceVersion "" or "0", else every change after it -- and
        register it for live ones, so nothing falls between the two."""
        fault = self._take_watch_fault()
        if fault is not None:
            return fault
        for unsupported in ("sendInitialEvents", "resourceVersionMatch"):
            if req.query.get(unsupported):
                raise ApiError(
                    501, "NotImplemented", f"fake apiserver: {unsupported} on a watch"
                )
        labels = parse_label_selector(req.query.get("labelSelector", ""))
        fields = _parse_field_selector(req.query.get("fieldSelector", ""), res)
        timeout = _watch_timeout(req.query.get("timeoutSeconds"))
        now = time.monotonic()
        w = _Watch(
            self._httpd, res, namespace, labels, fields,
            bool(_flag(req.query.get("allowWatchBookmarks"))), now + timeout,
        )  # fmt: skip
        if w.bookmarks:
            w.next_bookmark = _next_bookmark(
                now, w.deadline, self.bookmark_interval, self.bookmark_before_timeout
            )
        text = req.query.get("resourceVersion", "")
        if text in ("", "0"):  # "Get State and Start at Most Recent" / "... at Any"
            for _, stored in sorted(self._objects[res].items()):
                obj = self._render(res, stored)
                if w.selects(obj):
                    w.pending.append({"type": "ADDED", "object": obj})
        else:
            rv = _watch_resource_version(res, text)
            if rv > self._rv:  # the real server waits up to 3 s for it first
                raise ApiError(
                    504,
                    "Timeout",
                    f"Timeout: Too large resource version: {rv}, current: {self._rv}",
                    {
                        "causes": [
                            {
                                "reason": "ResourceVersionTooLarge",
                                "message": "Too large resource version",
                            }
                        ],
                        "retryAfterSeconds": 1,
                    },
                    {"Retry-After": "1"},
                )
            if rv < self._compacted:
                message = f"too old resource version: {rv} ({self._compacted})"
                if self.expired_as_http:
                    raise ApiError(410, "Expired", message)
                w.pending.append({"type": "ERROR", "object": status_body(410, "Expired", message)})
                w.finish = True
            else:
                for change in self._history:
                    event = w.event(change) if change.rv > rv else None
                    if event is not None:
                        w.pending.append(event)
        self._watches.add(w)
        return _WatchStart(200, {}, watch=w)

    def _serve_watch(self, h: _Handler, w: _Watch) -> None:
        """Stream ``w`` as the API server does: 200, chunked, one JSON event per line, each
        sent as it happens; the last chunk at its timeout (the connection stays open for the
        next request), none when dropped."""
        try:
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Cache-Control", "no-cache, private")
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()
            h.wfile.flush()
            while True:
                events, end = self._watch_batch(w)
                if events:
                    self._send_watch_events(h, events)
                if end == "drop":
                    h.close_connection = True
                    _shutdown(h.connection)
                    return
                if end == "end":
                    h.wfile.write(b"0\r\n\r\n")
                    h.wfile.flush()
                    return
                if end == "idle" and _client_gone(h.connection):
                    h.close_connection = True  # the API server ends a watch its client left
                    return
        except OSError:  # the client went away
            h.close_connection = True
        finally:
            with self._lock:
                self._watches.discard(w)

    def _watch_batch(self, w: _Watch) -> tuple[list[JSON], str]:
        """Wait for what ``w`` sends next: queued events, a bookmark, its end ("end", "drop"),
        or nothing for a while ("idle": time to see whether the client is still there)."""
        with self._watch_changed:
            while True:
                if w.drop or w.server is not self._httpd:
                    return [], "drop"
                if w.pending:
                    events, w.pending = w.pending, []
                    return events, ""
                now = time.monotonic()
                if w.finish or now >= w.deadline:
                    return [], "end"
                if w.next_bookmark is not None and now >= w.next_bookmark:
                    w.next_bookmark = _next_bookmark(
                        now, w.deadline, self.bookmark_interval, self.bookmark_before_timeout
                    )
                    return [w.bookmark(self._rv)], ""
                wake = w.deadline if w.next_bookmark is None else min(w.deadline, w.next_bookmark)
                if not self._watch_changed.wait(min(wake - now, _WATCH_IDLE)):
                    if time.monotonic() < wake:
                        return [], "idle"

    def _send_watch_events(self, h: _Handler, events: list[JSON]) -> None:
        lines = [json.dumps(e, separators=(",", ":")).encode() + b"\n" for e in events]
        size = self.watch_chunk_bytes
        if size:
            data = b"".join(lines)
            lines = [data[i : i + size] for i in range(0, len(data), size)]
        for piece in lines:
            h.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        h.wfile.flush()


