"""``gpu.accelerator``: a lowercase ``nvidia-`` slug of the primary model, mirrored under the
operator's key with --accelerator-label (an extended label)."""

from __future__ import annotations

import pytest
from helpers.builders import A100_40, H100, P, gpu, labelling, labels, snapshot, time_slicing

ACCELERATORS = [
    ("Tesla T4", "nvidia-tesla-t4"),
    ("Tesla P4", "nvidia-tesla-p4"),
    (H100, "nvidia-h100-80gb-hbm3"),
    (A100_40, "nvidia-a100-sxm4-40gb"),
]


@pytest.mark.parametrize(("model", "slug"), ACCELERATORS, ids=[m for m, _ in ACCELERATORS])
def test_accelerator_label(model: str, slug: str) -> None:
    snap = snapshot(gpu(0, model), gpu(1, model))
    assert labels(snap, label_set="extended", sharing=time_slicing(4))["gpu.accelerator"] == slug


def test_accelerator_label_mirrored_under_an_operator_key() -> None:
    result = labelling(snapshot(gpu(0, "Tesla T4")), label_set="extended",
                       accelerator_label="accelerator")
    assert result.labels["accelerator"] == "nvidia-tesla-t4"
    assert result.labels[P + "gpu.accelerator"] == "nvidia-tesla-t4"
