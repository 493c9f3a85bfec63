"""Golden label files (tests/data/golden): the label lines a command must print, in order."""

from __future__ import annotations

from pathlib import Path


def golden(path: Path) -> list[str]:
    """The file's lines without its comment lines (each golden file says where its labels
    come from in ``#`` lines)."""
    return [line for line in path.read_text().splitlines() if not line.startswith("#")]
