"""An in-memory Kubernetes API behind the sinks' protocols, for sink unit tests.

``MemoryApi`` implements ``gfd.sinks.node.NodeApi`` and ``gfd.sinks.nodefeature.NodeFeatureApi``
without HTTP and raises ``gfd.errors.ApiError`` exactly where the real boundary
(``gfd.kube.Kube`` over a real API server) does, with the same status, reason, causes,
Retry-After and missing-resource flag. ``tests/fakes/test_memory_api.py`` runs the same
scenarios against both, so the two cannot drift apart.

What it keeps and does:

- Nodes, with labels and per-manager ownership of label keys (``managedFields``, operation
  ``Update`` or ``Apply``). ``get_node`` of a missing node is a 404. ``apply_node_labels`` is
  a forced server-side apply: the applied set replaces the manager's previous one; a key it
  applied before and now omits is deleted unless another manager owns it too; a key another
  manager owns with a different value is taken over, with the same value it is shared.
  Invalid keys or values are a 422 ``Invalid`` whose causes name them; nothing changes. A
  ``uid`` is a precondition: a missing node is a 409 (never created), another node of that
  name a 422 (the uid is immutable); without one, apply creates a missing node.
- NodeFeatures: ``get`` gives None for a missing object and a 404 flagged
  ``resource_missing`` when the CRD is absent; ``create`` of an existing one is a 409
  ``AlreadyExists``; ``replace`` is a 404 for a missing object (a 409 when the body names a
  uid: the uid precondition fails first), a 409 for another uid, a 422 without a
  resourceVersion and a 409 ``Conflict`` for a stale one; ``delete`` answers whether it
  deleted anything (a 409 when it names another object's uid).
- Pods, for the NodeFeature owner lookup (404 when missing).
- One global resourceVersion, bumped by every write that changes something.
- An exact call log (``calls``, ``count``), injected failures (``fail``: any status, with
  causes and Retry-After, or no answer at all), 403 rules (``forbid``), admission rules
  that refuse one label value (``deny_label``: a 422 naming it) and an outage
  (``set_down``).
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fakes.apiserver import label_value_errors, qualified_name_errors
from gfd.errors import ApiError

JSON = dict[str, Any]

NFD_API_VERSION = "nfd.k8s-sigs.io/v1alpha1"

# method -> (verb, resource) as gfd.kube names them in its messages.
VERBS = {
    "get_node": ("get", "node"),
    "apply_node_labels": ("patch", "node"),
    "get_nodefeature": ("get", "nodefeature"),
    "create_nodefeature": ("create", "nodefeature"),
    "replace_nodefeature": ("update", "nodefeature"),
    "delete_nodefeature": ("delete", "nodefeature"),
    "get_pod": ("get", "pod"),
}
NODEFEATURE_METHODS = frozenset(m for m, (_, res) in VERBS.items() if res == "nodefeature")

REASONS = {400: "BadRequest", 403: "Forbidden", 404: "NotFound", 409: "Conflict",
           422: "Invalid", 429: "TooManyRequests", 500: "InternalError",
           503: "ServiceUnavailable", 504: "Timeout"}

FORBIDDEN_HINT = " (grant this permission to gfd's ServiceAccount: see manifests/)"
CRD_HINT = (" (the NodeFeature CRD is not installed: install Node Feature Discovery v0.14 "
            "or newer, or use the feature file sink)")


@dataclass(frozen=True, slots=True)
class Call:
    """One call of the API: the method and the object it named (``n1``, ``ns/name``)."""

    method: str
    target: str


@dataclass(slots=True)
class Failure:
    """An injected failure: the next ``times`` calls of ``method`` fail with ``status``
    (None: no answer, as when the server is unreachable)."""

    method: str
    status: int | None
    times: int | None
    reason: str
    message: str
    causes: tuple[str, ...]
    retry_after: float | None


@dataclass(slots=True)
class _Node:
    labels: dict[str, str]
    owners: dict[tuple[str, str], set[str]]
    """(manager, operation) -> the label keys it owns."""
    version: str
    uid: str


@dataclass(slots=True)
class MemoryApi:
    """NodeApi + NodeFeatureApi in memory; see the module docstring."""

    calls: list[Call] = field(default_factory=list)
    closed: int = 0
    """How many times close() was called."""
    _nodes: dict[str, _Node] = field(default_factory=dict)
    _nodefeatures: dict[tuple[str, str], JSON] = field(default_factory=dict)
    _pods: dict[tuple[str, str], JSON] = field(default_factory=dict)
    _failures: list[Failure] = field(default_factory=list)
    _forbidden: set[str] = field(default_factory=set)
    _denied: dict[str, tuple[str, str]] = field(default_factory=dict)
    _down: bool = False
    _crd_installed: bool = True
    _version: int = 1000
    _uids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    # ------------------------------------------------------------------ test set-up

    @property
    def resource_version(self) -> str:
        return str(self._version)

    def add_node(self, name: str, labels: Mapping[str, str] | None = None, *,
                 manager: str = "kubelet") -> None:
        """A Node whose labels are owned by ``manager`` (an Update, like the kubelet's)."""
        if name in self._nodes:
            raise ValueError(f"node {name} already exists")
        owners = {(manager, "Update"): set(labels)} if labels else {}
        self._nodes[name] = _Node(dict(labels or {}), owners, self._bump(), self._uid())

    def delete_node(self, name: str) -> None:
        del self._nodes[name]
        self._bump()

    def set_label(self, node: str, key: str, value: str, *, manager: str = "other-actor") -> None:
        """Another writer sets a label (an Update: it takes the key from every other owner;
        setting the value it already has changes nothing and takes nothing)."""
        stored = self._nodes[node]
        if stored.labels.get(key) == value:
            return
        for owned in stored.owners.values():
            owned.discard(key)
        stored.owners.setdefault((manager, "Update"), set()).add(key)
        stored.labels[key] = value
        self._prune_owners(stored)
        stored.version = self._bump()

    def remove_label(self, node: str, key: str) -> None:
        """Another writer removes a label (it loses every owner)."""
        stored = self._nodes[node]
        if key not in stored.labels:
            return
        del stored.labels[key]
        for owned in stored.owners.values():
            owned.discard(key)
        self._prune_owners(stored)
        stored.version = self._bump()

    def labels(self, node: str) -> dict[str, str]:
        return dict(self._nodes[node].labels)

    def owners(self, node: str, key: str) -> set[str]:
        """The managers that own a label key on a node."""
        return {m for (m, _), owned in self._nodes[node].owners.items() if key in owned}

    def add_pod(self, namespace: str, name: str, owner_daemonset: str | None = None) -> JSON:
        """A Pod, owned by a DaemonSet when one is named (as a DaemonSet's pods are)."""
        meta: JSON = {"name": name, "namespace": namespace, "uid": self._uid(),
                      "resourceVersion": self._bump()}
        if owner_daemonset:
            meta["ownerReferences"] = [{
                "apiVersion": "apps/v1", "kind": "DaemonSet", "name": owner_daemonset,
                "uid": f"ds-{owner_daemonset}", "controller": True, "blockOwnerDeletion": True}]
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta}
        self._pods[(namespace, name)] = pod
        return copy.deepcopy(pod)

    def nodefeature(self, namespace: str, name: str) -> JSON | None:
        """The stored NodeFeature (a copy), whatever the CRD's state; None when absent."""
        stored = self._nodefeatures.get((namespace, name))
        return copy.deepcopy(stored) if stored is not None else None

    def edit_nodefeature(self, namespace: str, name: str, labels: Mapping[str, str]) -> None:
        """Another writer replaces the NodeFeature's spec.labels (bumps its resourceVersion)."""
        stored = self._nodefeatures[(namespace, name)]
        stored["spec"]["labels"] = dict(labels)
        stored["metadata"]["resourceVersion"] = self._bump()

    def set_crd_installed(self, installed: bool) -> None:
        """Without the CRD every NodeFeature call answers 404 (objects are kept)."""
        self._crd_installed = installed

    def fail(self, method: str, status: int | None = 500, *, times: int | None = 1,
             reason: str = "", message: str = "", causes: tuple[str, ...] = (),
             retry_after: float | None = None) -> None:
        """Fail the next ``times`` calls of ``method`` (None: until ``clear_failures``)."""
        if method not in VERBS:
            raise ValueError(f"unknown method {method!r}")
        self._failures.append(Failure(
            method, status, times, reason or REASONS.get(status or 0, ""),
            message or f"injected {status}", causes, retry_after))

    def clear_failures(self) -> None:
        self._failures.clear()

    def forbid(self, method: str) -> None:
        """Answer every call of ``method`` 403 Forbidden, as RBAC without that verb does."""
        if method not in VERBS:
            raise ValueError(f"unknown method {method!r}")
        self._forbidden.add(method)

    def deny_label(self, key: str, value: str, *, message: str = "refused by policy") -> None:
        """An admission rule: an apply that sets Node label ``key`` to ``value`` is a 422
        Invalid naming the value, and nothing changes. ``allow_label`` lifts it."""
        self._denied[key] = (value, message)

    def allow_label(self, key: str) -> None:
        self._denied.pop(key, None)

    def set_down(self, down: bool) -> None:
        """While down, every call fails with no answer (status None), like a dead server."""
        self._down = down

    def count(self, method: str | None = None) -> int:
        return sum(1 for c in self.calls if method is None or c.method == method)

    def clear_log(self) -> None:
        self.calls.clear()

    # ------------------------------------------------------------------ NodeApi

    def get_node(self, name: str) -> JSON:
        self._enter("get_node", name)
        stored = self._nodes.get(name)
        if stored is None:
            raise self._error("get_node", name, 404, f'nodes "{name}" not found')
        return self._render_node(name, stored)

    def apply_node_labels(self, name: str, labels: dict[str, str], *,
                          field_manager: str, uid: str = "") -> JSON:
        self._enter("apply_node_labels", name)
        current = self._nodes.get(name)
        if uid and current is None:
            raise self._error("apply_node_labels", name, 409,
                              f'Operation cannot be fulfilled on nodes "{name}": uid mismatch: '
                              f"the provided object specified uid {uid}, and no existing "
                              "object was found")
        if uid and current is not None and current.uid != uid:
            cause = f'Invalid value: "{uid}": field is immutable'
            raise self._error("apply_node_labels", name, 422,
                              f'Node "{name}" is invalid: metadata.uid: {cause}',
                              causes=(cause,))
        problems = _label_problems(labels)
        if problems:
            summary = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
            raise self._error("apply_node_labels", name, 422,
                              f'Node "{name}" is invalid: {summary}',
                              causes=tuple(p.removeprefix("metadata.labels: ")
                                           for p in problems))
        stored = self._nodes.get(name)
        denied = [(key, rule) for key, rule in sorted(self._denied.items())
                  if labels.get(key) == rule[0]
                  and (stored is None or stored.labels.get(key) != rule[0])]
        if denied:
            causes = tuple(f'Invalid value: "{value}": {message}' for _, (value, message) in denied)
            summary = (f"metadata.labels: {causes[0]}" if len(causes) == 1 else
                       "[" + ", ".join(f"metadata.labels: {c}" for c in causes) + "]")
            raise self._error("apply_node_labels", name, 422,
                              f'Node "{name}" is invalid: {summary}', causes=causes)
        if stored is None:  # server-side apply creates what does not exist
            stored = self._nodes[name] = _Node({}, {}, self._bump(), self._uid())
        before = (dict(stored.labels), copy.deepcopy(stored.owners))
        mine = (field_manager, "Apply")
        previous = stored.owners.pop(mine, set())
        for key, value in labels.items():
            if stored.labels.get(key, value) != value:  # forced: the others lose the key
                for owned in stored.owners.values():
                    owned.discard(key)
        stored.labels.update(labels)
        for key in previous - set(labels):
            if not any(key in owned for owned in stored.owners.values()):
                stored.labels.pop(key, None)
        if labels:
            stored.owners[mine] = set(labels)
        self._prune_owners(stored)
        if (stored.labels, stored.owners) != before:
            stored.version = self._bump()
        return self._render_node(name, stored)

    # ------------------------------------------------------------------ NodeFeatureApi

    def get_nodefeature(self, namespace: str, name: str) -> JSON | None:
        try:
            self._enter("get_nodefeature", f"{namespace}/{name}")
        except ApiError as exc:  # as gfd.kube.Kube.get_nodefeature
            if exc.status == 404 and not exc.resource_missing:
                return None
            raise
        stored = self._nodefeatures.get((namespace, name))
        return copy.deepcopy(stored) if stored is not None else None

    def create_nodefeature(self, namespace: str, body: dict[str, Any]) -> JSON:
        name = body["metadata"]["name"]
        self._enter("create_nodefeature", f"{namespace}/{name}")
        obj = copy.deepcopy(body)
        meta = obj["metadata"]
        if meta.get("resourceVersion"):
            raise self._error("create_nodefeature", f"{namespace}/{name}", 400,
                              "resourceVersion should not be set on objects to be created")
        if meta.get("namespace") not in (None, "", namespace):
            raise self._error("create_nodefeature", f"{namespace}/{name}", 400,
                              "the namespace of the provided object does not match the "
                              "namespace sent on the request")
        self._check_nodefeature_labels("create_nodefeature", namespace, obj)
        if (namespace, name) in self._nodefeatures:
            raise self._error("create_nodefeature", f"{namespace}/{name}", 409,
                              f'nodefeatures.nfd.k8s-sigs.io "{name}" already exists',
                              reason="AlreadyExists")
        meta.update(namespace=namespace, uid=self._uid(), resourceVersion=self._bump(),
                    generation=1)
        self._nodefeatures[(namespace, name)] = obj
        return copy.deepcopy(obj)

    def replace_nodefeature(self, namespace: str, body: dict[str, Any]) -> JSON:
        name = body["metadata"]["name"]
        target = f"{namespace}/{name}"
        self._enter("replace_nodefeature", target)
        stored = self._nodefeatures.get((namespace, name))
        uid = body["metadata"].get("uid") or ""
        if uid and uid != (stored or {}).get("metadata", {}).get("uid"):
            actual = stored["metadata"]["uid"] if stored is not None else ""
            raise self._error(
                "replace_nodefeature", target, 409,
                f'Operation cannot be fulfilled on nodefeatures.nfd.k8s-sigs.io "{name}": '
                f"StorageError: invalid object, Code: 4, Key: /registry/nfd.k8s-sigs.io/"
                f"nodefeatures/{namespace}/{name}, ResourceVersion: 0, AdditionalErrorMsg: "
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}")
        if stored is None:
            raise self._error("replace_nodefeature", target, 404,
                              f'nodefeatures.nfd.k8s-sigs.io "{name}" not found')
        obj = copy.deepcopy(body)
        meta = obj["metadata"]
        version = meta.get("resourceVersion")
        if not version:  # custom resources allow no unconditional update
            cause = "Invalid value: 0x0: must be specified for an update"
            raise self._error("replace_nodefeature", target, 422,
                              f'NodeFeature.nfd.k8s-sigs.io "{name}" is invalid: '
                              f"metadata.resourceVersion: {cause}", causes=(cause,))
        if version != stored["metadata"]["resourceVersion"]:
            raise self._error(
                "replace_nodefeature", target, 409,
                f'Operation cannot be fulfilled on nodefeatures.nfd.k8s-sigs.io "{name}": the '
                "object has been modified; please apply your changes to the latest version and "
                "try again")
        self._check_nodefeature_labels("replace_nodefeature", namespace, obj)
        for system in ("uid", "generation", "resourceVersion"):
            meta[system] = stored["metadata"][system]
        meta["namespace"] = namespace
        if obj != stored:
            if obj.get("spec") != stored.get("spec"):
                meta["generation"] = stored["metadata"]["generation"] + 1
            meta["resourceVersion"] = self._bump()
            self._nodefeatures[(namespace, name)] = obj
        return copy.deepcopy(self._nodefeatures[(namespace, name)])

    def delete_nodefeature(self, namespace: str, name: str, *, uid: str = "") -> bool:
        target = f"{namespace}/{name}"
        try:
            self._enter("delete_nodefeature", target)
            stored = self._nodefeatures.get((namespace, name))
            if stored is None:
                raise self._error("delete_nodefeature", target, 404,
                                  f'nodefeatures.nfd.k8s-sigs.io "{name}" not found')
        except ApiError as exc:  # as gfd.kube.Kube.delete_nodefeature
            if exc.status == 404:
                return False
            raise
        actual = stored["metadata"]["uid"]
        if uid and uid != actual:
            raise self._error(
                "delete_nodefeature", target, 409,
                f'Operation cannot be fulfilled on nodefeatures.nfd.k8s-sigs.io "{name}": '
                f"StorageError: invalid object, Code: 4, Key: /registry/nfd.k8s-sigs.io/"
                f"nodefeatures/{namespace}/{name}, ResourceVersion: 0, AdditionalErrorMsg: "
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}")
        del self._nodefeatures[(namespace, name)]
        self._bump()
        return True

    def get_pod(self, namespace: str, name: str) -> JSON:
        self._enter("get_pod", f"{namespace}/{name}")
        pod = self._pods.get((namespace, name))
        if pod is None:
            raise self._error("get_pod", f"{namespace}/{name}", 404, f'pods "{name}" not found')
        return copy.deepcopy(pod)

    def close(self) -> None:
        self.closed += 1

    # ------------------------------------------------------------------ inside

    def _bump(self) -> str:
        self._version += 1
        return str(self._version)

    def _uid(self) -> str:
        return f"00000000-0000-0000-0000-{next(self._uids):012d}"

    @staticmethod
    def _prune_owners(stored: _Node) -> None:
        for key in [k for k, owned in stored.owners.items() if not owned]:
            del stored.owners[key]

    def _enter(self, method: str, target: str) -> None:
        """Log the call, then fail it as the server would: no answer while down, an injected
        failure, a 403 rule, or the CRD missing (404 for the whole resource)."""
        self.calls.append(Call(method, target))
        verb, resource = VERBS[method]
        if self._down:
            raise ApiError(f"{verb} {resource} {target}: cannot reach the API server: "
                           "connection refused")
        for failure in self._failures:
            if failure.method != method:
                continue
            if failure.times is not None:
                failure.times -= 1
                if failure.times <= 0:
                    self._failures.remove(failure)
            if failure.status is None:
                raise ApiError(f"{verb} {resource} {target}: cannot reach the API server: "
                               "connection reset")
            raise self._error(method, target, failure.status, failure.message,
                              reason=failure.reason, causes=failure.causes,
                              retry_after=failure.retry_after)
        if method in self._forbidden:
            raise self._error(method, target, 403,
                              f'{resource}s "{target.rpartition("/")[2]}" is forbidden: '
                              f'User "system:serviceaccount:gfd:gfd" cannot {verb} resource '
                              f'"{resource}s"')
        if method in NODEFEATURE_METHODS and not self._crd_installed:
            raise self._error(method, target, 404,
                              "the server could not find the requested resource",
                              resource_missing=True)

    def _error(self, method: str, target: str, status: int, message: str, *,
               reason: str = "", causes: tuple[str, ...] = (),
               retry_after: float | None = None, resource_missing: bool = False) -> ApiError:
        """An ApiError worded as gfd.kube words one, hints included."""
        verb, resource = VERBS[method]
        reason = reason or REASONS.get(status, "")
        hint = ""
        if status == 403:
            hint = FORBIDDEN_HINT
        elif status == 404 and resource_missing and resource == "nodefeature":
            hint = CRD_HINT
        text = f"{verb} {resource} {target}: HTTP {status} {reason}: {message}{hint}".strip()
        return ApiError(text, status=status, reason=reason, retry_after=retry_after,
                        causes=causes, resource_missing=resource_missing)

    def _check_nodefeature_labels(self, method: str, namespace: str, obj: JSON) -> None:
        meta = obj["metadata"]
        problems = _label_problems(meta.get("labels") or {})
        if problems:
            name = meta["name"]
            raise self._error(method, f"{namespace}/{name}", 422,
                              f'NodeFeature.nfd.k8s-sigs.io "{name}" is invalid: {problems[0]}',
                              causes=tuple(p.removeprefix("metadata.labels: ")
                                           for p in problems))

    def _render_node(self, name: str, stored: _Node) -> JSON:
        managed = []
        for (manager, operation), owned in stored.owners.items():
            managed.append({
                "manager": manager, "operation": operation, "apiVersion": "v1",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {f"f:{k}": {} for k in sorted(owned)}}}})
        meta: JSON = {"name": name, "uid": stored.uid, "resourceVersion": stored.version}
        if stored.labels:  # an empty map is left out, as the API server leaves it out
            meta["labels"] = dict(stored.labels)
        if managed:
            meta["managedFields"] = managed
        return {"apiVersion": "v1", "kind": "Node", "metadata": meta}


def _label_problems(labels: Mapping[str, str]) -> list[str]:
    """The API server's label rules (shared with the HTTP fake), as 422 field errors."""
    problems = []
    for key in sorted(labels):
        quoted_key = json.dumps(key)
        problems += [f"metadata.labels: Invalid value: {quoted_key}: {msg}"
                     for msg in qualified_name_errors(key)]
        quoted_value = json.dumps(labels[key])
        problems += [f"metadata.labels: Invalid value: {quoted_value}: {msg}"
                     for msg in label_value_errors(labels[key])]
    return problems
