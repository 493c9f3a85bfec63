"""An object's metadata as the handlers read and write it: the map, its labels or
annotations, the timestamp format."""

from __future__ import annotations

from datetime import UTC, datetime

from .errors import _bad_request
from .objects import _SECTIONS, JSON


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


