"""Label and field selectors as the API server parses and matches them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import _bad_request
from .objects import JSON, RESOURCESLICES, SELECTABLE_FIELDS, Resource

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


def _selected_name(selector: str) -> str | None:
    """The name a list or watch is field-selected to (``metadata.name=<n>``), which the API
    server authorizes as the request's name: RBAC resourceNames then apply to it."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        m = re.fullmatch(r"metadata\.name\s*==?\s*([^\s,]+)", term)
        if m:
            return m.group(1)
    return None


