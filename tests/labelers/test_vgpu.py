"""``vgpu.*``: present or not, with the host driver's version and branch; no vgpu label at all
when the scan failed; written with or without GPUs (docs/gfd-compatibility.md, "vGPU")."""

from __future__ import annotations

from helpers.builders import P, gpu, labels, snapshot

from gfd.labelers.options import LabelOptions
from gfd.labelers.vgpu import vgpu
from gfd.snapshot import Snapshot, Vgpu


def test_vgpu_scan_failed_gives_no_vgpu_labels() -> None:
    snap = Snapshot(driver_version="550.54.15", cuda_driver_version=12040,
                    machine_type="x", vgpu=None, gpus=(gpu(0),))
    assert not any(k.startswith("vgpu.") for k in labels(snap))


def test_vgpu_absent() -> None:
    got = labels(snapshot(gpu(0), vgpu=Vgpu(present=False)))
    assert {k: v for k, v in got.items() if k.startswith("vgpu.")} == {"vgpu.present": "false"}


def test_vgpu_present_gives_host_driver_labels() -> None:
    snap = snapshot(gpu(0), vgpu=Vgpu(present=True, host_driver_version="550.54.16",
                                      host_driver_branch="r550_40"))
    got = labels(snap)
    assert {k: v for k, v in got.items() if k.startswith("vgpu.")} == {
        "vgpu.present": "true",
        "vgpu.host-driver-version": "550.54.16",
        "vgpu.host-driver-branch": "r550_40",
    }


def test_no_gpu_with_vgpu_present() -> None:
    snap = snapshot(vgpu=Vgpu(present=True, host_driver_version="550.54.16",
                              host_driver_branch="r550_40"))
    assert labels(snap) == {"vgpu.present": "true", "vgpu.host-driver-version": "550.54.16",
                            "vgpu.host-driver-branch": "r550_40"}


# --- the labeler itself, with its provenance (what `gfd explain` prints) ---


def test_a_present_vgpu_without_a_host_driver_record_writes_only_present() -> None:
    result = vgpu(snapshot(gpu(0), vgpu=Vgpu(present=True)), LabelOptions())
    assert {k: v.value for k, v in result.labels.items()} == {P + "vgpu.present": "true"}
