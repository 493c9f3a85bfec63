"""The API server's answers gfd cannot use, as one-line ``gfd.errors.ApiError``: the HTTP
status, the API's reason, the Status causes, Retry-After, and a hint for a 403 or a missing
NodeFeature CRD; a 410 on a watch as ``WatchExpired``."""

from __future__ import annotations

import json
from typing import Any

from kubernetes.client.exceptions import ApiException

from gfd.errors import ApiError, WatchExpired, one_line


def snippet(body: bytes) -> str:
    text = one_line(body[:120].decode("utf-8", "replace"))
    return repr(text[:80] + ("..." if len(text) > 80 or len(body) > 120 else ""))


def status_error(verb: str, what: str, exc: ApiException) -> ApiError:
    body: dict[str, Any] = {}
    try:
        parsed = json.loads(exc.body or "{}")
        body = parsed if isinstance(parsed, dict) else {}
    except ValueError:
        pass
    message = str(body.get("message") or exc.reason or "").replace("\n", " ")
    reason = str(body.get("reason") or "")
    details = body.get("details") if isinstance(body.get("details"), dict) else {}
    causes = tuple(
        str(c.get("message", "")) for c in (details or {}).get("causes", []) if isinstance(c, dict)
    )
    retry_after = None
    headers = exc.headers or {}
    if "Retry-After" in headers:
        try:
            retry_after = float(headers["Retry-After"])
        except (TypeError, ValueError):
            retry_after = None
    status = int(exc.status or 0)
    hint = ""
    if status == 403:
        hint = " (grant this permission to gfd's ServiceAccount: see manifests/)"
    elif status == 404 and not (details or {}).get("name") and what.startswith("nodefeature"):
        hint = (" (the NodeFeature CRD is not installed: install Node Feature Discovery v0.14 "
                "or newer, or use the feature file sink)")
    text = f"{verb} {what}: HTTP {status} {reason}: {message}{hint}".strip()
    return ApiError(text, status=status, reason=reason, retry_after=retry_after, causes=causes,
                    resource_missing=status == 404 and not (details or {}).get("name"))


def watch_error(verb: str, what: str, status: int, reason: str, body: str,
                 headers: Any = None) -> ApiError:
    """An error answer or ERROR event as an ApiError; a 410 as WatchExpired."""
    exc = ApiException(status=status, reason=reason)
    exc.body, exc.headers = body, headers
    error = status_error(verb, what, exc)
    if error.status != 410:
        return error
    return WatchExpired(str(error), status=410, reason=error.reason,
                        retry_after=error.retry_after, causes=error.causes)
