"""The Kubernetes API boundary: the only importer of the ``kubernetes`` client.

Returns plain dicts, raises only :class:`gfd.errors.ApiError` with the HTTP status,
the API reason, the Status causes and any Retry-After, and reports every request
(verb, code) to an optional callback for metrics.

Every answer is distrusted the same way: it must arrive whole within one deadline (connect
included; a socket timeout alone restarts with each byte, so a trickling answer would never
end), it is read in chunks and refused beyond ``MAX_ANSWER_BYTES`` (a Node or NodeFeature is a
few KB), and a success must be a Kubernetes object (an auth proxy's HTML page is not).

Watches (``Kube.watch``) stream one object's events over their own connection pool, so a
watch open for an hour never holds up, or is held up by, the other requests.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import math
import os
import socket
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import urllib3
import urllib3.connectionpool
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from gfd.errors import ApiError, ConfigError, WatchExpired, one_line, show
from gfd.hostfile import what_is

log = logging.getLogger(__name__)

NFD_GROUP = "nfd.k8s-sigs.io"
NFD_VERSION = "v1alpha1"
NODEFEATURES = "nodefeatures"
APPLY = "application/apply-patch+yaml"
_NODE = "/api/v1/nodes/{name}"
_POD = "/api/v1/namespaces/{namespace}/pods/{name}"
_NODEFEATURES = f"/apis/{NFD_GROUP}/{NFD_VERSION}/namespaces/{{namespace}}/{NODEFEATURES}"
_NODEFEATURE = _NODEFEATURES + "/{name}"
_RESOURCESLICES = "/apis/resource.k8s.io/v1/resourceslices"
RESOURCESLICE_LIMIT = 8
"""The most ResourceSlices one count lists: a node has one per driver pool, and gfd only
needs to know whether there are any."""
_EVENTS = "/api/v1/namespaces/{namespace}/events"
_EVENT = _EVENTS + "/{name}"
MERGE = "application/merge-patch+json"
MAX_ANSWER_BYTES = 4 * 1024 * 1024
"""The largest answer gfd reads: a Node or a NodeFeature is a few KB."""
DEADLINE = 30.0
"""Seconds one request may take in all, connect included (kept well under --stuck-after)."""
_CHUNK = 64 * 1024


@dataclass(slots=True)
class RateLimiter:
    """Client-side token bucket (GFD's --kube-api-qps / --kube-api-burst)."""

    qps: float
    burst: int
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    _tokens: float = field(default=-1.0, init=False)
    _stamp: float = field(default=0.0, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def take(self) -> None:
        if self.qps <= 0:
            return
        with self._lock:
            now = self.clock()
            if self._tokens < 0:
                self._tokens, self._stamp = float(self.burst), now
            self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.qps)
            self._stamp = now
            wait = 0.0 if self._tokens >= 1 else (1 - self._tokens) / self.qps
            self._tokens -= 1
        if wait > 0:
            self.sleep(wait)


def check_kubeconfig(value: str) -> None:
    """Every existing file ``value`` names (KUBECONFIG may list several, ``:``-separated) must
    be a regular file or a link to one: the client would block forever opening a FIFO."""
    for path in filter(None, value.split(os.pathsep)):
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            continue  # the client says so, naming the file
        except OSError as exc:
            raise ConfigError(f"cannot read kubeconfig {path}: {one_line(str(exc))} (set "
                              "--kubeconfig / KUBECONFIG to a readable file)") from exc
        if not stat.S_ISREG(mode):
            raise ConfigError(f"kubeconfig {path} is {what_is(mode)}, not a regular file (point "
                              "--kubeconfig / KUBECONFIG at the kubeconfig file itself)")


def _shut_under_reader(holder: Any) -> None:
    """End a read another thread is blocked in on ``holder``'s socket (a urllib3 connection):
    the plain socket's shutdown, also under TLS (an SSL socket's would drop its state under
    the reader). Nothing while it has no socket yet (still connecting: its timeout ends it)."""
    sock = getattr(holder, "sock", None)
    if sock is None:
        return
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


class _Deadline:
    """One request's deadline: its own ``fired`` and connection, so a deadline that passes
    late can only ever end its own request."""

    __slots__ = ("at", "conn", "fired")

    def __init__(self, at: float) -> None:
        self.at = at
        self.conn: Any = None
        self.fired = False


class _Watchdog:
    """Ends the request in flight when its deadline passes, by shutting down the socket of
    the connection it uses (the pool hands that connection over in ``attach``). One
    long-lived thread per channel waits for the current deadline; ``arm`` gives each
    request its own ``_Deadline``, and only the current one can fire."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._cond = threading.Condition()
        self._current: _Deadline | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def arm(self, seconds: float) -> _Deadline:
        deadline = _Deadline(self._clock() + seconds)
        with self._cond:
            self._current = deadline
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name="gfd-api-deadline",
                                                daemon=True)
                self._thread.start()
            self._cond.notify()
        return deadline

    def attach(self, conn: Any) -> None:
        with self._cond:
            deadline = self._current
            if deadline is None:
                return
            deadline.conn = conn
            if deadline.fired:
                _shut_under_reader(conn)

    def disarm(self, deadline: _Deadline) -> None:
        with self._cond:
            deadline.conn = None
            if self._current is deadline:
                self._current = None

    def expire(self) -> float | None:
        """Fire the current deadline if it has passed. Seconds until it will otherwise;
        None when there is nothing left to wait for."""
        with self._cond:
            return self._expire()

    def _expire(self) -> float | None:
        deadline = self._current
        if deadline is None or deadline.fired:
            return None
        left = deadline.at - self._clock()
        if left > 0:
            return left
        deadline.fired = True
        if deadline.conn is not None:
            _shut_under_reader(deadline.conn)
        return None

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                self._cond.wait(self._expire())

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


class _WatchedPool(urllib3.connectionpool.HTTPConnectionPool):
    """A pool that hands each connection it gives out to the request's watchdog."""

    def __init__(self, *args: Any, watchdog: _Watchdog, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._watchdog = watchdog

    def _get_conn(self, timeout: float | None = None) -> Any:
        conn = super()._get_conn(timeout)
        self._watchdog.attach(conn)
        return conn


class _WatchedHttpsPool(_WatchedPool, urllib3.connectionpool.HTTPSConnectionPool):
    """The same over TLS (the MRO puts the HTTPS pool under ``_WatchedPool``)."""


def _snippet(body: bytes) -> str:
    text = one_line(body[:120].decode("utf-8", "replace"))
    return repr(text[:80] + ("..." if len(text) > 80 or len(body) > 120 else ""))


def _status_error(verb: str, what: str, exc: ApiException) -> ApiError:
    body: dict[str, Any] = {}
    try:
        parsed = json.loads(exc.body or "{}")
        body = parsed if isinstance(parsed, dict) else {}
    except ValueError:
        pass
    message = str(body.get("message") or exc.reason or "").replace("\n", " ")
    reason = str(body.get("reason") or "")
    details = body.get("details") if isinstance(body.get("details"), dict) else {}
    causes = tuple(
        str(c.get("message", "")) for c in (details or {}).get("causes", []) if isinstance(c, dict)
    )
    retry_after = None
    headers = exc.headers or {}
    if "Retry-After" in headers:
        try:
            retry_after = float(headers["Retry-After"])
        except (TypeError, ValueError):
            retry_after = None
    status = int(exc.status or 0)
    hint = ""
    if status == 403:
        hint = " (grant this permission to gfd's ServiceAccount: see manifests/)"
    elif status == 404 and not (details or {}).get("name") and what.startswith("nodefeature"):
        hint = (" (the NodeFeature CRD is not installed: install Node Feature Discovery v0.14 "
                "or newer, or use the feature file sink)")
    text = f"{verb} {what}: HTTP {status} {reason}: {message}{hint}".strip()
    return ApiError(text, status=status, reason=reason, retry_after=retry_after, causes=causes,
                    resource_missing=status == 404 and not (details or {}).get("name"))


# Watches ---------------------------------------------------------------------------

WatchKind = Literal["node", "nodefeature"]
MAX_WATCH_EVENT_BYTES = 4 * 1024 * 1024
"""The largest watch event gfd reads (one line of the stream): a Node or NodeFeature is a
few KB; a longer line is an error, never an unbounded read."""
_WATCH_READ = 64 * 1024
_ERROR_BODY_BYTES = 64 * 1024
_OBJECT_EVENTS = frozenset({"ADDED", "MODIFIED", "DELETED"})
_WATCH_CLIENT_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One event of a watch. ``type``: ADDED, MODIFIED, DELETED or BOOKMARK. ``object``: the
    object as a GET returns it (its last state for DELETED), None for a BOOKMARK.
    ``resource_version``: where to resume watching after this event."""

    type: str
    object: dict[str, Any] | None
    resource_version: str


def _watch_error(verb: str, what: str, status: int, reason: str, body: str,
                 headers: Any = None) -> ApiError:
    """An error answer or ERROR event as an ApiError; a 410 as WatchExpired."""
    exc = ApiException(status=status, reason=reason)
    exc.body, exc.headers = body, headers
    error = _status_error(verb, what, exc)
    if error.status != 410:
        return error
    return WatchExpired(str(error), status=410, reason=error.reason,
                        retry_after=error.retry_after, causes=error.causes)


def _collection(kind: WatchKind, name: str, namespace: str) -> tuple[str, dict[str, str], str]:
    """The collection URL an object of ``kind`` is listed and watched at, its path
    parameters, and how messages name the object."""
    if kind == "node":
        return "/api/v1/nodes", {}, f"node {name}"
    if kind == "nodefeature":
        if not namespace:
            raise ValueError("a nodefeature is namespaced: give its namespace")
        return _NODEFEATURES, {"namespace": namespace}, f"nodefeature {namespace}/{name}"
    raise ValueError(f"cannot watch {show(kind)}: only node and nodefeature")


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
        _shut_under_reader(getattr(self._response, "connection", None))

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
            raise _watch_error("watch", self._what, code if isinstance(code, int) else 0,
                               str(obj.get("reason") or ""), json.dumps(obj))
        raise self._fail(f"unknown watch event type {show(kind)}")


KEEPALIVE = (30, 10, 3)
"""Idle seconds before the first probe, seconds between probes, probes lost before the
connection counts as dead: about a minute for a watch whose peer went away."""


def keepalive_socket_options() -> list[tuple[int, int, int]]:
    """urllib3's default socket options (no Nagle) plus TCP keepalive, where the OS has it."""
    idle, interval, count = KEEPALIVE
    options = list(urllib3.connection.HTTPConnection.default_socket_options)
    options.append((socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1))
    for name, value in (("TCP_KEEPIDLE", idle), ("TCP_KEEPINTVL", interval),
                        ("TCP_KEEPCNT", count)):
        if hasattr(socket, name):
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    return options


class _Channel:
    """An ApiClient whose requests each run under one deadline (its watchdog), one at a
    time: the loop's requests use one, the watch thread's reads another."""

    def __init__(self, cfg: Any) -> None:
        self.api = client.ApiClient(cfg)
        self.watchdog = _Watchdog()
        self.one_at_a_time = threading.Lock()
        pools = self.api.rest_client.pool_manager
        pools.pool_classes_by_scheme = cast(Any, {  # this client's pools only
            "http": functools.partial(_WatchedPool, watchdog=self.watchdog),
            "https": functools.partial(_WatchedHttpsPool, watchdog=self.watchdog)})


@functools.cache
def unverified(where: str) -> None:
    """One warning line, once per process, for credentials that skip TLS verification
    (``insecure-skip-tls-verify``); urllib3's own two-line warning, which it repeats for each
    new connection, is silenced."""
    import warnings

    warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
    log.warning("%s skips TLS verification (insecure-skip-tls-verify): gfd does not check the "
                "API server's certificate; give the cluster's certificate-authority instead",
                where)


class Kube:
    """A small, typed facade over the kubernetes client for what gfd needs."""

    max_watch_event_bytes: int = MAX_WATCH_EVENT_BYTES
    """The cap on one watch event (``WatchStream``)."""
    _watch_api: Any = None

    def __init__(self, *, kubeconfig: str = "", qps: float = 5.0, burst: int = 10,
                 on_request: Callable[[str, str], None] | None = None,
                 timeout: float = DEADLINE, max_answer: int = MAX_ANSWER_BYTES) -> None:
        cfg = client.Configuration()
        check_kubeconfig(kubeconfig)
        try:
            if kubeconfig:
                config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
            else:
                config.load_incluster_config(client_configuration=cfg)
        except (ConfigException, OSError, TypeError, ValueError, yaml.YAMLError) as exc:
            where = kubeconfig or "in-cluster service account"
            raise ConfigError(
                f"cannot load Kubernetes credentials from {where}: {one_line(str(exc))} (set "
                "--kubeconfig / KUBECONFIG, or run in a pod with a ServiceAccount)") from exc
        cfg.retries = False  # gfd decides about retries and backoff itself
        if not cfg.verify_ssl:
            unverified(kubeconfig or "the in-cluster service account")
        # Requests go straight through ApiClient: the generated CoreV1Api wraps 400+
        # methods in validators when imported (+21 MiB, +0.5 s) and gfd needs four calls.
        self._main = _Channel(cfg)
        self._api = self._main.api
        self._side: _Channel | None = None
        """For the watch thread's reads (``list_object``): never waits for the loop's."""
        self._events: _Channel | None = None
        """For the Events thread's requests: never waits for the loop's, nor holds them up."""
        self._limiter = RateLimiter(qps, burst)
        self._on_request = on_request
        self._timeout = timeout
        self._max_answer = max_answer

    def close(self) -> None:
        self._api.close()
        self._main.watchdog.close()
        for side in (self._side, self._events):
            if side is not None:
                side.api.close()
                side.watchdog.close()
        if self._watch_api is not None:
            self._watch_api.close()

    def _read(self, verb: str, what: str, raw: Any) -> bytes:
        """The whole body, read in chunks; refused (connection dropped) beyond the cap."""
        declared = str(raw.headers.get("Content-Length") or "")
        size = int(declared) if declared.isdigit() else 0
        body = bytearray()
        if size <= self._max_answer:
            for chunk in raw.stream(_CHUNK, decode_content=True):
                body += chunk
                if len(body) > self._max_answer:
                    break
            else:
                raw.release_conn()
                return bytes(body)
        raw.close()
        raise ApiError(f"{verb} {what}: the API server's answer is larger than "
                       f"{self._max_answer // 1024} KiB, more than a Node or NodeFeature can be "
                       f"(HTTP {raw.status}; a proxy in the way?)", status=int(raw.status))

    def _late(self, verb: str, what: str) -> ApiError:
        return ApiError(f"{verb} {what}: no complete answer from the API server within "
                        f"{self._timeout:g} s (a slow or stuck connection)")

    def _object(self, verb: str, what: str, raw: Any, body: bytes) -> dict[str, Any]:
        """A successful answer must be a Kubernetes object (kind and apiVersion)."""
        try:
            parsed: Any = json.loads(body)
        except ValueError:
            parsed = None
        if (isinstance(parsed, dict) and isinstance(parsed.get("kind"), str)
                and isinstance(parsed.get("apiVersion"), str)):
            return parsed
        kind = str(raw.headers.get("Content-Type") or "no content type").split(";")[0]
        raise ApiError(f"{verb} {what}: the API server's answer is not a Kubernetes object: "
                       f"HTTP {raw.status}, {kind}, {_snippet(body)} (a proxy in the way?)",
                       status=int(raw.status))

    def _call(self, verb: str, what: str, method: str, path: str, *,
              path_params: dict[str, str], query: list[tuple[str, str]] | None = None,
              body: dict[str, Any] | None = None,
              content_type: str = "application/json",
              channel: _Channel | None = None) -> dict[str, Any]:
        self._limiter.take()
        code = "error"
        chan = channel or self._main
        request = chan.api.param_serialize(
            method=method, resource_path=path, path_params=path_params,
            query_params=query or [], body=body, auth_settings=["BearerToken"],
            header_params={"Accept": "application/json", "Content-Type": content_type},
        )
        with chan.one_at_a_time:
            deadline = chan.watchdog.arm(self._timeout)
            raw: Any = None
            try:
                response = chan.api.call_api(
                    *request, _request_timeout=(self._timeout, self._timeout))
                raw = response.response
                code = str(response.status)
                data = self._read(verb, what, raw)
                if deadline.fired:  # cut short at the deadline: not the whole answer
                    raw.close()
                    code = "error"
                    raise self._late(verb, what)
                if 200 <= response.status <= 299:
                    return self._object(verb, what, raw, data)
                error = ApiException(status=response.status, reason=response.reason)
                error.headers, error.body = response.headers, data.decode("utf-8", "replace")
                raise _status_error(verb, what, error)
            except ApiException as exc:
                code = str(exc.status)
                raise _status_error(verb, what, exc) from exc
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                if raw is not None:
                    raw.close()  # a half-read answer: its connection cannot be reused
                    code = "error"
                if deadline.fired:
                    raise self._late(verb, what) from exc
                raise ApiError(f"{verb} {what}: cannot reach the API server: {exc}") from exc
            finally:
                chan.watchdog.disarm(deadline)
                if self._on_request:
                    self._on_request(verb, code)

    # Nodes -------------------------------------------------------------------------

    def get_node(self, name: str) -> dict[str, Any]:
        return self._call("get", f"node {name}", "GET", _NODE, path_params={"name": name})

    def apply_node_labels(self, name: str, labels: dict[str, str], *,
                          field_manager: str, uid: str = "") -> dict[str, Any]:
        """Server-side apply of exactly ``labels`` as ``field_manager``'s set (force). A
        ``uid`` is a precondition: the API server then never creates the Node (409 when it is
        gone, 422 when another Node took its name), where an apply would create it."""
        metadata: dict[str, Any] = {"name": name, "labels": labels}
        if uid:
            metadata["uid"] = uid
        body = {"apiVersion": "v1", "kind": "Node", "metadata": metadata}
        return self._call("patch", f"node {name}", "PATCH", _NODE, path_params={"name": name},
                          query=[("fieldManager", field_manager), ("force", "true")],
                          body=body, content_type=APPLY)

    # NodeFeatures -------------------------------------------------------------------

    def get_nodefeature(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._call("get", f"nodefeature {namespace}/{name}", "GET", _NODEFEATURE,
                              path_params={"namespace": namespace, "name": name})
        except ApiError as exc:
            if exc.status == 404 and not exc.resource_missing:
                return None
            raise

    def create_nodefeature(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        return self._call("create", f"nodefeature {namespace}/{name}", "POST", _NODEFEATURES,
                          path_params={"namespace": namespace}, body=body)

    def replace_nodefeature(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        return self._call("update", f"nodefeature {namespace}/{name}", "PUT", _NODEFEATURE,
                          path_params={"namespace": namespace, "name": name}, body=body)

    def delete_nodefeature(self, namespace: str, name: str, *, uid: str = "") -> bool:
        """Delete; with ``uid``, only that object (a precondition: 409 if it was replaced)."""
        options = ({"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
                   if uid else None)
        try:
            self._call("delete", f"nodefeature {namespace}/{name}", "DELETE", _NODEFEATURE,
                       path_params={"namespace": namespace, "name": name}, body=options)
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    # ResourceSlices -------------------------------------------------------------------

    def count_resourceslices(self, node: str, driver: str) -> int:
        """How many ResourceSlices (``resource.k8s.io/v1``) of ``driver`` this ``node`` has,
        up to ``RESOURCESLICE_LIMIT`` (plus the count the server says remain, if it says).
        One LIST, field-selected by ``spec.nodeName`` and ``spec.driver`` -- the two
        fields the API server indexes for ResourceSlices besides the metadata ones."""
        answer = self._call("list", f"resourceslices of driver {driver} on node {node}",
                            "GET", _RESOURCESLICES, path_params={},
                            query=[("fieldSelector",
                                    f"spec.nodeName={node},spec.driver={driver}"),
                                   ("limit", str(RESOURCESLICE_LIMIT))])
        items = answer.get("items")
        count = len(items) if isinstance(items, list) else 0
        meta = answer.get("metadata")
        remaining = meta.get("remainingItemCount") if isinstance(meta, dict) else None
        return count + (remaining if isinstance(remaining, int) and remaining > 0 else 0)

    # Pods ---------------------------------------------------------------------------

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return self._call("get", f"pod {namespace}/{name}", "GET", _POD,
                          path_params={"namespace": namespace, "name": name})

    # Events -------------------------------------------------------------------------

    def _events_channel(self) -> _Channel:
        with _WATCH_CLIENT_LOCK:
            if self._events is None:
                self._events = _Channel(self._api.configuration)
            return self._events

    def create_event(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create a core/v1 Event (on a connection of its own: see ``_events``)."""
        name = body["metadata"]["name"]
        return self._call("create", f"event {namespace}/{name}", "POST", _EVENTS,
                          path_params={"namespace": namespace}, body=body,
                          channel=self._events_channel())

    def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """Merge-patch an Event (a repeat: its count, lastTimestamp and message)."""
        return self._call("patch", f"event {namespace}/{name}", "PATCH", _EVENT,
                          path_params={"namespace": namespace, "name": name}, body=patch,
                          content_type=MERGE, channel=self._events_channel())

    # Watches ------------------------------------------------------------------------

    def list_object(self, kind: WatchKind, name: str, *,
                    namespace: str = "") -> tuple[dict[str, Any] | None, str]:
        """The object (None when there is none) and the resourceVersion to watch it from.

        One LIST of the collection field-selected to the name, not a GET: the list's
        resourceVersion is the server's current one, while a GET gives the object's own,
        which after a while falls out of the server's watch window and would answer every
        watch with 410 (Expired). The object has its kind and apiVersion, as from a GET."""
        path, params, what = _collection(kind, name, namespace)
        with _WATCH_CLIENT_LOCK:
            if self._side is None:
                self._side = _Channel(self._api.configuration)
        answer = self._call("list", what, "GET", path, path_params=params,
                            query=[("fieldSelector", f"metadata.name={name}")],
                            channel=self._side)
        meta = answer.get("metadata")
        rv = str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""
        items = answer.get("items")
        found = [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []
        if not found:
            return None, rv
        obj = found[0]
        list_kind, api_version = str(answer.get("kind") or ""), answer.get("apiVersion")
        if list_kind.endswith("List") and api_version:
            obj.setdefault("kind", list_kind[:-len("List")])
            obj.setdefault("apiVersion", api_version)
        return obj, rv

    def watch(self, kind: WatchKind, name: str, *, namespace: str = "",
              resource_version: str, timeout: float) -> WatchStream:
        """Open one watch on one object and return its stream (see ``WatchStream``).

        The request is field-selected to ``name``, asks for bookmarks, and asks the server to
        end it cleanly after ``timeout`` seconds (rounded up to whole seconds, at least 1).
        ``resource_version`` "" starts with an ADDED event of the current object, if any;
        else the events after that resourceVersion come first. An answer other than 200 is
        an ``ApiError`` with its status (``WatchExpired`` for 410) and no connection is an
        ``ApiError`` without one, both raised here. It takes a token from the rate limiter
        and is reported once to ``on_request`` as verb ``watch``. It runs on a connection
        pool of its own, without the request timeout of the other calls: the connect timeout
        is that timeout, the read timeout exceeds the watch's own."""
        path, params, what = _collection(kind, name, namespace)
        seconds = max(1, math.ceil(timeout))
        query = [("watch", "1"), ("fieldSelector", f"metadata.name={name}")]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        query += [("allowWatchBookmarks", "true"), ("timeoutSeconds", str(seconds))]
        self._limiter.take()
        api = self._watch_client()
        code = "error"
        try:
            request = api.param_serialize(
                method="GET", resource_path=path, path_params=params, query_params=query,
                auth_settings=["BearerToken"], header_params={"Accept": "application/json"})
            response = api.call_api(*request,
                                    _request_timeout=(self._timeout, seconds + self._timeout))
            code = str(response.status)
        except ApiException as exc:
            code = str(exc.status)
            raise _status_error("watch", what, exc) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ApiError(f"watch {what}: cannot reach the API server: {exc}") from exc
        finally:
            if self._on_request:
                self._on_request("watch", code)
        raw = response.response
        if response.status == 200:
            return WatchStream(what, raw, self.max_watch_event_bytes)
        try:
            body = raw.read(_ERROR_BODY_BYTES).decode("utf-8", "replace")
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            body = str(exc)
        finally:
            raw.close()
            raw.release_conn()
        raise _watch_error("watch", what, response.status, str(response.reason or ""), body,
                           response.headers)

    def _watch_client(self) -> Any:
        """The ApiClient watches use: the same configuration, its own connection pool, and TCP
        keepalive, so a watch whose connection died silently (a node's network, a load
        balancer's idle timeout) is noticed in about a minute, not at its timeout."""
        with _WATCH_CLIENT_LOCK:
            if self._watch_api is None:
                cfg = copy.copy(self._api.configuration)
                cfg.socket_options = keepalive_socket_options()
                self._watch_api = client.ApiClient(cfg)
            return self._watch_api
