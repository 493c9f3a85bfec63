"""The route table and one handler per verb and resource: Nodes, Pods, DaemonSets,
ResourceSlices, ResourceClaims, DeviceClasses, Events and NodeFeatures."""

from __future__ import annotations

import re

from .apply import _apply_ownership, _parse_apply_body
from .errors import (
    ApiError,
    FieldError,
    _bad_request,
    _conflict,
    _invalid,
    _no_such_resource,
    _not_found,
    _uid_precondition_failed,
)
from .exchange import Handler, _dry, _flag, _parse_json, _Request, _Response, _Route
from .objects import (
    _SECTIONS,
    APPLY_PATCH,
    DAEMONSETS,
    DEVICECLASSES,
    EVENTS,
    JSON,
    NFD_API_VERSION,
    NODEFEATURES,
    NODES,
    PODS,
    RESOURCECLAIMS,
    RESOURCESLICES,
    Resource,
)
from .patches import _patch_kind, _patched
from .validation import _check_event, _q


class HandlersMixin:
    """Routes a request to its handler (``_routes``, built by ``FakeApiServer.__init__``)."""

    def _route(self, req: _Request) -> tuple[_Route, dict[str, str]]:
        path_matched = False
        for route in self._routes:
            m = route.pattern.fullmatch(req.path)
            if m is None:
                continue
            path_matched = True
            if route.method == req.method:
                return route, {k: v for k, v in m.groupdict().items() if v is not None}
        if path_matched:
            raise ApiError(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )
        raise _no_such_resource()

    def _build_routes(self) -> list[_Route]:
        name, ns = r"(?P<name>[^/]+)", r"(?P<ns>[^/]+)"
        nf = f"/apis/{re.escape(NFD_API_VERSION)}"
        nf_ns = f"{nf}/namespaces/{ns}/nodefeatures"
        table: list[tuple[str, str, Resource, str, Handler]] = [
            ("GET", "/api/v1/nodes", NODES, "list", self._list_nodes),
            ("GET", f"/api/v1/nodes/{name}", NODES, "get", self._get_node),
            ("PATCH", f"/api/v1/nodes/{name}", NODES, "patch", self._patch_node),
            ("PUT", f"/api/v1/nodes/{name}", NODES, "update", self._put_node),
            ("GET", f"/api/v1/namespaces/{ns}/pods/{name}", PODS, "get", self._get_pod),
            ("GET", "/api/v1/pods", PODS, "list", self._list_pods),
            ("GET", f"/apis/apps/v1/namespaces/{ns}/daemonsets/{name}", DAEMONSETS, "get",
             self._get_daemonset),
            ("GET", f"{nf}/nodefeatures", NODEFEATURES, "list", self._list_nodefeatures),
            ("GET", nf_ns, NODEFEATURES, "list", self._list_nodefeatures),
            ("POST", nf_ns, NODEFEATURES, "create", self._create_nodefeature),
            ("GET", f"{nf_ns}/{name}", NODEFEATURES, "get", self._get_nodefeature),
            ("PUT", f"{nf_ns}/{name}", NODEFEATURES, "update", self._put_nodefeature),
            ("PATCH", f"{nf_ns}/{name}", NODEFEATURES, "patch", self._patch_nodefeature),
            ("DELETE", f"{nf_ns}/{name}", NODEFEATURES, "delete", self._delete_nodefeature),
            ("GET", "/apis/resource.k8s.io/v1/resourceslices", RESOURCESLICES, "list",
             self._list_resourceslices),
            ("GET", "/apis/resource.k8s.io/v1/resourceclaims", RESOURCECLAIMS, "list",
             self._list_resourceclaims),
            ("GET", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims", RESOURCECLAIMS,
             "list", self._list_resourceclaims),
            ("GET", "/apis/resource.k8s.io/v1/deviceclasses", DEVICECLASSES, "list",
             self._list_deviceclasses),
            ("GET", "/api/v1/events", EVENTS, "list", self._list_events),
            ("GET", f"/api/v1/namespaces/{ns}/events", EVENTS, "list", self._list_events),
            ("POST", f"/api/v1/namespaces/{ns}/events", EVENTS, "create", self._create_event),
            ("GET", f"/api/v1/namespaces/{ns}/events/{name}", EVENTS, "get", self._get_event),
            ("PATCH", f"/api/v1/namespaces/{ns}/events/{name}", EVENTS, "patch",
             self._patch_event),
        ]  # fmt: skip
        return [
            _Route(m, re.compile(pattern), res, verb, fn) for m, pattern, res, verb, fn in table
        ]

    # ------------------------------------------------------------------ handlers: nodes

    def _list_nodes(self, req: _Request, p: dict[str, str]) -> _Response:
        if _flag(req.query.get("watch")):
            return self._watch(NODES, None, req)
        return _Response(200, self._list(NODES, None, req))

    def _get_node(self, req: _Request, p: dict[str, str]) -> _Response:
        return _Response(200, self._render(NODES, self._require(NODES, "", p["name"])))

    def _put_node(self, req: _Request, p: dict[str, str]) -> _Response:
        stored = self._require(NODES, "", p["name"])
        body = _parse_json(req.body)
        return _Response(200, self._update(NODES, stored, body, self._manager(req), _dry(req)))

    def _patch_node(self, req: _Request, p: dict[str, str]) -> _Response:
        kind = _patch_kind(req, NODES)
        force = _flag(req.query.get("force"))
        if kind == APPLY_PATCH:
            return self._apply_node(req, p["name"], bool(force))
        if force is not None:
            raise _bad_request("force flag is only allowed for apply patches")
        stored = self._require(NODES, "", p["name"])
        patched = _patched(kind, self._render(NODES, stored), req.body)
        return _Response(200, self._update(NODES, stored, patched, self._manager(req), _dry(req)))

    def _apply_node(self, req: _Request, name: str, force: bool) -> _Response:
        manager = req.query.get("fieldManager")
        if not manager:
            raise _bad_request("fieldManager is required for apply requests")
        config = _parse_apply_body(req.body, NODES, name)
        stored = self._objects[NODES].get(("", name))
        uid = config["uid"]
        if stored is None and uid:  # a uid in an apply is a precondition: never a create
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {NODES.qualified} "{name}": uid mismatch: '
                f"the provided object specified uid {uid}, and no existing object was found",
                NODES.details(name),
            )
        if stored is not None and uid and uid != stored.obj["metadata"]["uid"]:
            # applied onto the object, then refused by the update's metadata validation
            raise _invalid(
                NODES, name, [FieldError("metadata.uid", "FieldValueInvalid",
                                         "field is immutable", _q(uid))]
            )
        if stored is None:
            meta: JSON = {"name": name}
            for section in _SECTIONS:
                if config[section]:
                    meta[section] = dict(config[section])
            obj: JSON = {"apiVersion": "v1", "kind": "Node", "metadata": meta}
            created = self._create(NODES, "", obj, manager, _dry(req), operation="Apply")
            return _Response(201, created)
        rv = config["resourceVersion"]
        if rv and rv != stored.obj["metadata"]["resourceVersion"]:
            raise _conflict(NODES, name)
        new_obj, owners = _apply_ownership(stored, config, manager, force)
        self._check_metadata(NODES, new_obj)
        return _Response(200, self._commit(NODES, stored, new_obj, owners, _dry(req)))

    # ------------------------------------------------------------------ handlers: pods, ds

    def _list_pods(self, req: _Request, p: dict[str, str]) -> _Response:
        if _flag(req.query.get("watch")):
            return self._watch(PODS, None, req)
        return _Response(200, self._list(PODS, None, req))

    def _get_pod(self, req: _Request, p: dict[str, str]) -> _Response:
        return _Response(200, self._render(PODS, self._require(PODS, p["ns"], p["name"])))

    def _get_daemonset(self, req: _Request, p: dict[str, str]) -> _Response:
        stored = self._require(DAEMONSETS, p["ns"], p["name"])
        return _Response(200, self._render(DAEMONSETS, stored))

    # ------------------------------------------------------------------ handlers: resourceslices

    def _list_resourceslices(self, req: _Request, p: dict[str, str]) -> _Response:
        if _flag(req.query.get("watch")):
            return self._watch(RESOURCESLICES, None, req)
        return _Response(200, self._list(RESOURCESLICES, None, req))

    def _list_resourceclaims(self, req: _Request, p: dict[str, str]) -> _Response:
        if _flag(req.query.get("watch")):
            return self._watch(RESOURCECLAIMS, p.get("ns"), req)
        return _Response(200, self._list(RESOURCECLAIMS, p.get("ns"), req))

    def _list_deviceclasses(self, req: _Request, p: dict[str, str]) -> _Response:
        if _flag(req.query.get("watch")):
            return self._watch(DEVICECLASSES, None, req)
        return _Response(200, self._list(DEVICECLASSES, None, req))

    # ------------------------------------------------------------------ handlers: events

    def _list_events(self, req: _Request, p: dict[str, str]) -> _Response:
        if _flag(req.query.get("watch")):
            return self._watch(EVENTS, p.get("ns"), req)
        return _Response(200, self._list(EVENTS, p.get("ns"), req))

    def _get_event(self, req: _Request, p: dict[str, str]) -> _Response:
        return _Response(200, self._render(EVENTS, self._require(EVENTS, p["ns"], p["name"])))

    def _create_event(self, req: _Request, p: dict[str, str]) -> _Response:
        body = _parse_json(req.body)
        if isinstance(body, dict):
            _check_event(body, p["ns"])
        return _Response(201, self._create(EVENTS, p["ns"], body, self._manager(req),
                                           _dry(req)))

    def _patch_event(self, req: _Request, p: dict[str, str]) -> _Response:
        kind = _patch_kind(req, EVENTS)
        if kind == APPLY_PATCH:
            raise ApiError(501, "NotImplemented", "fake apiserver: server-side apply on events")
        stored = self._require(EVENTS, p["ns"], p["name"])
        patched = _patched(kind, self._render(EVENTS, stored), req.body)
        updated = self._update(EVENTS, stored, patched, self._manager(req), _dry(req))
        return _Response(200, updated)

    def events(self, namespace: str | None = None) -> list[JSON]:
        """Every Event stored (in ``namespace``), as a GET returns it."""
        with self._lock:
            return [self._render(EVENTS, s) for (ns, _), s in sorted(self._objects[EVENTS].items())
                    if namespace is None or ns == namespace]

    # ------------------------------------------------------------------ handlers: nodefeatures

    def _list_nodefeatures(self, req: _Request, p: dict[str, str]) -> _Response:
        if _flag(req.query.get("watch")):
            return self._watch(NODEFEATURES, p.get("ns"), req)
        return _Response(200, self._list(NODEFEATURES, p.get("ns"), req))

    def _get_nodefeature(self, req: _Request, p: dict[str, str]) -> _Response:
        stored = self._require(NODEFEATURES, p["ns"], p["name"])
        return _Response(200, self._render(NODEFEATURES, stored))

    def _create_nodefeature(self, req: _Request, p: dict[str, str]) -> _Response:
        body = _parse_json(req.body)
        created = self._create(NODEFEATURES, p["ns"], body, self._manager(req), _dry(req))
        return _Response(201, created)

    def _put_nodefeature(self, req: _Request, p: dict[str, str]) -> _Response:
        body = _parse_json(req.body)
        stored = self._objects[NODEFEATURES].get((p["ns"], p["name"]))
        if stored is None:
            # A custom resource is never created by a PUT: 404 -- unless the body names a
            # uid, whose precondition the missing object fails first (409).
            meta = body.get("metadata") if isinstance(body, dict) else None
            uid = meta.get("uid") if isinstance(meta, dict) else None
            if uid:
                raise _uid_precondition_failed(NODEFEATURES, p["ns"], p["name"], uid, "")
            raise _not_found(NODEFEATURES, p["name"])
        updated = self._update(NODEFEATURES, stored, body, self._manager(req), _dry(req))
        return _Response(200, updated)

    def _patch_nodefeature(self, req: _Request, p: dict[str, str]) -> _Response:
        kind = _patch_kind(req, NODEFEATURES)
        if kind == APPLY_PATCH:
            raise ApiError(
                501, "NotImplemented", "fake apiserver: server-side apply on nodefeatures"
            )
        if req.query.get("force") is not None:
            raise _bad_request("force flag is only allowed for apply patches")
        stored = self._require(NODEFEATURES, p["ns"], p["name"])
        patched = _patched(kind, self._render(NODEFEATURES, stored), req.body)
        updated = self._update(NODEFEATURES, stored, patched, self._manager(req), _dry(req))
        return _Response(200, updated)

    def _delete_nodefeature(self, req: _Request, p: dict[str, str]) -> _Response:
        key = (p["ns"], p["name"])
        stored = self._require(NODEFEATURES, *key)
        options = _parse_json(req.body) if req.body else {}
        pre = options.get("preconditions") or {} if isinstance(options, dict) else {}
        meta = stored.obj["metadata"]
        if pre.get("uid") and pre["uid"] != meta["uid"]:
            raise _uid_precondition_failed(NODEFEATURES, p["ns"], p["name"], pre["uid"],
                                           meta["uid"])
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
            raise _conflict(NODEFEATURES, p["name"])
        if not _dry(req):
            del self._objects[NODEFEATURES][key]
            self._bump()
            self._changed(NODEFEATURES, self._render(NODEFEATURES, stored), None)
        details = NODEFEATURES.details(p["name"]) | {"uid": meta["uid"]}
        return _Response(
            200,
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": details,
            },
        )

