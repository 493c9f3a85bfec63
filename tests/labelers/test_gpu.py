"""Full-GPU labels of the primary model: ``gpu.memory`` in MiB and ``gpu.product``, shortened
but never dropped when too long (docs/gfd-compatibility.md, "Memory" and "Sanitising and
product names")."""

from __future__ import annotations

import pytest
from helpers.builders import (
    A10_BYTES,
    A100_40_BYTES,
    H100_BYTES,
    P,
    gpu,
    labelling,
    labels,
    snapshot,
    time_slicing,
    unknown,
)

MEMORY_CASES = [
    ("a100-40gb", A100_40_BYTES, "40960"),
    ("h100-80gb", H100_BYTES, "81559"),
    ("a10-floors", A10_BYTES, "22731"),
    ("one-byte-short-of-4MiB", 4 * 2**20 - 1, "3"),
]


@pytest.mark.parametrize(("total", "mib"), [(t, m) for _, t, m in MEMORY_CASES],
                         ids=[i for i, _, _ in MEMORY_CASES])
def test_memory_bytes_to_mib(total: int, mib: str) -> None:
    assert labels(snapshot(gpu(memory=total)))["gpu.memory"] == mib


@pytest.mark.parametrize("total", [None, 0], ids=["unknown", "zero"])
def test_memory_unknown_or_zero_gives_no_memory_label(total: int | None) -> None:
    got = labels(snapshot(gpu(memory=total)))
    assert "gpu.memory" not in got
    assert got["gpu.count"] == "1"


def test_long_product_name_is_shortened_and_published() -> None:
    snap = snapshot(gpu(0, "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
                        100_000 * 2**20, (12, 0)))
    result = labelling(snap, sharing=time_slicing(2), label_set="extended")
    assert not result.rejected
    product = result.labels[P + "gpu.product"]
    assert product == "NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edition-SHARED"
    assert result.labels[P + "gpu.family"] == "blackwell"
    keys = [k for k in result.labels if k.startswith(P + "gpu.product.")]
    assert len(keys) == 1
    assert len(keys[0].removeprefix(P)) <= 63
    assert result.labels[keys[0]] == "1"


def test_replicas_and_sharing_are_left_out_when_every_mig_mode_isunknown() -> None:
    snap = snapshot(gpu(0, degraded=unknown("mig_mode")), gpu(1, degraded=unknown("mig_mode")))
    got = labels(snap)
    assert "gpu.replicas" not in got and "gpu.sharing-strategy" not in got
    assert got["gpu.count"] == "2" and got["gpu.product"] == "NVIDIA-A100-SXM4-40GB"


def test_a_known_mig_disabled_gpu_decides_sharing_whatever_the_unknown_ones() -> None:
    snap = snapshot(gpu(0), gpu(1, degraded=unknown("mig_mode")))
    assert labels(snap)["gpu.replicas"] == "1"


def test_product_is_left_out_too_when_its_shared_suffix_depends_on_an_unknown_mode() -> None:
    snap = snapshot(gpu(0, degraded=unknown("mig_mode")))
    got = labels(snap, sharing=time_slicing(4))
    assert "gpu.product" not in got and "gpu.replicas" not in got


def test_memory_and_capability_come_from_a_gpu_of_the_model_that_answered() -> None:
    snap = snapshot(gpu(0, memory=None, cc=None, degraded=unknown("memory")), gpu(1))
    got = labels(snap)
    assert got["gpu.memory"] == "40960" and got["gpu.family"] == "ampere"


def test_gpus_with_empty_names_keep_count_and_say_why_product_is_empty() -> None:
    result = labelling(snapshot(gpu(0, ""), gpu(1, "")))
    assert result.labels[P + "gpu.count"] == "2"
    assert result.labels[P + "gpu.product"] == ""
    assert result.labels[P + "gpu.memory"] == "40960"
    assert any("GPU 0, 1: NVML gave the name ''" in w for w in result.warnings)


def test_a_shared_gpu_with_an_empty_name_is_still_a_valid_product() -> None:
    got = labels(snapshot(gpu(0, "")), sharing=time_slicing(2))
    assert got["gpu.product"] == "SHARED" and got["gpu.replicas"] == "2"
