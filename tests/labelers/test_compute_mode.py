"""``gpu.compute-mode``: the NVML compute mode when every GPU agrees (an extended label)."""

from __future__ import annotations

import pytest
from helpers.builders import P, gpu, labels, snapshot

from gfd.labelers.compute_mode import compute_mode
from gfd.labelers.options import LabelOptions

COMPUTE_MODES = [
    ("all-default", ["default", "default"], "default"),
    ("all-exclusive-process", ["exclusive-process"] * 2, "exclusive-process"),
    ("all-prohibited", ["prohibited"], "prohibited"),
    ("disagree", ["default", "prohibited"], None),
    ("unknown", [None, None], None),
]


@pytest.mark.parametrize(("modes", "value"), [(m, v) for _, m, v in COMPUTE_MODES],
                         ids=[i for i, _, _ in COMPUTE_MODES])
def test_compute_mode(modes: list[str | None], value: str | None) -> None:
    snap = snapshot(*(gpu(i, compute_mode=m) for i, m in enumerate(modes)))
    assert labels(snap, label_set="extended").get("gpu.compute-mode") == value


# --- the labeler itself, with its provenance (what `gfd explain` prints) ---


def test_a_lost_gpus_unknown_mode_does_not_hide_the_others_agreement() -> None:
    snap = snapshot(gpu(0, compute_mode="prohibited"), gpu(1, error="GPU is lost"))
    label = compute_mode(snap, LabelOptions()).labels[P + "gpu.compute-mode"]
    assert (label.value, label.source) == ("prohibited", "nvmlDeviceGetComputeMode")
