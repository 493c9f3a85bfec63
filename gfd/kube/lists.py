"""Reading whole collections cheaply: a LIST in pages (``limit`` and ``continue``), each page
handed on as it arrives so the caller can reduce it before the next is read; used by
``gfd fleet``, which reads Nodes, Pods, ResourceSlices and ResourceClaims cluster-wide, and
``gfd why``, which also GETs one pod and its claims and templates.

The API server serves these reads from its watch cache (Kubernetes 1.34+ serves consistent,
paginated LISTs from it: ``ConsistentListFromCache``, ``ListFromCacheSnapshot``), so a page
costs it no etcd read. A continue token that expired (410) restarts the collection once from
the first page, as kubectl does."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gfd.errors import ApiError
from gfd.kube.calls import DEADLINE, Calls, RateLimiter
from gfd.kube.channel import Channel
from gfd.kube.credentials import configuration

PAGE = 250
"""Objects per page: half kubectl's chunk of 500, since a decoded page is what a read holds
at once (a page of 500 big pods is some 60 MiB of Python objects; 5,000 nodes and 50,000
pods are 220 requests either way cheap for the watch cache)."""
MAX_PAGE_BYTES = 64 * 1024 * 1024
"""The largest page read: 500 pods of a big spec are a few MiB."""


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

    @property
    def server(self) -> str:
        return str(self._channel.api.configuration.host)

    def close(self) -> None:
        self._channel.api.close()
        self._channel.watchdog.close()

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
              label_selector: str = "") -> Iterator[list[dict[str, Any]]]:
        """The collection at ``path`` (``/api/v1/pods``), page by page: each page's items.
        An ``ApiError`` for a refused or failed LIST (``status`` 403 when forbidden)."""
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
            yield [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []
            meta = answer.get("metadata")
            token = str(meta.get("continue") or "") if isinstance(meta, dict) else ""
            if not token:
                return
