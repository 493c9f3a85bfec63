"""``gpu.unhealthy``: how many GPUs answered NVML with a fatal error; such GPUs are not
counted (an extended label)."""

from __future__ import annotations

from helpers.builders import P, gpu, labels, snapshot

from gfd.labelers.options import LabelOptions
from gfd.labelers.unhealthy import unhealthy
from gfd.snapshot import Gpu


def test_lost_gpu_is_not_counted_but_is_unhealthy() -> None:
    snap = snapshot(gpu(0), gpu(1), gpu(2, error="GPU is lost"))
    got = labels(snap, label_set="extended")
    assert got["gpu.count"] == "2"
    assert got["gpu.unhealthy"] == "1"


def test_lost_gpu_without_a_name_is_not_counted() -> None:
    lost = Gpu(index=1, error="GPU is lost")
    got = labels(snapshot(gpu(0), lost), label_set="extended")
    assert got["gpu.count"] == "1"
    assert got["gpu.unhealthy"] == "1"
    assert got["gpu.heterogeneous"] == "false"


def test_unhealthy_counts_every_lost_gpu() -> None:
    snap = snapshot(gpu(0), gpu(1, error="GPU is lost"), gpu(2, error="Unknown Error"))
    assert labels(snap, label_set="extended")["gpu.unhealthy"] == "2"


def test_no_unhealthy_label_when_every_gpu_answers() -> None:
    assert "gpu.unhealthy" not in labels(snapshot(gpu(0)), label_set="extended")


def test_unhealthy_is_an_extended_label() -> None:
    snap = snapshot(gpu(0), gpu(1, error="GPU is lost"))
    got = labels(snap)
    assert "gpu.unhealthy" not in got
    assert got["gpu.count"] == "1"


# --- the labeler itself, with its provenance (what `gfd explain` prints) ---


def test_the_raw_value_names_each_lost_gpu_and_its_error() -> None:
    snap = snapshot(gpu(0), gpu(1, error="GPU is lost"), gpu(3, error="Unknown Error"))
    label = unhealthy(snap, LabelOptions()).labels[P + "gpu.unhealthy"]
    assert (label.value, label.raw) == ("2", "GPU 1: GPU is lost; GPU 3: Unknown Error")
