"""What a unit is. The device plugin's resources, named from the labels gfd publishes
(``placement.node_labels``) for every simulated machine x MIG strategy x sharing config,
against what the device plugin hands out there (``placement.units``: the truth): the model
(``gpu.product`` without ``-SHARED`` / ``-MIG-``; every model on a node of several), the
memory of one unit (a MIG device's; an MPS replica's share; the smallest on a mixed node),
the MIG profile, the sharing and its replicas, the resource. The DRA driver's devices
(``gfd.devices.resource_slices``), named from their attributes: the sanitised productName,
the memory capacity, the profile, and the DeviceClass whose selector selects the device
(the driver's chart: ``device.driver == 'gpu.nvidia.com' && ...type == '<type>'``)."""

from __future__ import annotations

import itertools
from functools import cache
from typing import Any

import pytest
from helpers import placement
from helpers.placement import Unit

from gfd import dra
from gfd.devices import resource_slices
from gfd.facts.naming import sanitise
from gfd.fleet.kinds import DEVICE_PLUGIN, DRA, device_kind, plugin_kind
from gfd.fleet.model import Device, Node, slice_of

STRATEGIES = ("none", "single", "mixed")
machines = cache(placement.machines)


def _sharing(config: dict[str, Any] | None, resource: str) -> tuple[str, int]:
    """The sharing the device plugin's config applies to ``resource`` and its replicas."""
    base = resource.removesuffix(".shared")
    for section, name in (("mps", "mps"), ("timeSlicing", "time-slicing")):
        for entry in (config or {}).get(section, {}).get("resources", []):
            if entry["name"] == base:
                return name, entry["replicas"]
    return "none", 1


def _labels_cannot_tell(snap: Any, strategy: str, config: dict[str, Any] | None) -> bool:
    """MIG-enabled GPUs under --mig-strategy none, shared: the device plugin replicates them,
    but gfd (like GFD) labels them gpu.replicas=0 (docs/labels.md, ``<R>.replicas``), so no
    label says how they are shared (selector's ``labels.MISSED``, the third kind)."""
    return strategy == "none" and bool(config) and all(
        g.mig_enabled for g in snap.gpus if g.name == snap.gpus[0].name)


@cache
def deployed(machine: str, strategy: str, sharing: str
             ) -> tuple[dict[str, str], dict[str, list[Unit]]]:
    """The labels gfd publishes and the units the device plugin hands out there."""
    snap, config = machines()[machine], placement.SHARING[sharing]
    return (placement.node_labels(snap, strategy, config, "extended", "device-plugin"),
            placement.units(snap, strategy, config, "device-plugin"))


@cache
def plugin_cases() -> list[tuple[str, str, str, str]]:
    out = []
    for (machine, snap), strategy, sharing in itertools.product(
            machines().items(), STRATEGIES, placement.SHARING):
        config = placement.SHARING[sharing]
        labels, units = deployed(machine, strategy, sharing)
        if not labels or _labels_cannot_tell(snap, strategy, config):
            continue
        out += [(machine, strategy, sharing, resource) for resource in sorted(units)]
    return out


def _truth(units: list[Unit], config: dict[str, Any] | None, resource: str) -> dict[str, Any]:
    sharing, replicas = _sharing(config, resource)
    (profile,) = {u.profile for u in units}
    return {"model": "+".join(sorted({sanitise(u.model) for u in units})),
            "memory": min(u.memory_mib for u in units), "mig_profile": profile,
            "sharing": sharing, "replicas": replicas, "resource": resource,
            "manager": DEVICE_PLUGIN}


def _plugin_params() -> list[Any]:
    return [pytest.param(*case, id="/".join(case)) for case in plugin_cases()]


@pytest.mark.parametrize("machine, strategy, sharing, resource", _plugin_params())
def test_a_device_plugin_resource_is_the_kind_of_unit_the_plugin_hands_out(
        machine: str, strategy: str, sharing: str, resource: str) -> None:
    labels, all_units = deployed(machine, strategy, sharing)
    units = all_units[resource]
    node = Node(name="n", labels=labels, allocatable={resource: len(units)}, capacity={})
    kind = plugin_kind(node, resource)
    got = {"model": kind.model, "memory": kind.memory, "mig_profile": kind.mig_profile,
           "sharing": kind.sharing, "replicas": kind.replicas, "resource": kind.resource,
           "manager": kind.manager}
    assert got == _truth(units, placement.SHARING[sharing], resource)


def test_the_matrix_covers_every_kind_of_unit() -> None:
    cases = plugin_cases()
    resources = {r for _, _, _, r in cases}
    assert {"nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.5gb",
            "nvidia.com/mig-3g.20gb"} <= resources
    assert {s for _, _, s, _ in cases} == set(placement.SHARING)
    assert {st for _, st, _, _ in cases} == set(STRATEGIES)
    assert len(cases) > 100


@pytest.mark.parametrize("labels, resource, expected", [
    ({"nvidia.com/gpu.product": "Tesla-T4-SHARED", "nvidia.com/gpu.sharing-strategy":
      "time-slicing", "nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.memory": "15360"},
     "nvidia.com/gpu", ("Tesla-T4", 15360, "", "time-slicing", 4)),
    ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
      "nvidia.com/gpu.memory": "4864", "nvidia.com/gpu.replicas": "1",
      "nvidia.com/gpu.sharing-strategy": "none"},
     "nvidia.com/gpu", ("NVIDIA-A100-SXM4-40GB", 4864, "1g.5gb", "none", 1)),
    ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED",
      "nvidia.com/gpu.memory": "4864", "nvidia.com/gpu.replicas": "2",
      "nvidia.com/gpu.sharing-strategy": "time-slicing"},
     "nvidia.com/gpu", ("NVIDIA-A100-SXM4-40GB", 4864, "1g.5gb", "time-slicing", 2)),
    ({"nvidia.com/mig-1g.10gb.me.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me",
      "nvidia.com/mig-1g.10gb.me.memory": "9856"},
     "nvidia.com/mig-1g.10gb.me", ("NVIDIA-H100-80GB-HBM3", 9856, "1g.10gb.me", "none", 1)),
    ({"nvidia.com/gpu.product": "Tesla-T4-SHARED", "nvidia.com/gpu.sharing-strategy": "mps",
      "nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.memory": "15360"},
     "nvidia.com/gpu", ("Tesla-T4", 3840, "", "mps", 4)),
], ids=["time-sliced", "single's MIG device", "single's MIG device time-sliced",
        "mixed's MIG resource", "MPS without a per-replica label: memory / replicas"])
def test_a_product_value_is_read_without_its_suffixes(
        labels: dict[str, str], resource: str, expected: tuple[Any, ...]) -> None:
    k = plugin_kind(Node(name="n", labels=labels, allocatable={resource: 1}, capacity={}),
                    resource)
    assert (k.model, k.memory, k.mig_profile, k.sharing, k.replicas) == expected


def test_a_resource_on_a_node_without_labels_is_of_unknown_model_and_sharing() -> None:
    k = plugin_kind(Node(name="n", labels={}, allocatable={"nvidia.com/gpu": 4}, capacity={}),
                    "nvidia.com/gpu")
    assert (k.model, k.memory, k.mig_profile, k.sharing, k.replicas) == ("", None, "",
                                                                         "unknown", 1)


# ----------------------------------------------------------------------------------- DRA

GATES: tuple[dict[str, bool] | None, ...] = (
    None, {"DynamicMIG": True}, {"PassthroughSupport": True})


def _class_of(raw: dict[str, Any], driver: str) -> str | None:
    """The chart's DeviceClass whose selector selects the device (dra.md §3 table)."""
    kind = raw["attributes"].get("type", {}).get("string")
    for name, device_type in (("gpu.nvidia.com", "gpu"), ("mig.nvidia.com", "mig"),
                              ("vfio.gpu.nvidia.com", "vfio")):
        if driver == "gpu.nvidia.com" and kind == device_type:
            return name
    return None


def _mib(text: str) -> int:
    for suffix, factor in (("Ti", 2**20), ("Gi", 2**10), ("Mi", 1)):
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) * factor
    return int(text) // 2**20


@cache
def dra_cases() -> list[tuple[str, str, dict[str, Any], Device]]:
    out = []
    for (machine, snap), gates in itertools.product(machines().items(), GATES):
        for obj in resource_slices(snap, node="n", gates=gates):
            raws = obj["spec"].get("devices", [])
            for raw, device in zip(raws, slice_of(obj).devices, strict=True):
                out.append((machine, str(gates), raw, device))
    return out


@pytest.mark.parametrize("machine, gates", sorted({(m, g) for m, g, _, _ in dra_cases()}))
def test_a_dra_device_is_the_kind_its_attributes_say(machine: str, gates: str) -> None:
    for _, _, raw, device in (c for c in dra_cases() if c[:2] == (machine, gates)):
        attrs, capacity = raw["attributes"], raw["capacity"]
        kind = device_kind(device)
        memory = capacity.get("memory") or capacity.get("addressableMemory")
        assert kind.manager == DRA
        assert kind.model == sanitise(attrs["productName"]["string"]), raw["name"]
        assert kind.memory == (_mib(memory["value"]) if memory else None), raw["name"]
        assert kind.mig_profile == attrs.get("profile", {}).get("string", "").replace(
            "+", "."), raw["name"]
        assert (kind.sharing, kind.replicas) == ("none", 1)
        assert kind.resource == _class_of(raw, dra.DRIVER), raw["name"]


def test_the_dra_cases_cover_every_device_type() -> None:
    types = {raw["attributes"]["type"]["string"] for _, _, raw, _ in dra_cases()}
    assert types == {"gpu", "mig", "vfio"}


def test_another_drivers_device_is_not_of_an_nvidia_device_class() -> None:
    device = Device(driver="gpu.example.com", pool="n", name="gpu-0", node="n",
                    attributes={"model": "LATEST-GPU-MODEL", "driverVersion": "1.0.0"},
                    capacity={"memory": 80 * 2**30})
    assert device_kind(device).resource not in dra.DEVICE_TYPES


def test_a_device_without_memory_capacity_has_unknown_memory() -> None:
    device = Device(driver=dra.DRIVER, pool="n", name="gpu-0", node="n",
                    attributes={"type": "gpu", "productName": "NVIDIA A100-SXM4-40GB"},
                    capacity={})
    assert device_kind(device).memory is None
