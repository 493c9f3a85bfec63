"""Resource labels under sharing: ``<R>.replicas``, ``<R>.sharing-strategy``, the ``-SHARED``
product suffix unless renamed, and ``<R>.memory.per-replica`` (docs/gfd-compatibility.md,
"Sharing")."""

from __future__ import annotations

import pytest
from helpers.builders import A100_40_BYTES, gpu, labels, mps, snapshot, time_slicing

from gfd.labelers.options import LabelOptions
from gfd.labelers.resource import GPU_RESOURCE, per_replica, sharing_labels


def test_worked_example_none_with_time_slicing_4() -> None:
    # GFD's worked example: 8 x A100-40GB, no MIG strategy, time-slicing with 4 replicas.
    snap = snapshot(*(gpu(i, mig_capable=True) for i in range(8)))
    got = labels(snap, sharing=time_slicing(4))
    assert got["gpu.replicas"] == "4"
    assert got["gpu.sharing-strategy"] == "time-slicing"
    assert got["gpu.product"] == "NVIDIA-A100-SXM4-40GB-SHARED"


SHARING_TABLE = [
    ("none", None, "1", "none", "NVIDIA-A100-SXM4-40GB", "false"),
    ("time-slicing-4", time_slicing(4), "4", "time-slicing", "NVIDIA-A100-SXM4-40GB-SHARED",
     "false"),
    ("time-slicing-4-renamed", time_slicing(4, rename=True), "4", "time-slicing",
     "NVIDIA-A100-SXM4-40GB", "false"),
    ("mps-4", mps(4), "4", "mps", "NVIDIA-A100-SXM4-40GB-SHARED", "true"),
    ("mps-4-renamed", mps(4, rename=True), "4", "mps", "NVIDIA-A100-SXM4-40GB", "true"),
    ("time-slicing-other-resource-only", time_slicing(2, "nvidia.com/mig-1g.5gb"), "1", "none",
     "NVIDIA-A100-SXM4-40GB", "false"),
]


@pytest.mark.parametrize(
    ("sharing", "replicas", "strategy", "product", "mps_capable"),
    [row[1:] for row in SHARING_TABLE],
    ids=[row[0] for row in SHARING_TABLE],
)
def test_sharing_table(sharing: object, replicas: str, strategy: str, product: str,
                       mps_capable: str) -> None:
    got = labels(snapshot(gpu(0), gpu(1)), sharing=sharing)
    assert got["gpu.replicas"] == replicas
    assert got["gpu.sharing-strategy"] == strategy
    assert got["gpu.product"] == product
    assert got["mps.capable"] == mps_capable


PER_REPLICA = [
    ("time-slicing-4", time_slicing(4), A100_40_BYTES, "10240"),
    ("mps-4", mps(4), A100_40_BYTES, "10240"),
    ("time-slicing-3-floors", time_slicing(3), 16106127360, "5120"),
    ("time-slicing-2-floors", time_slicing(2), 15361 * 2**20, "7680"),
    ("renamed-still-shared", time_slicing(4, rename=True), A100_40_BYTES, "10240"),
]


@pytest.mark.parametrize(("sharing", "memory", "value"), [r[1:] for r in PER_REPLICA],
                         ids=[r[0] for r in PER_REPLICA])
def test_memory_per_replica(sharing: object, memory: int, value: str) -> None:
    got = labels(snapshot(gpu(0, memory=memory)), sharing=sharing, label_set="extended")
    assert got["gpu.memory.per-replica"] == value


def test_no_memory_per_replica_without_sharing_or_in_compat() -> None:
    assert "gpu.memory.per-replica" not in labels(snapshot(gpu(0)), label_set="extended")
    assert "gpu.memory.per-replica" not in labels(snapshot(gpu(0)), sharing=time_slicing(4))


# --- the labeler itself, with its provenance (what `gfd explain` prints) ---


def test_sharing_disabled_gives_zero_replicas_and_no_suffix() -> None:
    labels = sharing_labels(GPU_RESOURCE, "NVIDIA A100-SXM4-40GB", (), LabelOptions(
        sharing=time_slicing(4)), count=2, sharing_enabled=False, source="s")
    assert {k: v.value for k, v in labels.items()} == {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.count": "2",
        "nvidia.com/gpu.replicas": "0", "nvidia.com/gpu.sharing-strategy": "none"}


@pytest.mark.parametrize("replicas, memory, expected", [
    (1, 40960, {}), (4, 0, {}), (4, 40960, {"nvidia.com/gpu.memory.per-replica": "10240"}),
], ids=["not-shared", "memory-unknown", "shared"])
def test_per_replica_only_when_shared_and_memory_is_known(replicas: int, memory: int,
                                                          expected: dict[str, str]) -> None:
    options = LabelOptions(sharing=time_slicing(replicas))
    got = per_replica(GPU_RESOURCE, memory, options)
    assert {k: v.value for k, v in got.items()} == expected
