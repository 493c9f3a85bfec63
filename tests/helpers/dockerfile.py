"""The repository's Dockerfile read as instructions: ``instructions()`` (every stage) and
``final_stage()`` (the image that ships), continuation lines joined, comments dropped."""

from __future__ import annotations

from functools import cache

from helpers.paths import ROOT

DOCKERFILE = ROOT / "Dockerfile"


@cache
def instructions() -> tuple[tuple[str, str], ...]:
    """(INSTRUCTION, arguments) with continuations joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        keyword, _, rest = line.partition(" ")
        out.append((keyword.upper(), rest.strip()))
    return tuple(out)


def final_stage() -> list[tuple[str, str]]:
    """The instructions from the last FROM on."""
    found = list(instructions())
    last_from = max(i for i, (k, _) in enumerate(found) if k == "FROM")
    return found[last_from:]
