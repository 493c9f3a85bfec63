"""Watches: one open watch request on one object as a stream of typed events, read as they
arrive, each event bounded in size, closable from any thread (``WatchStream``); opening one
(``open_watch``), an answer other than 200 raised as the ``ApiError`` it is."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import urllib3
from kubernetes.client.exceptions import ApiException

from gfd.errors import ApiError, one_line, show
from gfd.kube.channel import shut_under_reader
from gfd.kube.status import status_error, watch_error

WatchKind = Literal["node", "nodefeature"]
MAX_WATCH_EVENT_BYTES = 4 * 1024 * 1024
"""The largest watch event gfd reads (one line of the stream): a Node or NodeFeature is a
few KB; a longer line is an error, never an unbounded read."""
_WATCH_READ = 64 * 1024
_ERROR_BODY_BYTES = 64 * 1024
_OBJECT_EVENTS = frozenset({"ADDED", "MODIFIED", "DELETED"})


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One event of a watch. ``type``: ADDED, MODIFIED, DELETED or BOOKMARK. ``object``: the
    object as a GET returns it (its last state for DELETED), None for a BOOKMARK.
    ``resource_version``: where to resume watching after this event."""

    type: str
    object: dict[str, Any] | None
    resource_version: str


class WatchStream(Iterator[WatchEvent]):
    """One open watch request. Iterating yields its events as they arrive and ends when the
    server ends the watch cleanly (its ``timeoutSeconds``). It raises ``WatchExpired`` for a
    410 ERROR event, ``ApiError`` with the status for any other ERROR event, and ``ApiError``
    without a status when the connection is lost mid-stream or an event is malformed or
    longer than ``max_event`` bytes; the connection is closed after any of these.

    ``close()`` may be called from any thread, any number of times: an iteration blocked
    waiting for the next event then simply ends (no error), at once."""

    def __init__(self, what: str, response: Any, max_event: int) -> None:
        self._what = what
        self._response = response
        self._max_event = max_event
        self._buffer = bytearray()
        self._lock = threading.Lock()
        self._reading = False
        self._closed = False
        self._done = False
        self._chunks: Iterator[bytes] | None = None

    def __iter__(self) -> WatchStream:
        return self

    def __next__(self) -> WatchEvent:
        while True:
            line = self._next_line()
            if line is None:
                raise StopIteration
            if line.strip():
                return self._event(line)

    def __enter__(self) -> WatchStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            reading = self._reading
        if not reading:
            self._finish(clean=False)
            return
        # Another thread is blocked reading: end its read and let that thread clean up.
        shut_under_reader(getattr(self._response, "connection", None))

    def _finish(self, *, clean: bool) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
        if not clean:  # a half-read stream: its connection cannot be reused
            self._response.close()
        self._response.release_conn()

    def _fail(self, message: str) -> ApiError:
        self._finish(clean=False)
        return ApiError(f"watch {self._what}: {message}")

    def _next_line(self) -> bytes | None:
        while True:
            end = self._buffer.find(b"\n")
            if end > self._max_event or (end < 0 and len(self._buffer) > self._max_event):
                raise self._fail(f"an event is larger than {self._max_event // 1024} KiB, more "
                                 "than a Node or NodeFeature can be (a proxy in the way?)")
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[:end + 1]
                return line
            data = self._read()
            if data is None:
                line, self._buffer = bytes(self._buffer), bytearray()
                return line if line.strip() and not self._closed else None
            self._buffer += data

    def _read(self) -> bytes | None:
        """The next bytes of the stream; None at its clean end or once closed."""
        with self._lock:
            if self._closed or self._done:
                closed = True
            else:
                closed, self._reading = False, True
        if closed:
            self._finish(clean=False)
            return None
        try:
            data = self._read_some()
            lost: Exception | None = None
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            data, lost = b"", exc
        with self._lock:
            self._reading = False
            closed = self._closed
        if closed:
            self._finish(clean=False)
            return None
        if lost is not None:
            raise self._fail(f"the connection was lost mid-stream: {one_line(str(lost))}") \
                from lost
        if not data:
            self._finish(clean=True)
            return None
        return data

    def _read_some(self) -> bytes:
        """What has arrived, up to ``_WATCH_READ`` bytes, as soon as there is any; b"" at
        the end (urllib3 without ``read1``: chunk by chunk)."""
        read1 = getattr(self._response, "read1", None)
        if read1 is not None:
            data: bytes = read1(_WATCH_READ)
            return data
        if self._chunks is None:
            self._chunks = iter(self._response.stream(_WATCH_READ, decode_content=True))
        return next(self._chunks, b"")

    def _event(self, line: bytes) -> WatchEvent:
        try:
            event: Any = json.loads(line)
        except ValueError:
            event = None
        kind = event.get("type") if isinstance(event, dict) else None
        obj = event.get("object") if isinstance(event, dict) else None
        if not isinstance(kind, str) or not isinstance(obj, dict):
            snippet = one_line(line[:80].decode("utf-8", "replace"))
            raise self._fail(f"not a watch event: {snippet!r} (a proxy in the way?)")
        meta = obj.get("metadata")
        rv = str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""
        if kind in _OBJECT_EVENTS:
            return WatchEvent(kind, obj, rv)
        if kind == "BOOKMARK":
            return WatchEvent(kind, None, rv)
        if kind == "ERROR":
            self._finish(clean=False)
            code = obj.get("code")
            raise watch_error("watch", self._what, code if isinstance(code, int) else 0,
                               str(obj.get("reason") or ""), json.dumps(obj))
        raise self._fail(f"unknown watch event type {show(kind)}")


def open_watch(api: Any, what: str, path: str, *, params: dict[str, str],
               query: list[tuple[str, str]], connect_timeout: float, read_timeout: float,
               max_event: int = MAX_WATCH_EVENT_BYTES,
               on_request: Callable[[str, str], None] | None = None) -> WatchStream:
    """Send the watch request ``query`` for ``what`` at ``path`` over ``api`` (an ApiClient)
    and return its stream; an answer other than 200 is an ``ApiError`` with its status
    (``WatchExpired`` for 410), no connection one without; reported once to ``on_request``
    as verb ``watch``."""
    code = "error"
    try:
        request = api.param_serialize(
            method="GET", resource_path=path, path_params=params, query_params=query,
            auth_settings=["BearerToken"], header_params={"Accept": "application/json"})
        response = api.call_api(*request, _request_timeout=(connect_timeout, read_timeout))
        code = str(response.status)
    except ApiException as exc:
        code = str(exc.status)
        raise status_error("watch", what, exc) from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise ApiError(f"watch {what}: cannot reach the API server: {exc}") from exc
    finally:
        if on_request:
            on_request("watch", code)
    raw = response.response
    if response.status == 200:
        return WatchStream(what, raw, max_event)
    try:
        body = raw.read(_ERROR_BODY_BYTES).decode("utf-8", "replace")
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        body = str(exc)
    finally:
        raw.close()
        raw.release_conn()
    raise watch_error("watch", what, response.status, str(response.reason or ""), body,
                      response.headers)
