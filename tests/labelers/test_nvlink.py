"""``gpu.nvlink``: true when any link of any GPU is active (an extended label)."""

from __future__ import annotations

import pytest
from helpers.builders import gpu, labels, snapshot

NVLINK = [
    ("one-active", [True, False], "true"),
    ("none-active", [False, False], "false"),
    ("unsupported", [None, None], "false"),
    ("active-and-unsupported", [None, True], "true"),
]


@pytest.mark.parametrize(("links", "value"), [(n, v) for _, n, v in NVLINK],
                         ids=[i for i, _, _ in NVLINK])
def test_nvlink(links: list[bool | None], value: str) -> None:
    snap = snapshot(*(gpu(i, nvlink_active=n) for i, n in enumerate(links)))
    assert labels(snap, label_set="extended")["gpu.nvlink"] == value
