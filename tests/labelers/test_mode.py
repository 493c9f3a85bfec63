"""``gpu.mode``: compute or graphics when every healthy GPU's PCI class agrees, else
``unknown`` (docs/gfd-compatibility.md, "Merge order and heterogeneous nodes")."""

from __future__ import annotations

import pytest
from helpers.builders import P, gpu, labels, snapshot, unknown

from gfd.labelers.mode import mode
from gfd.labelers.options import LabelOptions

MODE_CASES = [
    ("all-3d-controller", ["0x030200", "0x030200"], "compute"),
    ("all-vga", ["0x030000", "0x030000"], "graphics"),
    ("mixed-classes", ["0x030200", "0x030000"], "unknown"),
    ("unreadable", [None], "unknown"),
    ("one-unreadable", ["0x030200", None], "unknown"),
    ("other-class", ["0x038000"], "unknown"),
]


@pytest.mark.parametrize(("classes", "mode"), [(c, m) for _, c, m in MODE_CASES],
                         ids=[i for i, _, _ in MODE_CASES])
def test_gpu_mode(classes: list[str | None], mode: str) -> None:
    snap = snapshot(*(gpu(i, pci_class=c) for i, c in enumerate(classes)))
    assert labels(snap)["gpu.mode"] == mode


def test_a_lost_gpu_does_not_turn_gpu_modeunknown() -> None:
    from dataclasses import replace as _replace

    from gfd.labelers.options import LabelOptions as _Options
    from gfd.labelers.pipeline import compute_labels as _compute
    from gfd.readers.simulate import simulate as _simulate

    snap = _simulate("hgx-h100").snapshot
    lost = _replace(snap.gpus[3], error="GPU is lost", pci_class=None)
    snap = _replace(snap, gpus=(*snap.gpus[:3], lost, *snap.gpus[4:]))
    got = _compute(snap, _Options()).labels
    assert got["nvidia.com/gpu.mode"] == "compute"
    assert got["nvidia.com/gpu.count"] == "7"
    assert got["nvidia.com/gpu.unhealthy"] == "1"


# --- the labeler itself, with its provenance (what `gfd explain` prints) ---


def test_the_raw_value_lists_the_classes_seen() -> None:
    snap = snapshot(gpu(0, pci_class="0x030200"), gpu(1, pci_class=None))
    label = mode(snap, LabelOptions()).labels[P + "gpu.mode"]
    assert (label.value, label.raw) == ("unknown", "0x030200,unreadable")


def test_mode_is_left_out_when_nvml_gave_no_bus_id() -> None:
    snap = snapshot(gpu(0), gpu(1, pci_class=None, degraded=unknown("pci")))
    assert "gpu.mode" not in labels(snap), "not 'unknown' computed from a failed answer"
