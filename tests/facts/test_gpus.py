"""Which GPUs count (display adapters skipped, a lost GPU counted but not healthy), whether
the node has GPUs at all, and the model groups behind the primary model: the facts every
projection derives alike (docs/gfd-compatibility.md, "Merge order and heterogeneous
nodes")."""

from __future__ import annotations

import itertools

import pytest
from helpers.builders import A10, A10_BYTES, A100_80, A100_80_BYTES, H100, H100_BYTES, gpu, snapshot

from gfd.facts.gpus import counted, has_gpus, healthy, model_groups, unhealthy
from gfd.snapshot import Gpu, Snapshot


def test_counted_healthy_and_unhealthy_split_the_gpus() -> None:
    display = gpu(0, "NVIDIA DGX Display")
    lost = gpu(1, error="GPU is lost")
    nameless = Gpu(index=2)
    good = gpu(3)
    snap = snapshot(display, lost, nameless, good)
    assert counted(snap) == (lost, nameless, good)
    assert healthy(snap) == (nameless, good), "a GPU that answered is healthy, name or none"
    assert unhealthy(snap) == (lost,)


def test_a_lost_display_adapter_still_counts() -> None:
    lost_display = gpu(0, "NVIDIA DGX Display", error="GPU is lost")
    assert counted(snapshot(lost_display)) == (lost_display,)


@pytest.mark.parametrize("snap, yes", [
    (snapshot(gpu(0)), True),
    (snapshot(), False),
    (snapshot(gpu(0, "DGX Display")), False),
    (snapshot(gpu(0, error="GPU is lost")), True),
    (Snapshot(nvml_available=False, gpus=(gpu(0),)), False),
], ids=["a-gpu", "none", "display-only", "a-lost-gpu", "nvml-down"])
def test_has_gpus_needs_nvml_and_a_counted_gpu(snap: Snapshot, yes: bool) -> None:
    assert has_gpus(snap) is yes


def test_model_groups_keep_gpus_in_index_order() -> None:
    snap = snapshot(gpu(3, A10, A10_BYTES), gpu(1, A10, A10_BYTES), gpu(2))
    [a10, a100] = model_groups(snap)
    assert [g.index for g in a10.gpus] == [1, 3] and a10.first.index == 1
    assert a100.name == "NVIDIA A100-SXM4-40GB" and a100.memory_mib == 40960


def test_a_gpu_with_an_empty_name_is_healthy_and_counted() -> None:
    snap = snapshot(gpu(0, ""), gpu(1, ""))
    assert healthy(snap) == snap.gpus
    assert [g.name for g in model_groups(snap)] == [""]


PRIMARY_CASES = [
    ("most-gpus", [gpu(0, A100_80, A100_80_BYTES), gpu(1, A10, A10_BYTES),
                   gpu(2, A10, A10_BYTES)], A10),
    ("then-most-memory", [gpu(0, A10, A10_BYTES), gpu(1, A100_80, A100_80_BYTES)], A100_80),
    ("then-name", [gpu(0, "NVIDIA Beta"), gpu(1, "NVIDIA Alpha")], "NVIDIA Alpha"),
    ("count-beats-memory", [gpu(0, H100, H100_BYTES), *(gpu(i, A10, A10_BYTES)
                                                        for i in (1, 2, 3))], A10),
]


@pytest.mark.parametrize(("gpus", "primary"), [(g, p) for _, g, p in PRIMARY_CASES],
                         ids=[i for i, _, _ in PRIMARY_CASES])
def test_the_primary_model_is_first_whatever_the_gpu_order(gpus: list[Gpu], primary: str) -> None:
    firsts = {model_groups(snapshot(*order))[0].name for order in itertools.permutations(gpus)}
    assert firsts == {primary}


def test_a_lost_gpu_is_in_no_model_group() -> None:
    snap = snapshot(gpu(0, A10, A10_BYTES, error="GPU is lost"), gpu(1, A10, A10_BYTES))
    [group] = model_groups(snap)
    assert [g.index for g in group.gpus] == [1]
