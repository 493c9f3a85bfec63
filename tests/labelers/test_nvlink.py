"""``gpu.nvlink``: true when any link of any GPU is active (an extended label)."""

from __future__ import annotations

import pytest
from helpers.builders import P, gpu, labels, snapshot, unknown

from gfd.labelers.nvlink import nvlink
from gfd.labelers.options import LabelOptions
from gfd.snapshot import Gpu

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


# --- the labeler itself, with its provenance (what `gfd explain` prints) ---


def test_no_healthy_gpu_gives_no_nvlink_label() -> None:
    assert nvlink(snapshot(Gpu(index=0, error="GPU is lost")), LabelOptions()).labels == {}


def test_a_lost_gpus_link_does_not_count() -> None:
    snap = snapshot(gpu(0, nvlink_active=False), gpu(1, nvlink_active=True, error="lost"))
    assert nvlink(snap, LabelOptions()).labels[P + "gpu.nvlink"].value == "false"


def test_nvlink_false_is_left_out_when_a_gpus_links_areunknown() -> None:
    snap = snapshot(gpu(0, nvlink_active=False), gpu(1, degraded=unknown("nvlink")))
    assert "gpu.nvlink" not in labels(snap, label_set="extended")
    snap = snapshot(gpu(0, nvlink_active=True), gpu(1, degraded=unknown("nvlink")))
    assert labels(snap, label_set="extended")["gpu.nvlink"] == "true"
