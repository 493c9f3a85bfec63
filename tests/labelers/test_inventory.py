"""Which GPUs count and the primary model: display adapters skipped, lost GPUs not counted,
the most GPUs then the most memory then the name winning whatever the GPU order; and the
node's model inventory (``gpu.heterogeneous``, ``gpu.product.<model>``, ``gpu.memory.min``)
(docs/gfd-compatibility.md, "Merge order and heterogeneous nodes")."""

from __future__ import annotations

import itertools

import pytest
from helpers.builders import (
    A10,
    A10_BYTES,
    A100_40_BYTES,
    A100_80,
    A100_80_BYTES,
    H100,
    H100_BYTES,
    gpu,
    labels,
    snapshot,
    unknown,
)

from gfd.snapshot import Gpu

HETERO_CASES = [
    (
        "most-gpus-wins",
        [gpu(0, A100_80, A100_80_BYTES, (8, 0)), gpu(1, A10, A10_BYTES, (8, 6)),
         gpu(2, A10, A10_BYTES, (8, 6))],
        {"gpu.product": "NVIDIA-A10", "gpu.count": "2", "gpu.memory": "22731",
         "gpu.family": "ampere", "gpu.compute.major": "8", "gpu.compute.minor": "6"},
    ),
    (
        "same-count-most-memory-wins",
        [gpu(0, A10, A10_BYTES, (8, 6)), gpu(1, A100_80, A100_80_BYTES, (8, 0))],
        {"gpu.product": "NVIDIA-A100-80GB-PCIe", "gpu.count": "1", "gpu.memory": "81920",
         "gpu.compute.minor": "0"},
    ),
    (
        "same-count-same-memory-name-wins",
        [gpu(0, "NVIDIA Beta", A100_40_BYTES, (9, 0)),
         gpu(1, "NVIDIA Alpha", A100_40_BYTES, (8, 9))],
        {"gpu.product": "NVIDIA-Alpha", "gpu.count": "1", "gpu.family": "ada-lovelace"},
    ),
    (
        "count-beats-memory",
        [gpu(0, H100, H100_BYTES, (9, 0)), gpu(1, A10, A10_BYTES, (8, 6)),
         gpu(2, A10, A10_BYTES, (8, 6)), gpu(3, A10, A10_BYTES, (8, 6))],
        {"gpu.product": "NVIDIA-A10", "gpu.count": "3", "gpu.family": "ampere"},
    ),
]


@pytest.mark.parametrize(("gpus", "expected"), [(g, e) for _, g, e in HETERO_CASES],
                         ids=[i for i, _, _ in HETERO_CASES])
def test_heterogeneous_primary_model(gpus: list[Gpu], expected: dict[str, str]) -> None:
    got = labels(snapshot(*gpus))
    for k, v in expected.items():
        assert got[k] == v, k


@pytest.mark.parametrize(("gpus", "expected"), [(g, e) for _, g, e in HETERO_CASES],
                         ids=[i for i, _, _ in HETERO_CASES])
def test_heterogeneous_labels_do_not_depend_on_gpu_order(
    gpus: list[Gpu], expected: dict[str, str]
) -> None:
    results = {
        tuple(sorted(labels(snapshot(*order), label_set="extended").items()))
        for order in itertools.permutations(gpus)
    }
    assert len(results) == 1


def test_heterogeneous_extended_labels() -> None:
    snap = snapshot(gpu(0, A100_80, A100_80_BYTES, (8, 0), mig_capable=True),
                    gpu(1, A100_80, A100_80_BYTES, (8, 0), mig_capable=True),
                    gpu(2, A10, A10_BYTES, (8, 6)))
    got = labels(snap, label_set="extended")
    assert got["gpu.heterogeneous"] == "true"
    assert got["gpu.product.NVIDIA-A100-80GB-PCIe"] == "2"
    assert got["gpu.product.NVIDIA-A10"] == "1"
    assert [k for k in got if k.startswith("gpu.product.")] == [
        "gpu.product.NVIDIA-A10", "gpu.product.NVIDIA-A100-80GB-PCIe"]
    assert got["gpu.memory.min"] == "22731"
    assert got["gpu.accelerator"] == "nvidia-a100-80gb-pcie"
    assert got["gpu.count"] == "2"  # the primary model only (GFD semantics)


def test_homogeneous_node_is_not_heterogeneous() -> None:
    got = labels(snapshot(gpu(0), gpu(1)), label_set="extended")
    assert got["gpu.heterogeneous"] == "false"
    assert got["gpu.product.NVIDIA-A100-SXM4-40GB"] == "2"


@pytest.mark.parametrize("display", ["NVIDIA DGX Display", "DGX Display"])
def test_dgx_display_devices_are_skipped(display: str) -> None:
    snap = snapshot(gpu(0, display, 4 * 2**30, (7, 5), pci_class="0x030000"),
                    *(gpu(i, A100_80, A100_80_BYTES) for i in range(1, 5)))
    got = labels(snap, label_set="extended")
    assert got["gpu.product"] == "NVIDIA-A100-80GB-PCIe"
    assert got["gpu.count"] == "4"
    assert got["gpu.mode"] == "compute"
    assert got["gpu.heterogeneous"] == "false"
    assert got["gpu.memory.min"] == "81920"
    assert not any("Display" in k for k in got)


def test_node_with_only_a_dgx_display_has_no_gpu_labels() -> None:
    snap = snapshot(gpu(0, "NVIDIA DGX Display", 4 * 2**30, (7, 5), pci_class="0x030000"))
    assert labels(snap, timestamp=1724632719) == {
        "gfd.timestamp": "1724632719", "vgpu.present": "false"}


def test_memory_min_is_left_out_when_a_gpus_memory_isunknown() -> None:
    snap = snapshot(gpu(0), gpu(1, memory=None, degraded=unknown("memory")))
    got = labels(snap, label_set="extended")
    assert "gpu.memory.min" not in got and got["gpu.product.NVIDIA-A100-SXM4-40GB"] == "2"


def test_no_product_model_key_for_a_name_with_nothing_labelable() -> None:
    got = labels(snapshot(gpu(0, ""), gpu(1, "™"), gpu(2, "Tesla T4")), label_set="extended")
    assert {k: v for k, v in got.items() if k.startswith("gpu.product.")} == {
        "gpu.product.Tesla-T4": "1"}
    assert got["gpu.heterogeneous"] == "true"
