"""The objects the fake API server stores: the resources it serves, a stored object with
its field owners."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]

DEFAULT_TOKEN = "fake-token"
DEFAULT_USER = "system:serviceaccount:gfd:gfd"
NFD_GROUP = "nfd.k8s-sigs.io"
NFD_API_VERSION = f"{NFD_GROUP}/v1alpha1"

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

VERBS = frozenset({"get", "list", "watch", "create", "update", "patch", "delete"})


# --------------------------------------------------------------------------- resources


@dataclass(frozen=True)
class Resource:
    """One API resource served by the fake."""

    plural: str
    kind: str
    group: str  # "" for the core group
    version: str
    namespaced: bool
    custom: bool = False  # a CRD-backed resource

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """``nodes`` or ``nodefeatures.nfd.k8s-sigs.io``, as in error messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def qualified_kind(self) -> str:
        """``Node`` or ``NodeFeature.nfd.k8s-sigs.io``, as in 422 messages."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    def details(self, name: str | None) -> JSON:
        out: JSON = {}
        if name:
            out["name"] = name
        if self.group:
            out["group"] = self.group
        out["kind"] = self.plural
        return out


NODES = Resource("nodes", "Node", "", "v1", namespaced=False)
PODS = Resource("pods", "Pod", "", "v1", namespaced=True)
DAEMONSETS = Resource("daemonsets", "DaemonSet", "apps", "v1", namespaced=True)
NODEFEATURES = Resource(
    "nodefeatures", "NodeFeature", NFD_GROUP, "v1alpha1", namespaced=True, custom=True
)
RESOURCESLICES = Resource("resourceslices", "ResourceSlice", "resource.k8s.io", "v1",
                          namespaced=False)
EVENTS = Resource("events", "Event", "", "v1", namespaced=True)
RESOURCECLAIMS = Resource("resourceclaims", "ResourceClaim", "resource.k8s.io", "v1",
                          namespaced=True)
DEVICECLASSES = Resource("deviceclasses", "DeviceClass", "resource.k8s.io", "v1",
                         namespaced=False)
RESOURCES = {r.plural: r for r in (NODES, PODS, DAEMONSETS, NODEFEATURES, RESOURCESLICES,
                                   EVENTS, RESOURCECLAIMS, DEVICECLASSES)}
EVENT_FIELDS = frozenset({
    "involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
    "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
    "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type",
})
"""The fields the API server selects Events by (besides metadata.name / namespace)."""
SELECTABLE_FIELDS = {RESOURCESLICES: frozenset({"spec.nodeName", "spec.driver"}),
                     EVENTS: EVENT_FIELDS,
                     PODS: frozenset({"spec.nodeName", "status.phase"})}
"""Field selectors a resource takes besides metadata.name and metadata.namespace (the real
server's ResourceSlice strategy indexes exactly spec.nodeName and spec.driver)."""


# --------------------------------------------------------------------------- state

_SECTIONS = ("labels", "annotations")
Field = tuple[str, str]  # ("labels" | "annotations", key)
ManagerKey = tuple[str, str]  # (manager, "Apply" | "Update")


@dataclass
class _Owner:
    fields: frozenset[Field]
    time: str


@dataclass
class _Stored:
    obj: JSON  # without metadata.managedFields
    owners: dict[ManagerKey, _Owner] = field(default_factory=dict)


