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
from dataclasses import dataclass, field
from typing import Any, Protocol

from gfd.errors import ApiError
from gfd.sinks.base import PublishResult, diff
from gfd.sinks.retry import Retry
from gfd.triggers import Fire

log = logging.getLogger(__name__)

FIELD_MANAGER = "gfd"
_QUOTED = re.compile(r'"([^"]+)"')


class NodeApi(Protocol):
    def get_node(self, name: str) -> dict[str, Any]: ...
    def apply_node_labels(self, name: str, labels: dict[str, str], *,
                          field_manager: str) -> dict[str, Any]: ...
    def close(self) -> None: ...


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


def offending_keys(error: ApiError, labels: dict[str, str]) -> set[str]:
    """Label keys a 422 names (in its causes or message)."""
    text = " ".join((str(error), *error.causes))
    named = set(_QUOTED.findall(text))
    return {k for k, v in labels.items() if k in named or (v and v in named)}


@dataclass(slots=True)
class NodeSink:
    """Publishes to the Node's labels. Costs no request while labels are unchanged; the
    loop's resync duty calls ``refresh()`` so the next publish re-applies (heals drift)."""

    api: NodeApi
    node: str
    retry: Retry = field(default_factory=Retry)
    field_manager: str = FIELD_MANAGER
    name: str = "node"
    _labels: dict[str, str] | None = field(default=None, init=False)
    _stale: bool = field(default=False, init=False)

    def refresh(self) -> None:
        """Apply again at the next publish even if labels are unchanged (resync)."""
        self._stale = True

    def watch(self, fire: Fire) -> None:
        pass  # TODO-WATCH

    def close(self) -> None:
        self.api.close()

    def published(self) -> dict[str, str]:
        return owned_labels(self.retry.run(lambda: self.api.get_node(self.node)),
                            self.field_manager)

    def publish(self, labels: dict[str, str]) -> PublishResult:
        if self._labels == labels and not self._stale:
            return PublishResult(written=False)
        if self._labels is None:
            old = self.published()  # first publish: report the real change
        else:
            old = self._labels
        sent = dict(labels)
        try:
            self._apply(sent)
        except ApiError as exc:
            if exc.status != 422:
                raise
            bad = offending_keys(exc, sent)
            if not bad:
                raise
            log.error("API server rejected label(s) %s: %s; publishing the others",
                      ", ".join(sorted(bad)), exc)
            sent = {k: v for k, v in sent.items() if k not in bad}
            self._apply(sent)
        self._labels = dict(labels)
        self._stale = False
        return PublishResult(written=True, change=diff(old, sent))

    def _apply(self, labels: dict[str, str]) -> dict[str, Any]:
        return self.retry.run(lambda: self.api.apply_node_labels(
            self.node, labels, field_manager=self.field_manager))

    def prune(self) -> PublishResult:
        old = self.published()
        self._apply({})
        self._labels = None
        return PublishResult(written=True, change=diff(old, {}))
