"""Labeler unit tests from hand-built snapshots. Every expected value is derived from the
rules: reference/gfd-behaviour.md §2 (catalogue), §3 (derivations), §4 (merge and
heterogeneous nodes), §6.4 (sharing), §12 (worked example) and SPEC.md §2 (gfd's
deliberate differences and extended labels). MIG rules (§5) are in test_mig.py."""

from __future__ import annotations

import itertools

import pytest
from helpers.builders import (
    A10,
    A10_BYTES,
    A100_40,
    A100_40_BYTES,
    A100_80,
    A100_80_BYTES,
    CLUSTER,
    CUDA_550_12040,
    H100,
    H100_BYTES,
    P,
    fabric,
    gpu,
    is_extended_key,
    labelling,
    labels,
    mig,
    mig_gpu,
    mps,
    snapshot,
    time_slicing,
)

from gfd.errors import ConfigError, DiscoveryError
from gfd.snapshot import Gpu, Snapshot, Vgpu

# --- §12.1: the worked example, every label ---------------------------------------------


def test_worked_example_8x_a100_none_strategy_gives_exactly_the_reference_labels() -> None:
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


def test_worked_example_none_with_time_slicing_4(  # §12.3 last-but-one bullet
) -> None:
    snap = snapshot(*(gpu(i, mig_capable=True) for i in range(8)))
    got = labels(snap, sharing=time_slicing(4))
    assert got["gpu.replicas"] == "4"
    assert got["gpu.sharing-strategy"] == "time-slicing"
    assert got["gpu.product"] == "NVIDIA-A100-SXM4-40GB-SHARED"


# --- §3.6 driver and CUDA versions ---------------------------------------------------------

DRIVER_CASES = [
    ("three-parts", "550.54.15", ("550", "54", "15")),
    ("two-parts-empty-rev", "535.104", ("535", "104", "")),
    ("leading-zeros-kept", "580.159.04", ("580", "159", "04")),
    ("leading-zeros-everywhere", "0550.054.005", ("0550", "054", "005")),
]


@pytest.mark.parametrize(("driver", "parts"), [(d, p) for _, d, p in DRIVER_CASES],
                         ids=[i for i, _, _ in DRIVER_CASES])
def test_driver_version_splitting(driver: str, parts: tuple[str, str, str]) -> None:
    got = labels(snapshot(gpu(), driver=driver))
    major, minor, rev = parts
    assert got["cuda.driver.major"] == major
    assert got["cuda.driver.minor"] == minor
    assert got["cuda.driver.rev"] == rev
    assert got["cuda.driver-version.major"] == major
    assert got["cuda.driver-version.minor"] == minor
    assert got["cuda.driver-version.revision"] == rev
    assert got["cuda.driver-version.full"] == driver


@pytest.mark.parametrize("driver", ["550", "1.2.3.4", "550.54.15.1"],
                         ids=["one-part", "four-parts", "four-parts-real"])
def test_driver_version_with_wrong_number_of_parts_is_a_discovery_error(driver: str) -> None:
    with pytest.raises(DiscoveryError):
        labelling(snapshot(gpu(), driver=driver))


CUDA_CASES = [
    (12040, "12", "4"),
    (13000, "13", "0"),
    (12060, "12", "6"),
    (11080, "11", "8"),
    (12045, "12", "4"),  # (v % 1000) / 10 is integer division
]


@pytest.mark.parametrize(("cuda", "major", "minor"), CUDA_CASES,
                         ids=[str(c) for c, _, _ in CUDA_CASES])
def test_cuda_driver_version_splitting(cuda: int, major: str, minor: str) -> None:
    got = labels(snapshot(gpu(), cuda=cuda))
    assert got["cuda.runtime.major"] == major
    assert got["cuda.runtime.minor"] == minor
    assert got["cuda.runtime-version.major"] == major
    assert got["cuda.runtime-version.minor"] == minor
    assert got["cuda.runtime-version.full"] == f"{major}.{minor}"


# --- §3.3 family table -----------------------------------------------------------------

FAMILY_TABLE = [
    ((1, 3), "tesla"),
    ((2, 1), "fermi"),
    ((3, 7), "kepler"),
    ((5, 2), "maxwell"),
    ((6, 1), "pascal"),
    ((7, 0), "volta"),
    ((7, 2), "volta"),
    ((7, 5), "turing"),
    ((8, 0), "ampere"),
    ((8, 6), "ampere"),
    ((8, 7), "ampere"),
    ((8, 9), "ada-lovelace"),
    ((9, 0), "hopper"),
    ((10, 0), "blackwell"),
    ((10, 3), "blackwell"),
    ((12, 0), "blackwell"),
    ((13, 0), "rubin"),
    ((4, 0), "undefined"),
    ((11, 0), "undefined"),
    ((14, 0), "undefined"),
]


@pytest.mark.parametrize(("cc", "family"), FAMILY_TABLE,
                         ids=[f"{c[0]}.{c[1]}-{f}" for c, f in FAMILY_TABLE])
def test_family_table(cc: tuple[int, int], family: str) -> None:
    got = labels(snapshot(gpu(cc=cc)))
    assert got["gpu.family"] == family
    assert got["gpu.compute.major"] == str(cc[0])
    assert got["gpu.compute.minor"] == str(cc[1])


def test_negative_compute_capability_is_undefined_and_its_invalid_values_are_dropped() -> None:
    # VFIO reports -1.-1 (§2.5): family 'undefined'; "-1" is not a valid label value
    # (nfd-and-kubernetes §8.2: must start with an alphanumeric), so gfd drops those two
    # labels alone (SPEC §2.1 #2) where GFD would write them for NFD to drop.
    result = labelling(snapshot(gpu(cc=(-1, -1))))
    assert result.labels[P + "gpu.family"] == "undefined"
    assert P + "gpu.compute.major" not in result.labels
    assert P + "gpu.compute.minor" not in result.labels
    assert {r.key for r in result.rejected} == {P + "gpu.compute.major", P + "gpu.compute.minor"}
    assert {r.value for r in result.rejected} == {"-1"}
    assert result.labels[P + "gpu.product"] == "NVIDIA-A100-SXM4-40GB"


@pytest.mark.parametrize("cc", [(0, 0), (0, 5)], ids=["0.0", "0.5"])
def test_compute_major_zero_gives_no_family_and_no_compute_labels(cc: tuple[int, int]) -> None:
    got = labels(snapshot(gpu(cc=cc)))
    assert "gpu.family" not in got
    assert "gpu.compute.major" not in got
    assert "gpu.compute.minor" not in got
    assert got["gpu.product"] == "NVIDIA-A100-SXM4-40GB"  # the rest is still written


# --- §3.4 memory -----------------------------------------------------------------------

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


# --- §3.5 machine type -------------------------------------------------------------------

MACHINE_CASES = [
    ("DGX H100\n", "DGX-H100"),
    ("  PowerEdge XE9680  \n", "PowerEdge-XE9680"),
    ("g4dn.xlarge", "g4dn.xlarge"),
    ("ProLiant DL380 Gen10 (HPE)", "ProLiant-DL380-Gen10-HPE"),
    ("DGXA100 920-23687-2530-000", "DGXA100-920-23687-2530-000"),
    (None, "unknown"),
]


@pytest.mark.parametrize(("raw", "value"), MACHINE_CASES,
                         ids=[repr(r) for r, _ in MACHINE_CASES])
def test_machine_type_trimmed_and_sanitised(raw: str | None, value: str) -> None:
    assert labels(snapshot(gpu(), machine=raw))["gpu.machine"] == value


# --- §2.1 gpu.mode -------------------------------------------------------------------------

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


# --- §2.1 mig.capable -------------------------------------------------------------------


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


# --- §4.2 + SPEC §2.1 #1: heterogeneous nodes, deterministic primary model -------------------

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


# --- lost GPUs and DGX Display devices ---------------------------------------------------------


def test_lost_gpu_is_not_counted_but_is_unhealthy() -> None:
    snap = snapshot(gpu(0), gpu(1), gpu(2, error="GPU is lost"))
    got = labels(snap, label_set="extended")
    assert got["gpu.count"] == "2"
    assert got["gpu.unhealthy"] == "1"


def test_lost_gpu_without_a_name_is_not_counted() -> None:
    lost = Gpu(index=1, error="GPU is lost")
    got = labels(snapshot(gpu(0), lost), label_set="extended")
    assert got["gpu.count"] == "1"
    assert got["gpu.unhealthy"] == "1"
    assert got["gpu.heterogeneous"] == "false"


def test_unhealthy_counts_every_lost_gpu() -> None:
    snap = snapshot(gpu(0), gpu(1, error="GPU is lost"), gpu(2, error="Unknown Error"))
    assert labels(snap, label_set="extended")["gpu.unhealthy"] == "2"


def test_no_unhealthy_label_when_every_gpu_answers() -> None:
    assert "gpu.unhealthy" not in labels(snapshot(gpu(0)), label_set="extended")


def test_unhealthy_is_an_extended_label() -> None:
    snap = snapshot(gpu(0), gpu(1, error="GPU is lost"))
    got = labels(snap)
    assert "gpu.unhealthy" not in got
    assert got["gpu.count"] == "1"


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


# --- §6.4 sharing --------------------------------------------------------------------------

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


@pytest.mark.parametrize("strategy", ["none", "single", "mixed"])
def test_mps_with_a_mig_enabled_gpu_is_a_config_error(strategy: str) -> None:
    snap = snapshot(gpu(0), mig_gpu(1, (mig(0),)))
    with pytest.raises(ConfigError):
        labelling(snap, strategy=strategy, sharing=mps(4))


def test_mps_with_mig_capable_but_disabled_gpus_is_fine() -> None:
    snap = snapshot(gpu(0, mig_capable=True, mig_enabled=False))
    assert labels(snap, sharing=mps(4))["mps.capable"] == "true"


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


# --- §2.1 gpu.clique --------------------------------------------------------------------------


def test_clique_when_every_attached_gpu_agrees() -> None:
    snap = snapshot(*(gpu(i, fabric=fabric()) for i in range(4)))
    assert labels(snap)["gpu.clique"] == f"{CLUSTER}.1"


def test_clique_ignores_gpus_that_are_not_attached() -> None:
    snap = snapshot(gpu(0, fabric=fabric(clique=7)), gpu(1, fabric=None),
                    gpu(2, fabric=fabric(state="in-progress", clique=3)))
    assert labels(snap)["gpu.clique"] == f"{CLUSTER}.7"


NOT_ATTACHED = [
    ("state-not-completed", fabric(state="in-progress")),
    ("state-not-started", fabric(state="not-started")),
    ("state-not-supported", fabric(state="not-supported")),
    ("status-not-success", fabric(ok=False)),
    ("zero-cluster-uuid", fabric(cluster="00000000-0000-0000-0000-000000000000")),
    ("no-fabric", None),
]


@pytest.mark.parametrize("fab", [f for _, f in NOT_ATTACHED], ids=[i for i, _ in NOT_ATTACHED])
def test_no_clique_when_no_gpu_is_attached(fab: object) -> None:
    snap = snapshot(gpu(0, fabric=fab), gpu(1, fabric=fab))
    result = labelling(snap)
    assert P + "gpu.clique" not in result.labels


DISAGREE = [
    ("different-clique-id", fabric(clique=1), fabric(clique=2)),
    ("different-cluster", fabric(), fabric(cluster="11111111-2222-3333-4444-555555555555")),
]


@pytest.mark.parametrize(("f0", "f1"), [(a, b) for _, a, b in DISAGREE],
                         ids=[i for i, _, _ in DISAGREE])
def test_disagreeing_cliques_give_no_label_and_a_warning(f0: object, f1: object) -> None:
    result = labelling(snapshot(gpu(0, fabric=f0), gpu(1, fabric=f1)))
    assert P + "gpu.clique" not in result.labels
    assert result.warnings
    assert any("clique" in w.lower() for w in result.warnings)


# --- §2.1 vGPU ---------------------------------------------------------------------------------


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


# --- timestamp, no GPU, NVML unavailable (§2.1, §2.4) ---------------------------------------


def test_timestamp_present_when_given() -> None:
    assert labels(snapshot(gpu(0)), timestamp=1724632719)["gfd.timestamp"] == "1724632719"


def test_timestamp_absent_with_no_timestamp() -> None:
    assert "gfd.timestamp" not in labels(snapshot(gpu(0)), timestamp=None)


@pytest.mark.parametrize("label_set", ["compat", "extended"])
@pytest.mark.parametrize("strategy", ["none", "single", "mixed"])
def test_no_gpu_gives_only_timestamp_and_vgpu(strategy: str, label_set: str) -> None:
    snap = snapshot(machine="PowerEdge R650\n")
    got = labels(snap, strategy=strategy, label_set=label_set, timestamp=1724632719)
    assert got == {"gfd.timestamp": "1724632719", "vgpu.present": "false"}


def test_no_gpu_with_vgpu_present() -> None:
    snap = snapshot(vgpu=Vgpu(present=True, host_driver_version="550.54.16",
                              host_driver_branch="r550_40"))
    assert labels(snap) == {"vgpu.present": "true", "vgpu.host-driver-version": "550.54.16",
                            "vgpu.host-driver-branch": "r550_40"}


def test_no_gpu_and_no_timestamp_and_vgpu_scan_failed_gives_nothing() -> None:
    assert labels(Snapshot(vgpu=None)) == {}


@pytest.mark.parametrize("label_set", ["compat", "extended"])
def test_nvml_unavailable_gives_only_timestamp_and_vgpu(label_set: str) -> None:
    snap = Snapshot(nvml_available=False, nvml_error="libnvidia-ml.so.1 not found",
                    vgpu=Vgpu(present=False))
    got = labels(snap, label_set=label_set, timestamp=1724632719)
    assert got == {"gfd.timestamp": "1724632719", "vgpu.present": "false"}


# --- SPEC §2.1 #2: long product values are shortened, never dropped -----------------------------


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


# --- SPEC §2.2 extended labels -------------------------------------------------------------------

COMPUTE_MODES = [
    ("all-default", ["default", "default"], "default"),
    ("all-exclusive-process", ["exclusive-process"] * 2, "exclusive-process"),
    ("all-prohibited", ["prohibited"], "prohibited"),
    ("disagree", ["default", "prohibited"], None),
    ("unknown", [None, None], None),
]


@pytest.mark.parametrize(("modes", "value"), [(m, v) for _, m, v in COMPUTE_MODES],
                         ids=[i for i, _, _ in COMPUTE_MODES])
def test_compute_mode(modes: list[str | None], value: str | None) -> None:
    snap = snapshot(*(gpu(i, compute_mode=m) for i, m in enumerate(modes)))
    assert labels(snap, label_set="extended").get("gpu.compute-mode") == value


NVLINK = [
    ("one-active", [True, False], "true"),
    ("none-active", [False, False], "false"),
    ("unsupported", [None, None], "false"),
    ("active-and-unsupported", [None, True], "true"),
]


@pytest.mark.parametrize(("links", "value"), [(n, v) for _, n, v in NVLINK],
                         ids=[i for i, _, _ in NVLINK])
def test_nvlink(links: list[bool | None], value: str) -> None:
    snap = snapshot(*(gpu(i, nvlink_active=n) for i, n in enumerate(links)))
    assert labels(snap, label_set="extended")["gpu.nvlink"] == value


TIMESLICES = [
    ("all-default", ["default", "default"], "default"),
    ("all-long", ["long", "long"], "long"),
    ("all-short", ["short"], "short"),
    ("all-medium", ["medium"], "medium"),
    ("disagree", ["short", "long"], None),
    ("unsupported", [None], None),
    ("one-unsupported", ["default", None], None),
]


@pytest.mark.parametrize(("policies", "value"), [(p, v) for _, p, v in TIMESLICES],
                         ids=[i for i, _, _ in TIMESLICES])
def test_timeslice(policies: list[str | None], value: str | None) -> None:
    snap = snapshot(*(gpu(i, timeslice=t) for i, t in enumerate(policies)))
    assert labels(snap, label_set="extended").get("gpu.timeslice") == value


ACCELERATORS = [
    ("Tesla T4", "nvidia-tesla-t4"),
    ("Tesla P4", "nvidia-tesla-p4"),
    (H100, "nvidia-h100-80gb-hbm3"),
    (A100_40, "nvidia-a100-sxm4-40gb"),
]


@pytest.mark.parametrize(("model", "slug"), ACCELERATORS, ids=[m for m, _ in ACCELERATORS])
def test_accelerator_label(model: str, slug: str) -> None:
    snap = snapshot(gpu(0, model), gpu(1, model))
    assert labels(snap, label_set="extended", sharing=time_slicing(4))["gpu.accelerator"] == slug


def test_accelerator_label_mirrored_under_an_operator_key() -> None:
    result = labelling(snapshot(gpu(0, "Tesla T4")), label_set="extended",
                       accelerator_label="accelerator")
    assert result.labels["accelerator"] == "nvidia-tesla-t4"
    assert result.labels[P + "gpu.accelerator"] == "nvidia-tesla-t4"


# --- label sets -----------------------------------------------------------------------------------


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


def test_a_lost_gpu_does_not_turn_gpu_mode_unknown() -> None:
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
