"""Naming rules: GFD's sanitise(), product values with suffixes, the 63-character rule, slugs."""

from __future__ import annotations

import re

MAX_VALUE = 63
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9\-_. ]")


def sanitise(text: str) -> str:
    """GFD's sanitise: drop characters outside ``[A-Za-z0-9-_. ]``, join words with ``-``.

    It does not collapse ``-``, trim ``-._`` or enforce a length (GFD does neither).
    """
    return "-".join(_NOT_ALLOWED.sub("", text).split())


def product_value(model: str, *suffixes: str) -> tuple[str, tuple[str, ...]]:
    """Join sanitised parts with ``-``; shorten the model part if the value passes 63.

    Returns the value and the rules applied (for ``explain``). The suffixes (``MIG``,
    a profile, ``SHARED``, ``MIG-INVALID``) are kept whole; the model is cut and
    trailing ``-._`` trimmed so the value stays a valid label value.
    """
    rules = ["sanitise: keep [A-Za-z0-9-_. ], join words with '-'"]
    parts = [p for p in (sanitise(model), *suffixes) if p]
    value = "-".join(parts)
    if suffixes:
        rules.append(f"append suffix {'-'.join(s for s in suffixes if s)!r}")
    if len(value) > MAX_VALUE and parts and parts[0] == sanitise(model) and model:
        tail = "-".join(parts[1:])
        room = MAX_VALUE - len(tail) - (1 if tail else 0)
        head = parts[0][: max(room, 0)].rstrip("-._")
        value = f"{head}-{tail}" if head and tail else head or tail
        rules.append(f"shorten model part to fit {MAX_VALUE} characters, trim trailing '-._'")
    return value, tuple(rules)


def short_name(text: str, limit: int) -> str:
    """``text`` if it fits ``limit``; else a prefix plus a stable 8-hex-digit hash of the whole."""
    if len(text) <= limit:
        return text
    import hashlib  # (only for a name past its limit: not on every start)

    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    head = text[: limit - len(digest) - 1].rstrip("-._")
    return f"{head}-{digest}"


def accelerator_slug(model: str) -> str:
    """``Tesla T4`` -> ``nvidia-tesla-t4``; ``NVIDIA H100 80GB HBM3`` -> ``nvidia-h100-80gb-hbm3``.
    """
    slug = sanitise(model).lower().replace("_", "-").replace(".", "-")
    slug = re.sub(r"-{2,}", "-", slug).strip("-")
    if not slug.startswith("nvidia"):
        slug = f"nvidia-{slug}"
    return short_name(slug, MAX_VALUE)
