"""Reading whole collections cheaply: a LIST in pages (``limit`` and ``continue``), each page
handed on as it arrives so the caller can reduce it before the next is read; used by
``gfd fleet``, which reads Nodes, Pods, ResourceSlices and ResourceClaims cluster-wide, and
``gfd why``, which also GETs one pod and its claims and templates. The listing's
resourceVersion is where a WATCH of the collection starts (``Lister.watch``: the same
selectors, bookmarks on, on a connection pool of its own with TCP keepalive).

The API server serves these reads from its watch cache (Kubernetes 1.34+ serves consistent,
paginated LISTs from it: ``ConsistentListFromCache``, ``ListFromCacheSnapshot``), so a page
costs it no etcd read. A continue token that expired (410) restarts the collection once from
the first page, as kubectl does."""

from __future__ import annotations

import copy
import math
import threading
from collections.abc import Iterator
from typing import Any

from kubernetes import client

from gfd.errors import ApiError
from gfd.kube.calls import DEADLINE, Calls, RateLimiter
from gfd.kube.channel import Channel, keepalive_socket_options
from gfd.kube.credentials import configuration
from gfd.kube.watch import WatchStream, open_watch

PAGE = 250
"""Objects per page: half kubectl's chunk of 500, since a decoded page is what a read holds
at once (a page of 500 big pods is some 60 MiB of Python objects; 5,000 nodes and 50,000
pods are 220 requests either way cheap for the watch cache)."""
MAX_PAGE_BYTES = 64 * 1024 * 1024
"""The largest page read: 500 pods of a big spec are a few MiB."""
MAX_EVENT_BYTES = 16 * 1024 * 1024
"""The largest watch event read: one object of the collection (a Node with its images, a
ResourceSlice of 128 devices) is well under a MiB."""


class Pages(Iterator[list[dict[str, Any]]]):
    """A LIST, page by page (each page's items, as it arrives); ``resource_version`` is the
    listing's once its first page is in (every page of one listing has it; were they to
    differ, the first page's is the one a watch may start from without missing a change)."""

    def __init__(self, pages: Iterator[tuple[list[dict[str, Any]], str]]) -> None:
        self._pages = pages
        self.resource_version = ""

    def __iter__(self) -> Pages:
        return self

    def __next__(self) -> list[dict[str, Any]]:
        items, version = next(self._pages)
        self.resource_version = self.resource_version or version
        return items


class Lister:
    """Paginated LISTs over one connection (kubeconfig and context as kubectl takes them)."""

    def __init__(self, *, kubeconfig: str = "", context: str = "", qps: float = 50.0,
                 burst: int = 100, page: int = PAGE, timeout: float = DEADLINE) -> None:
        self._channel = Channel(configuration(kubeconfig, context=context))
        self._calls = Calls(self._channel, limiter=RateLimiter(qps, burst), timeout=timeout,
                            max_answer=MAX_PAGE_BYTES)
        self.page = page
        self.requests = 0
        """LIST requests sent (pages read)."""
        self.watches = 0
        """WATCH requests sent."""
        self._watch_api: Any = None
        self._lock = threading.Lock()

    @property
    def server(self) -> str:
        return str(self._channel.api.configuration.host)

    def close(self) -> None:
        self._channel.api.close()
        self._channel.watchdog.close()
        with self._lock:
            if self._watch_api is not None:
                self._watch_api.close()

    def get(self, path: str, what: str) -> dict[str, Any] | None:
        """The object at ``path`` (``/api/v1/namespaces/ns/pods/name``); None when it does not
        exist (404). An ``ApiError`` for any other refusal or failure."""
        try:
            answer = self._calls.call("get", what, "GET", path, path_params={})
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return answer

    def pages(self, path: str, what: str, *, field_selector: str = "",
              label_selector: str = "") -> Pages:
        """The collection at ``path`` (``/api/v1/pods``), page by page: each page's items.
        An ``ApiError`` for a refused or failed LIST (``status`` 403 when forbidden)."""
        return Pages(self._pages(path, what, field_selector, label_selector))

    def watch(self, path: str, what: str, *, resource_version: str, field_selector: str = "",
              label_selector: str = "", timeout: float = 1800.0) -> WatchStream:
        """A WATCH of the collection at ``path`` from ``resource_version`` (a listing's),
        with bookmarks, ended cleanly by the server after ``timeout`` seconds; its stream
        (``WatchStream``). An answer other than 200 is an ``ApiError`` with its status
        (``WatchExpired`` for 410: list again), no connection one without. Each watch holds
        a connection of its own, kept alive by TCP keepalive, so a watch whose connection
        died silently is noticed in about a minute."""
        seconds = max(1, math.ceil(timeout))
        query = [("watch", "1"), ("allowWatchBookmarks", "true"),
                 ("timeoutSeconds", str(seconds))]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        if label_selector:
            query.append(("labelSelector", label_selector))
        self._calls.limiter.take()
        self.watches += 1
        return open_watch(self._watch_client(), what, path, params={}, query=query,
                          connect_timeout=self._calls.timeout,
                          read_timeout=seconds + self._calls.timeout,
                          max_event=MAX_EVENT_BYTES)

    def _watch_client(self) -> Any:
        with self._lock:
            if self._watch_api is None:
                cfg = copy.copy(self._channel.api.configuration)
                cfg.socket_options = keepalive_socket_options()
                self._watch_api = client.ApiClient(cfg)
            return self._watch_api

    def _pages(self, path: str, what: str, field_selector: str,
               label_selector: str) -> Iterator[tuple[list[dict[str, Any]], str]]:
        token = ""
        restarted = False
        while True:
            query = [("limit", str(self.page))]
            if field_selector:
                query.append(("fieldSelector", field_selector))
            if label_selector:
                query.append(("labelSelector", label_selector))
            if token:
                query.append(("continue", token))
            try:
                answer = self._calls.call("list", what, "GET", path, path_params={},
                                          query=query)
            except ApiError as exc:
                if exc.status == 410 and token and not restarted:
                    token, restarted = "", True  # the continue token expired: start again
                    continue
                raise
            self.requests += 1
            items = answer.get("items")
            meta = answer.get("metadata")
            meta = meta if isinstance(meta, dict) else {}
            yield ([i for i in items if isinstance(i, dict)] if isinstance(items, list) else [],
                   str(meta.get("resourceVersion") or ""))
            token = str(meta.get("continue") or "")
            if not token:
                return
