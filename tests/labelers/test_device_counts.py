"""``gpu.devices.full`` / ``gpu.devices.mig-<profile>`` (extended): the devices the node
offers under its MIG layout, whatever the MIG strategy, without touching ``gpu.count``."""

from __future__ import annotations

import pytest
from helpers.builders import (
    A100_1G5,
    A100_2G10,
    A100_3G20,
    P,
    gpu,
    labels,
    mig,
    mig_gpu,
    migs,
    snapshot,
    unknown,
)

from gfd.labelers.catalog import describe
from gfd.labelers.device_counts import devices
from gfd.labelers.options import LabelOptions
from gfd.snapshot import Gpu, Snapshot


def devices_of(snap: Snapshot, strategy: str = "none") -> dict[str, str]:
    return {k.removeprefix("gpu.devices."): v
            for k, v in labels(snap, strategy=strategy, label_set="extended").items()
            if k.startswith("gpu.devices.")}


def mixed_node() -> Snapshot:
    return snapshot(
        mig_gpu(0, migs(7, **A100_1G5)),
        mig_gpu(1, (mig(0, **A100_3G20), mig(1, **A100_2G10), mig(2, **A100_1G5))),
        gpu(2, mig_capable=True), gpu(3, mig_capable=True))


@pytest.mark.parametrize("strategy", ["none", "single", "mixed"])
def test_full_gpus_and_mig_devices_by_profile_whatever_the_strategy(strategy: str) -> None:
    assert devices_of(mixed_node(), strategy) == {
        "full": "2", "mig-1g.5gb": "8", "mig-2g.10gb": "1", "mig-3g.20gb": "1"}


def test_gpu_count_keeps_gfds_meaning() -> None:
    got = labels(mixed_node(), strategy="none", label_set="extended")
    assert got["gpu.count"] == "4"


def test_a_node_without_mig_offers_only_full_gpus() -> None:
    assert devices_of(snapshot(gpu(0), gpu(1), gpu(2))) == {"full": "3"}


def test_every_gpu_in_mig_offers_no_full_gpu() -> None:
    assert devices_of(snapshot(mig_gpu(0, migs(7, **A100_1G5)))) == {
        "full": "0", "mig-1g.5gb": "7"}


def test_a_mig_enabled_gpu_without_devices_offers_nothing() -> None:
    assert devices_of(snapshot(mig_gpu(0, ()), gpu(1, mig_capable=True))) == {"full": "1"}


def test_a_lost_gpu_offers_nothing() -> None:
    snap = snapshot(gpu(0), Gpu(index=1, name="NVIDIA A100-SXM4-40GB", error="GPU is lost"),
                    mig_gpu(2, migs(2, **A100_3G20)))
    assert devices_of(snap) == {"full": "1", "mig-3g.20gb": "2"}


def test_profiles_are_named_as_the_device_plugins_resources() -> None:
    snap = snapshot(mig_gpu(0, (mig(0, profile="MIG 1g.10gb+me"),
                                mig(1, profile="MIG 1c.3g.20gb", gi=3, ci=1))))
    assert devices_of(snap) == {"full": "0", "mig-1g.10gb.me": "1", "mig-1c.3g.20gb": "1"}


def test_an_unknown_layout_leaves_every_device_label_out_with_a_warning() -> None:
    snap = snapshot(gpu(0), gpu(1, mig_capable=True, degraded=unknown("mig_mode")))
    result = devices(snap, LabelOptions())
    assert result.labels == {}
    assert result.warnings == ("gpu.devices.* left out: the MIG mode of GPU 1 is unknown",)


def test_device_labels_are_extended_and_documented() -> None:
    assert not any(k.startswith("gpu.devices.")
                   for k in labels(mixed_node(), strategy="mixed", label_set="compat"))
    for name in ("full", "mig-1g.5gb", "mig-1g.10gb.me"):
        doc = describe(P + "gpu.devices." + name)
        assert doc is not None and doc.set == "extended" and doc.module == "device_counts"


def test_the_provenance_lists_where_each_device_is() -> None:
    result = devices(mixed_node(), LabelOptions())
    assert result.labels[P + "gpu.devices.full"].raw == "GPUs [2, 3]"
    assert result.labels[P + "gpu.devices.mig-1g.5gb"].raw == (
        "0:0, 0:1, 0:2, 0:3, 0:4, 0:5, 0:6, 1:2")
