"""The Kubernetes API boundary: the only importer of the ``kubernetes`` client.

Returns plain dicts, raises only :class:`gfd.errors.ApiError` with the HTTP status,
the API reason, the Status causes and any Retry-After, and reports every request
(verb, code) to an optional callback for metrics.

Every answer is distrusted the same way: it must arrive whole within one deadline (connect
included; a socket timeout alone restarts with each byte, so a trickling answer would never
end), it is read in chunks and refused beyond ``MAX_ANSWER_BYTES`` (a Node or NodeFeature is a
few KB), and a success must be a Kubernetes object (an auth proxy's HTML page is not).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import socket
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import urllib3
import urllib3.connectionpool
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from gfd.errors import ApiError, ConfigError, one_line

log = logging.getLogger(__name__)

NFD_GROUP = "nfd.k8s-sigs.io"
NFD_VERSION = "v1alpha1"
NODEFEATURES = "nodefeatures"
APPLY = "application/apply-patch+yaml"
_NODE = "/api/v1/nodes/{name}"
_POD = "/api/v1/namespaces/{namespace}/pods/{name}"
_NODEFEATURES = f"/apis/{NFD_GROUP}/{NFD_VERSION}/namespaces/{{namespace}}/{NODEFEATURES}"
_NODEFEATURE = _NODEFEATURES + "/{name}"
MAX_ANSWER_BYTES = 4 * 1024 * 1024
"""The largest answer gfd reads: a Node or a NodeFeature is a few KB."""
DEADLINE = 30.0
"""Seconds one request may take in all, connect included (kept well under --stuck-after)."""
_CHUNK = 64 * 1024
_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
               (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"))


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
            kind = next((name for test, name in _FILE_KINDS if test(mode)), "not a file")
            raise ConfigError(f"kubeconfig {path} is {kind}, not a regular file (point "
                              "--kubeconfig / KUBECONFIG at the kubeconfig file itself)")


class _Watchdog:
    """Ends the request in flight when its deadline passes, by shutting down the socket of
    the connection it uses (the pool hands that connection over in ``attach``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conn: Any = None
        self._timer: threading.Timer | None = None
        self.fired = False

    def arm(self, seconds: float) -> None:
        self.fired = False
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def attach(self, conn: Any) -> None:
        with self._lock:
            self._conn = conn
            if self.fired:
                self._shut(conn)

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        with self._lock:
            self._conn = None

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            if self._conn is not None:
                self._shut(self._conn)

    @staticmethod
    def _shut(conn: Any) -> None:
        sock = getattr(conn, "sock", None)
        if sock is None:
            return  # still connecting: the connect timeout (the deadline) ends it
        try:  # the plain socket's shutdown: an SSL socket's would drop its state under a reader
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
        except OSError:
            pass


class _WatchedPool(urllib3.connectionpool.HTTPConnectionPool):
    def __init__(self, *args: Any, watchdog: _Watchdog, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._watchdog = watchdog

    def _get_conn(self, timeout: float | None = None) -> Any:
        conn = super()._get_conn(timeout)
        self._watchdog.attach(conn)
        return conn


class _WatchedHttpsPool(urllib3.connectionpool.HTTPSConnectionPool):
    def __init__(self, *args: Any, watchdog: _Watchdog, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._watchdog = watchdog

    def _get_conn(self, timeout: float | None = None) -> Any:
        conn = super()._get_conn(timeout)
        self._watchdog.attach(conn)
        return conn


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


class Kube:
    """A small, typed facade over the kubernetes client for what gfd needs."""

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
        # Requests go straight through ApiClient: the generated CoreV1Api wraps 400+
        # methods in validators when imported (+21 MiB, +0.5 s) and gfd needs four calls.
        self._api = client.ApiClient(cfg)
        self._watchdog = _Watchdog()
        pools = self._api.rest_client.pool_manager
        pools.pool_classes_by_scheme = cast(Any, {  # this client's pools only
            "http": functools.partial(_WatchedPool, watchdog=self._watchdog),
            "https": functools.partial(_WatchedHttpsPool, watchdog=self._watchdog)})
        self._limiter = RateLimiter(qps, burst)
        self._on_request = on_request
        self._timeout = timeout
        self._max_answer = max_answer
        self._one_at_a_time = threading.Lock()

    def close(self) -> None:
        self._api.close()

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
              content_type: str = "application/json") -> dict[str, Any]:
        self._limiter.take()
        code = "error"
        request = self._api.param_serialize(
            method=method, resource_path=path, path_params=path_params,
            query_params=query or [], body=body, auth_settings=["BearerToken"],
            header_params={"Accept": "application/json", "Content-Type": content_type},
        )
        with self._one_at_a_time:
            self._watchdog.arm(self._timeout)
            raw: Any = None
            try:
                response = self._api.call_api(
                    *request, _request_timeout=(self._timeout, self._timeout))
                raw = response.response
                code = str(response.status)
                data = self._read(verb, what, raw)
                if self._watchdog.fired:  # cut short at the deadline: not the whole answer
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
                if self._watchdog.fired:
                    raise self._late(verb, what) from exc
                raise ApiError(f"{verb} {what}: cannot reach the API server: {exc}") from exc
            finally:
                self._watchdog.disarm()
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

    # Pods ---------------------------------------------------------------------------

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return self._call("get", f"pod {namespace}/{name}", "GET", _POD,
                          path_params={"namespace": namespace, "name": name})
