"""``gpu.power.limit.min`` / ``.max`` (extended): the power limit range, in milliwatts, that
every healthy GPU of the node accepts; left out when any GPU cannot tell."""

from __future__ import annotations

import pytest
from helpers.builders import A10, A100_80, A100_80_BYTES, P, gpu, labels, snapshot, unknown

from gfd.labelers.options import LabelOptions
from gfd.labelers.power import power_limits
from gfd.snapshot import Gpu

RANGES = [
    ("one-model", [(100000, 400000)] * 4, ("100000", "400000")),
    # A100 PCIe 150-300 W and A10 100-150 W: only 150 W suits both
    ("a100-pcie-and-a10", [(150000, 300000), (150000, 300000), (100000, 150000)],
     ("150000", "150000")),
    ("overlapping", [(100000, 400000), (200000, 700000)], ("200000", "400000")),
]


@pytest.mark.parametrize(("ranges", "expected"), [(r, e) for _, r, e in RANGES],
                         ids=[i for i, _, _ in RANGES])
def test_the_range_is_the_one_every_gpu_accepts(ranges: list[tuple[int, int]],
                                                 expected: tuple[str, str]) -> None:
    snap = snapshot(*(gpu(i, power_limits_mw=r) for i, r in enumerate(ranges)))
    got = labels(snap, label_set="extended")
    assert (got["gpu.power.limit.min"], got["gpu.power.limit.max"]) == expected


def test_power_limits_are_extended_labels() -> None:
    snap = snapshot(gpu(0, power_limits_mw=(100000, 400000)))
    assert not any(k.startswith("gpu.power") for k in labels(snap, label_set="compat"))


def test_a_gpu_without_the_query_leaves_both_labels_out() -> None:
    snap = snapshot(gpu(0, power_limits_mw=(100000, 400000)), gpu(1, power_limits_mw=None))
    result = power_limits(snap, LabelOptions())
    assert result.labels == {} and result.warnings == ()


def test_an_unknown_range_leaves_both_labels_out_with_a_warning() -> None:
    snap = snapshot(gpu(0, power_limits_mw=(100000, 400000)),
                    gpu(1, degraded=unknown("power_limits")))
    result = power_limits(snap, LabelOptions())
    assert result.labels == {}
    assert result.warnings == ("gpu.power.limit.* left out: the power limits of GPU(s) 1 are "
                               "unknown",)


def test_a_held_range_still_counts() -> None:
    snap = snapshot(gpu(0, power_limits_mw=(100000, 400000),
                        degraded=unknown("power_limits", held=True)))
    assert labels(snap, label_set="extended")["gpu.power.limit.max"] == "400000"


def test_ranges_with_no_common_limit_leave_both_out_with_a_warning() -> None:
    snap = snapshot(gpu(0, A100_80, A100_80_BYTES, power_limits_mw=(150000, 300000)),
                    gpu(1, "Tesla T4", power_limits_mw=(60000, 70000)))
    result = power_limits(snap, LabelOptions())
    assert result.labels == {}
    assert result.warnings == ("gpu.power.limit.* left out: no power limit suits every GPU "
                               "(GPU 0: 150000-300000, GPU 1: 60000-70000 mW)",)


def test_a_lost_gpu_does_not_narrow_the_range() -> None:
    snap = snapshot(gpu(0, power_limits_mw=(100000, 400000)),
                    Gpu(index=1, name=A10, error="GPU is lost"))
    result = power_limits(snap, LabelOptions())
    assert result.labels[P + "gpu.power.limit.min"].value == "100000"


def test_the_provenance_names_each_gpus_range() -> None:
    snap = snapshot(gpu(0, power_limits_mw=(150000, 300000)),
                    gpu(1, A10, power_limits_mw=(100000, 150000)))
    label = power_limits(snap, LabelOptions()).labels[P + "gpu.power.limit.min"]
    assert label.source == "nvmlDeviceGetPowerManagementLimitConstraints"
    assert label.raw == "GPU 0: 150000-300000, GPU 1: 100000-150000"
    assert label.rules == ("the largest of the GPUs' minimum limits, mW",)


def test_no_gpu_gives_no_power_labels() -> None:
    assert power_limits(snapshot(), LabelOptions()).labels == {}
