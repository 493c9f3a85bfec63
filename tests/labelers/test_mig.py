"""MIG labels from hand-built snapshots (docs/gfd-compatibility.md, "MIG strategies" and
"MIG profile names"): full-GPU labels under every strategy; ``none``; ``single`` with its
three INVALID layouts; ``mixed``; profile names and the eighths rule when NVML gives none;
sharing of MIG resources; worked examples on 8 x A100-40GB; ``mig.capable``; and gfd's
extended ``mig.enabled.count``, ``mig.pending`` and ``<R>.memory.per-replica``."""

from __future__ import annotations

from typing import Any

import pytest
from helpers.builders import (
    A10,
    A10_BYTES,
    A100_1G5,
    A100_2G10,
    A100_3G20,
    A100_40,
    A100_40_BYTES,
    A100_80,
    A100_80_BYTES,
    CUDA_550_12040,
    H100,
    H100_BYTES,
    P,
    gpu,
    labelling,
    labels,
    mig,
    mig_gpu,
    migs,
    mps,
    snapshot,
    time_slicing,
    unknown,
)

from gfd.errors import ConfigError
from gfd.snapshot import Gpu, MigDevice

MIG_SUFFIXES = ("product", "count", "replicas", "sharing-strategy", "memory", "multiprocessors",
                "slices.gi", "slices.ci", "engines.copy", "engines.decoder", "engines.encoder",
                "engines.jpeg", "engines.ofa")
ATTRIBUTE_SUFFIXES = MIG_SUFFIXES[4:]

# Node-level labels of a 2 x A100-40GB test node (machine "DGX-A100\n").
A100_NODE = {
    **CUDA_550_12040,
    "gpu.machine": "DGX-A100",
    "gpu.mode": "compute",
    "mig.capable": "true",
    "mps.capable": "false",
    "vgpu.present": "false",
    "gpu.family": "ampere",
    "gpu.compute.major": "8",
    "gpu.compute.minor": "0",
}


def a100_migs(n: int, profile: dict[str, Any] = A100_1G5, start: int = 0) -> tuple[MigDevice, ...]:
    return tuple(mig(start + i, **profile) for i in range(n))


def keys_for(resource: str, got: dict[str, str]) -> dict[str, str]:
    return {k.removeprefix(resource + "."): v for k, v in got.items()
            if k.startswith(resource + ".")}


# --- full-GPU labels under every strategy -----------------------------------------------------


@pytest.mark.parametrize("strategy", ["none", "mixed"])
def test_all_gpus_of_a_model_mig_enabled_gives_replicas_zero(strategy: str) -> None:
    snap = snapshot(mig_gpu(0, a100_migs(7)), mig_gpu(1, a100_migs(7)))
    got = labels(snap, strategy=strategy, sharing=time_slicing(4))
    assert got["gpu.count"] == "2"  # MIG-enabled GPUs still count (#1501)
    assert got["gpu.replicas"] == "0"
    assert got["gpu.sharing-strategy"] == "none"
    assert got["gpu.product"] == "NVIDIA-A100-SXM4-40GB"  # sharing disabled: no -SHARED
    assert got["gpu.memory"] == "40960"


@pytest.mark.parametrize("strategy", ["none", "mixed"])
def test_some_gpus_of_a_model_mig_disabled_gives_sharing_applied(strategy: str) -> None:
    snap = snapshot(mig_gpu(0, a100_migs(7)), gpu(1, mig_capable=True))
    got = labels(snap, strategy=strategy, sharing=time_slicing(4))
    assert got["gpu.count"] == "2"
    assert got["gpu.replicas"] == "4"
    assert got["gpu.sharing-strategy"] == "time-slicing"
    assert got["gpu.product"] == "NVIDIA-A100-SXM4-40GB-SHARED"


def test_no_memory_per_replica_for_mig_enabled_full_gpus() -> None:
    snap = snapshot(mig_gpu(0, a100_migs(7)))
    got = labels(snap, strategy="mixed", sharing=time_slicing(4), label_set="extended")
    assert "gpu.memory.per-replica" not in got


# --- none -------------------------------------------------------------------------------------


def test_none_strategy_ignores_mig_devices() -> None:
    snap = snapshot(mig_gpu(0, a100_migs(7)), mig_gpu(1, a100_migs(7)))
    got = labels(snap, strategy="none")
    assert got == {
        **A100_NODE,
        "gpu.product": "NVIDIA-A100-SXM4-40GB",
        "gpu.count": "2",
        "gpu.replicas": "0",
        "gpu.sharing-strategy": "none",
        "gpu.memory": "40960",
    }


# --- single -------------------------------------------------------------------------------------

INVALID_LABELS = {
    "gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-INVALID",
    "gpu.count": "0",
    "gpu.replicas": "0",
    "gpu.sharing-strategy": "",
    "gpu.memory": "0",
    "mig.strategy": "single",
}

INVALID_CASES = [
    ("a-mig-enabled-gpu-without-devices",
     [mig_gpu(0, a100_migs(7)), mig_gpu(1, ())]),
    ("b-mig-enabled-and-disabled-gpus",
     [mig_gpu(0, a100_migs(7)), gpu(1, mig_capable=True)]),
    ("c-more-than-one-profile",
     [mig_gpu(0, a100_migs(7)), mig_gpu(1, a100_migs(2, A100_3G20))]),
    ("c-more-than-one-profile-on-one-gpu",
     [mig_gpu(0, (mig(0, **A100_3G20), mig(1, **A100_2G10), mig(2, **A100_1G5))),
      mig_gpu(1, a100_migs(7))]),
]


@pytest.mark.parametrize("gpus", [g for _, g in INVALID_CASES], ids=[i for i, _ in INVALID_CASES])
def test_single_invalid_layout_gives_exactly_the_invalid_labels(gpus: list[Gpu]) -> None:
    result = labelling(snapshot(*gpus), strategy="single")
    got = {k.removeprefix("nvidia.com/"): v for k, v in result.labels.items()}
    # family and compute.* of the full-GPU pass stay; no MIG attribute keys at all.
    assert got == {**A100_NODE, **INVALID_LABELS}
    assert not result.rejected


@pytest.mark.parametrize("gpus", [g for _, g in INVALID_CASES], ids=[i for i, _ in INVALID_CASES])
def test_single_invalid_layout_never_gets_shared(gpus: list[Gpu]) -> None:
    got = labels(snapshot(*gpus), strategy="single", sharing=time_slicing(4),
                 label_set="extended")
    for k, v in INVALID_LABELS.items():
        assert got[k] == v, k
    assert "gpu.memory.per-replica" not in got


def test_single_invalid_product_names_the_first_mig_enabled_gpu() -> None:
    # The primary model (two A100 80GB, MIG disabled) is not the first MIG-enabled GPU's.
    snap = snapshot(gpu(0, A100_80, A100_80_BYTES, mig_capable=True),
                    gpu(1, A100_80, A100_80_BYTES, mig_capable=True),
                    mig_gpu(2, a100_migs(7)))
    got = labels(snap, strategy="single")
    assert got["gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-INVALID"
    assert got["gpu.count"] == "0"
    assert got["gpu.memory"] == "0"
    assert got["gpu.family"] == "ampere"


def test_single_invalid_first_mig_enabled_gpu_is_the_lowest_index() -> None:
    # Reading of "first": enumeration (index) order, whatever the snapshot's tuple order.
    snap = snapshot(mig_gpu(3, a100_migs(1, A100_3G20), name=A100_80, memory=A100_80_BYTES),
                    mig_gpu(1, a100_migs(7)))
    assert labels(snap, strategy="single")["gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-INVALID"


def test_single_invalid_warns() -> None:
    result = labelling(snapshot(mig_gpu(0, a100_migs(7)), gpu(1)), strategy="single")
    assert result.warnings


def test_single_valid_layout() -> None:
    snap = snapshot(mig_gpu(0, a100_migs(7)), mig_gpu(1, a100_migs(7)))
    got = labels(snap, strategy="single")
    assert got == {
        **A100_NODE,
        "mig.strategy": "single",
        "gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
        "gpu.count": "14",
        "gpu.replicas": "1",
        "gpu.sharing-strategy": "none",
        "gpu.memory": "4864",
        "gpu.multiprocessors": "14",
        "gpu.slices.gi": "1",
        "gpu.slices.ci": "1",
        "gpu.engines.copy": "1",
        "gpu.engines.decoder": "0",
        "gpu.engines.encoder": "0",
        "gpu.engines.jpeg": "0",
        "gpu.engines.ofa": "0",
    }


def test_single_valid_layout_with_time_slicing_of_nvidia_com_gpu() -> None:
    snap = snapshot(mig_gpu(0, a100_migs(7)), mig_gpu(1, a100_migs(7)))
    got = labels(snap, strategy="single", sharing=time_slicing(2), label_set="extended")
    assert got["gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED"
    assert got["gpu.replicas"] == "2"
    assert got["gpu.sharing-strategy"] == "time-slicing"
    assert got["gpu.memory.per-replica"] == "2432"
    assert got["gpu.count"] == "14"


def test_single_without_mig_enabled_gpus_is_none_plus_strategy() -> None:
    snap = snapshot(gpu(0, mig_capable=True), gpu(1, mig_capable=True))
    none = labels(snap, strategy="none")
    assert labels(snap, strategy="single") == {**none, "mig.strategy": "single"}


# --- mixed --------------------------------------------------------------------------------------


def test_mixed_strategy_labels_each_profile() -> None:
    snap = snapshot(
        mig_gpu(0, (*a100_migs(3), mig(3, **A100_2G10))),
        mig_gpu(1, (*a100_migs(2), mig(2, **A100_3G20))),
        gpu(2, mig_capable=True),
    )
    got = labels(snap, strategy="mixed")
    assert got["mig.strategy"] == "mixed"
    assert got["gpu.count"] == "3"
    assert got["gpu.replicas"] == "1"  # a MIG-disabled A100 is present: sharing applies
    assert keys_for("mig-1g.5gb", got) == {
        "product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "count": "5", "replicas": "1",
        "sharing-strategy": "none", "memory": "4864", "multiprocessors": "14",
        "slices.gi": "1", "slices.ci": "1", "engines.copy": "1", "engines.decoder": "0",
        "engines.encoder": "0", "engines.jpeg": "0", "engines.ofa": "0",
    }
    assert keys_for("mig-2g.10gb", got)["count"] == "1"
    assert keys_for("mig-2g.10gb", got)["memory"] == "9856"
    assert keys_for("mig-3g.20gb", got)["count"] == "1"
    assert keys_for("mig-3g.20gb", got)["engines.decoder"] == "2"
    mig_keys = {k for k in got if k.startswith("mig-")}
    assert mig_keys == {f"mig-{p}.{s}" for p in ("1g.5gb", "2g.10gb", "3g.20gb")
                        for s in MIG_SUFFIXES}
    # MIG resources never get family or compute keys of their own.
    assert not any(k.endswith((".family", ".compute.major", ".compute.minor"))
                   for k in mig_keys)


def test_mixed_counts_are_summed_over_gpus() -> None:
    snap = snapshot(*(mig_gpu(i, a100_migs(7)) for i in range(8)))
    got = labels(snap, strategy="mixed")
    assert got["mig-1g.5gb.count"] == "56"
    assert got["gpu.count"] == "8"
    assert got["gpu.replicas"] == "0"


def test_mixed_ignores_a_mig_enabled_gpu_without_devices() -> None:
    snap = snapshot(mig_gpu(0, ()), mig_gpu(1, a100_migs(2)))
    result = labelling(snap, strategy="mixed")
    got = {k.removeprefix("nvidia.com/"): v for k, v in result.labels.items()}
    assert got["mig-1g.5gb.count"] == "2"
    assert {k.split(".", 1)[0] for k in got if k.startswith("mig-")} == {"mig-1g"}
    assert got["gpu.count"] == "2"


def test_mixed_with_only_an_empty_mig_enabled_gpu() -> None:
    got = labels(snapshot(mig_gpu(0, ())), strategy="mixed")
    assert got == {
        **A100_NODE,
        "mig.strategy": "mixed",
        "gpu.product": "NVIDIA-A100-SXM4-40GB",
        "gpu.count": "1",
        "gpu.replicas": "0",
        "gpu.sharing-strategy": "none",
        "gpu.memory": "40960",
    }


def test_mixed_time_sliced_mig_profile() -> None:
    snap = snapshot(mig_gpu(0, (*a100_migs(2), mig(2, **A100_3G20))),
                    mig_gpu(1, (*a100_migs(2), mig(2, **A100_3G20))))
    got = labels(snap, strategy="mixed", sharing=time_slicing(2, "nvidia.com/mig-1g.5gb"),
                 label_set="extended")
    assert got["mig-1g.5gb.product"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED"
    assert got["mig-1g.5gb.replicas"] == "2"
    assert got["mig-1g.5gb.sharing-strategy"] == "time-slicing"
    assert got["mig-1g.5gb.memory.per-replica"] == "2432"
    assert got["mig-1g.5gb.count"] == "4"
    # the other profile and the full GPUs are not shared
    assert got["mig-3g.20gb.product"] == "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb"
    assert got["mig-3g.20gb.replicas"] == "1"
    assert got["mig-3g.20gb.sharing-strategy"] == "none"
    assert "mig-3g.20gb.memory.per-replica" not in got
    assert got["gpu.replicas"] == "0"
    assert got["gpu.sharing-strategy"] == "none"
    assert got["gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert got["mps.capable"] == "false"


def test_mixed_time_sliced_mig_profile_not_in_compat_has_no_per_replica() -> None:
    snap = snapshot(mig_gpu(0, a100_migs(2)))
    got = labels(snap, strategy="mixed", sharing=time_slicing(2, "nvidia.com/mig-1g.5gb"))
    assert got["mig-1g.5gb.replicas"] == "2"
    assert "mig-1g.5gb.memory.per-replica" not in got


def test_mixed_time_sliced_mig_profile_renamed_has_no_shared_suffix() -> None:
    snap = snapshot(mig_gpu(0, a100_migs(2)))
    got = labels(snap, strategy="mixed",
                 sharing=time_slicing(2, "nvidia.com/mig-1g.5gb", rename=True))
    assert got["mig-1g.5gb.product"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"
    assert got["mig-1g.5gb.replicas"] == "2"
    assert got["mig-1g.5gb.sharing-strategy"] == "time-slicing"


@pytest.mark.parametrize("strategy", ["none", "single", "mixed"])
def test_mps_with_mig_enabled_is_a_config_error(strategy: str) -> None:
    snap = snapshot(mig_gpu(0, a100_migs(7)), mig_gpu(1, a100_migs(7)))
    with pytest.raises(ConfigError):
        labelling(snap, strategy=strategy, sharing=mps(2))


# --- profile names -----------------------------------------------------------------------------

NVML_NAMES = [
    ("plus-me-becomes-dot-me", "MIG 1g.10gb+me", H100, H100_BYTES, "1g.10gb.me"),
    ("compute-slices-differ", "MIG 1c.3g.20gb", A100_40, A100_40_BYTES, "1c.3g.20gb"),
    ("plain", "MIG 3g.20gb", A100_40, A100_40_BYTES, "3g.20gb"),
    ("plus-me-all", "MIG 1g.10gb+me.all", H100, H100_BYTES, "1g.10gb.me.all"),
    ("minus-me-kept", "MIG 1g.20gb-me", H100, H100_BYTES, "1g.20gb-me"),
]


@pytest.mark.parametrize(("raw", "model", "total", "name"),
                         [r[1:] for r in NVML_NAMES], ids=[r[0] for r in NVML_NAMES])
def test_profile_name_normalisation(raw: str, model: str, total: int, name: str) -> None:
    snap = snapshot(mig_gpu(0, (mig(0, profile=raw, memory=9856, gi=1, ci=1),),
                            name=model, memory=total))
    got = labels(snap, strategy="mixed")
    product = f"{model.replace(' ', '-')}-MIG-{name}"
    assert got[f"mig-{name}.product"] == product
    assert got[f"mig-{name}.count"] == "1"
    single = labels(snap, strategy="single")
    assert single["gpu.product"] == product


# The eighths rule when NVML gives no profile name (old drivers). The first two rows are
# GFD's worked examples; the others apply the same arithmetic.
EIGHTHS = [
    ("a100-40-1slice-worked", A100_40_BYTES, 4864, 1, 1, "1g.5gb"),
    ("a100-40-3slice-worked", A100_40_BYTES, 20096, 3, 3, "3g.20gb"),
    ("a100-40-ci-smaller-than-gi", A100_40_BYTES, 20096, 3, 1, "1c.3g.20gb"),
    ("a100-40-2slice", A100_40_BYTES, 9856, 2, 2, "2g.10gb"),
    ("a100-40-4slice", A100_40_BYTES, 20096, 4, 4, "4g.20gb"),
    ("a100-40-7slice", A100_40_BYTES, 40192, 7, 7, "7g.40gb"),
    ("a100-40-exactly-one-eighth", A100_40_BYTES, 5120, 1, 1, "1g.5gb"),
    ("a100-40-just-over-one-eighth", A100_40_BYTES, 5121, 1, 1, "1g.10gb"),
    ("a100-80-1slice", A100_80_BYTES, 9856, 1, 1, "1g.10gb"),
    ("a100-80-2slice", A100_80_BYTES, 19968, 2, 2, "2g.20gb"),
    ("h100-1slice", H100_BYTES, 9856, 1, 1, "1g.10gb"),
    ("h100-1slice-20gb", H100_BYTES, 19968, 1, 1, "1g.20gb"),
    ("h100-3slice", H100_BYTES, 40192, 3, 3, "3g.40gb"),
    ("h100-7slice", H100_BYTES, 80384, 7, 7, "7g.80gb"),
    ("h100-ci-smaller-than-gi", H100_BYTES, 40192, 3, 2, "2c.3g.40gb"),
    # 20 GiB parent: 1/8 x 20 = 2.5, rounded half away from zero as go-nvlib's math.Round.
    ("half-rounds-up", 20 * 2**30, 2048, 1, 1, "1g.3gb"),
]


@pytest.mark.parametrize(("total", "memory", "gi", "ci", "name"), [r[1:] for r in EIGHTHS],
                         ids=[r[0] for r in EIGHTHS])
def test_eighths_rule_when_nvml_gives_no_profile_name(
    total: int, memory: int, gi: int, ci: int, name: str
) -> None:
    snap = snapshot(mig_gpu(0, (mig(0, profile="", memory=memory, gi=gi, ci=ci),),
                            memory=total))
    got = labels(snap, strategy="mixed")
    assert got[f"mig-{name}.count"] == "1"
    assert got[f"mig-{name}.product"] == f"NVIDIA-A100-SXM4-40GB-MIG-{name}"
    assert got[f"mig-{name}.memory"] == str(memory)


def test_long_model_with_mig_profile_is_shortened_not_dropped() -> None:
    # NVIDIA/k8s-device-plugin#1876: 67 characters under GFD; gfd keeps it within 63.
    model = "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"
    snap = snapshot(mig_gpu(0, (mig(0, profile="MIG 1g.24gb", memory=24 * 1024),),
                            name=model, memory=97887 * 2**20, cc=(12, 0)))
    for strategy, key in (("mixed", "nvidia.com/mig-1g.24gb.product"),
                          ("single", "nvidia.com/gpu.product")):
        result = labelling(snap, strategy=strategy)
        assert not result.rejected
        assert result.labels[key] == (
            "NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edi-MIG-1g.24gb")


# --- worked examples (8 x A100-40GB) ----------------------------------------------------------

# The 1-slice profile of GFD's dgxa100 mock: 1 copy engine, 1 decoder, 0/0/0, 14 SMs, 4864 MiB.
MOCK_1G5 = dict(profile="MIG 1g.5gb", memory=4864, sms=14, gi=1, ci=1, copy=1, dec=1)


def _dgx(layouts: list[int | None]) -> list[Gpu]:
    gpus = []
    for i, n in enumerate(layouts):
        if n is None:
            gpus.append(gpu(i, mig_capable=True))
        else:
            gpus.append(mig_gpu(i, tuple(mig(j, **MOCK_1G5) for j in range(n))))
    return gpus


def test_worked_example_single_every_gpu_7x_1g5gb() -> None:
    got = labels(snapshot(*_dgx([7] * 8)), strategy="single", timestamp=1724632719)
    assert got == {
        **A100_NODE,
        "gfd.timestamp": "1724632719",
        "mig.strategy": "single",
        "gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
        "gpu.count": "56",
        "gpu.replicas": "1",
        "gpu.sharing-strategy": "none",
        "gpu.memory": "4864",
        "gpu.multiprocessors": "14",
        "gpu.slices.gi": "1",
        "gpu.slices.ci": "1",
        "gpu.engines.copy": "1",
        "gpu.engines.decoder": "1",
        "gpu.engines.encoder": "0",
        "gpu.engines.jpeg": "0",
        "gpu.engines.ofa": "0",
    }


def test_worked_example_single_gpu7_mig_disabled_is_invalid() -> None:
    got = labels(snapshot(*_dgx([7] * 7 + [None])), strategy="single")
    assert got == {**A100_NODE, **INVALID_LABELS}


def test_worked_example_mixed_every_gpu_7x_1g5gb() -> None:
    got = labels(snapshot(*_dgx([7] * 8)), strategy="mixed")
    assert got == {
        **A100_NODE,
        "mig.strategy": "mixed",
        "gpu.product": "NVIDIA-A100-SXM4-40GB",
        "gpu.count": "8",
        "gpu.replicas": "0",
        "gpu.sharing-strategy": "none",
        "gpu.memory": "40960",
        "mig-1g.5gb.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
        "mig-1g.5gb.count": "56",
        "mig-1g.5gb.replicas": "1",
        "mig-1g.5gb.sharing-strategy": "none",
        "mig-1g.5gb.memory": "4864",
        "mig-1g.5gb.multiprocessors": "14",
        "mig-1g.5gb.slices.gi": "1",
        "mig-1g.5gb.slices.ci": "1",
        "mig-1g.5gb.engines.copy": "1",
        "mig-1g.5gb.engines.decoder": "1",
        "mig-1g.5gb.engines.encoder": "0",
        "mig-1g.5gb.engines.jpeg": "0",
        "mig-1g.5gb.engines.ofa": "0",
    }


# --- extended: mig.enabled.count, mig.pending ------------------------------------------------


def test_mig_enabled_count() -> None:
    snap = snapshot(mig_gpu(0, a100_migs(7)), gpu(1, mig_capable=True),
                    mig_gpu(2, a100_migs(7)))
    assert labels(snap, label_set="extended")["mig.enabled.count"] == "2"


def test_mig_enabled_count_zero_when_capable_but_disabled() -> None:
    snap = snapshot(gpu(0, mig_capable=True))
    assert labels(snap, label_set="extended")["mig.enabled.count"] == "0"


def test_no_mig_enabled_count_without_mig_capable_gpus() -> None:
    got = labels(snapshot(gpu(0, A10, A10_BYTES, (8, 6))), label_set="extended")
    assert "mig.enabled.count" not in got


PENDING = [
    ("enable-pending", False, True, "true"),
    ("disable-pending", True, False, "true"),
    ("no-change", True, True, None),
    ("not-reported", False, None, None),
]


@pytest.mark.parametrize(("current", "pending", "value"), [r[1:] for r in PENDING],
                         ids=[r[0] for r in PENDING])
def test_mig_pending(current: bool, pending: bool | None, value: str | None) -> None:
    devices = a100_migs(7) if current else ()
    snap = snapshot(gpu(0, mig_capable=True, mig_enabled=current, mig_pending_enabled=pending,
                        mig_devices=devices),
                    gpu(1, mig_capable=True, mig_enabled=current, mig_pending_enabled=current,
                        mig_devices=devices))
    assert labels(snap, label_set="extended").get("mig.pending") == value


def test_mig_pending_does_not_change_the_strategy_labels() -> None:
    # The current MIG mode decides; a pending change is ignored.
    snap = snapshot(gpu(0, mig_capable=True, mig_enabled=False, mig_pending_enabled=True),
                    gpu(1, mig_capable=True, mig_enabled=False, mig_pending_enabled=True))
    got = labels(snap, strategy="single")
    assert got["gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert got["gpu.replicas"] == "1"
    assert got["mig.strategy"] == "single"


def test_mig_extended_labels_absent_in_compat() -> None:
    snap = snapshot(mig_gpu(0, a100_migs(7), mig_pending_enabled=False))
    got = labels(snap, strategy="mixed")
    assert "mig.enabled.count" not in got
    assert "mig.pending" not in got


def test_single_uses_only_the_nvidia_com_gpu_sharing_entry() -> None:
    # Under single the MIG devices are nvidia.com/gpu; an entry for
    # nvidia.com/mig-1g.5gb names a resource that does not exist under single.
    snap = snapshot(mig_gpu(0, a100_migs(7)), mig_gpu(1, a100_migs(7)))
    got = labels(snap, strategy="single", sharing=time_slicing(2, "nvidia.com/mig-1g.5gb"),
                 label_set="extended")
    assert got["gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"
    assert got["gpu.replicas"] == "1"
    assert got["gpu.sharing-strategy"] == "none"
    assert "gpu.memory.per-replica" not in got
    assert not any(k.startswith("mig-") for k in got)


def test_single_invalid_on_a_heterogeneous_node_keeps_per_replica_consistent() -> None:
    """The INVALID labels say gpu.replicas=0 and gpu.memory=0 for nvidia.com/gpu."""
    snap = snapshot(gpu(0, A100_80, A100_80_BYTES, mig_capable=True),
                    gpu(1, A100_80, A100_80_BYTES, mig_capable=True),
                    mig_gpu(2, a100_migs(7)))
    got = labels(snap, strategy="single", sharing=time_slicing(4), label_set="extended")
    assert got["gpu.replicas"] == "0"
    assert got["gpu.memory"] == "0"
    assert got["gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-INVALID"


def test_single_invalid_on_a_heterogeneous_node_has_no_memory_per_replica() -> None:
    snap = snapshot(gpu(0, A100_80, A100_80_BYTES, mig_capable=True),
                    gpu(1, A100_80, A100_80_BYTES, mig_capable=True),
                    mig_gpu(2, a100_migs(7)))
    got = labels(snap, strategy="single", sharing=time_slicing(4), label_set="extended")
    assert "gpu.memory.per-replica" not in got


# --- mig.capable ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("capable", "value"),
    [([False, False], "false"), ([False, True], "true"), ([True, True], "true")],
    ids=["none-capable", "one-capable", "all-capable"],
)
def test_mig_capable_when_any_gpu_supports_mig(capable: list[bool], value: str) -> None:
    snap = snapshot(*(gpu(i, mig_capable=c) for i, c in enumerate(capable)))
    assert labels(snap)["mig.capable"] == value


def test_mig_capable_counts_a_non_primary_model() -> None:
    # Two A10s (primary by count, not MIG-capable) and one MIG-capable A100.
    snap = snapshot(gpu(0, A10, A10_BYTES, (8, 6)), gpu(1, A10, A10_BYTES, (8, 6)),
                    gpu(2, A100_80, A100_80_BYTES, mig_capable=True))
    got = labels(snap)
    assert got["gpu.product"] == "NVIDIA-A10"
    assert got["mig.capable"] == "true"


def test_mig_capable_regardless_of_mig_mode() -> None:
    snap = snapshot(gpu(0, mig_capable=True, mig_enabled=False))
    assert labels(snap)["mig.capable"] == "true"


def test_mig_capable_is_left_out_rather_than_false_when_a_mode_isunknown() -> None:
    assert "mig.capable" not in labels(snapshot(gpu(0), gpu(1, degraded=unknown("mig_mode"))))


def test_mig_capable_is_true_when_a_known_gpu_says_so_whatever_the_unknown_ones() -> None:
    snap = snapshot(gpu(0, mig_capable=True), gpu(1, degraded=unknown("mig_mode")))
    assert labels(snap)["mig.capable"] == "true"


@pytest.mark.parametrize("strategy", ["single", "mixed"])
def test_mig_resource_labels_are_left_out_when_the_layout_isunknown(strategy: str) -> None:
    snap = snapshot(mig_gpu(0, migs(7)), mig_gpu(1, (), degraded=unknown("mig_devices")))
    result = labelling(snap, strategy=strategy)
    got = {k.removeprefix(P): v for k, v in result.labels.items()}
    assert got["mig.strategy"] == strategy
    assert not [k for k in got if k.startswith("mig-")]
    if strategy == "single":  # single would replace these: neither value is sure
        assert not {"gpu.product", "gpu.count", "gpu.replicas", "gpu.memory"} & set(got)
        assert got["gpu.family"] == "ampere", "the capability is known"
    assert any("MIG resource labels left out" in w for w in result.warnings)


def test_enabled_count_is_left_out_when_a_mode_is_unknown_but_pending_still_said() -> None:
    snap = snapshot(gpu(0, mig_capable=True, mig_pending_enabled=True),
                    gpu(1, degraded=unknown("mig_mode")))
    got = labels(snap, label_set="extended")
    assert "mig.enabled.count" not in got and got["mig.pending"] == "true"
