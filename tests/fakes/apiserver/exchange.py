"""A request and its answer as the handlers see them, the route table's row, and the
request log's record."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from .errors import _bad_request
from .objects import JSON, Resource


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


def _flag(value: str | None) -> bool | None:
    if value is None:
        return None
    if value.lower() in ("true", "1"):
        return True
    if value.lower() in ("false", "0", ""):
        return False
    raise _bad_request(f"invalid boolean value {value!r}")


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


