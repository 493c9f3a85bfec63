"""Label validation with the API server's exact rules (apimachinery ValidateLabels)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gfd.errors import show

_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


@dataclass(frozen=True, slots=True)
class Rejection:
    """A label that failed validation, and why."""

    key: str
    value: str
    reason: str
    """Short machine reason: ``invalid-key`` or ``invalid-value``."""
    message: str


def key_problem(key: str) -> str | None:
    """Why a label key is invalid, or None when it is valid."""
    if key.count("/") > 1:
        return "a label key may contain at most one '/'"
    prefix, _, name = key.rpartition("/")
    if "/" in key:
        if not prefix:
            return "prefix part must be non-empty"
        if len(prefix) > 253:
            return "prefix part must be no more than 253 characters"
        if not _PREFIX.fullmatch(prefix):
            return "prefix part must be a lowercase RFC 1123 subdomain"
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _NAME.fullmatch(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character"
        )
    return None


def value_problem(value: str) -> str | None:
    """Why a label value is invalid, or None when it is valid (the empty string is valid)."""
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not _VALUE.fullmatch(value):
        return (
            "a valid label must be an empty string or consist of alphanumeric characters, "
            "'-', '_' or '.', and must start and end with an alphanumeric character"
        )
    return None


def validate(labels: dict[str, str]) -> tuple[dict[str, str], tuple[Rejection, ...]]:
    """Split labels into the valid ones and rejections; one bad label never blocks the rest."""
    good: dict[str, str] = {}
    bad: list[Rejection] = []
    for k in sorted(labels):
        v = labels[k]
        problem = key_problem(k)
        if problem:
            bad.append(Rejection(k, v, "invalid-key", f"label key {show(k)}: {problem}"))
            continue
        problem = value_problem(v)
        if problem:
            bad.append(Rejection(k, v, "invalid-value", f"label {k}={show(v)}: {problem}"))
            continue
        good[k] = v
    return good, tuple(bad)
