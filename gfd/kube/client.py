"""The Kubernetes client gfd uses: ``Kube``, a small typed facade with one method per thing gfd
asks of the API server (Nodes, NodeFeatures, ResourceSlices, the pod, Events, a watch on one
object), each a plain dict in and out. Its requests go through ``calls``; each thread that
talks to the API server (the loop, the watch thread's reads, the Events thread, the watches)
has a connection pool of its own, so none waits for, or holds up, another."""

from __future__ import annotations

import copy
import math
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import client

from gfd.budget import Budget
from gfd.errors import ApiError, show
from gfd.kube.calls import DEADLINE, MAX_ANSWER_BYTES, Calls, RateLimiter
from gfd.kube.channel import Channel, keepalive_socket_options
from gfd.kube.credentials import configuration
from gfd.kube.watch import MAX_WATCH_EVENT_BYTES, WatchKind, WatchStream, open_watch

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

_CHUNK = 64 * 1024


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


class Kube:
    """A small, typed facade over the kubernetes client for what gfd needs."""

    max_watch_event_bytes: int = MAX_WATCH_EVENT_BYTES
    """The cap on one watch event (``WatchStream``)."""
    _watch_api: Any = None

    def __init__(self, *, kubeconfig: str = "", qps: float = 5.0, burst: int = 10,
                 on_request: Callable[[str, str], None] | None = None,
                 timeout: float = DEADLINE, max_answer: int = MAX_ANSWER_BYTES,
                 budget: Budget | None = None) -> None:
        # Requests go straight through ApiClient: the generated CoreV1Api wraps 400+
        # methods in validators when imported (+21 MiB, +0.5 s) and gfd needs four calls.
        self._main = Channel(configuration(kubeconfig))
        self._api = self._main.api
        self._side: Channel | None = None
        """For the watch thread's reads (``list_object``): never waits for the loop's."""
        self._events: Channel | None = None
        """For the Events thread's requests: never waits for the loop's, nor holds them up."""
        self._lock = threading.Lock()
        """Guards the channels made on first use (``_side``, ``_events``, ``_watch_api``)."""
        self._calls = Calls(self._main, limiter=RateLimiter(qps, burst), timeout=timeout,
                            max_answer=max_answer, on_request=on_request, budget=budget)

    @property
    def budget(self) -> Budget | None:
        """The cycle's deadline the loop's requests share (``gfd.budget``): each request on
        the thread that opened it ends by then, whatever its own deadline."""
        return self._calls.budget

    def close(self) -> None:
        self._api.close()
        self._main.watchdog.close()
        for side in (self._side, self._events):
            if side is not None:
                side.api.close()
                side.watchdog.close()
        if self._watch_api is not None:
            self._watch_api.close()

    def get_node(self, name: str) -> dict[str, Any]:
        return self._calls.call("get", f"node {name}", "GET", _NODE, path_params={"name": name})

    def apply_node_labels(self, name: str, labels: dict[str, str], *,
                          field_manager: str, uid: str = "") -> dict[str, Any]:
        """Server-side apply of exactly ``labels`` as ``field_manager``'s set (force). A
        ``uid`` is a precondition: the API server then never creates the Node (409 when it is
        gone, 422 when another Node took its name), where an apply would create it."""
        metadata: dict[str, Any] = {"name": name, "labels": labels}
        if uid:
            metadata["uid"] = uid
        body = {"apiVersion": "v1", "kind": "Node", "metadata": metadata}
        return self._calls.call("patch", f"node {name}", "PATCH", _NODE, path_params={"name": name},
                                query=[("fieldManager", field_manager), ("force", "true")],
                                body=body, content_type=APPLY)

    # NodeFeatures -------------------------------------------------------------------

    def get_nodefeature(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._calls.call("get", f"nodefeature {namespace}/{name}", "GET", _NODEFEATURE,
                                    path_params={"namespace": namespace, "name": name})
        except ApiError as exc:
            if exc.status == 404 and not exc.resource_missing:
                return None
            raise

    def create_nodefeature(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        return self._calls.call("create", f"nodefeature {namespace}/{name}", "POST", _NODEFEATURES,
                                path_params={"namespace": namespace}, body=body)

    def replace_nodefeature(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        return self._calls.call("update", f"nodefeature {namespace}/{name}", "PUT", _NODEFEATURE,
                                path_params={"namespace": namespace, "name": name}, body=body)

    def delete_nodefeature(self, namespace: str, name: str, *, uid: str = "") -> bool:
        """Delete; with ``uid``, only that object (a precondition: 409 if it was replaced)."""
        options = ({"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
                   if uid else None)
        try:
            self._calls.call("delete", f"nodefeature {namespace}/{name}", "DELETE", _NODEFEATURE,
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
        answer = self._calls.call("list", f"resourceslices of driver {driver} on node {node}",
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
        return self._calls.call("get", f"pod {namespace}/{name}", "GET", _POD,
                                path_params={"namespace": namespace, "name": name})

    # Events -------------------------------------------------------------------------

    def _events_channel(self) -> Channel:
        with self._lock:
            if self._events is None:
                self._events = Channel(self._api.configuration)
            return self._events

    def create_event(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create a core/v1 Event (on a connection of its own: see ``_events``)."""
        name = body["metadata"]["name"]
        return self._calls.call("create", f"event {namespace}/{name}", "POST", _EVENTS,
                                path_params={"namespace": namespace}, body=body,
                                channel=self._events_channel())

    def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """Merge-patch an Event (a repeat: its count, lastTimestamp and message)."""
        return self._calls.call("patch", f"event {namespace}/{name}", "PATCH", _EVENT,
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
        with self._lock:
            if self._side is None:
                self._side = Channel(self._api.configuration)
        answer = self._calls.call("list", what, "GET", path, path_params=params,
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
        path, params, what = _collection(kind, name, namespace)
        seconds = max(1, math.ceil(timeout))
        query = [("watch", "1"), ("fieldSelector", f"metadata.name={name}")]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        query += [("allowWatchBookmarks", "true"), ("timeoutSeconds", str(seconds))]
        self._calls.limiter.take()
        return open_watch(self._watch_client(), what, path, params=params, query=query,
                          connect_timeout=self._calls.timeout,
                          read_timeout=seconds + self._calls.timeout,
                          max_event=self.max_watch_event_bytes,
                          on_request=self._calls.on_request)

    def _watch_client(self) -> Any:
        """The ApiClient watches use: the same configuration, its own connection pool, and TCP
        keepalive, so a watch whose connection died silently (a node's network, a load
        balancer's idle timeout) is noticed in about a minute, not at its timeout."""
        with self._lock:
            if self._watch_api is None:
                cfg = copy.copy(self._api.configuration)
                cfg.socket_options = keepalive_socket_options()
                self._watch_api = client.ApiClient(cfg)
            return self._watch_api
