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
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import re
import secrets
import select
import signal
import socket
import ssl
import subprocess
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

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
RESOURCES = {r.plural: r for r in (NODES, PODS, DAEMONSETS, NODEFEATURES, RESOURCESLICES,
                                   EVENTS)}
EVENT_FIELDS = frozenset({
    "involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
    "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
    "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type",
})
"""The fields the API server selects Events by (besides metadata.name / namespace)."""
SELECTABLE_FIELDS = {RESOURCESLICES: frozenset({"spec.nodeName", "spec.driver"}),
                     EVENTS: EVENT_FIELDS}
"""Field selectors a resource takes besides metadata.name and metadata.namespace (the real
server's ResourceSlice strategy indexes exactly spec.nodeName and spec.driver)."""


# --------------------------------------------------------------------------- errors


def status_body(code: int, reason: str, message: str, details: JSON | None = None) -> JSON:
    """A ``Status`` object exactly as the API server sends it (details only when given)."""
    body: JSON = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


class ApiError(Exception):
    """An error answered with a ``Status`` body."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: JSON | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = dict(headers or {})

    def body(self) -> JSON:
        return status_body(self.code, self.reason, self.message, self.details)


def _bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def _not_found(res: Resource, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{res.qualified} "{name}" not found', res.details(name))


def _no_such_resource() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def _conflict(res: Resource, name: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {res.qualified} "{name}": the object has been '
        "modified; please apply your changes to the latest version and try again",
        res.details(name),
    )


def _storage_key(res: Resource, namespace: str, name: str) -> str:
    """The etcd key the API server names in a storage error."""
    group = f"{res.group}/" if res.group else ""
    ns = f"{namespace}/" if res.namespaced else ""
    return f"/registry/{group}{res.plural}/{ns}{name}"


def _uid_precondition_failed(
    res: Resource, namespace: str, name: str, wanted: str, actual: str
) -> ApiError:
    """A uid precondition (from ``metadata.uid`` of an update, or a delete's preconditions)
    that the stored object does not meet -- or no object at all (``actual`` empty): the
    storage layer's InvalidObj error, which the registry answers as a 409 Conflict."""
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {res.qualified} "{name}": StorageError: invalid '
        f"object, Code: 4, Key: {_storage_key(res, namespace, name)}, ResourceVersion: 0, "
        f"AdditionalErrorMsg: Precondition failed: UID in precondition: {wanted}, UID in "
        f"object meta: {actual}",
        res.details(name),
    )


def _already_exists(res: Resource, name: str) -> ApiError:
    return ApiError(
        409, "AlreadyExists", f'{res.qualified} "{name}" already exists', res.details(name)
    )


def _unsupported_media_type(res: Resource) -> ApiError:
    types = [JSON_PATCH, MERGE_PATCH]
    if not res.custom:
        types.append(STRATEGIC_MERGE_PATCH)
    types += [APPLY_PATCH, "application/apply-patch+cbor"]
    return ApiError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(types),
    )


@dataclass(frozen=True)
class FieldError:
    """One entry of ``details.causes`` in a 422 answer."""

    field: str
    reason: str  # FieldValueInvalid, FieldValueRequired, FieldValueTooLong
    detail: str
    value: str | None = None  # already quoted, as Go's %q would

    def text(self) -> str:
        if self.reason == "FieldValueInvalid":
            return f"Invalid value: {self.value}: {self.detail}"
        if self.reason == "FieldValueRequired":
            return "Required value" + (f": {self.detail}" if self.detail else "")
        return f"Too long: {self.detail}"


def _invalid(res: Resource, name: str, errors: list[FieldError]) -> ApiError:
    parts = [f"{e.field}: {e.text()}" for e in errors]
    summary = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    details: JSON = {"name": name}
    if res.group:
        details["group"] = res.group
    details["kind"] = res.kind
    details["causes"] = [
        {"reason": e.reason, "message": e.text(), "field": e.field} for e in errors
    ]
    return ApiError(422, "Invalid", f'{res.qualified_kind} "{name}" is invalid: {summary}', details)


_REASONS = {
    400: ("BadRequest", "the server rejected our request for an unknown reason"),
    401: ("Unauthorized", "Unauthorized"),
    403: ("Forbidden", "forbidden: injected fault"),
    404: ("NotFound", "the server could not find the requested resource"),
    405: ("MethodNotAllowed", "the server does not allow this method on the requested resource"),
    409: ("Conflict", "Operation cannot be fulfilled: the object has been modified"),
    410: ("Expired", "too old resource version"),
    422: ("Invalid", "the server rejected our request due to an error in our request"),
    429: ("TooManyRequests", "Too many requests, please try again later."),
    500: ("InternalError", "Internal error occurred: injected fault"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
    504: ("Timeout", "the server was unable to return a response in the time allotted"),
}


# --------------------------------------------------------------------------- label rules

_DNS1123_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_QUALIFIED_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE = f"({_QUALIFIED_NAME})?"
_QUALIFIED_NAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character"
)
_TOTAL_ANNOTATION_SIZE = 256 * 1024


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    ex = " or ".join(f"'{e}'" for e in examples)
    return f"{msg} (e.g. {ex}, regex used for validation is '{fmt}')"


def _max_len(n: int) -> str:
    return f"must be no more than {n} bytes"


def qualified_name_errors(value: str) -> list[str]:
    """apimachinery ``IsQualifiedName``: the rule for label and annotation keys."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            if len(prefix) > 253:
                errs.append("prefix part " + _max_len(253))
            if not re.fullmatch(_DNS1123_SUBDOMAIN, prefix):
                errs.append(
                    "prefix part "
                    + _regex_error(
                        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                        "characters, '-' or '.', and must start and end with an alphanumeric "
                        "character",
                        _DNS1123_SUBDOMAIN,
                        "example.com",
                    )
                )
    else:
        return [
            "a qualified name "
            + _regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part " + _max_len(63))
    if not re.fullmatch(_QUALIFIED_NAME, name):
        errs.append(
            "name part "
            + _regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME, "MyName", "my.name", "123-abc")
        )
    return errs


def label_value_errors(value: str) -> list[str]:
    """apimachinery ``IsValidLabelValue``."""
    errs: list[str] = []
    if len(value) > 63:
        errs.append(_max_len(63))
    if not re.fullmatch(_LABEL_VALUE, value):
        errs.append(
            _regex_error(
                "a valid label must be an empty string or consist of alphanumeric characters, "
                "'-', '_' or '.', and must start and end with an alphanumeric character",
                _LABEL_VALUE,
                "MyValue",
                "my_value",
                "12345",
            )
        )
    return errs


def _metadata_errors(meta: JSON) -> list[FieldError]:
    """``ValidateLabels`` + ``ValidateAnnotations`` on an object's metadata."""
    errors: list[FieldError] = []
    labels: dict[str, str] = meta.get("labels") or {}
    for key in sorted(labels):
        for msg in qualified_name_errors(key):
            errors.append(FieldError("metadata.labels", "FieldValueInvalid", msg, _q(key)))
        for msg in label_value_errors(labels[key]):
            errors.append(FieldError("metadata.labels", "FieldValueInvalid", msg, _q(labels[key])))
    annotations: dict[str, str] = meta.get("annotations") or {}
    for key in sorted(annotations):
        for msg in qualified_name_errors(key.lower()):
            errors.append(FieldError("metadata.annotations", "FieldValueInvalid", msg, _q(key)))
    size = sum(len(k) + len(v) for k, v in annotations.items())
    if size > _TOTAL_ANNOTATION_SIZE:
        errors.append(
            FieldError(
                "metadata.annotations",
                "FieldValueTooLong",
                f"must have at most {_TOTAL_ANNOTATION_SIZE} bytes",
            )
        )
    return errors


def _q(value: str) -> str:
    return json.dumps(value)


def _check_string_map(meta: JSON, key: str) -> None:
    """Decoding into ``map[string]string`` fails with 400 for non-strings."""
    value = meta.get(key)
    if value is None:
        return
    if not isinstance(value, dict):
        raise _bad_request(
            f"json: cannot unmarshal {_json_type(value)} into Go struct field "
            f"ObjectMeta.metadata.{key} of type map[string]string"
        )
    for v in value.values():
        if v is None:
            raise _bad_request(f"fake apiserver: null values in metadata.{key} are not supported")
        if not isinstance(v, str):
            raise _bad_request(
                f"json: cannot unmarshal {_json_type(v)} into Go struct field "
                f"ObjectMeta.metadata.{key} of type string"
            )


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "string"


# --------------------------------------------------------------------------- patches


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Strategic merge patch, limited to what maps need (identical to merge patch there).

    ``$setElementOrder/...`` and ``$retainKeys`` directives are ignored; other
    directives are rejected (400) rather than silently mis-applied.
    """
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key == "$retainKeys":
            continue
        if key.startswith("$"):
            raise _bad_request(f"fake apiserver: strategic merge directive {key} not supported")
        if value is None:
            result.pop(key, None)
        else:
            result[key] = strategic_merge_patch(result.get(key), value)
    return result


class JsonPatchError(Exception):
    pass


def _pointer(path: str) -> list[str]:
    if path and not path.startswith("/"):
        raise JsonPatchError(f"invalid JSON pointer: {path!r}")
    if path == "":
        return []
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _child(container: Any, token: str, path: str, op: str) -> Any:
    if isinstance(container, dict):
        if token not in container:
            raise JsonPatchError(f'{op} operation does not apply: doc is missing path: "{path}"')
        return container[token]
    if isinstance(container, list):
        index = _index(container, token, path, op, allow_end=False)
        return container[index]
    raise JsonPatchError(f'{op} operation does not apply: doc is missing path: "{path}"')


def _index(container: list[Any], token: str, path: str, op: str, *, allow_end: bool) -> int:
    if allow_end and token == "-":
        return len(container)
    if not re.fullmatch(r"0|[1-9][0-9]*", token):
        raise JsonPatchError(f"{op} operation does not apply: invalid array index: {path}")
    index = int(token)
    limit = len(container) + (1 if allow_end else 0)
    if index >= limit:
        raise JsonPatchError(f"{op} operation does not apply: index out of bounds: {path}")
    return index


def _parent(doc: Any, tokens: list[str], path: str, op: str) -> Any:
    node = doc
    for token in tokens[:-1]:
        node = _child(node, token, path, op)
    return node


def _strict_equal(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def json_patch(doc: Any, ops: list[Any]) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, test, move, copy), atomic."""
    doc = copy.deepcopy(doc)
    for raw in ops:
        if not isinstance(raw, dict):
            raise JsonPatchError("invalid operation")
        op, path = raw.get("op"), raw.get("path")
        if not isinstance(path, str):
            raise JsonPatchError(f"{op} operation does not apply: missing path")
        tokens = _pointer(path)
        if op in ("add", "replace", "test") and "value" not in raw:
            raise JsonPatchError(f"{op} operation does not apply: missing value")
        if op == "test":
            try:
                current = _get(doc, tokens, path, op)
            except JsonPatchError:
                current = _Missing
            if current is _Missing or not _strict_equal(current, raw["value"]):
                raise JsonPatchError(f"testing value {path} failed: test failed")
        elif op == "add":
            doc = _add(doc, tokens, path, copy.deepcopy(raw["value"]), op)
        elif op == "remove":
            doc = _remove(doc, tokens, path, op)[0]
        elif op == "replace":
            _get(doc, tokens, path, op)  # must exist
            doc = _remove(doc, tokens, path, op)[0]
            doc = _add(doc, tokens, path, copy.deepcopy(raw["value"]), op)
        elif op in ("move", "copy"):
            source = raw.get("from")
            if not isinstance(source, str):
                raise JsonPatchError(f"{op} operation does not apply: missing from")
            from_tokens = _pointer(source)
            value = copy.deepcopy(_get(doc, from_tokens, source, op))
            if op == "move":
                doc = _remove(doc, from_tokens, source, op)[0]
            doc = _add(doc, tokens, path, value, op)
        else:
            raise JsonPatchError(f"Unexpected kind: {op}")
    return doc


class _MissingType:
    pass


_Missing = _MissingType()


def _get(doc: Any, tokens: list[str], path: str, op: str) -> Any:
    node = doc
    for token in tokens:
        node = _child(node, token, path, op)
    return node


def _add(doc: Any, tokens: list[str], path: str, value: Any, op: str) -> Any:
    if not tokens:
        return value
    parent = _parent(doc, tokens, path, op)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, path, op, allow_end=True), value)
    else:
        raise JsonPatchError(f'{op} operation does not apply: doc is missing path: "{path}"')
    return doc


def _remove(doc: Any, tokens: list[str], path: str, op: str) -> tuple[Any, Any]:
    if not tokens:
        raise JsonPatchError(f"{op} operation does not apply: cannot remove the root")
    parent = _parent(doc, tokens, path, op)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise JsonPatchError(
                f'{op} operation does not apply: doc is missing path: "{path}": missing value'
            )
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, last, path, op, allow_end=False))
    raise JsonPatchError(f'{op} operation does not apply: doc is missing path: "{path}"')


# --------------------------------------------------------------------------- selectors


@dataclass(frozen=True)
class Requirement:
    """One term of a label selector."""

    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.op == "exists":
            return value is not None
        if self.op == "!":
            return value is None
        if self.op in ("=", "in"):
            return value in self.values
        return value not in self.values  # "!=", "notin"


def parse_label_selector(selector: str) -> list[Requirement]:
    """Equality (``=``, ``==``, ``!=``), set (``in``, ``notin``) and existence (``k``, ``!k``)."""
    requirements: list[Requirement] = []
    for raw in _split_selector(selector):
        term = raw.strip()
        if not term:
            continue
        m = re.fullmatch(r"(\S+)\s+(in|notin)\s+\(([^)]*)\)", term)
        if m:
            values = frozenset(v.strip() for v in m.group(3).split(","))
            requirements.append(Requirement(m.group(1), m.group(2), values))
            continue
        m = re.fullmatch(r"([^=!\s]+)\s*(==|=|!=)\s*(\S*)", term)
        if m:
            op = "!=" if m.group(2) == "!=" else "="
            requirements.append(Requirement(m.group(1), op, frozenset({m.group(3)})))
            continue
        m = re.fullmatch(r"(!?)([^=!\s()]+)", term)
        if m:
            requirements.append(Requirement(m.group(2), "!" if m.group(1) else "exists"))
            continue
        raise _bad_request(f"unable to parse requirement: {term!r}")
    return requirements


def _split_selector(selector: str) -> list[str]:
    parts: list[str] = []
    depth, current = 0, ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return parts


def _parse_field_selector(selector: str, res: Resource | None = None
                          ) -> list[tuple[str, Requirement]]:
    """``metadata.name`` and ``metadata.namespace`` (and the resource's own selectable
    fields, ``SELECTABLE_FIELDS``: an Event's, a ResourceSlice's) with ``=``, ``==``,
    ``!=``; each as (field path, requirement). Any other field is a 400 (for ResourceSlices
    in the real server's words)."""
    extra = SELECTABLE_FIELDS.get(res, frozenset()) if res is not None else frozenset()
    out: list[tuple[str, Requirement]] = []
    for term in filter(None, (t.strip() for t in selector.split(","))):
        m = re.fullmatch(r"([A-Za-z.]+)\s*(==|=|!=)\s*(\S*)", term)
        if not m:
            raise _bad_request(f'"{term}" is not a known field selector')
        path = m.group(1)
        if path not in ("metadata.name", "metadata.namespace", *extra):
            if res is not RESOURCESLICES:
                raise _bad_request(f'"{term}" is not a known field selector')
            raise _bad_request(f"field label not supported for {res.api_version}, "
                               f"Kind={res.kind}: {path}")
        op = "!=" if m.group(2) == "!=" else "="
        out.append((path, Requirement(path, op, frozenset({m.group(3)}))))
    return out


def _field_value(obj: JSON, path: str) -> str:
    """The value a field selector compares: ``source`` is the Event's source.component."""
    if path == "source":
        path = "source.component"
    value: Any = obj
    for part in path.split("."):
        value = value.get(part, "") if isinstance(value, dict) else ""
    return str(value) if value is not None else ""


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


@dataclass(frozen=True)
class RequestRecord:
    """One entry of the request log."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str | None
    status: int  # 0: the connection was dropped (set_down) without an answer
    request_bytes: int
    response_bytes: int
    timestamp: float
    body: bytes = b""

    def json(self) -> Any:
        """The request body, parsed (JSON, or YAML for apply)."""
        return yaml.safe_load(self.body) if self.body else None

    @property
    def watch(self) -> bool:
        """A watch request (``?watch=1`` or ``?watch=true``); it is logged when its stream
        starts, with status 200 and ``response_bytes`` 0."""
        return self.query.get("watch", "").lower() in ("1", "true")


@dataclass
class _Fault:
    status: int
    remaining: int | None
    method: str | None
    path_contains: str | None
    retry_after: int | None
    body: JSON | str | bytes | None
    content_type: str | None = None
    size: int | None = None
    chunked: bool = False
    trickle: float = 0.0
    trickle_headers: bool = True


@dataclass(frozen=True)
class _Rule:
    verb: str
    resource: str
    name: str | None


@dataclass
class _Request:
    method: str
    path: str
    query: dict[str, str]
    content_type: str | None  # media type only, lower case, no parameters
    body: bytes
    user_agent: str
    authorization: str | None


@dataclass
class _Response:
    status: int
    body: JSON | str | bytes
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str | None = None
    """Overrides the Content-Type (JSON for a dict, text/plain otherwise)."""
    size: int | None = None
    """Pad the body to this many bytes, streamed (never held in memory)."""
    chunked: bool = False
    """Send the body with Transfer-Encoding: chunked (no Content-Length)."""
    trickle: float = 0.0
    """Seconds between bytes: an answer that trickles."""
    trickle_headers: bool = True
    """Trickle from the status line on (else the status line and headers come at once)."""


Handler = Callable[[_Request, dict[str, str]], _Response]


@dataclass(frozen=True)
class _Route:
    method: str
    pattern: re.Pattern[str]
    resource: Resource
    verb: str
    handler: Handler


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _meta(obj: JSON) -> JSON:
    meta = obj.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise _bad_request("metadata must be an object")
    return meta


def _section(obj: JSON, section: str) -> dict[str, str]:
    value = obj.get("metadata", {}).get(section)
    return dict(value) if isinstance(value, dict) else {}


def _drop_empty_maps(meta: JSON) -> None:
    for key in _SECTIONS:
        if key in meta and not meta[key]:
            del meta[key]


def _flag(value: str | None) -> bool | None:
    if value is None:
        return None
    if value.lower() in ("true", "1"):
        return True
    if value.lower() in ("false", "0", ""):
        return False
    raise _bad_request(f"invalid boolean value {value!r}")


# --------------------------------------------------------------------------- watches

DEFAULT_WATCH_TIMEOUT = 1800.0
"""A watch without ``timeoutSeconds`` (or 0) lasts the API server's --min-request-timeout
(1800 s) times a random factor in [1, 2)."""


@dataclass(frozen=True)
class _Change:
    """One entry of the watch history: an object as rendered before and after one write
    (None: absent), at the resourceVersion the write made."""

    rv: int
    res: Resource
    before: JSON | None
    after: JSON | None


@dataclass(eq=False)
class _Watch:
    """One open watch: what it selects, the events queued for it and when it ends."""

    server: Any  # the _HTTPServer it was opened on: a watch outliving it is dropped
    res: Resource
    namespace: str | None
    labels: list[Requirement]
    fields: list[tuple[str, Requirement]]
    bookmarks: bool
    deadline: float  # time.monotonic()
    next_bookmark: float | None = None
    pending: list[JSON] = field(default_factory=list)
    finish: bool = False  # end cleanly once ``pending`` is sent
    drop: bool = False  # close the connection without the last chunk

    def selects(self, obj: JSON | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata", {})
        if self.namespace is not None and meta.get("namespace", "") != self.namespace:
            return False
        labels = meta.get("labels") or {}
        return all(r.matches(labels) for r in self.labels) and all(
            r.matches({attr: _field_value(obj, attr)}) for attr, r in self.fields
        )

    def event(self, change: _Change) -> JSON | None:
        """What this watch sees of ``change``: an object entering its selection is ADDED,
        one leaving it (or deleted) DELETED with the resourceVersion of that change, as the
        API server's watch cache sends them."""
        if change.res is not self.res:
            return None
        was, now = self.selects(change.before), self.selects(change.after)
        if was and now:
            return {"type": "MODIFIED", "object": copy.deepcopy(change.after)}
        if now:
            return {"type": "ADDED", "object": copy.deepcopy(change.after)}
        if was:
            gone = copy.deepcopy(change.after if change.after is not None else change.before)
            assert gone is not None
            gone["metadata"]["resourceVersion"] = str(change.rv)
            return {"type": "DELETED", "object": gone}
        return None

    def bookmark(self, rv: int) -> JSON:
        """A BOOKMARK: only kind, apiVersion and metadata.resourceVersion are meaningful (a
        built-in kind also carries Go's zero ``creationTimestamp: null``)."""
        meta: JSON = {"resourceVersion": str(rv)}
        if not self.res.custom:
            meta["creationTimestamp"] = None
        obj = {"kind": self.res.kind, "apiVersion": self.res.api_version, "metadata": meta}
        return {"type": "BOOKMARK", "object": obj}


def _next_bookmark(now: float, deadline: float, interval: float, before: float) -> float | None:
    """The API server's schedule (cacheWatcher.nextBookmarkTime): every ``interval``, or
    ``before`` seconds ahead of the watch's deadline if that comes first; none once that
    moment has passed."""
    beat = now + interval
    if before > 0 and deadline - before < beat:
        beat = deadline - before
    return None if beat < now else beat


@dataclass
class _WatchStart(_Response):
    """The answer to a watch request: stream ``watch``'s events."""

    watch: _Watch | None = None


_WATCH_IDLE = 0.1
"""Seconds a watch waits for something to send before checking that its client is there."""


def _client_gone(conn: socket.socket) -> bool:
    """The client closed a connection it sends nothing else on (TLS: its close_notify)."""
    try:
        poller = select.poll()  # not select(): a busy test process has fds past 1024
        poller.register(conn, select.POLLIN | select.POLLHUP | select.POLLERR)
        if not poller.poll(0):
            return False
        if isinstance(conn, ssl.SSLSocket):
            return True
        return conn.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


def _shutdown(conn: socket.socket) -> None:
    try:  # the plain socket's shutdown, also under TLS: the peer sees the connection end
        socket.socket.shutdown(conn, socket.SHUT_RDWR)
    except OSError:
        pass


# --------------------------------------------------------------------------- the server


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, fake: FakeApiServer, tls: ssl.SSLContext | None = None) -> None:
        self.fake = fake
        self.connections: set[socket.socket] = set()
        self.busy: set[socket.socket] = set()
        self.threads: set[threading.Thread] = set()
        self.stopping = False
        self.connections_lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)
        if tls is not None:  # HTTPS, as in-cluster credentials expect
            self.socket = tls.wrap_socket(self.socket, server_side=True)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.threads.add(threading.current_thread())
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self.connections_lock:
                self.threads.discard(threading.current_thread())

    def join_threads(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self.connections_lock:
            threads = list(self.threads)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def set_busy(self, conn: socket.socket, busy: bool) -> bool:
        """Mark a connection as serving a request; False once the server is stopping."""
        with self.connections_lock:
            (self.busy.add if busy else self.busy.discard)(conn)
            return not self.stopping

    def close_connections(self) -> None:
        """Close idle keep-alive connections; busy ones close after their answer."""
        with self.connections_lock:
            self.stopping = True
            conns = list(self.connections - self.busy)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = -1  # buffered: status line, headers and body leave in one segment
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        # no Nagle: otherwise delayed ACKs add ~40 ms to some requests
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _any(self) -> None:
        self.server.set_busy(self.connection, True)
        try:
            self.server.fake._serve(self)
        finally:
            if not self.server.set_busy(self.connection, False):
                self.close_connection = True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

    def log_message(self, format: str, *args: Any) -> None:
        pass


class FakeApiServer:
    """A fake kube-apiserver on ``127.0.0.1:<random port>``; see the module docstring."""

    def __init__(self, *, token: str | None = DEFAULT_TOKEN, user: str = DEFAULT_USER,
                 tls: tuple[Path, Path] | None = None) -> None:
        self.token = token
        self.user = user
        self.tls = tls
        """(certificate, key) files to serve HTTPS with (see ``self_signed``); None: HTTP."""
        self._lock = threading.RLock()
        self._objects: dict[Resource, dict[tuple[str, str], _Stored]] = {
            r: {} for r in RESOURCES.values()
        }
        self._rv = 1000
        self._crd_installed = True
        self._rules: list[_Rule] = []
        self._denied: dict[str, str] = {}
        self._faults: list[_Fault] = []
        self._latency = 0.0
        self._down = False
        self._log: list[RequestRecord] = []
        self._errors: list[str] = []
        # watches: the history of changes, how far compact() forgot it, the open watches
        self._history: list[_Change] = []
        self._compacted = 0
        self._watches: set[_Watch] = set()
        self._watch_changed = threading.Condition(self._lock)
        self._watch_faults: list[_Fault] = []
        self.bookmark_interval = 60.0
        """Seconds between BOOKMARK events of a watch that allows them (the API server: about
        a minute); read when a watch opens."""
        self.bookmark_before_timeout = 2.0
        """The API server also sends a BOOKMARK this long before a watch's timeout (0: no)."""
        self.expired_as_http = False
        """Refuse a watch from a compacted resourceVersion with HTTP 410 before streaming (as
        some servers and proxies do) instead of a 200 stream holding one ERROR event."""
        self.watch_chunk_bytes: int | None = None
        """Cut each batch of watch events into HTTP chunks of this many bytes (an event split
        across chunks, several in one); None: one chunk per event, as the API server does."""
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._routes = self._build_routes()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> FakeApiServer:
        if self._httpd is not None:
            return self
        context = None
        if self.tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(self.tls[0]), str(self.tls[1]))
        self._httpd = _HTTPServer(self, context)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.01},
            name="fake-apiserver",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, thread = self._httpd, self._thread
        if httpd is None:
            return
        self._httpd = self._thread = None
        self.drop_watches()
        httpd.shutdown()
        httpd.close_connections()
        httpd.server_close()
        httpd.join_threads(timeout=5)
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("FakeApiServer is not started")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def write_service_account(self, directory: Path, *, namespace: str) -> Path:
        """What the kubelet mounts at /var/run/secrets/kubernetes.io/serviceaccount for
        in-cluster credentials: token, ca.crt (this server's certificate) and namespace."""
        if self.tls is None or self.token is None:
            raise RuntimeError("in-cluster credentials need HTTPS and a token")
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "token").write_text(self.token)
        (directory / "ca.crt").write_bytes(self.tls[0].read_bytes())
        (directory / "namespace").write_text(namespace)
        return directory

    def write_kubeconfig(self, path: str | Path, *, namespace: str | None = None) -> Path:
        """Write a kubeconfig (context, cluster and user all named ``fake``)."""
        context: JSON = {"cluster": "fake", "user": "fake"}
        if namespace:
            context["namespace"] = namespace
        user: JSON = {"token": self.token} if self.token else {}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url, **(
                {"certificate-authority": str(self.tls[0])} if self.tls else {})}}],
            "contexts": [{"name": "fake", "context": context}],
            "users": [{"name": "fake", "user": user}],
            "current-context": "fake",
            "preferences": {},
        }
        out = Path(path)
        out.write_text(yaml.safe_dump(config, sort_keys=False))
        return out

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
        with self._lock:
            stored = self._objects[NODES].pop(("", name), None)
            if stored is None:
                raise KeyError(name)
            self._bump()
            self._changed(NODES, self._render(NODES, stored), None)

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
        with self._lock:
            stored = self._objects[NODEFEATURES].pop((namespace, name), None)
            if stored is None:
                raise KeyError(name)
            self._bump()
            self._changed(NODEFEATURES, self._render(NODEFEATURES, stored), None)

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
        with self._lock:
            stored = self._objects[RESOURCESLICES].pop(("", name), None)
            if stored is None:
                raise KeyError(name)
            self._bump()
            self._changed(RESOURCESLICES, self._render(RESOURCESLICES, stored), None)

    def _get_plain(self, res: Resource, namespace: str, name: str) -> JSON | None:
        with self._lock:
            stored = self._objects[res].get((namespace, name))
            return None if stored is None else self._render(res, stored)

    def set_crd_installed(self, installed: bool) -> None:
        """Without the CRD every nodefeatures URL answers 404 (objects are kept)."""
        with self._lock:
            self._crd_installed = installed

    # ------------------------------------------------------------------ authorisation

    def forbid(self, verb: str, resource: str, name: str | None = None) -> None:
        """Deny ``verb`` on ``resource`` (all names, or one) with 403 Forbidden."""
        if verb not in VERBS:
            raise ValueError(f"unknown verb {verb!r}")
        if resource not in RESOURCES:
            raise ValueError(f"unknown resource {resource!r}")
        with self._lock:
            self._rules.append(_Rule(verb, resource, name))

    def allow_all(self) -> None:
        with self._lock:
            self._rules.clear()

    def deny_label(self, key: str, value: str, *, message: str = "refused by policy") -> None:
        """An admission rule (a validating admission policy with reason Invalid, a webhook):
        a write that sets Node label ``key`` to ``value`` is a 422 Invalid naming the value,
        and nothing changes. ``allow_label`` lifts it."""
        with self._lock:
            self._denied[key] = f"{value}\0{message}"

    def allow_label(self, key: str) -> None:
        with self._lock:
            self._denied.pop(key, None)

    # ------------------------------------------------------------------ faults

    def inject(
        self,
        status: int,
        count: int | None = 1,
        *,
        method: str | None = None,
        path_contains: str | None = None,
        retry_after: int | None = None,
        body: JSON | str | bytes | None = None,
        content_type: str | None = None,
        size: int | None = None,
        chunked: bool = False,
        trickle: float = 0.0,
        trickle_headers: bool = True,
    ) -> None:
        """Answer the next ``count`` matching requests with ``status`` (None: until
        ``clear_faults``) instead of serving them; a 2xx status fakes what a proxy in front
        of the API server may answer.

        The default body is a Status with the reason the real server uses for
        ``status``; ``retry_after`` adds a ``Retry-After`` header (and, for 429,
        ``details.retryAfterSeconds``). A str/bytes body is sent as text/plain unless
        ``content_type`` says otherwise. ``size`` pads the body to that many bytes, streamed
        (a 300 MB answer costs the fake no memory); ``chunked`` sends it without a
        Content-Length; ``trickle`` sends the answer one byte every ``trickle`` seconds, from
        the status line on, or from the body on when ``trickle_headers`` is false.
        """
        with self._lock:
            self._faults.append(
                _Fault(
                    status,
                    count,
                    method.upper() if method else None,
                    path_contains,
                    retry_after,
                    body,
                    content_type,
                    size,
                    chunked,
                    trickle,
                    trickle_headers,
                )
            )

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()
            self._watch_faults.clear()

    def set_latency(self, seconds: float) -> None:
        with self._lock:
            self._latency = seconds

    def set_down(self, down: bool) -> None:
        """While down, every request is read and then its connection closed unanswered."""
        with self._lock:
            self._down = down

    # ------------------------------------------------------------------ request log

    @property
    def requests(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._log)

    def clear_log(self) -> None:
        with self._lock:
            self._log.clear()

    def count(self, method: str | None = None, path_contains: str | None = None) -> int:
        with self._lock:
            return sum(
                1
                for r in self._log
                if (method is None or r.method == method.upper())
                and (path_contains is None or path_contains in r.path)
            )

    @property
    def errors(self) -> list[str]:
        """Tracebacks of bugs inside the fake (answered as 500); should stay empty."""
        with self._lock:
            return list(self._errors)

    # ------------------------------------------------------------------ HTTP plumbing

    def _serve(self, h: _Handler) -> None:
        split = urlsplit(h.path)
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        raw_type = h.headers.get("Content-Type")
        req = _Request(
            method=h.command,
            path=unquote(split.path),
            query=query,
            content_type=raw_type.split(";")[0].strip().lower() if raw_type else None,
            body=body,
            user_agent=h.headers.get("User-Agent", ""),
            authorization=h.headers.get("Authorization"),
        )
        with self._lock:
            down, latency = self._down, self._latency
        if down:
            self._record(req, raw_type, 0, 0)
            h.close_connection = True
            return
        if latency > 0:
            time.sleep(latency)
        resp = self._dispatch(req)
        if isinstance(resp, _WatchStart) and resp.watch is not None:
            self._record(req, raw_type, resp.status, 0)
            self._serve_watch(h, resp.watch)
            return
        if isinstance(resp.body, dict):
            payload = json.dumps(resp.body).encode()
            ctype = "application/json"
        else:
            payload = resp.body.encode() if isinstance(resp.body, str) else resp.body
            ctype = "text/plain; charset=utf-8"
        ctype = resp.content_type or ctype
        if resp.size is not None or resp.chunked or resp.trickle:
            self._record(req, raw_type, resp.status, max(len(payload), resp.size or 0))
            self._stream(h, resp, payload, ctype)
            return
        self._record(req, raw_type, resp.status, len(payload))
        try:
            h.send_response(resp.status)
            h.send_header("Content-Type", ctype)
            h.send_header("Content-Length", str(len(payload)))
            h.send_header("Cache-Control", "no-cache, private")
            for key, value in resp.headers.items():
                h.send_header(key, value)
            h.end_headers()
            h.wfile.write(payload)
        except OSError:
            h.close_connection = True

    def _stream(self, h: _Handler, resp: _Response, payload: bytes, ctype: str) -> None:
        """Write an answer piece by piece: padded to ``size`` (a body that ends ``"}`` when it
        is JSON, so it stays a valid object), chunked, or one byte at a time."""
        filler = b""
        if resp.size is not None and resp.size > len(payload):
            if payload.endswith(b"}"):  # {..., "pad": "xxx...x"}
                payload = payload[:-1] + b', "pad": "'
                tail = b'"}'
            else:
                tail = b""
            filler_len = resp.size - len(payload) - len(tail)
            filler = b"x" * min(filler_len, 1 << 20)
            pieces = self._padded(payload, filler, filler_len, tail)
        else:
            pieces = iter([payload])
        total = max(len(payload), resp.size or 0)
        lines = [f"HTTP/1.1 {resp.status} {h.responses.get(resp.status, ('',))[0]}",
                 f"Content-Type: {ctype}", "Cache-Control: no-cache, private"]
        lines += [f"{k}: {v}" for k, v in resp.headers.items()]
        lines += ["Transfer-Encoding: chunked"] if resp.chunked else [f"Content-Length: {total}"]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode()
        h.close_connection = True
        try:
            self._send(h, head, resp.trickle if resp.trickle_headers else 0.0)
            for piece in pieces:
                if resp.chunked:
                    piece = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
                self._send(h, piece, resp.trickle)
            if resp.chunked:
                self._send(h, b"0\r\n\r\n", resp.trickle)
        except OSError:  # the client gave up: drop what is left, even from the buffer
            h.wfile = io.BytesIO()

    @staticmethod
    def _padded(payload: bytes, filler: bytes, length: int, tail: bytes) -> Any:
        yield payload
        while length > 0:
            piece = filler[:length]
            length -= len(piece)
            yield piece
        if tail:
            yield tail

    def _send(self, h: _Handler, data: bytes, trickle: float) -> None:
        if not trickle:
            h.wfile.write(data)
            h.wfile.flush()
            return
        for i in range(len(data)):
            if self._httpd is None or self._httpd.stopping:
                raise OSError("the fake API server is stopping")
            h.wfile.write(data[i : i + 1])
            h.wfile.flush()
            time.sleep(trickle)

    def _record(self, req: _Request, raw_type: str | None, status: int, size: int) -> None:
        record = RequestRecord(
            method=req.method,
            path=req.path,
            query=dict(req.query),
            content_type=raw_type,
            status=status,
            request_bytes=len(req.body),
            response_bytes=size,
            timestamp=time.time(),
            body=req.body,
        )
        with self._lock:
            self._log.append(record)

    def _dispatch(self, req: _Request) -> _Response:
        try:
            fault = self._take_fault(req)
            if fault is not None:
                return fault
            if req.method == "GET" and req.path == "/version":
                return _Response(200, {"major": "1", "minor": "35", "gitVersion": "v1.35.0-fake"})
            if self.token is not None and not _bearer_matches(req.authorization, self.token):
                raise ApiError(401, "Unauthorized", "Unauthorized")
            route, params = self._route(req)
            with self._lock:
                self._authorize(route, req, params)
                if route.resource.custom and not self._crd_installed:
                    raise _no_such_resource()
                return route.handler(req, params)
        except ApiError as err:
            return _Response(err.code, err.body(), err.headers)
        except Exception:
            tb = traceback.format_exc()
            with self._lock:
                self._errors.append(tb)
            return _Response(500, status_body(500, "InternalError", f"fake apiserver bug: {tb}"))

    def _take_fault(self, req: _Request) -> _Response | None:
        with self._lock:
            for fault in self._faults:
                if fault.method is not None and fault.method != req.method:
                    continue
                if fault.path_contains is not None and fault.path_contains not in req.path:
                    continue
                if fault.remaining is not None:
                    fault.remaining -= 1
                    if fault.remaining <= 0:
                        self._faults.remove(fault)
                break
            else:
                return None
        headers: dict[str, str] = {}
        if fault.retry_after is not None:
            headers["Retry-After"] = str(fault.retry_after)
        body = fault.body
        if body is None:
            reason, message = _REASONS.get(
                fault.status,
                ("", f"the server responded with the status code {fault.status}"),
            )
            details: JSON = {}
            if fault.retry_after is not None and fault.status in (429, 500, 503, 504):
                details["retryAfterSeconds"] = fault.retry_after
            body = status_body(fault.status, reason, message, details or None)
        return _Response(fault.status, body, headers, fault.content_type, fault.size,
                         fault.chunked, fault.trickle, fault.trickle_headers)

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

    def _authorize(self, route: _Route, req: _Request, params: dict[str, str]) -> None:
        verb = route.verb
        if verb == "list" and _flag(req.query.get("watch")):
            verb = "watch"
        name = params.get("name")
        if name is None and verb in ("list", "watch"):
            name = _selected_name(req.query.get("fieldSelector", ""))
        res = route.resource
        for rule in self._rules:
            if rule.verb == verb and rule.resource == res.plural and rule.name in (None, name):
                break
        else:
            return
        ns = params.get("ns")
        scope = f'in the namespace "{ns}"' if ns else "at the cluster scope"
        subject = f'{res.qualified} "{name}"' if name else res.qualified
        raise ApiError(
            403,
            "Forbidden",
            f'{subject} is forbidden: User "{self.user}" cannot {verb} resource '
            f'"{res.plural}" in API group "{res.group}" {scope}',
            res.details(name),
        )

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
        if req.query.get("continue"):
            raise ApiError(501, "NotImplemented", "fake apiserver: continue on a list")
        if limit.isdigit() and 0 < int(limit) < len(items):
            # The real server: a continue token, and the remaining count only when no
            # selector made it unknown.
            meta_out["continue"] = f"fake-continue-{limit}"
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

    def _admit(self, res: Resource, old: JSON, new: JSON) -> None:
        """The ``deny_label`` rules: a write that sets a denied Node label value is a 422."""
        if res is not NODES:
            return
        before, after = _section(old, "labels"), _section(new, "labels")
        errors = []
        for key, rule in sorted(self._denied.items()):
            value, message = rule.split("\0", 1)
            if after.get(key) == value and before.get(key) != value:
                errors.append(FieldError("metadata.labels", "FieldValueInvalid", message,
                                         _q(value)))
        if errors:
            raise _invalid(res, new["metadata"]["name"], errors)

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


    # ------------------------------------------------------------------ watches

    @property
    def open_watches(self) -> int:
        """Watch streams open now."""
        with self._lock:
            return len(self._watches)

    @property
    def watch_requests(self) -> int:
        """Watch requests in the request log (answered or not; ``clear_log`` resets it)."""
        with self._lock:
            return sum(1 for r in self._log if r.watch)

    def compact(self, resource_version: str | None = None) -> str:
        """Forget the change history up to ``resource_version`` (default: now), as etcd's
        compaction and the watch cache's window do: a watch from an older resourceVersion
        then gets a 410 ``Expired`` ERROR event. Returns the compacted resourceVersion."""
        with self._lock:
            upto = self._rv if resource_version is None else int(resource_version)
            self._history = [c for c in self._history if c.rv > upto]
            self._compacted = max(self._compacted, upto)
            return str(self._compacted)

    def drop_watches(self) -> int:
        """Close every open watch's connection abruptly (no last chunk), as a crashed API
        server or a proxy does; returns how many there were."""
        return self._end_open_watches(drop=True)

    def end_watches(self) -> int:
        """End every open watch cleanly, as its timeout does; returns how many there were."""
        return self._end_open_watches(drop=False)

    def send_watch_error(self, code: int, reason: str, message: str) -> int:
        """Send every open watch an ERROR event with this Status, then end it cleanly (the
        API server's answer to a failure once a watch is streaming); returns how many."""
        with self._watch_changed:
            for w in self._watches:
                w.pending.append({"type": "ERROR", "object": status_body(code, reason, message)})
                w.finish = True
            self._watch_changed.notify_all()
            return len(self._watches)

    def inject_watch(
        self,
        status: int,
        count: int | None = 1,
        *,
        retry_after: int | None = None,
        body: JSON | str | bytes | None = None,
    ) -> None:
        """Answer the next ``count`` watch requests (None: until ``clear_faults``) with
        ``status`` before any streaming, like ``inject`` but for watches only (``inject``
        faults apply to watches too). Checked after authentication and RBAC."""
        with self._lock:
            self._watch_faults.append(
                _Fault(status, count, "GET", None, retry_after, body)
            )

    def _end_open_watches(self, *, drop: bool) -> int:
        with self._watch_changed:
            for w in self._watches:
                if drop:
                    w.drop = True
                else:
                    w.finish = True
            self._watch_changed.notify_all()
            return len(self._watches)

    def _changed(self, res: Resource, before: JSON | None, after: _Stored | None) -> None:
        """Record a write at the current resourceVersion and queue its event for every open
        watch that selects it (called with the lock held, right after the write)."""
        rendered = None if after is None else self._render(res, after)
        change = _Change(self._rv, res, before, rendered)
        self._history.append(change)
        for w in self._watches:
            event = w.event(change)
            if event is not None:
                w.pending.append(event)
        self._watch_changed.notify_all()

    def _take_watch_fault(self) -> _Response | None:
        for fault in self._watch_faults:
            if fault.remaining is not None:
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self._watch_faults.remove(fault)
            break
        else:
            return None
        headers = {} if fault.retry_after is None else {"Retry-After": str(fault.retry_after)}
        body = fault.body
        if body is None:
            reason, message = _REASONS.get(
                fault.status, ("", f"the server responded with the status code {fault.status}")
            )
            body = status_body(fault.status, reason, message)
        return _Response(fault.status, body, headers)

    def _watch(self, res: Resource, namespace: str | None, req: _Request) -> _Response:
        """Open a watch (under the lock, after authorization): queue its initial events --
        the current state for resourceVersion "" or "0", else every change after it -- and
        register it for live ones, so nothing falls between the two."""
        fault = self._take_watch_fault()
        if fault is not None:
            return fault
        for unsupported in ("sendInitialEvents", "resourceVersionMatch"):
            if req.query.get(unsupported):
                raise ApiError(
                    501, "NotImplemented", f"fake apiserver: {unsupported} on a watch"
                )
        labels = parse_label_selector(req.query.get("labelSelector", ""))
        fields = _parse_field_selector(req.query.get("fieldSelector", ""), res)
        timeout = _watch_timeout(req.query.get("timeoutSeconds"))
        now = time.monotonic()
        w = _Watch(
            self._httpd, res, namespace, labels, fields,
            bool(_flag(req.query.get("allowWatchBookmarks"))), now + timeout,
        )  # fmt: skip
        if w.bookmarks:
            w.next_bookmark = _next_bookmark(
                now, w.deadline, self.bookmark_interval, self.bookmark_before_timeout
            )
        text = req.query.get("resourceVersion", "")
        if text in ("", "0"):  # "Get State and Start at Most Recent" / "... at Any"
            for _, stored in sorted(self._objects[res].items()):
                obj = self._render(res, stored)
                if w.selects(obj):
                    w.pending.append({"type": "ADDED", "object": obj})
        else:
            rv = _watch_resource_version(res, text)
            if rv > self._rv:  # the real server waits up to 3 s for it first
                raise ApiError(
                    504,
                    "Timeout",
                    f"Timeout: Too large resource version: {rv}, current: {self._rv}",
                    {
                        "causes": [
                            {
                                "reason": "ResourceVersionTooLarge",
                                "message": "Too large resource version",
                            }
                        ],
                        "retryAfterSeconds": 1,
                    },
                    {"Retry-After": "1"},
                )
            if rv < self._compacted:
                message = f"too old resource version: {rv} ({self._compacted})"
                if self.expired_as_http:
                    raise ApiError(410, "Expired", message)
                w.pending.append({"type": "ERROR", "object": status_body(410, "Expired", message)})
                w.finish = True
            else:
                for change in self._history:
                    event = w.event(change) if change.rv > rv else None
                    if event is not None:
                        w.pending.append(event)
        self._watches.add(w)
        return _WatchStart(200, {}, watch=w)

    def _serve_watch(self, h: _Handler, w: _Watch) -> None:
        """Stream ``w`` as the API server does: 200, chunked, one JSON event per line, each
        sent as it happens; the last chunk at its timeout (the connection stays open for the
        next request), none when dropped."""
        try:
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Cache-Control", "no-cache, private")
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()
            h.wfile.flush()
            while True:
                events, end = self._watch_batch(w)
                if events:
                    self._send_watch_events(h, events)
                if end == "drop":
                    h.close_connection = True
                    _shutdown(h.connection)
                    return
                if end == "end":
                    h.wfile.write(b"0\r\n\r\n")
                    h.wfile.flush()
                    return
                if end == "idle" and _client_gone(h.connection):
                    h.close_connection = True  # the API server ends a watch its client left
                    return
        except OSError:  # the client went away
            h.close_connection = True
        finally:
            with self._lock:
                self._watches.discard(w)

    def _watch_batch(self, w: _Watch) -> tuple[list[JSON], str]:
        """Wait for what ``w`` sends next: queued events, a bookmark, its end ("end", "drop"),
        or nothing for a while ("idle": time to see whether the client is still there)."""
        with self._watch_changed:
            while True:
                if w.drop or w.server is not self._httpd:
                    return [], "drop"
                if w.pending:
                    events, w.pending = w.pending, []
                    return events, ""
                now = time.monotonic()
                if w.finish or now >= w.deadline:
                    return [], "end"
                if w.next_bookmark is not None and now >= w.next_bookmark:
                    w.next_bookmark = _next_bookmark(
                        now, w.deadline, self.bookmark_interval, self.bookmark_before_timeout
                    )
                    return [w.bookmark(self._rv)], ""
                wake = w.deadline if w.next_bookmark is None else min(w.deadline, w.next_bookmark)
                if not self._watch_changed.wait(min(wake - now, _WATCH_IDLE)):
                    if time.monotonic() < wake:
                        return [], "idle"

    def _send_watch_events(self, h: _Handler, events: list[JSON]) -> None:
        lines = [json.dumps(e, separators=(",", ":")).encode() + b"\n" for e in events]
        size = self.watch_chunk_bytes
        if size:
            data = b"".join(lines)
            lines = [data[i : i + size] for i in range(0, len(data), size)]
        for piece in lines:
            h.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        h.wfile.flush()


# --------------------------------------------------------------------------- helpers


def _check_event(body: JSON, namespace: str) -> None:
    """The API server's legacy Event validation (core/v1): an Event about a cluster-scoped
    object (no involvedObject.namespace) lives in ``default``; reasons and the reporting
    component are at most 128 characters."""
    involved = body.get("involvedObject") if isinstance(body.get("involvedObject"), dict) else {}
    name = str((body.get("metadata") or {}).get("name", ""))
    errors = []
    obj_ns = str(involved.get("namespace") or "")
    if (not obj_ns and namespace not in ("", "default")) or (obj_ns and obj_ns != namespace):
        errors.append(FieldError("involvedObject.namespace", "FieldValueInvalid",
                                 "does not match event.namespace", _q(obj_ns)))
    for key in ("reason", "reportingComponent"):
        if len(str(body.get(key) or "")) > 128:
            errors.append(FieldError(key, "FieldValueTooLong", "must have at most 128 bytes",
                                     _q(str(body.get(key)))))
    if errors:
        raise _invalid(EVENTS, name, errors)


def _selected_name(selector: str) -> str | None:
    """The name a list or watch is field-selected to (``metadata.name=<n>``), which the API
    server authorizes as the request's name: RBAC resourceNames then apply to it."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        m = re.fullmatch(r"metadata\.name\s*==?\s*([^\s,]+)", term)
        if m:
            return m.group(1)
    return None


def _watch_timeout(value: str | None) -> float:
    """``timeoutSeconds``: whole seconds; absent or 0 is the server's default."""
    if value is None or value == "":
        seconds = 0
    else:
        try:
            seconds = int(value)
        except ValueError as err:
            raise _bad_request(f"invalid timeoutSeconds {value!r}: {err}") from err
    if seconds <= 0:
        return DEFAULT_WATCH_TIMEOUT * (1.0 + secrets.randbelow(1000) / 1000)
    return float(seconds)


def _watch_resource_version(res: Resource, value: str) -> int:
    """A watch's resourceVersion as the storage layer parses it (422 when not a number)."""
    if re.fullmatch(r"[0-9]+", value):
        return int(value)
    raise ApiError(
        422,
        "Invalid",
        f'{res.qualified} "" is invalid: resourceVersion: Invalid value: "{value}": '
        f'strconv.ParseUint: parsing "{value}": invalid syntax',
        {"kind": res.plural, **({"group": res.group} if res.group else {}),
         "causes": [{"reason": "FieldValueInvalid", "field": "resourceVersion",
                     "message": f'Invalid value: "{value}": strconv.ParseUint: parsing '
                                f'"{value}": invalid syntax'}]},
    )  # fmt: skip


def _dry(req: _Request) -> bool:
    value = req.query.get("dryRun")
    if value is None or value == "":
        return False
    if value != "All":
        raise _bad_request(f"unsupported dry run directive: {value!r}")
    return True


def _parse_json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError as err:
        raise _bad_request(f"error decoding request body: {err}") from err


def _patch_kind(req: _Request, res: Resource) -> str:
    kind = req.content_type
    allowed = {MERGE_PATCH, JSON_PATCH, APPLY_PATCH}
    if not res.custom:
        allowed.add(STRATEGIC_MERGE_PATCH)
    if kind not in allowed:
        raise _unsupported_media_type(res)
    return kind


def _patched(kind: str, current: JSON, body: bytes) -> Any:
    patch = _parse_json(body)
    if kind == JSON_PATCH:
        if not isinstance(patch, list):
            raise _bad_request(
                "json: cannot unmarshal object into Go value of type jsonpatch.Patch"
            )
        try:
            return json_patch(current, patch)
        except JsonPatchError as err:
            raise ApiError(
                422,
                "Invalid",
                "the server rejected our request due to an error in our request",
                {"causes": [{"message": str(err)}]},
            ) from err
    if not isinstance(patch, dict):
        raise _bad_request(
            f"error decoding patch: json: cannot unmarshal {_json_type(patch)} into Go "
            "value of type map[string]interface {}"
        )
    if kind == STRATEGIC_MERGE_PATCH:
        return strategic_merge_patch(current, patch)
    return merge_patch(current, patch)


_APPLY_META_KEYS = {"name", "labels", "annotations", "resourceVersion", "uid"}


def _parse_apply_body(body: bytes, res: Resource, name: str) -> JSON:
    """Parse an apply configuration; return its labels, annotations and resourceVersion."""
    try:
        config = yaml.safe_load(body)
    except yaml.YAMLError as err:
        raise _bad_request(f"error decoding YAML: {err}") from err
    if not isinstance(config, dict):
        raise _bad_request("error decoding YAML: the apply configuration must be an object")
    if config.get("kind") != res.kind or config.get("apiVersion") != res.api_version:
        raise _bad_request(
            f"the apply configuration must have apiVersion {res.api_version!r} and kind "
            f"{res.kind!r}"
        )
    meta = config.get("metadata") or {}
    if not isinstance(meta, dict):
        raise _bad_request("metadata must be an object")
    if meta.get("name") not in (None, name):
        raise _bad_request(
            f"the name of the object ({meta.get('name')}) does not match the name on the URL "
            f"({name})"
        )
    extra = [k for k, v in config.items() if k not in ("apiVersion", "kind", "metadata") and v]
    extra += [f"metadata.{k}" for k, v in meta.items() if k not in _APPLY_META_KEYS and v]
    if extra:
        raise _bad_request(
            "fake apiserver: server-side apply only tracks metadata.labels and "
            f"metadata.annotations; unsupported fields: {', '.join(sorted(extra))}"
        )
    out: JSON = {"resourceVersion": meta.get("resourceVersion"), "uid": meta.get("uid")}
    for section in _SECTIONS:
        _check_string_map(meta, section)
        out[section] = dict(meta.get(section) or {})
    return out


def _owners_after_update(stored: _Stored, new: JSON, manager: str) -> dict[ManagerKey, _Owner]:
    """A non-apply write takes the fields it changed; removed fields lose all owners."""
    changed: set[Field] = set()
    removed: set[Field] = set()
    for section in _SECTIONS:
        before, after = _section(stored.obj, section), _section(new, section)
        changed |= {(section, k) for k, v in after.items() if before.get(k) != v}
        removed |= {(section, k) for k in before if k not in after}
    mine = (manager, "Update")
    now = _now()
    owners: dict[ManagerKey, _Owner] = {}
    for key, owner in stored.owners.items():
        fields = owner.fields - removed
        if key != mine:
            fields -= changed
        else:
            fields |= changed
        if fields:
            owners[key] = owner if fields == owner.fields else _Owner(fields, now)
    if mine not in owners and changed:
        owners[mine] = _Owner(frozenset(changed), now)
    return owners


def _apply_ownership(
    stored: _Stored, config: JSON, manager: str, force: bool
) -> tuple[JSON, dict[ManagerKey, _Owner]]:
    """Server-side apply of labels/annotations for ``manager``.

    Applied keys become owned by the manager (shared with managers that own the
    same key with the same value); a key it applied before and now omits is
    deleted unless another manager owns it too; a key another manager owns with
    a different value is a conflict (409) unless ``force``, which takes it over.
    """
    mine: ManagerKey = (manager, "Apply")
    obj = copy.deepcopy(stored.obj)
    meta = obj["metadata"]
    applied: set[Field] = {(s, k) for s in _SECTIONS for k in config[s]}
    fields: dict[ManagerKey, set[Field]] = {k: set(o.fields) for k, o in stored.owners.items()}
    previous = fields.pop(mine, set())

    conflicts: list[tuple[ManagerKey, Field]] = []
    for section, key in sorted(applied):
        current = meta.get(section, {}).get(key)
        if current is None or current == config[section][key]:
            continue
        conflicts += [(other, (section, key)) for other, f in fields.items() if (section, key) in f]
    if conflicts and not force:
        raise _conflict_error(conflicts)
    for other, fld in conflicts:  # forced: the other managers lose these fields
        fields[other].discard(fld)

    for section in _SECTIONS:
        values = meta.setdefault(section, {})
        values.update(config[section])
        for sec, key in previous - applied:
            if sec == section and not any((sec, key) in f for f in fields.values()):
                values.pop(key, None)
    _drop_empty_maps(meta)

    if applied:
        fields[mine] = applied
    now = _now()
    owners: dict[ManagerKey, _Owner] = {}
    for who, owned in fields.items():
        if owned:
            old = stored.owners.get(who)
            unchanged = old is not None and old.fields == owned
            owners[who] = old if old is not None and unchanged else _Owner(frozenset(owned), now)
    return obj, owners


def _conflict_error(conflicts: list[tuple[ManagerKey, Field]]) -> ApiError:
    def who(key: ManagerKey) -> str:
        manager, operation = key
        return f'"{manager}" using v1' if operation == "Update" else f'"{manager}"'

    def path(f: Field) -> str:
        return f".metadata.{f[0]}.{f[1]}"

    causes = [
        {"reason": "FieldManagerConflict", "message": f"conflict with {who(k)}", "field": path(f)}
        for k, f in conflicts
    ]
    if len(conflicts) == 1:
        key, fld = conflicts[0]
        message = f"Apply failed with 1 conflict: conflict with {who(key)}: {path(fld)}"
    else:
        lines: list[str] = []
        for key in sorted({k for k, _ in conflicts}):
            lines.append(f"conflicts with {who(key)}:")
            lines += [f"- {path(f)}" for k, f in conflicts if k == key]
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return ApiError(409, "Conflict", message, {"causes": causes})


def _nodefeature_schema_errors(obj: JSON) -> list[FieldError]:
    """The parts of the NodeFeature CRD schema gfd can trip over."""
    spec = obj.get("spec")
    if spec is None:
        return [FieldError("spec", "FieldValueRequired", "")]
    if not isinstance(spec, dict):
        return [
            FieldError(
                "spec",
                "FieldValueInvalid",
                'spec in body must be of type object: "' + _json_type(spec) + '"',
                _q(_json_type(spec)),
            )
        ]
    errors: list[FieldError] = []
    labels = spec.get("labels")
    if labels is not None:
        if not isinstance(labels, dict):
            errors.append(
                FieldError(
                    "spec.labels",
                    "FieldValueInvalid",
                    f'spec.labels in body must be of type object: "{_json_type(labels)}"',
                    _q(_json_type(labels)),
                )
            )
        else:
            for key, value in sorted(labels.items()):
                if not isinstance(value, str):
                    t = _json_type(value)
                    errors.append(
                        FieldError(
                            f"spec.labels.{key}",
                            "FieldValueInvalid",
                            f'spec.labels.{key} in body must be of type string: "{t}"',
                            _q(t),
                        )
                    )
    return errors


# --------------------------------------------------------------------------- standalone use


def main(argv: list[str] | None = None) -> None:
    """Serve until killed: ``python tests/fakes/apiserver.py --kubeconfig PATH [--node N]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--node", action="append", default=[])
    args = parser.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with FakeApiServer() as api:
        for name in args.node:
            api.add_node(name)
        api.write_kubeconfig(args.kubeconfig)
        print(api.url, flush=True)
        stop.wait()


if __name__ == "__main__":
    main()


def _bearer_matches(header: str | None, token: str) -> bool:
    """The Authorization header carries this bearer token; the scheme is case-insensitive
    (RFC 7235), as the API server reads it (in-cluster credentials send "bearer")."""
    scheme, _, value = (header or "").partition(" ")
    return scheme.lower() == "bearer" and value == token


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, made with the openssl command."""
    cert, key = directory / "apiserver.crt", directory / "apiserver.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key
