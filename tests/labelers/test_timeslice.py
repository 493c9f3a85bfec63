"""``gpu.timeslice``: the compute-policy timeslice when every GPU reports the same one (an
extended label)."""

from __future__ import annotations

import pytest
from helpers.builders import gpu, labels, snapshot

TIMESLICES = [
    ("all-default", ["default", "default"], "default"),
    ("all-long", ["long", "long"], "long"),
    ("all-short", ["short"], "short"),
    ("all-medium", ["medium"], "medium"),
    ("disagree", ["short", "long"], None),
    ("unsupported", [None], None),
    ("one-unsupported", ["default", None], None),
]


@pytest.mark.parametrize(("policies", "value"), [(p, v) for _, p, v in TIMESLICES],
                         ids=[i for i, _, _ in TIMESLICES])
def test_timeslice(policies: list[str | None], value: str | None) -> None:
    snap = snapshot(*(gpu(i, timeslice=t) for i, t in enumerate(policies)))
    assert labels(snap, label_set="extended").get("gpu.timeslice") == value
