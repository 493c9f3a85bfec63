"""The Node sink: labels the Node directly with server-side apply, field manager ``gfd``.

Why server-side apply: the API server itself records, per label key, that gfd set it
(managedFields), so gfd removes exactly the keys it set and stopped producing, in the
same request that sets the new ones; labels of every other writer are never touched;
there is no read-modify-write race and no ownership annotation that someone can edit.
gfd forces conflicts, as controllers should, so it stays authoritative for its own keys.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gfd.kube import KubeError
from gfd.sinks.api import Retry
from gfd.sinks.base import PublishResult, diff

log = logging.getLogger(__name__)

FIELD_MANAGER = "gfd"
_QUOTED = re.compile(r'"([^"]+)"')


class NodeApi(Protocol):
    def get_node(self, name: str) -> dict[str, Any]: ...
    def apply_node_labels(self, name: str, labels: dict[str, str], *,
                          field_manager: str) -> dict[str, Any]: ...


def owned_labels(node: dict[str, Any], manager: str = FIELD_MANAGER) -> dict[str, str]:
    """The labels ``manager`` owns on a Node, from its managedFields."""
    meta = node.get("metadata", {})
    labels: dict[str, str] = meta.get("labels") or {}
    keys: set[str] = set()
    for entry in meta.get("managedFields") or []:
        if entry.get("manager") != manager or entry.get("operation") != "Apply":
            continue
        fields = ((entry.get("fieldsV1") or {}).get("f:metadata") or {}).get("f:labels") or {}
        keys.update(k[2:] for k in fields if k.startswith("f:"))
    return {k: labels[k] for k in sorted(keys) if k in labels}


def offending_keys(error: KubeError, labels: dict[str, str]) -> set[str]:
    """Label keys a 422 names (in its causes or message)."""
    text = " ".join((str(error), *error.causes))
    named = set(_QUOTED.findall(text))
    return {k for k, v in labels.items() if k in named or (v and v in named)}


@dataclass(slots=True)
class NodeSink:
    api: NodeApi
    node: str
    resync_interval: float = 3600.0
    clock: Callable[[], float] = time.monotonic
    retry: Retry = field(default_factory=Retry)
    field_manager: str = FIELD_MANAGER
    name: str = "node"
    _labels: dict[str, str] | None = field(default=None, init=False)
    _synced_at: float = field(default=0.0, init=False)

    def published(self) -> dict[str, str]:
        return owned_labels(self.retry.run(lambda: self.api.get_node(self.node)),
                            self.field_manager)

    def publish(self, labels: dict[str, str]) -> PublishResult:
        now = self.clock()
        resync_due = now - self._synced_at >= self.resync_interval
        if self._labels == labels and not resync_due:
            return PublishResult(written=False)
        requests = 0
        if self._labels is None:
            old = self.published()  # first publish: report the real change
            requests += 1
        else:
            old = self._labels
        sent = dict(labels)
        try:
            self._apply(sent)
        except KubeError as exc:
            if exc.status != 422:
                raise
            bad = offending_keys(exc, sent)
            if not bad:
                raise
            log.error("API server rejected label(s) %s: %s; publishing the others",
                      ", ".join(sorted(bad)), exc)
            sent = {k: v for k, v in sent.items() if k not in bad}
            requests += 1
            self._apply(sent)
        requests += 1
        self._labels = dict(labels)
        self._synced_at = now
        return PublishResult(written=True, change=diff(old, sent), requests=requests)

    def _apply(self, labels: dict[str, str]) -> dict[str, Any]:
        return self.retry.run(lambda: self.api.apply_node_labels(
            self.node, labels, field_manager=self.field_manager))

    def prune(self) -> PublishResult:
        old = self.published()
        self._apply({})
        self._labels = None
        return PublishResult(written=True, change=diff(old, {}), requests=2)
