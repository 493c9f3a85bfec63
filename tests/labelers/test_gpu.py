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
