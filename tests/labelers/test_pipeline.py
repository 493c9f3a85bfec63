"""The pipeline applies the GPU-presence guard, the compat/extended filter and the resource
manager's label set, once."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from helpers.builders import (
    A10,
    A10_BYTES,
    A100_1G5,
    A100_40,
    A100_40_BYTES,
    A100_80,
    A100_80_BYTES,
    CUDA_550_12040,
    P,
    gpu,
    is_extended_key,
    labelling,
    labels,
    mig_gpu,
    migs,
    snapshot,
    time_slicing,
)

from gfd.labelers.base import Label, Labeler, Result
from gfd.labelers.catalog import describe
from gfd.labelers.options import MIG_STRATEGIES, LabelOptions
from gfd.labelers.pipeline import LABELERS, Step, compute_labels
from gfd.readers.simulate import SIMULATIONS, simulate
from gfd.sharing import SharedResource, Sharing
from gfd.snapshot import Gpu, ResourceManager, Snapshot, Vgpu

NO_GPU = {
    "no-gpu": snapshot(),
    "nvml-unavailable": Snapshot(nvml_available=False, nvml_error="libnvidia-ml.so.1 not found",
                                 gpus=(gpu(0),)),
    "display-adapter-only": snapshot(gpu(0, "NVIDIA DGX Display", 4 * 2**30, (7, 5))),
}


def recording(calls: list[str], name: str, labels: dict[str, str] | None = None) -> Labeler:
    """A labeler that notes each call and returns the given labels."""

    def labeler(snap: Snapshot, options: LabelOptions, /) -> Result:
        calls.append(name)
        return Result({k: Label(value=v) for k, v in (labels or {}).items()})

    return labeler


@pytest.mark.parametrize("snap", list(NO_GPU.values()), ids=list(NO_GPU))
def test_a_labeler_that_needs_gpus_is_not_called_without_gpus(snap: Snapshot) -> None:
    calls: list[str] = []
    steps = (Step(recording(calls, "needs"), needs_gpus=True),
             Step(recording(calls, "always"), needs_gpus=False))
    compute_labels(snap, LabelOptions(), labelers=steps)
    assert calls == ["always"]


def test_every_labeler_runs_in_order_on_a_node_with_gpus() -> None:
    calls: list[str] = []
    steps = (Step(recording(calls, "first"), needs_gpus=False),
             Step(recording(calls, "second"), needs_gpus=True),
             Step(recording(calls, "third"), needs_gpus=True))
    compute_labels(snapshot(gpu(0)), LabelOptions(), labelers=steps)
    assert calls == ["first", "second", "third"]


def test_a_lost_gpu_still_counts_as_a_gpu_for_the_guard() -> None:
    calls: list[str] = []
    steps = (Step(recording(calls, "needs"), needs_gpus=True),)
    compute_labels(snapshot(Gpu(index=0, error="GPU is lost")), LabelOptions(), labelers=steps)
    assert calls == ["needs"]


def test_a_later_labeler_wins_for_the_same_key() -> None:
    calls: list[str] = []
    steps = (Step(recording(calls, "a", {P + "gpu.mode": "compute"}), needs_gpus=False),
             Step(recording(calls, "b", {P + "gpu.mode": "graphics"}), needs_gpus=False))
    assert compute_labels(snapshot(), LabelOptions(), labelers=steps).labels == {
        P + "gpu.mode": "graphics"}


def test_only_timestamp_and_vgpu_run_without_gpus() -> None:
    names = [getattr(s.labeler, "__name__", "") for s in LABELERS if not s.needs_gpus]
    assert names == ["timestamp", "vgpu"]


# --- the compat filter -------------------------------------------------------------------------

MIXED = {
    P + "gpu.product": "NVIDIA-A10",
    P + "gpu.memory": "22731",
    P + "mig-1g.5gb.memory": "4864",
    P + "gpu.product.NVIDIA-A10": "1",
    P + "gpu.product.": "1",
    P + "gpu.memory.per-replica": "5682",
    P + "mig-1G.5GB.memory.per-replica": "1216",
    P + "gpu.nvlink": "false",
    P + "mig.pending": "true",
}
COMPAT = (P + "gpu.product", P + "gpu.memory", P + "mig-1g.5gb.memory")


def test_compat_drops_every_extended_key_whatever_labeler_made_it() -> None:
    steps = (Step(recording([], "any", MIXED), needs_gpus=True),)
    compat = compute_labels(snapshot(gpu(0)), LabelOptions(label_set="compat"), labelers=steps)
    assert sorted(compat.explained) == sorted(COMPAT)
    assert not [r for r in compat.rejected if r.key not in COMPAT]
    extended = compute_labels(snapshot(gpu(0)), LabelOptions(label_set="extended"),
                              labelers=steps)
    assert sorted(extended.explained) == sorted(MIXED)


SHARED = Sharing(strategy="time-slicing", resources=(
    SharedResource(name="nvidia.com/gpu", replicas=2),
    SharedResource(name="nvidia.com/mig-1g.5gb", replicas=2)))


def _label_set(full_key: str) -> str:
    doc = describe(full_key)
    assert doc is not None, full_key
    return doc.set


@pytest.mark.parametrize("machine", sorted(SIMULATIONS))
@pytest.mark.parametrize("strategy", ["none", "single", "mixed"])
@pytest.mark.parametrize("sharing", [Sharing(), SHARED], ids=["unshared", "shared"])
def test_compat_is_extended_without_the_catalogues_extended_keys(
        machine: str, strategy: str, sharing: Sharing) -> None:
    snap = simulate(machine).snapshot
    extended = compute_labels(snap, LabelOptions(mig_strategy=strategy, sharing=sharing,
                                                 timestamp=1, label_set="extended"))
    compat = compute_labels(snap, LabelOptions(mig_strategy=strategy, sharing=sharing,
                                               timestamp=1, label_set="compat"))
    kept = {k: v for k, v in extended.labels.items() if _label_set(k) == "compat"}
    assert compat.labels == kept
    assert compat.warnings == extended.warnings


def test_compat_has_no_accelerator_mirror() -> None:
    snap = snapshot(gpu(0, "Tesla T4"))
    compat = compute_labels(snap, LabelOptions(label_set="compat",
                                               accelerator_label="accelerator"))
    assert "accelerator" not in compat.explained
    extended = compute_labels(snap, LabelOptions(accelerator_label="accelerator"))
    assert extended.labels["accelerator"] == "nvidia-tesla-t4"
    assert extended.explained["accelerator"] == extended.explained[P + "gpu.accelerator"]


def test_a_mirror_key_that_is_a_compat_key_is_left_alone_in_compat() -> None:
    snap = snapshot(gpu(0, "Tesla T4"))
    got = compute_labels(snap, LabelOptions(label_set="compat",
                                            accelerator_label=P + "gpu.product")).labels
    assert got[P + "gpu.product"] == "Tesla-T4"


def test_no_accelerator_mirror_without_gpus() -> None:
    got = compute_labels(snapshot(), LabelOptions(accelerator_label="accelerator")).labels
    assert "accelerator" not in got


# --- the labelers leave both rules to the pipeline -----------------------------------------------

LABELERS_DIR = Path(__file__).parent.parent.parent / "gfd" / "labelers"
SHARED_MODULES = {"pipeline.py", "inventory.py", "options.py"}


@pytest.mark.parametrize("path", sorted(p for p in LABELERS_DIR.glob("*.py")
                                        if p.name not in SHARED_MODULES), ids=lambda p: p.name)
def test_labelers_neither_guard_on_gpus_nor_read_the_label_set(path: Path) -> None:
    text = path.read_text()
    assert "has_gpus" not in text
    assert "options.extended" not in text
    assert "label_set" not in text


# --- whole label sets from hand-built snapshots ---------------------------------------------


def test_worked_example_8x_a100_none_strategy_gives_exactly_the_reference_labels() -> None:
    # GFD's own worked example: every label of an 8 x A100-40GB DGX, no MIG strategy.
    snap = snapshot(*(gpu(i, A100_40, A100_40_BYTES, (8, 0), mig_capable=True)
                      for i in range(8)), machine="DGX-A100\n")
    got = labels(snap, timestamp=1724632719)
    assert got == {
        **CUDA_550_12040,
        "gfd.timestamp": "1724632719",
        "gpu.compute.major": "8",
        "gpu.compute.minor": "0",
        "gpu.count": "8",
        "gpu.family": "ampere",
        "gpu.machine": "DGX-A100",
        "gpu.memory": "40960",
        "gpu.mode": "compute",
        "gpu.product": "NVIDIA-A100-SXM4-40GB",
        "gpu.replicas": "1",
        "gpu.sharing-strategy": "none",
        "mig.capable": "true",
        "mps.capable": "false",
        "vgpu.present": "false",
    }


@pytest.mark.parametrize("label_set", ["compat", "extended"])
@pytest.mark.parametrize("strategy", ["none", "single", "mixed"])
def test_no_gpu_gives_only_timestamp_and_vgpu(strategy: str, label_set: str) -> None:
    snap = snapshot(machine="PowerEdge R650\n")
    got = labels(snap, strategy=strategy, label_set=label_set, timestamp=1724632719)
    assert got == {"gfd.timestamp": "1724632719", "vgpu.present": "false"}


def test_no_gpu_and_no_timestamp_and_vgpu_scan_failed_gives_nothing() -> None:
    assert labels(Snapshot(vgpu=None)) == {}


@pytest.mark.parametrize("label_set", ["compat", "extended"])
def test_nvml_unavailable_gives_only_timestamp_and_vgpu(label_set: str) -> None:
    snap = Snapshot(nvml_available=False, nvml_error="libnvidia-ml.so.1 not found",
                    vgpu=Vgpu(present=False))
    got = labels(snap, label_set=label_set, timestamp=1724632719)
    assert got == {"gfd.timestamp": "1724632719", "vgpu.present": "false"}


def _rich_snapshot() -> Snapshot:
    return snapshot(
        gpu(0, A100_80, A100_80_BYTES, mig_capable=True, mig_pending_enabled=True,
            compute_mode="default", nvlink_active=True, timeslice="default"),
        gpu(1, A100_80, A100_80_BYTES, mig_capable=True, compute_mode="default",
            nvlink_active=True, timeslice="default"),
        gpu(2, A10, A10_BYTES, (8, 6), compute_mode="default", timeslice="default"),
        gpu(3, A100_80, A100_80_BYTES, error="GPU is lost"),
    )


@pytest.mark.parametrize("strategy", ["none", "single", "mixed"])
def test_compat_label_set_has_no_extended_key(strategy: str) -> None:
    extended = labels(_rich_snapshot(), strategy=strategy, label_set="extended",
                      sharing=time_slicing(4))
    compat = labels(_rich_snapshot(), strategy=strategy, label_set="compat",
                    sharing=time_slicing(4))
    # The rich snapshot really produces every kind of extended key ...
    for k in ("gpu.heterogeneous", "gpu.memory.min", "gpu.accelerator", "gpu.compute-mode",
              "gpu.nvlink", "mig.enabled.count", "mig.pending", "gpu.unhealthy",
              "gpu.timeslice", "gpu.memory.per-replica"):
        assert k in extended, k
    # ... and none of them in compat; extended only adds keys, never changes compat values.
    assert not [k for k in compat if is_extended_key(k)]
    assert {k: v for k, v in extended.items() if not is_extended_key(k)} == compat


# --------------------------------------------------------------------------- per GPU back end
# GFD derives a few labels differently per back end (docs/gfd-compatibility.md, "Back ends"):
# on vfio the driver, CUDA version and compute capability are GFD's placeholders, the product
# the PCI IDs name and the memory the BAR total (in MiB, gfd's deliberate difference); on Tegra
# the driver version is unknown and the CUDA minor is (v % 100) / 10; an NVML snapshot that
# lacks the same facts gets none of those placeholders.

GA100 = "GA100 [A100 SXM4 40GB]"
BARS_128GIB = 128 * 2**30


def vfio_gpu(index: int = 0, name: str = GA100, memory: int | None = BARS_128GIB) -> Gpu:
    """A GPU as VfioReader reports it: no UUID, capability, MIG or NVLink facts."""
    return Gpu(index=index, name=name, memory_total_bytes=memory,
               pci_bus_id=f"00000000:{0x07 + 8 * index:02X}:00.0", pci_class="0x030200")


def vfio(*gpus: Gpu) -> Snapshot:
    return snapshot(*gpus, driver=None, cuda=None, backend="vfio", source="vfio")


VFIO_VERSIONS = {
    "cuda.driver-version.full": "unknown.unknown.unknown",
    "cuda.driver-version.major": "unknown",
    "cuda.driver-version.minor": "unknown",
    "cuda.driver-version.revision": "unknown",
    "cuda.driver.major": "unknown",
    "cuda.driver.minor": "unknown",
    "cuda.driver.rev": "unknown",
    "cuda.runtime-version.full": "0.0",
    "cuda.runtime-version.major": "0",
    "cuda.runtime-version.minor": "0",
    "cuda.runtime.major": "0",
    "cuda.runtime.minor": "0",
}


def test_vfio_node_gets_exactly_gfds_vfio_labels() -> None:
    got = labels(vfio(vfio_gpu(0), vfio_gpu(1)))
    assert got == VFIO_VERSIONS | {
        "gpu.count": "2",
        "gpu.family": "undefined",
        "gpu.machine": "DGX-A100",
        "gpu.memory": "131072",
        "gpu.mode": "compute",
        "gpu.product": "GA100-A100-SXM4-40GB",
        "gpu.replicas": "1",
        "gpu.sharing-strategy": "none",
        "mig.capable": "false",
        "mps.capable": "false",
        "vgpu.present": "false",
    }


def test_vfio_compute_capability_is_minus_one_and_its_labels_are_dropped() -> None:
    result = labelling(vfio(vfio_gpu()))
    assert result.labels[P + "gpu.family"] == "undefined"
    assert {(r.key, r.value) for r in result.rejected} == {
        (P + "gpu.compute.major", "-1"), (P + "gpu.compute.minor", "-1")}


def test_vfio_memory_is_the_bar_total_in_mib_with_its_provenance() -> None:
    result = labelling(vfio(vfio_gpu()))
    assert result.labels[P + "gpu.memory"] == "131072"
    memory = result.explained[P + "gpu.memory"]
    assert memory.raw == f"{BARS_128GIB} bytes"
    assert "BAR" in memory.source and any("GFD writes the bytes" in r for r in memory.rules)


def test_vfio_versions_name_their_source() -> None:
    explained = labelling(vfio(vfio_gpu())).explained
    assert explained[P + "cuda.driver.major"].source.startswith("vfio back end")
    assert explained[P + "cuda.runtime.major"].source.startswith("vfio back end")
    assert explained[P + "gpu.product"].source.startswith("PCI IDs database")


def test_nvml_gets_no_placeholders() -> None:
    snap = snapshot(gpu(cc=None), driver=None, cuda=None, backend="nvml")
    got = labels(snap)
    assert not [k for k in got if k.startswith("cuda.")]
    assert "gpu.family" not in got and "gpu.compute.major" not in got
    assert got["gpu.product"] == "NVIDIA-A100-SXM4-40GB"


def test_tegra_gets_its_own_driver_placeholder_but_none_of_vfios() -> None:
    snap = snapshot(gpu(cc=None), driver=None, cuda=None, backend="tegra")
    got = labels(snap)
    assert got["cuda.driver-version.full"] == "unknown.unknown.unknown"  # GFD's Tegra rule
    assert not [k for k in got if k.startswith("cuda.runtime")], "no vfio CUDA 0.0"
    assert "gpu.family" not in got and "gpu.compute.major" not in got, "no vfio -1.-1"


def test_vfio_versions_reported_by_the_snapshot_are_used_as_given() -> None:
    snap = snapshot(gpu(cc=(8, 0)), backend="vfio")  # a recorded or future reader's facts
    got = labels(snap)
    assert got["cuda.driver-version.full"] == "550.54.15"
    assert got["cuda.runtime-version.full"] == "12.4"
    assert got["gpu.family"] == "ampere"


def test_vfio_node_writes_no_nvlink_label_but_the_inventory() -> None:
    got = labels(vfio(vfio_gpu(0), vfio_gpu(1)), label_set="extended")
    assert "gpu.nvlink" not in got
    assert got["gpu.product.GA100-A100-SXM4-40GB"] == "2"
    assert got["gpu.memory.min"] == "131072"
    assert got["gpu.accelerator"] == "nvidia-ga100-a100-sxm4-40gb"


def test_nvml_node_without_nvlink_support_still_says_false() -> None:
    assert labels(snapshot(gpu(nvlink_active=None)), label_set="extended")["gpu.nvlink"] == (
        "false")


def test_vfio_node_without_gpus_gets_only_the_vgpu_label() -> None:
    assert labels(vfio()) == {"vgpu.present": "false"}


def test_an_unreadable_vfio_gpu_is_unhealthy_not_a_product() -> None:
    lost = Gpu(index=1, pci_bus_id="00000000:0F:00.0", pci_class="0x030200",
               error="cannot read the PCI device id of 0000:0f:00.0: Is a directory")
    got = labels(vfio(vfio_gpu(0), lost), label_set="extended")
    assert got["gpu.count"] == "1" and got["gpu.unhealthy"] == "1"


# --- Tegra (libcuda)

def tegra_gpu() -> Gpu:
    """A Jetson AGX Orin as libcuda reports it: no PCI bus id, so no PCI class."""
    return Gpu(index=0, uuid="GPU-0", name="Orin", memory_total_bytes=65893089280,
               compute_capability=(8, 7))


TEGRA_DRIVER = {
    "cuda.driver.major": "unknown",
    "cuda.driver.minor": "unknown",
    "cuda.driver.rev": "unknown",
    "cuda.driver-version.major": "unknown",
    "cuda.driver-version.minor": "unknown",
    "cuda.driver-version.revision": "unknown",
    "cuda.driver-version.full": "unknown.unknown.unknown",
}
"""Tegra has no NVML to ask: every part of the driver version is unknown."""


def test_tegra_driver_version_is_unknown_in_every_part() -> None:
    got = labels(snapshot(tegra_gpu(), driver=None, cuda=12020, backend="tegra"))
    assert {k: v for k, v in got.items() if k.startswith("cuda.driver")} == TEGRA_DRIVER


def test_nvml_snapshot_without_a_driver_version_gets_no_driver_labels() -> None:
    got = labels(snapshot(gpu(), driver=None))
    assert not [k for k in got if k.startswith("cuda.driver")]
    assert got["cuda.runtime.minor"] == "4"


TEGRA_CUDA_CASES = [
    (12020, "12", "2"),  # JetPack 6.0
    (12060, "12", "6"),  # JetPack 6.1 / 6.2
    (11040, "11", "4"),  # JetPack 5
    (13000, "13", "0"),  # JetPack 7
    (12045, "12", "4"),  # integer division
    (12100, "12", "0"),  # a minor of 10 would lose its tens under v % 100 / 10
]


@pytest.mark.parametrize(("cuda", "major", "minor"), TEGRA_CUDA_CASES,
                         ids=[str(c) for c, _, _ in TEGRA_CUDA_CASES])
def test_tegra_cuda_version_splits_with_v_mod_100(cuda: int, major: str, minor: str) -> None:
    got = labels(snapshot(tegra_gpu(), driver=None, cuda=cuda, backend="tegra"))
    assert got["cuda.runtime.major"] == major
    assert got["cuda.runtime.minor"] == minor
    assert got["cuda.runtime-version.major"] == major
    assert got["cuda.runtime-version.minor"] == minor
    assert got["cuda.runtime-version.full"] == f"{major}.{minor}"


def test_nvml_keeps_the_v_mod_1000_rule_where_tegra_differs() -> None:
    assert labels(snapshot(gpu(), cuda=12100))["cuda.runtime-version.full"] == "12.10"
    tegra = labels(snapshot(tegra_gpu(), driver=None, cuda=12100, backend="tegra"))
    assert tegra["cuda.runtime-version.full"] == "12.0"


@pytest.mark.parametrize("major", range(9, 14))
def test_both_cuda_minor_rules_agree_for_single_digit_minors(major: int) -> None:
    for minor, patch in itertools.product(range(10), (0, 5)):
        cuda = 1000 * major + 10 * minor + patch
        nvml = labels(snapshot(gpu(), cuda=cuda))["cuda.runtime-version.full"]
        tegra = labels(snapshot(tegra_gpu(), driver=None, cuda=cuda, backend="tegra"))
        assert tegra["cuda.runtime-version.full"] == nvml == f"{major}.{minor}"


def test_tegra_gpu_mode_is_unknown_even_with_a_pci_class() -> None:
    snap = snapshot(gpu(pci_class="0x030200"), driver=None, cuda=12020, backend="tegra")
    result = labelling(snap)
    assert result.labels[P + "gpu.mode"] == "unknown"
    assert "Tegra" in result.explained[P + "gpu.mode"].source


def test_tegra_compat_labels_follow_gfd_rules() -> None:
    got = labels(snapshot(tegra_gpu(), driver=None, cuda=12020, machine=None, backend="tegra"))
    assert got == {
        **TEGRA_DRIVER,
        "cuda.runtime.major": "12",
        "cuda.runtime.minor": "2",
        "cuda.runtime-version.major": "12",
        "cuda.runtime-version.minor": "2",
        "cuda.runtime-version.full": "12.2",
        "gpu.compute.major": "8",
        "gpu.compute.minor": "7",
        "gpu.count": "1",
        "gpu.family": "ampere",
        "gpu.machine": "unknown",
        "gpu.memory": "62840",  # 65893089280 // 2^20
        "gpu.mode": "unknown",  # no PCI class on Tegra
        "gpu.product": "Orin",
        "gpu.replicas": "1",
        "gpu.sharing-strategy": "none",
        "mig.capable": "false",
        "mps.capable": "false",
        "vgpu.present": "false",
    }


# --- the resource manager: which labels each one gets (data in the catalogue) -----------

DRA = ResourceManager(name="dra", evidence="--resource-manager dra")
DEVICE_PLUGIN_ONLY = ("gpu.replicas", "gpu.sharing-strategy", "mig.strategy", "mps.capable")


def test_dra_publishes_gpu_present_and_no_device_plugin_label() -> None:
    snap = snapshot(gpu(0), gpu(1), resource_manager=DRA)
    got = labels(snap, strategy="single", label_set="extended")
    assert got["gpu.present"] == "true"
    assert got["gpu.count"] == "2" and got["gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert not [k for k in DEVICE_PLUGIN_ONLY if k in got]


def test_device_plugin_keeps_gfds_labels_and_no_gpu_present() -> None:
    got = labels(snapshot(gpu(0)), strategy="single")
    assert "gpu.present" not in got
    assert [k for k in DEVICE_PLUGIN_ONLY if k in got] == list(DEVICE_PLUGIN_ONLY)


def test_dra_ignores_the_sharing_config_with_one_warning() -> None:
    snap = snapshot(gpu(0), resource_manager=DRA)
    result = labelling(snap, sharing=time_slicing(4), label_set="extended")
    assert result.labels[P + "gpu.product"] == "NVIDIA-A100-SXM4-40GB"  # no -SHARED
    assert P + "gpu.memory.per-replica" not in result.labels
    ignored = [w for w in result.warnings if "sharing config" in w]
    assert len(ignored) == 1 and "resource manager dra" in ignored[0]


def test_dra_labels_full_gpus_whatever_the_mig_strategy() -> None:
    gpus = (mig_gpu(0, migs(7, **A100_1G5)), mig_gpu(1, migs(7, **A100_1G5)))
    for strategy in MIG_STRATEGIES:
        got = labels(snapshot(*gpus, resource_manager=DRA), strategy=strategy)
        assert not [k for k in got if k.startswith("mig-")], strategy
        assert got["gpu.product"] == "NVIDIA-A100-SXM4-40GB", strategy
        assert got["gpu.count"] == "2" and got["mig.capable"] == "true"


def test_dra_on_a_node_without_gpus_publishes_no_gpu_present() -> None:
    got = labels(snapshot(resource_manager=DRA), label_set="extended")
    assert "gpu.present" not in got and got == labels(snapshot(), label_set="extended")


def test_a_mixed_node_under_dra_counts_each_model() -> None:
    snap = snapshot(gpu(0, A100_80, A100_80_BYTES), gpu(1, A100_80, A100_80_BYTES),
                    gpu(2, A10, A10_BYTES), resource_manager=DRA)
    got = labels(snap, label_set="extended")
    assert got["gpu.product.NVIDIA-A100-80GB-PCIe"] == "2"
    assert got["gpu.product.NVIDIA-A10"] == "1"
    assert got["gpu.present"] == "true"
