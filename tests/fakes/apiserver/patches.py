"""The four patch kinds: JSON merge, strategic merge, JSON patch (RFC 6902), and which one
a request sends; server-side apply is in ``apply``."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from .errors import ApiError, _bad_request, _unsupported_media_type
from .exchange import _parse_json, _Request
from .objects import APPLY_PATCH, JSON, JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, Resource
from .validation import _json_type

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


