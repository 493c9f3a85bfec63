"""``gpu.accelerator``: a lowercase ``nvidia-`` slug of the primary model, mirrored under the
operator's key with --accelerator-label (an extended label)."""

from __future__ import annotations

import pytest
from helpers.builders import A100_40, H100, P, gpu, labelling, labels, snapshot, time_slicing

from gfd.labelers.accelerator import accelerator
from gfd.labelers.options import LabelOptions

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


# --- the labeler itself, with its provenance (what `gfd explain` prints) ---


def test_the_slug_is_of_the_primary_model_with_its_raw_name() -> None:
    snap = snapshot(gpu(0, "Tesla T4"), gpu(1, "Tesla T4"), gpu(2, "NVIDIA A10"))
    label = accelerator(snap, LabelOptions()).labels[P + "gpu.accelerator"]
    assert (label.value, label.raw) == ("nvidia-tesla-t4", "Tesla T4")


def test_no_healthy_gpu_gives_no_accelerator() -> None:
    assert accelerator(snapshot(gpu(0, error="GPU is lost")), LabelOptions()).labels == {}


@pytest.mark.parametrize("name", ["", "   ", "™®"], ids=["empty", "blank", "symbols"])
def test_no_accelerator_label_from_a_name_with_nothing_labelable(name: str) -> None:
    # "nvidia-" would be no valid value; the GPUs are still counted (tests/labelers/test_gpu.py)
    got = labels(snapshot(gpu(0, name), gpu(1, name)), label_set="extended",
                 accelerator_label="accelerator")
    assert "gpu.accelerator" not in got and "accelerator" not in got
    assert got["gpu.count"] == "2"
