"""A local, stateful fake of the Kubernetes API server, over real HTTP.

The server is standard library only (``http.server`` + ``threading``, plus PyYAML
for apply bodies) and is meant to be driven by the **real** ``kubernetes``
Python client through a kubeconfig that points at it::

    with FakeApiServer() as api:
        api.add_node("n1", labels={"kubernetes.io/hostname": "n1"})
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        cfg = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(str(kubeconfig), client_configuration=cfg)
        with kubernetes.client.ApiClient(cfg) as client:
            kubernetes.client.CoreV1Api(client).patch_node(
                "n1", {"metadata": {"labels": {"a": "b"}}})

It serves Nodes (core/v1, cluster scoped), NodeFeatures
(``nfd.k8s-sigs.io/v1alpha1``, namespaced), read-only Pods and DaemonSets, and
ResourceSlices (``resource.k8s.io/v1``, list and watch, field-selected by ``spec.nodeName``
and ``spec.driver`` like the real server, ``limit`` honoured), and reproduces the
behaviour gfd depends on (tests/README.md, "The fakes"): merge, strategic-merge, JSON and
server-side-apply patches; a global ``resourceVersion``
bumped on every write (no bump for a write that changes nothing, like the real
server); 409 for a stale ``resourceVersion``; 422 with the exact label rules; 403 from a rule set;
404 for missing objects and for the NodeFeature API when the CRD is absent;
fault injection, latency, dropped connections; answers no API server sends but a
proxy in front of one may (a 200 that is an HTML page or a JSON list, an answer of
hundreds of MB streamed without holding it, one that trickles a byte at a time); and an
exact request log.

Selecting the patch type with kubernetes client 37.x
----------------------------------------------------
The generated ``patch_*`` methods take ``_content_type=``; without it:

* ``CoreV1Api.patch_node(name, body)`` picks ``application/json-patch+json``
  (the first JSON-ish entry of its list), and ``rest.py`` then rewrites it to
  ``application/strategic-merge-patch+json`` whenever ``body`` is not a list.
  So a dict body means **strategic merge**, a list body means **JSON patch**.
* ``CustomObjectsApi.patch_namespaced_custom_object(...)`` defaults to
  ``application/merge-patch+json``.

Explicitly:

* merge patch:     ``patch_node(name, body, _content_type="application/merge-patch+json")``
* strategic merge: ``patch_node(name, body,
  _content_type="application/strategic-merge-patch+json")`` (or the default)
* JSON patch:      ``patch_node(name, [ops...], _content_type="application/json-patch+json")``
  (or the default with a list body)
* server-side apply: ``patch_node(name, body, field_manager="gfd", force=True,
  _content_type="application/apply-patch+yaml")``; the body must be a dict
  (pydantic rejects a ``str``) and is sent as JSON, which is valid YAML. The
  server also accepts YAML text from other clients.

Other client behaviour worth knowing: PUT, POST and DELETE are sent with no
``Content-Type`` at all (the server assumes JSON, as the real one does). With
``Configuration.retries`` left at None, urllib3's ``Retry(3)`` silently retries
GET/PUT/DELETE answered 429/503 *with* ``Retry-After`` (sleeping that long) and
retries dropped connections for GET; PATCH and POST are never retried. Set
``retries = 0`` to see every fault.

Non-apply writes record ownership for ``fieldManager``, else for the
User-Agent's prefix (``OpenAPI-Generator`` for this client), like the real
server. ``add_node`` labels are owned by ``kubelet`` (an Update manager).

Watches (``?watch=1`` on the Node and NodeFeature collections) stream like the real
server's: HTTP 200, chunked, one JSON event per line (``ADDED``, ``MODIFIED``, ``DELETED``,
``BOOKMARK``, ``ERROR``), replayed from a history of every change after the requested
``resourceVersion`` (synthetic ``ADDED`` events of the current state for ``""`` or ``"0"``),
filtered by field and label selectors, with bookmarks, ``timeoutSeconds`` and a 410
``Expired`` ERROR event after ``compact()``; ``drop_watches()``, ``end_watches()``,
``send_watch_error()`` and ``inject_watch()`` fault them (see "watches" in the class).

``deny_label`` stands in for an admission rule that refuses one label value (422
Invalid naming it, as a validating admission policy with reason Invalid answers).

Where the real server checks a ``metadata.uid`` it does so here too: in an apply
it is a precondition (no object: 409 "uid mismatch"; another object of that name: 422,
the uid is immutable), so an apply naming a uid never creates; in a PUT it is a
precondition checked before the object's absence (409 StorageError, else 404).

Known limits (requests outside them fail loudly rather than silently):
lists in strategic merge patches are replaced, not merged by key; no
``sendInitialEvents`` watch (501); server-side apply tracks ownership of ``metadata.labels`` and
``metadata.annotations`` keys only (other fields in an apply body but the uid
precondition are a 400) and is not offered for NodeFeatures (501).

Where each part lives (``from fakes.apiserver import X`` works for every name below):
``server`` (the HTTP server, lifecycle, kubeconfigs, request log, one request's path),
``handlers`` (routes, one handler per verb and resource), ``store`` (objects and storage:
state helpers, create/update/list/commit), ``watch`` (history, streams, bookmarks, 410),
``admission`` (token, RBAC-like rules, label admission), ``faults`` (injected answers,
latency, down), ``validation`` (label rules, metadata, Event and NodeFeature schema),
``patches``, ``apply`` (server-side apply and field ownership), ``selectors``, ``errors``
(Status answers), ``objects`` (resources and stored objects), ``exchange`` (a request, its
answer, the request log's record).
"""

from .errors import ApiError, FieldError, status_body
from .exchange import Handler, RequestRecord
from .objects import (
    APPLY_PATCH,
    DAEMONSETS,
    DEFAULT_TOKEN,
    DEFAULT_USER,
    EVENT_FIELDS,
    EVENTS,
    JSON,
    JSON_PATCH,
    MERGE_PATCH,
    NFD_API_VERSION,
    NFD_GROUP,
    NODEFEATURES,
    NODES,
    PODS,
    RESOURCES,
    RESOURCESLICES,
    SELECTABLE_FIELDS,
    STRATEGIC_MERGE_PATCH,
    VERBS,
    Field,
    ManagerKey,
    Resource,
)
from .patches import JsonPatchError, json_patch, merge_patch, strategic_merge_patch
from .selectors import Requirement, parse_label_selector
from .server import FakeApiServer, main, self_signed
from .validation import label_value_errors, qualified_name_errors
from .watch import DEFAULT_WATCH_TIMEOUT

__all__ = [
    "APPLY_PATCH",
    "DAEMONSETS",
    "DEFAULT_TOKEN",
    "DEFAULT_USER",
    "DEFAULT_WATCH_TIMEOUT",
    "EVENTS",
    "EVENT_FIELDS",
    "JSON",
    "JSON_PATCH",
    "MERGE_PATCH",
    "NFD_API_VERSION",
    "NFD_GROUP",
    "NODEFEATURES",
    "NODES",
    "PODS",
    "RESOURCES",
    "RESOURCESLICES",
    "SELECTABLE_FIELDS",
    "STRATEGIC_MERGE_PATCH",
    "VERBS",
    "ApiError",
    "FakeApiServer",
    "Field",
    "FieldError",
    "Handler",
    "JsonPatchError",
    "ManagerKey",
    "RequestRecord",
    "Requirement",
    "Resource",
    "json_patch",
    "label_value_errors",
    "main",
    "merge_patch",
    "parse_label_selector",
    "qualified_name_errors",
    "self_signed",
    "status_body",
    "strategic_merge_patch",
]
