"""The DRA driver's vocabulary: its value forms (Masterminds/semver coercion, binary
quantities), device names and the family -> architecture table, checked against the
driver's and go-nvlib's rules (dra.md section 3), and spelled in no other module."""

from __future__ import annotations

from pathlib import Path

import pytest

from gfd import dra
from gfd.dra import quantity, semver
from gfd.facts.family import FAMILIES


@pytest.mark.parametrize("text, want", [
    ("550.54.15", "550.54.15"), ("535.183.01", "535.183.1"), ("8.0", "8.0.0"),
    ("12.4", "12.4.0"), ("13", "13.0.0"), ("580.159.04", "580.159.4"),
    ("1.2.3-rc.1+build.5", "1.2.3-rc.1+build.5"), ("550.54.15.01", None), ("", None),
    ("driver", None)])
def test_versions_are_coerced_as_masterminds_semver_prints_them(text: str,
                                                                 want: str | None) -> None:
    assert semver(text) == want


@pytest.mark.parametrize("value, want", [
    (0, "0"), (14, "14"), (1023, "1023"), (1024, "1Ki"), (42949672960, "40Gi"),
    (85520809984, "81559Mi"), (4864 * 2**20, "4864Mi"), (1025, "1025")])
def test_capacities_print_as_binary_quantities(value: int, want: str) -> None:
    assert quantity(value) == want


@pytest.mark.parametrize("profile, want", [
    ("1g.5gb", "1g5gb"), ("1g.10gb+me", "1g10gb-me"), ("7g.80gb", "7g80gb"),
    ("1g.24gb+gfx", "1g24gb-gfx")])
def test_mig_device_names_carry_the_profile_without_dots_in_rfc1123_form(profile: str,
                                                                          want: str) -> None:
    assert dra.mig_name(3, profile, 19, 6) == f"gpu-3-mig-{want}-19-6"
    assert dra.gpu_name(3) == "gpu-3"


@pytest.mark.parametrize("nvml, want", [
    ("00000000:07:00.0", "0000:07:00.0"), ("0000:C1:00.0", "0000:c1:00.0"),
    ("07:00.0", None), ("", None)])
def test_bus_ids_are_cut_to_a_four_digit_domain_as_go_nvlib_does(nvml: str,
                                                                  want: str | None) -> None:
    assert dra.bus_id(nvml) == want


def test_every_family_the_driver_names_maps_to_its_architecture() -> None:
    assert dra.FAMILY_ARCHITECTURES["ada-lovelace"] == "Ada Lovelace"
    assert dra.FAMILY_ARCHITECTURES["hopper"] == "Hopper"
    assert set(dra.FAMILY_ARCHITECTURES) <= set(FAMILIES)
    assert set(dra.FAMILY_ARCHITECTURES.values()) == set(dra.ARCHITECTURE_NAMES)
    assert "ada" not in dra.FAMILY_ARCHITECTURES and "tesla" not in dra.FAMILY_ARCHITECTURES


def test_each_device_class_selects_its_type() -> None:
    assert dra.device_class("gpu") == "gpu.nvidia.com"
    assert dra.device_class("mig") == "mig.nvidia.com"
    assert dra.device_class("vfio") == "vfio.gpu.nvidia.com"
    assert dra.DEVICE_CLASSES["mig.nvidia.com"].endswith(".type == 'mig'")


def test_the_drivers_name_is_spelled_in_this_module_only() -> None:
    package = Path(dra.__file__).parent
    spelled = sorted(str(p.relative_to(package)) for p in package.rglob("*.py")
                     if dra.DRIVER in p.read_text())
    assert spelled == ["dra.py"]


@pytest.mark.parametrize("index, mib, total, want", [
    (0, 4864, 42949672960, "1g.5gb"), (7, 4864, 42949672960, "1g.5gb+me"),
    (9, 9856, 42949672960, "1g.10gb"), (4, 40192, 42949672960, "7g.40gb"),
    (7, 9856, 85520809984, "1g.10gb+me"), (2, 40448, 85520809984, "3g.40gb"),
    (13, 9856, 85520809984, "1g.10gb-me"), (15, 9856, 85520809984, "1g.10gb+me.all"),
    (17, 9856, 85520809984, None), (0, 9856, 0, None)])
def test_mig_profiles_are_named_as_go_nvlib_names_them(index: int, mib: int, total: int,
                                                       want: str | None) -> None:
    assert dra.mig_profile(index, mib, total) == want


def test_counters_are_the_capacities_in_dns_form_and_one_per_memory_slice() -> None:
    assert [dra.counter_name(c) for c in dra.MIG_CAPACITIES] == [
        "multiprocessors", "copy-engines", "decoders", "encoders", "jpeg-engines",
        "ofa-engines", "memory"]
    assert dra.memory_slice_counter(7) == "memory-slice-7"
    assert dra.counter_set_name(3) == "gpu-3-counter-set"
    assert dra.vfio_name(2) == "gpu-vfio-2"


def test_the_gates_default_as_the_driver_sets_them_and_conflict_as_it_checks() -> None:
    assert dra.parse_gates("") == dra.GATES
    assert dra.GATES[dra.DYNAMIC_MIG] is False and dra.GATES[dra.PASSTHROUGH_SUPPORT] is False
    assert dra.gate_conflict(dra.GATES) == ""
    assert dra.gate_conflict(dra.parse_gates("DeviceMetadata=true")) == (
        "feature gate DeviceMetadata requires PassthroughSupport to also be enabled")
    assert dra.gate_conflict(dra.parse_gates("DynamicMIG=true,MPSSupport=true")) == (
        "feature gate DynamicMIG is currently mutually exclusive with MPSSupport")


def test_which_names_exist_on_which_device_type_under_the_gates() -> None:
    gpu_attrs, gpu_caps = dra.published_names("gpu")
    assert dra.UUID in gpu_attrs and gpu_caps == {dra.MEMORY}
    assert "numaNode" not in " ".join(gpu_attrs)
    mig_attrs, mig_caps = dra.published_names("mig", {dra.DYNAMIC_MIG: True})
    assert dra.UUID not in mig_attrs and "memorySlice<N>" not in mig_caps
    assert "memorySlice<N>" in dra.published_names("mig")[1]
    assert dra.published_names("gpu", {dra.DYNAMIC_MIG: True})[1] == set(dra.MIG_CAPACITIES)
    assert dra.published_names("vfio") == (frozenset(), frozenset())
    assert dra.NUMA in dra.published_names("vfio", {dra.PASSTHROUGH_SUPPORT: True})[0]
