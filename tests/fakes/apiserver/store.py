"""Objects and storage: the state helpers tests seed and read the server with, and the
create, update, list and commit every handler goes through (resourceVersion, uid
preconditions, ownership)."""

from __future__ import annotations

import copy
import json
import secrets
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from .apply import _owners_after_update
from .errors import (
    ApiError,
    FieldError,
    _already_exists,
    _bad_request,
    _conflict,
    _invalid,
    _not_found,
    _uid_precondition_failed,
)
from .exchange import _Request
from .metadata import _drop_empty_maps, _meta, _now, _section
from .objects import (
    _SECTIONS,
    DAEMONSETS,
    JSON,
    NODEFEATURES,
    NODES,
    PODS,
    RESOURCES,
    RESOURCESLICES,
    ManagerKey,
    Resource,
    _Owner,
    _Stored,
)
from .patches import merge_patch
from .selectors import _field_value, _parse_field_selector, parse_label_selector
from .validation import _check_string_map, _metadata_errors, _nodefeature_schema_errors


class StoreMixin:
    """The stored objects, the global resourceVersion and the writes that change them. Uses
    ``_objects``, ``_rv`` and ``_crd_installed``, made by ``FakeApiServer.__init__``, under
    ``_lock``."""

    # ------------------------------------------------------------------ state helpers

    @property
    def resource_version(self) -> str:
        """The current global resourceVersion."""
        with self._lock:
            return str(self._rv)

    def add_node(
        self,
        name: str,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        *,
        manager: str = "kubelet",
    ) -> JSON:
        """Create (or fail on an existing) Node; its labels are owned by ``manager``."""
        obj: JSON = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": dict(labels or {})},
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
        if annotations:
            obj["metadata"]["annotations"] = dict(annotations)
        with self._lock:
            if ("", name) in self._objects[NODES]:
                raise ValueError(f"node {name} already exists")
            return self._local(lambda: self._create(NODES, "", obj, manager, dry_run=False))

    def delete_node(self, name: str) -> None:
        self._delete(NODES, "", name)

    def node(self, name: str) -> JSON:
        """The Node as a GET would return it (KeyError if absent)."""
        with self._lock:
            stored = self._objects[NODES].get(("", name))
            if stored is None:
                raise KeyError(name)
            return self._render(NODES, stored)

    def nodes(self) -> list[JSON]:
        with self._lock:
            return [self._render(NODES, s) for s in self._objects[NODES].values()]

    def labels(self, node: str) -> dict[str, str]:
        """Shortcut: the Node's current labels."""
        return dict(self.node(node)["metadata"].get("labels", {}))

    def set_label(self, node: str, key: str, value: str, *, manager: str = "other-actor") -> None:
        """Another actor sets a label (an Update by ``manager``; bumps resourceVersion)."""
        self._edit_node(node, "labels", key, value, manager)

    def remove_label(self, node: str, key: str, *, manager: str = "other-actor") -> None:
        self._edit_node(node, "labels", key, None, manager)

    def set_annotation(
        self, node: str, key: str, value: str, *, manager: str = "other-actor"
    ) -> None:
        self._edit_node(node, "annotations", key, value, manager)

    def remove_annotation(self, node: str, key: str, *, manager: str = "other-actor") -> None:
        self._edit_node(node, "annotations", key, None, manager)

    def _edit_node(
        self, node: str, section: str, key: str, value: str | None, manager: str
    ) -> None:
        with self._lock:
            stored = self._objects[NODES].get(("", node))
            if stored is None:
                raise KeyError(node)
            patched = merge_patch(
                self._render(NODES, stored), {"metadata": {section: {key: value}}}
            )
            self._local(lambda: self._update(NODES, stored, patched, manager, dry_run=False))

    def add_pod(
        self,
        namespace: str,
        name: str,
        owner_daemonset: str | None = None,
        *,
        node_name: str | None = None,
    ) -> JSON:
        """A Pod, and (when named) its owning DaemonSet, created if absent."""
        with self._lock:
            owners: list[JSON] = []
            if owner_daemonset:
                ds = self._objects[DAEMONSETS].get((namespace, owner_daemonset))
                if ds is None:
                    ds = self._insert(
                        DAEMONSETS, namespace, self._daemonset(namespace, owner_daemonset)
                    )
                owners.append(
                    {
                        "apiVersion": "apps/v1",
                        "kind": "DaemonSet",
                        "name": owner_daemonset,
                        "uid": ds.obj["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                )
            pod: JSON = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": {"app.kubernetes.io/name": owner_daemonset or name},
                },
                "spec": {"containers": [{"name": "gfd", "image": "gfd:test"}]},
                "status": {"phase": "Running"},
            }
            if owners:
                pod["metadata"]["ownerReferences"] = owners
            if node_name:
                pod["spec"]["nodeName"] = node_name
            return self._render(PODS, self._insert(PODS, namespace, pod))

    @staticmethod
    def _daemonset(namespace: str, name: str) -> JSON:
        selector = {"app.kubernetes.io/name": name}
        return {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": namespace, "generation": 1},
            "spec": {
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {"labels": selector},
                    "spec": {"containers": [{"name": "gfd", "image": "gfd:test"}]},
                },
            },
        }

    def pod(self, namespace: str, name: str) -> JSON | None:
        return self._get_plain(PODS, namespace, name)

    def daemonset(self, namespace: str, name: str) -> JSON | None:
        return self._get_plain(DAEMONSETS, namespace, name)

    def nodefeature(self, namespace: str, name: str) -> JSON | None:
        return self._get_plain(NODEFEATURES, namespace, name)

    def nodefeatures(self, namespace: str | None = None) -> list[JSON]:
        with self._lock:
            return [
                self._render(NODEFEATURES, s)
                for (ns, _), s in sorted(self._objects[NODEFEATURES].items())
                if namespace is None or ns == namespace
            ]

    def add_nodefeature(self, namespace: str, obj: JSON, *, manager: str = "test-setup") -> JSON:
        """Create a NodeFeature directly (validated like a POST)."""
        with self._lock:
            return self._local(
                lambda: self._create(NODEFEATURES, namespace, copy.deepcopy(obj), manager, False)
            )

    def set_nodefeature_label(
        self, namespace: str, name: str, key: str, value: str | None, *,
        manager: str = "other-actor"
    ) -> None:
        """Another actor edits the NodeFeature's ``spec.labels`` (a merge patch by
        ``manager``; ``value`` None removes the key); KeyError if absent."""
        with self._lock:
            stored = self._objects[NODEFEATURES].get((namespace, name))
            if stored is None:
                raise KeyError(name)
            patched = merge_patch(
                self._render(NODEFEATURES, stored), {"spec": {"labels": {key: value}}}
            )
            self._local(
                lambda: self._update(NODEFEATURES, stored, patched, manager, dry_run=False)
            )

    def set_nodefeature_attribute(
        self, namespace: str, name: str, feature: str, element: str, value: str, *,
        manager: str = "other-actor"
    ) -> None:
        """Another actor edits an ``attributes`` feature's element in the NodeFeature's
        ``spec.features`` (a merge patch by ``manager``); KeyError if absent."""
        with self._lock:
            stored = self._objects[NODEFEATURES].get((namespace, name))
            if stored is None:
                raise KeyError(name)
            patch = {"spec": {"features": {"attributes": {
                feature: {"elements": {element: value}}}}}}
            patched = merge_patch(self._render(NODEFEATURES, stored), patch)
            self._local(
                lambda: self._update(NODEFEATURES, stored, patched, manager, dry_run=False)
            )

    def delete_nodefeature(self, namespace: str, name: str) -> None:
        """Someone deletes the NodeFeature (kubectl delete); KeyError if absent."""
        self._delete(NODEFEATURES, namespace, name)

    def add_resourceslice(self, node: str, driver: str, name: str | None = None) -> JSON:
        """A ResourceSlice of ``driver`` for ``node`` (one pool of one device), as a DRA
        kubelet plugin publishes it (read-only through the API: list and watch)."""
        obj: JSON = {
            "apiVersion": RESOURCESLICES.api_version, "kind": RESOURCESLICES.kind,
            "metadata": {"name": name or f"{node}-{driver}-{secrets.token_hex(3)[:5]}"},
            "spec": {"nodeName": node, "driver": driver,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": "gpu-0",
                                  "attributes": {"type": {"string": "gpu"}}}]},
        }  # fmt: skip
        with self._lock:
            return self._local(
                lambda: self._create(RESOURCESLICES, "", obj, "test-setup", False)
            )

    def delete_resourceslice(self, name: str) -> None:
        """The DRA kubelet plugin withdraws the slice; KeyError if absent."""
        self._delete(RESOURCESLICES, "", name)

    def put_object(self, resource: str, obj: JSON, *, manager: str = "test-setup") -> JSON:
        """Create or replace (whatever its resourceVersion) an object of any resource the
        fake serves, as someone else's write, status included (a kubelet's, a scheduler's):
        a pod bound or ended, a claim allocated, a Node's allocatable changed. Watches see it
        ADDED or MODIFIED (or DELETED when it leaves their selection); an equal object
        changes nothing."""
        res = RESOURCES[resource]
        body = copy.deepcopy(obj)
        meta = body.setdefault("metadata", {})
        namespace = str(meta.get("namespace") or "") if res.namespaced else ""
        with self._lock:
            stored = self._objects[res].get((namespace, meta["name"]))
            if stored is None:
                return self._local(lambda: self._create(res, namespace, body, manager, False))
            obj = self._check_kind(res, body)
            for system in ("uid", "creationTimestamp", "resourceVersion", "generation"):
                if system in stored.obj["metadata"]:
                    meta[system] = stored.obj["metadata"][system]
            if res.namespaced:
                meta["namespace"] = namespace
            meta.pop("managedFields", None)
            self._check_metadata(res, obj)
            owners = _owners_after_update(stored, obj, manager)
            return self._local(lambda: self._commit(res, stored, obj, owners, False))

    def delete_object(self, resource: str, namespace: str, name: str) -> None:
        """Someone deletes the object (KeyError if absent)."""
        self._delete(RESOURCES[resource], namespace, name)

    def _delete(self, res: Resource, namespace: str, name: str) -> None:
        """Remove a stored object as a deletion by someone else (KeyError if absent): the
        resourceVersion moves on and watches see it DELETED."""
        with self._lock:
            stored = self._objects[res].pop((namespace, name), None)
            if stored is None:
                raise KeyError(name)
            self._bump()
            self._changed(res, self._render(res, stored), None)

    def _get_plain(self, res: Resource, namespace: str, name: str) -> JSON | None:
        with self._lock:
            stored = self._objects[res].get((namespace, name))
            return None if stored is None else self._render(res, stored)

    def set_crd_installed(self, installed: bool) -> None:
        """Without the CRD every nodefeatures URL answers 404 (objects are kept)."""
        with self._lock:
            self._crd_installed = installed

    # ------------------------------------------------------------------ generic store logic

    def _bump(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _local(self, fn: Callable[[], JSON]) -> JSON:
        """Run a write from a helper method: API errors become ValueError."""
        try:
            return fn()
        except ApiError as err:
            raise ValueError(err.message) from err

    def _require(self, res: Resource, namespace: str, name: str) -> _Stored:
        stored = self._objects[res].get((namespace, name))
        if stored is None:
            raise _not_found(res, name)
        return stored

    def _manager(self, req: _Request) -> str:
        """``fieldManager``, else the User-Agent's prefix, as the real server does."""
        manager = req.query.get("fieldManager")
        if manager:
            return manager
        prefix = req.user_agent.split("/")[0].strip()
        return prefix[:128] if prefix else "unknown"

    def _render(self, res: Resource, stored: _Stored) -> JSON:
        obj = copy.deepcopy(stored.obj)
        entries = []
        for (manager, operation), owner in stored.owners.items():
            fields: JSON = {}
            for section, key in sorted(owner.fields):
                fields.setdefault(f"f:{section}", {})[f"f:{key}"] = {}
            entries.append(
                {
                    "manager": manager,
                    "operation": operation,
                    "apiVersion": res.api_version,
                    "time": owner.time,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": fields},
                }
            )
        if entries:
            obj["metadata"]["managedFields"] = entries
        return obj

    def _insert(self, res: Resource, namespace: str, obj: JSON) -> _Stored:
        meta = _meta(obj)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        meta["resourceVersion"] = self._bump()
        stored = _Stored(obj)
        self._objects[res][(namespace, meta["name"])] = stored
        return stored

    def _list(self, res: Resource, namespace: str | None, req: _Request) -> JSON:
        selectors = parse_label_selector(req.query.get("labelSelector", ""))
        fields = _parse_field_selector(req.query.get("fieldSelector", ""), res)
        items = []
        for (ns, _), stored in sorted(self._objects[res].items()):
            if namespace is not None and ns != namespace:
                continue
            meta = stored.obj["metadata"]
            labels = meta.get("labels", {})
            if all(r.matches(labels) for r in selectors) and all(
                r.matches({attr: _field_value(stored.obj, attr)}) for attr, r in fields
            ):
                item = self._render(res, stored)
                if not res.custom:  # built-in lists carry no kind/apiVersion per item
                    item.pop("kind", None)
                    item.pop("apiVersion", None)
                items.append(item)
        meta_out: JSON = {"resourceVersion": str(self._rv)}
        limit = req.query.get("limit", "")
        token = req.query.get("continue", "")
        start = 0
        if token:
            if token in self.expired_continues:
                raise ApiError(410, "Expired", "The provided continue parameter is too old to "
                               "display a consistent list result. You can start a new list "
                               "without the continue parameter.")
            if not token.startswith("fake-continue-") or not token[14:].isdigit():
                raise _bad_request(f"invalid continue token {token!r}")
            start = int(token[14:])
            items = items[start:]
        if limit.isdigit() and 0 < int(limit) < len(items):
            # The real server: a continue token, and the remaining count only when no
            # selector made it unknown.
            meta_out["continue"] = f"fake-continue-{start + int(limit)}"
            if not req.query.get("fieldSelector") and not req.query.get("labelSelector"):
                meta_out["remainingItemCount"] = len(items) - int(limit)
            items = items[: int(limit)]
        return {
            "kind": f"{res.kind}List",
            "apiVersion": res.api_version,
            "metadata": meta_out,
            "items": items,
        }

    def _check_kind(self, res: Resource, obj: Any) -> JSON:
        if not isinstance(obj, dict):
            raise _bad_request("the body of the request must be an object")
        kind, api_version = obj.get("kind"), obj.get("apiVersion")
        if res.custom and (not kind or not api_version):
            raise _bad_request(f"Object 'Kind' is missing in '{json.dumps(obj)[:200]}'")
        if kind is not None and kind != res.kind:
            raise _bad_request(f"the kind in the body ({kind}) does not match {res.kind}")
        if api_version is not None and api_version != res.api_version:
            raise _bad_request(
                f"the API version in the data ({api_version}) does not match the expected "
                f"API version ({res.api_version})"
            )
        obj["kind"], obj["apiVersion"] = res.kind, res.api_version
        return obj

    def _check_metadata(self, res: Resource, obj: JSON) -> None:
        """400 for non-string maps, then 422 for label/annotation/schema errors."""
        meta = obj["metadata"]
        for section in _SECTIONS:
            _check_string_map(meta, section)
        _drop_empty_maps(meta)
        errors = _metadata_errors(meta)
        if res is NODEFEATURES:
            errors += _nodefeature_schema_errors(obj)
        if errors:
            raise _invalid(res, meta.get("name", ""), errors)

    def _create(
        self,
        res: Resource,
        namespace: str,
        body: Any,
        manager: str,
        dry_run: bool,
        operation: str = "Update",
    ) -> JSON:
        obj = self._check_kind(res, body)
        meta = _meta(obj)
        if res.namespaced:
            if meta.get("namespace") not in (None, "", namespace):
                raise _bad_request(
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request"
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + secrets.token_hex(3)[:5]
        name = meta.get("name")
        if not name:
            raise _invalid(
                res,
                "",
                [
                    FieldError(
                        "metadata.name", "FieldValueRequired", "name or generateName is required"
                    )
                ],
            )
        if meta.get("resourceVersion"):
            raise _bad_request("resourceVersion should not be set on objects to be created")
        for system in ("uid", "creationTimestamp", "managedFields", "generation"):
            meta.pop(system, None)
        self._check_metadata(res, obj)
        if (namespace, name) in self._objects[res]:
            raise _already_exists(res, name)
        if res.custom:
            meta["generation"] = 1
        now = _now()
        fields = frozenset(
            (section, key) for section in _SECTIONS for key in _section(obj, section)
        )
        owners = {(manager, operation): _Owner(fields, now)} if fields else {}
        if dry_run:
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now
            return self._render(res, _Stored(obj, owners))
        stored = self._insert(res, namespace, obj)
        stored.owners = owners
        self._changed(res, None, stored)
        return self._render(res, stored)

    def _update(
        self, res: Resource, stored: _Stored, body: Any, manager: str, dry_run: bool
    ) -> JSON:
        """PUT and the result of a non-apply patch: preconditions, validation, ownership."""
        old = stored.obj
        old_meta = old["metadata"]
        obj = self._check_kind(res, copy.deepcopy(body))
        meta = _meta(obj)
        name = old_meta["name"]
        if meta.get("name") != name:
            raise _bad_request(
                f"the name of the object ({meta.get('name', '')}) does not match the name on "
                f"the URL ({name})"
            )
        if res.namespaced:
            if meta.get("namespace") not in (None, "", old_meta["namespace"]):
                raise _bad_request(
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request"
                )
            meta["namespace"] = old_meta["namespace"]
        if meta.get("uid") and meta["uid"] != old_meta["uid"]:
            raise _uid_precondition_failed(
                res, old_meta.get("namespace", ""), name, meta["uid"], old_meta["uid"]
            )
        rv = meta.get("resourceVersion")
        if rv:
            if rv != old_meta["resourceVersion"]:
                raise _conflict(res, name)
        elif res.custom:  # CRs do not allow unconditional updates
            raise _invalid(
                res,
                name,
                [
                    FieldError(
                        "metadata.resourceVersion",
                        "FieldValueInvalid",
                        "must be specified for an update",
                        "0x0",
                    )
                ],
            )
        for system in ("uid", "creationTimestamp", "resourceVersion", "generation"):
            if system in old_meta:
                meta[system] = old_meta[system]
            else:
                meta.pop(system, None)
        meta.pop("managedFields", None)
        if res is NODES:  # the main resource cannot change status
            if "status" in old:
                obj["status"] = copy.deepcopy(old["status"])
            else:
                obj.pop("status", None)
        self._check_metadata(res, obj)
        owners = _owners_after_update(stored, obj, manager)
        return self._commit(res, stored, obj, owners, dry_run)

    def _commit(
        self,
        res: Resource,
        stored: _Stored,
        obj: JSON,
        owners: dict[ManagerKey, _Owner],
        dry_run: bool,
    ) -> JSON:
        """Store a new version, unless nothing changed (then no resourceVersion bump)."""
        self._admit(res, stored.obj, obj)
        if res.custom and obj.get("spec") != stored.obj.get("spec"):
            obj["metadata"]["generation"] = stored.obj["metadata"].get("generation", 1) + 1
        if obj == stored.obj and owners == stored.owners:
            return self._render(res, stored)
        candidate = _Stored(obj, owners)
        if dry_run:
            return self._render(res, candidate)
        obj["metadata"]["resourceVersion"] = self._bump()
        before = self._render(res, stored)
        stored.obj, stored.owners = obj, owners
        self._changed(res, before, stored)
        return self._render(res, stored)


