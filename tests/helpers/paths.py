"""Where things are: the repository, the tests, their recorded data and the fakes."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
DATA = TESTS / "data"
FAKES = TESTS / "fakes"
