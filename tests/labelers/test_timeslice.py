"""``gpu.timeslice``: the compute-policy timeslice when every GPU reports the same one (an
extended label)."""

from __future__ import annotations

import pytest
from helpers.builders import P, gpu, labels, snapshot

from gfd.labelers.options import LabelOptions
from gfd.labelers.timeslice import timeslice

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


# --- the labeler itself, with its provenance (what `gfd explain` prints) ---


def test_a_lost_gpu_does_not_break_the_agreement() -> None:
    snap = snapshot(gpu(0, timeslice="long"), gpu(1, timeslice=None, error="GPU is lost"))
    label = timeslice(snap, LabelOptions()).labels[P + "gpu.timeslice"]
    assert (label.value, label.source) == ("long", "nvidia-smi compute-policy --list")
