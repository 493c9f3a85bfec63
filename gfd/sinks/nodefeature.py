"""The NFD NodeFeature sink: object ``nvidia-features-for-<node>`` whose ``spec.labels`` nfd-master
turns into Node labels. Owned by the DaemonSet (never the Pod), written only on change,
conflict-safe, and free in steady state (no request unless labels change or a resync is due)."""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from gfd.errors import ApiError, ApiSinkError
from gfd.sinks.base import Change, PublishResult, diff
from gfd.sinks.retry import Retry

log = logging.getLogger(__name__)

API_VERSION = "nfd.k8s-sigs.io/v1alpha1"
NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"
CONFLICT_RETRIES = 5


class NodeFeatureApi(Protocol):
    def get_nodefeature(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def create_nodefeature(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...
    def replace_nodefeature(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...
    def delete_nodefeature(self, namespace: str, name: str) -> bool: ...
    def get_pod(self, namespace: str, name: str) -> dict[str, Any]: ...
    def close(self) -> None: ...


def object_name(node: str) -> str:
    return f"nvidia-features-for-{node}"


def owner_references(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The DaemonSet that controls the pod, as an ownerReference; never the pod itself."""
    for ref in pod.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("kind") == "DaemonSet" and ref.get("apiVersion", "").startswith("apps/"):
            return [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": ref["name"],
                     "uid": ref["uid"], "controller": True, "blockOwnerDeletion": False}]
    return []


def build(node: str, namespace: str, labels: dict[str, str],
          owners: list[dict[str, Any]]) -> dict[str, Any]:
    """The NodeFeature object for these labels (pure)."""
    metadata: dict[str, Any] = {"name": object_name(node), "namespace": namespace,
                                "labels": {NODE_NAME_LABEL: node}}
    if owners:
        metadata["ownerReferences"] = owners
    return {"apiVersion": API_VERSION, "kind": "NodeFeature", "metadata": metadata,
            "spec": {"features": {}, "labels": dict(sorted(labels.items()))}}


def _in_sync(current: dict[str, Any], wanted: dict[str, Any]) -> bool:
    meta, want = current.get("metadata", {}), wanted["metadata"]
    return bool(
        (current.get("spec") or {}).get("labels") == wanted["spec"]["labels"]
        and (meta.get("labels") or {}).get(NODE_NAME_LABEL) == want["labels"][NODE_NAME_LABEL]
        and (meta.get("ownerReferences") or []) == want.get("ownerReferences", [])
    )


@dataclass(slots=True)
class NodeFeatureSink:
    """Publishes to the NodeFeature object. Costs no request while labels are unchanged; the
    loop's resync duty calls ``refresh()`` so the next publish re-reads it (heals drift)."""

    api: NodeFeatureApi
    node: str
    namespace: str = "default"
    pod_name: str = ""
    retry: Retry = field(default_factory=Retry)
    name: str = "nodefeature"
    _owners: list[dict[str, Any]] | None = field(default=None, init=False)
    _labels: dict[str, str] | None = field(default=None, init=False)
    _version: str = field(default="", init=False)
    _stale: bool = field(default=False, init=False)

    def refresh(self) -> None:
        """Re-read the object at the next publish even if labels are unchanged (resync)."""
        self._stale = True

    def close(self) -> None:
        self.api.close()

    def _resolve_owners(self) -> list[dict[str, Any]]:
        """The DaemonSet owner, looked up once; a failed lookup is retried next time."""
        if self._owners is not None:
            return self._owners
        if not self.pod_name:
            log.warning("POD_NAME is not set: the NodeFeature gets no owner and stays after "
                        "an uninstall (set POD_NAME from the downward API)")
            self._owners = []
            return self._owners
        try:
            pod = self.retry.run(lambda: self.api.get_pod(self.namespace, self.pod_name))
        except ApiError as exc:
            if exc.status not in (403, 404):
                raise  # transient: publish nothing now, look again next cycle
            log.warning("cannot look up pod %s for the NodeFeature owner: %s", self.pod_name,
                        exc)
            self._owners = []
            return self._owners
        self._owners = owner_references(pod)
        if not self._owners:
            log.warning("pod %s is not owned by a DaemonSet: NodeFeature left without an owner",
                        self.pod_name)
        return self._owners

    def _read(self) -> dict[str, Any] | None:
        return self.retry.run(
            lambda: self.api.get_nodefeature(self.namespace, object_name(self.node)))

    def published(self, also: Collection[str] = ()) -> dict[str, str]:
        current = self._read()
        return dict(((current or {}).get("spec") or {}).get("labels") or {})

    def publish(self, labels: dict[str, str]) -> PublishResult:
        if self._labels == labels and not self._stale:
            return PublishResult(written=False)
        owners = self._resolve_owners()
        wanted = build(self.node, self.namespace, labels, owners)
        known_version = self._version if (self._labels is not None and not self._stale) else ""
        old = dict(self._labels or {})  # what the object holds, as far as gfd knows
        for _ in range(CONFLICT_RETRIES):
            try:
                if known_version:
                    body = dict(wanted, metadata=dict(wanted["metadata"],
                                                      resourceVersion=known_version))
                    stored = self.retry.run(partial(self.api.replace_nodefeature,
                                                    self.namespace, body))
                    return self._done(labels, stored, diff(old, labels))
                current = self._read()
                if current is None:
                    stored = self.retry.run(lambda: self.api.create_nodefeature(
                        self.namespace, wanted))
                    return self._done(labels, stored, diff({}, labels))
                old = dict((current.get("spec") or {}).get("labels") or {})
                if _in_sync(current, wanted):
                    self._remember(labels, current)
                    return PublishResult(written=False, change=diff(old, labels))
                known_version = str(current["metadata"].get("resourceVersion", ""))
            except ApiError as exc:
                if exc.status == 404 and known_version and not exc.resource_missing:
                    # deleted behind gfd's back: read again, which creates it anew
                    log.info("NodeFeature %s/%s was deleted: creating it again", self.namespace,
                             object_name(self.node))
                    known_version = ""
                    continue
                if exc.status not in (409,):
                    raise
                log.debug("NodeFeature conflict (%s): re-reading", exc.reason)
                known_version = ""
        raise ApiSinkError(f"NodeFeature {self.namespace}/{object_name(self.node)}: still "
                           f"conflicting after {CONFLICT_RETRIES} attempts")

    def _remember(self, labels: dict[str, str], stored: dict[str, Any]) -> None:
        self._labels = dict(labels)
        self._version = str(stored.get("metadata", {}).get("resourceVersion", ""))
        self._stale = False

    def _done(self, labels: dict[str, str], stored: dict[str, Any],
              change: Change) -> PublishResult:
        self._remember(labels, stored)
        return PublishResult(written=True, change=change)

    def prune(self) -> PublishResult:
        old = self.published()
        removed = self.retry.run(lambda: self.api.delete_nodefeature(
            self.namespace, object_name(self.node)))
        self._labels = None
        return PublishResult(written=removed, change=diff(old, {}))
