"""The API server's error answers: the Status body, ``ApiError`` and one constructor per
reason (404, 409, 415, 422 with its causes...)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .objects import APPLY_PATCH, JSON, JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, Resource

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


