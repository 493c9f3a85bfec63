"""Where a pod with given filters fits now (``gfd fleet --product ... --count N``): the nodes
a GPU pod can use now (not cordoned, Ready, no NoSchedule/NoExecute taint it does not
tolerate) where every unit of the requested resource meets the filters and at least
``count`` units are free; the pods that fit are ``sum(free // count)`` over those nodes.

The truth: the device plugin's units per node from ``placement.units`` (what each unit is),
read against the options alone (``satisfies``); the DRA driver's devices from
``gfd.devices.resource_slices`` read against the options (``meets``), free as the
allocator leaves them (not allocated, within the shared counters). The fleet avoids the
nodes where gfd's labels cannot tell (``gfd.selector.labels.MISSED``: a model filter on a
node of several models), so the truth and the answer must agree exactly."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from helpers import fleetobjects as fo
from helpers import placement
from helpers.placement import Unit

from gfd.devices import resource_slices
from gfd.facts.naming import sanitise
from gfd.fleet.count import count
from gfd.fleet.fits import Fits, fits
from gfd.fleet.model import Fleet, claim_of, node_of, pod_of, slice_of
from gfd.readers.simulate import simulate
from gfd.selector import Filters, Options, parse

GPU = "nvidia.com/gpu"
DRIVER = "gpu.nvidia.com"
Obj = dict[str, Any]
machines = cache(placement.machines)


@dataclass(frozen=True)
class PluginNode:
    name: str
    machine: str
    strategy: str = "none"
    sharing: str = "none"
    held: dict[str, int] = field(default_factory=dict)
    usable: bool = True
    node_spec: dict[str, Any] = field(default_factory=dict)

    @property
    def units(self) -> dict[str, list[Unit]]:
        return placement.units(machines()[self.machine], self.strategy,
                               placement.SHARING[self.sharing], "device-plugin")

    @property
    def labels(self) -> dict[str, str]:
        return placement.node_labels(machines()[self.machine], self.strategy,
                                     placement.SHARING[self.sharing], "extended",
                                     "device-plugin")


PLUGIN_NODES = (
    PluginNode("h100-a", "hgx-h100", held={GPU: 3}),
    PluginNode("h100-b", "hgx-h100", held={GPU: 7}),
    PluginNode("h100-cordoned", "hgx-h100", usable=False, node_spec={"unschedulable": True}),
    PluginNode("h100-tainted", "hgx-h100", usable=False, node_spec={"taints": [
        {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]}),
    PluginNode("h100-gpu-taint", "hgx-h100", node_spec={"taints": [
        {"key": GPU, "value": "present", "effect": "NoSchedule"}]}),
    PluginNode("t4-ts", "t4-time-sliced", sharing="ts4", held={GPU: 5}),
    PluginNode("t4-renamed", "t4-time-sliced", sharing="ts4-renamed"),
    PluginNode("t4-mps", "t4-time-sliced", sharing="mps4", held={GPU: 1}),
    PluginNode("a100-mixed", "dgx-a100-mig-mixed", strategy="mixed",
               held={"nvidia.com/mig-1g.5gb": 2, GPU: 1}),
    PluginNode("a100-single", "dgx-a100-mig-single", strategy="single", held={GPU: 10}),
    PluginNode("a100-a10", "mixed-a100-a10"),
    PluginNode("gb200", "gb200-nvl", held={GPU: 1}),
    PluginNode("laptop", "geforce-laptop"),
)


def _node_obj(name: str, labels: dict[str, str], allocatable: dict[str, str],
              spec: dict[str, Any]) -> Obj:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {**labels, "kubernetes.io/hostname": name}},
            "spec": spec,
            "status": {"capacity": allocatable, "allocatable": {"pods": "110", **allocatable},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def _pod_obj(name: str, node: str, limits: dict[str, int]) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"nodeName": node, "containers": [{"name": "main", "resources": {
                "limits": {k: str(v) for k, v in limits.items()}}}]},
            "status": {"phase": "Running"}}


@cache
def plugin_fleet() -> Fleet:
    f = Fleet(nodes={}, pods=[], slices=[], claims={}, incomplete=[])
    for n in PLUGIN_NODES:
        alloc = {r: str(len(u)) for r, u in n.units.items()}
        node = node_of(_node_obj(n.name, n.labels, alloc, n.node_spec))
        f.nodes[node.name] = node
        for resource, amount in n.held.items():
            pod = pod_of(_pod_obj(f"{n.name}-{resource}", n.name, {resource: amount}))
            assert pod is not None
            f.pods.append(pod)
    return f


def satisfies(unit: Unit, o: dict[str, Any], f: Filters) -> bool:
    """What the options ask of one unit, from the options (and the parsed sharing, which
    --count above 1 narrows to dedicated units)."""
    if o.get("product"):
        wanted = {w.lower() for w in sanitise(o["product"]).split("-") if w}
        have = {w.lower() for w in sanitise(unit.model).split("-") if w}
        if not wanted <= have:
            return False
    if "min_memory" in o and unit.memory_mib < o["min_memory"]:
        return False
    if o.get("family") and placement.family(unit.compute) != o["family"]:
        return False
    if o.get("min_compute"):
        major, minor = (int(x) for x in o["min_compute"].split("."))
        if unit.compute < (major, minor):
            return False
    if f.shared is True and unit.replicas == 1:
        return False
    if f.shared is False and unit.replicas > 1:
        return False
    return not (o.get("mig_profile") and unit.profile != o["mig_profile"])


def plugin_truth(o: dict[str, Any]) -> dict[str, tuple[int, int]]:
    f = parse(Options(**o))
    out = {}
    for n in PLUGIN_NODES:
        units = n.units.get(f.resource, [])
        if not n.usable or not units or not all(satisfies(u, o, f) for u in units):
            continue
        free = len(units) - n.held.get(f.resource, 0)
        if free >= f.count:
            out[n.name] = (free, free // f.count)
    return out


PLUGIN_FILTERS: list[dict[str, Any]] = [
    {"product": "H100"}, {"product": "H100", "count": 2}, {"product": "H100", "count": 3},
    {"product": "A100"}, {"product": "T4", "shared": True}, {"product": "GB200", "count": 2},
    {"min_memory": 20000}, {"min_memory": 40000}, {"min_memory": 4864}, {"min_memory": 3840},
    {"family": "hopper"}, {"family": "blackwell", "count": 3},
    {"family": "blackwell", "count": 4}, {"min_compute": "8.6"},
    {"shared": True}, {"renamed": True}, {"dedicated": True}, {"dedicated": True, "count": 4},
    {"mig_profile": "1g.5gb"}, {"mig_profile": "1g.5gb", "count": 3},
    {"mig_profile": "3g.20gb"}, {"mig_profile": "7g.40gb", "dedicated": True},
]


@pytest.mark.parametrize("o", PLUGIN_FILTERS, ids=str)
def test_a_pod_fits_where_every_unit_meets_the_filters_and_enough_are_free(
        o: dict[str, Any]) -> None:
    fl = plugin_fleet()
    answer = fits(fl, count(fl), parse(Options(**o)))
    truth = plugin_truth(o)
    assert {n.node: (n.free, n.pods) for n in answer.nodes} == truth
    assert answer.pods == sum(p for _, p in truth.values())
    assert answer.count == o.get("count", 1)
    assert answer.resource == parse(Options(**o)).resource


def test_the_fleet_has_answers_of_every_size() -> None:
    sizes = [sum(p for _, p in plugin_truth(o).values()) for o in PLUGIN_FILTERS]
    assert 0 in sizes and max(sizes) > 10 and len(set(sizes)) > 6


def test_the_answer_carries_the_selectors_stanza() -> None:
    fl = plugin_fleet()
    answer = fits(fl, count(fl), parse(Options(product="H100", count=2)))
    (stanza,) = answer.selector
    assert stanza["containers"][0]["resources"]["limits"] == {GPU: 2}


# ----------------------------------------------------------------------------------- DRA


@dataclass(frozen=True)
class DraNode:
    name: str
    machine: str
    gates: str = ""
    held: tuple[str, ...] = ()
    usable: bool = True


DRA_NODES = (
    DraNode("dra-h100", "hgx-h100", held=("gpu-0", "gpu-1")),
    DraNode("dra-h100-cordoned", "hgx-h100", usable=False),
    DraNode("dra-a100", "dgx-a100-mig-mixed", held=("gpu-4",)),
    DraNode("dra-t4", "t4-time-sliced"),
    DraNode("dra-gb", "gb200-nvl", gates="dynamic"),
    DraNode("dra-h100-mig", "h100-mig", gates="dynamic"),
)


@cache
def dra_slices(machine: str, node: str, gates: str) -> tuple[Obj, ...]:
    g = {"DynamicMIG": True} if gates else None
    return tuple(resource_slices(simulate(machine).snapshot, node=node, gates=g))


def _first_partition(node: DraNode, size: str) -> str:
    devices = [d for s in dra_slices(node.machine, node.name, node.gates)
               for d in s["spec"].get("devices", [])]
    return str(next(d["name"] for d in devices if d["name"].startswith(f"gpu-0-mig-{size}")))


def dra_held(node: DraNode) -> tuple[str, ...]:
    """What claims hold there: the listed devices, and under DynamicMIG the first 3g
    partition of GPU 0 (so the counters matter)."""
    return node.held + ((_first_partition(node, "3g"),) if node.gates else ())


@cache
def dra_fleet() -> Fleet:
    f = Fleet(nodes={}, pods=[], slices=[], claims={}, incomplete=[])
    for n in DRA_NODES:
        labels = placement.node_labels(machines()[n.machine], "none", None, "extended", "dra")
        node = node_of(_node_obj(n.name, labels, {}, {} if n.usable else {
            "unschedulable": True}))
        f.nodes[node.name] = node
        f.slices += [slice_of(s) for s in dra_slices(n.machine, n.name, n.gates)]
        held = dra_held(n)
        if held:
            claim = claim_of({"metadata": {"name": f"{n.name}-claim", "namespace": "ml"},
                              "status": {"allocation": {"devices": {"results": [
                                  {"request": "gpu", "driver": DRIVER, "pool": n.name,
                                   "device": d} for d in held]}}}})
            f.claims[(claim.namespace, claim.name)] = claim
    return f


def _attr(raw: Obj, name: str) -> Any:
    value = raw["attributes"].get(name)
    return None if value is None else next(iter(value.values()))


def _bytes(text: str) -> int:
    for suffix, factor in (("Gi", 2**30), ("Mi", 2**20)):
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) * factor
    return int(text)


def meets(o: dict[str, Any], raw: Obj) -> bool:
    """What the options ask of one device, from its attributes (dra.md §3)."""
    if _attr(raw, "type") != ("mig" if o.get("mig_profile") else "gpu"):
        return False
    if o.get("product"):
        wanted = {w.lower() for w in sanitise(o["product"]).split("-") if w}
        have = {w.lower() for w in sanitise(_attr(raw, "productName")).split("-") if w}
        if not wanted <= have:
            return False
    memory = raw["capacity"].get("memory")
    if "min_memory" in o and (memory is None or _bytes(memory["value"]) < o["min_memory"]
                              * 2**20):
        return False
    cc = tuple(int(x) for x in _attr(raw, "cudaComputeCapability").split(".")[:2])
    if o.get("family") and placement.family((cc[0], cc[1])) != o["family"]:
        return False
    return not (o.get("mig_profile")
                and _attr(raw, "profile") != o["mig_profile"].replace(".me", "+me"))


def allocatable_now(raw_slices: tuple[Obj, ...], held: tuple[str, ...], o: dict[str, Any]
                    ) -> int:
    """One-device claims one after the other, in slice order: a device not held, meeting
    the filters, whose consumption keeps every counter of its pool at or above zero."""
    left: dict[str, dict[str, int]] = {}
    devices = []
    for s in raw_slices:
        for c in s["spec"].get("sharedCounters", []):
            left[c["name"]] = {k: _bytes(v["value"]) for k, v in c["counters"].items()}
        devices += s["spec"].get("devices", [])

    def take(d: Obj, sign: int) -> None:
        for use in d.get("consumesCounters", []):
            for k, v in use["counters"].items():
                left[use["counterSet"]][k] -= sign * _bytes(v["value"])

    for d in devices:
        if d["name"] in held:
            take(d, 1)
    got = 0
    for d in devices:
        if d["name"] in held or not meets(o, d):
            continue
        take(d, 1)
        if all(v >= 0 for counters in left.values() for v in counters.values()):
            got += 1
        else:
            take(d, -1)
    return got


def dra_truth(o: dict[str, Any]) -> dict[str, tuple[int, int]]:
    out = {}
    for n in DRA_NODES:
        if not n.usable:
            continue
        free = allocatable_now(dra_slices(n.machine, n.name, n.gates), dra_held(n), o)
        if free >= o.get("count", 1):
            out[n.name] = (free, free // o.get("count", 1))
    return out


DRA_FILTERS: list[dict[str, Any]] = [
    {"product": "H100"}, {"product": "H100", "count": 2}, {"product": "A100", "count": 3},
    {"min_memory": 80000}, {"min_memory": 15000, "count": 4}, {"family": "hopper"},
    {"family": "turing", "count": 2}, {"mig_profile": "1g.5gb"},
    {"mig_profile": "1g.5gb", "count": 4}, {"mig_profile": "1g.23gb"},
    {"mig_profile": "3g.40gb"}, {"mig_profile": "1g.10gb.me"},
    {"mig_profile": "3g.20gb", "product": "A100"},
]


@pytest.mark.parametrize("o", DRA_FILTERS, ids=str)
def test_a_claim_fits_where_enough_devices_meet_its_cel_and_are_free(o: dict[str, Any]) -> None:
    fl = dra_fleet()
    answer = fits(fl, count(fl), parse(Options(dra=True, **o)), gates={"DynamicMIG": True})
    truth = dra_truth(o)
    assert {n.node: (n.free, n.pods) for n in answer.nodes} == truth
    assert answer.pods == sum(p for _, p in truth.values())


def test_the_dra_fleet_has_answers_of_every_size() -> None:
    sizes = [sum(p for _, p in dra_truth(o).values()) for o in DRA_FILTERS]
    assert max(sizes) > 10 and len(set(sizes)) > 5


def test_a_node_selection_that_leaves_no_node_fits_no_pod() -> None:
    fl = copy.copy(plugin_fleet())
    fl.nodes = {k: v for k, v in fl.nodes.items() if k == "h100-cordoned"}
    answer: Fits = fits(fl, count(fl), parse(Options(product="H100")))
    assert answer.nodes == () and answer.pods == 0


# ------------------------------------------------- a DeviceClass serving an extended resource


def _sample_fleet(tmp_path: Path) -> Fleet:
    """The shipped sample as ``--from`` reads it (its DeviceClasses are the chart's)."""
    from helpers import fleetsample

    from gfd.fleet.source import from_dump

    (tmp_path / "dump.json").write_text(fleetsample.text())
    return from_dump(str(tmp_path / "dump.json"))


def test_a_dra_node_serves_a_plain_gpu_request_through_its_classes_extended_resource(
        tmp_path: Path) -> None:
    """DRAExtendedResource (beta, on in 1.36): a pod asking for nvidia.com/gpu on a node
    without it allocatable gets a device of the DeviceClass whose extendedResourceName is
    nvidia.com/gpu (the driver's chart sets it on gpu.nvidia.com). The sample's DRA H100 node
    publishes 8 whole GPUs, one held by a claim: 7 such pods fit there, beside the device
    plugin node's 4 free GPUs; without that class, only the 4."""
    fleet = _sample_fleet(tmp_path)
    f = parse(Options(product="H100"))
    slices = resource_slices(simulate("hgx-h100").snapshot, node="h100-dra-1")
    whole = sum(1 for s in slices for d in s["spec"]["devices"])
    with_class = fits(fleet, count(fleet), f)
    assert {n.node: n.free for n in with_class.nodes} == {"h100-dra-1": whole - 1,
                                                          "hgx-h100-2": 4}
    fleet.classes = {}
    without = fits(fleet, count(fleet), f)
    assert {n.node: n.free for n in without.nodes} == {"hgx-h100-2": 4}


# ----------------------------------------------------------------- the rules, one at a time
# Hand-built fleets (helpers.fleetobjects, read as `gfd fleet` reads them) of H100 nodes
# labelled as gfd labels them (the filters below are --product H100 and its --dra form).

H100_LABELS = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": "8",
               "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
               "nvidia.com/gpu.product.NVIDIA-H100-80GB-HBM3": "8",
               "nvidia.com/gpu.heterogeneous": "false"}
H100 = parse(Options(product="H100"))
H100_DRA = parse(Options(product="H100", dra=True))
GPU_TOLERATION = {"key": GPU, "operator": "Exists"}


def h100_node(name: str, **more: Any) -> Obj:
    return fo.node(name, labels=H100_LABELS, **more)


def placed(fleet: Fleet, f: Filters, **counting: Any) -> dict[str, tuple[int, int]]:
    answer = fits(fleet, count(fleet, **counting), f, gates=None)
    return {n.node: (n.free, n.pods) for n in answer.nodes}


def pods_on(fleet: Fleet, f: Filters) -> dict[str, int]:
    return {n.node: n.pods for n in fits(fleet, count(fleet), f).nodes if n.pods}


# NodeResourcesFit (noderesources/fit.go): one pod asking `count` units takes one pod slot;
# "Too many pods" once len(nodeInfo.Pods)+1 > AllowedPodNumber. So a node with `free` units and
# `slots` free slots takes min(free // count, slots) such pods.


def _slot_cases() -> list[Any]:
    out = []
    for manager in ("device-plugin", "dra-extended", "dra-claim"):
        for n, expected in ((1, 3), (2, 3), (3, 2), (4, 2), (9, 0)):
            out.append(pytest.param(manager, n, expected, id=f"{manager}, --count {n}"))
    return out


@pytest.mark.parametrize("manager, n, expected", _slot_cases())
def test_a_node_takes_no_more_pods_than_it_has_pod_slots(manager: str, n: int,
                                                         expected: int) -> None:
    """Eight free H100s and three free pod slots (pods=4, one pod bound); labelled
    gpu.replicas=1, as --count above 1 asks for dedicated GPUs."""
    labels = {**H100_LABELS, "nvidia.com/gpu.replicas": "1"}
    if manager == "device-plugin":
        objects = [fo.node("n", allocatable={GPU: "8"}, pods="4", labels=labels)]
    else:
        objects = [fo.node("n", pods="4", labels=labels), fo.gpu_slice("n", fo.h100s("n"))]
    fl = fo.fleet(*objects, fo.pod("web", "n"))
    f = parse(Options(product="H100", count=n, dra=manager == "dra-claim"))
    assert sum(pods_on(fl, f).values()) == expected


# extendeddynamicresources.go filterExtendedResources: "isBackedByDRA && allocatable == 0":
# the node provides nvidia.com/gpu through the class serving it; noderesources/fit.go
# shouldDelegateResourceToDRA: allocatable > 0 -> the device plugin's units only.


@pytest.mark.parametrize("allocatable", [{}, {GPU: "0"}], ids=["none allocatable",
                                                               "0 allocatable"])
def test_a_plain_gpu_pod_fits_on_the_dra_devices_of_a_node_without_the_resource(
        allocatable: dict[str, str]) -> None:
    fl = fo.fleet(h100_node("d", allocatable=allocatable, capacity={}),
                  fo.gpu_slice("d", fo.h100s("d")), fo.claim("held", node_name="d",
                                                             devices=("gpu-0",)))
    assert placed(fl, H100) == {"d": (7, 7)}


def test_a_node_with_the_resource_allocatable_is_served_by_the_device_plugin_only() -> None:
    """Two device-plugin units and eight DRA devices: the pod gets device-plugin units."""
    fl = fo.fleet(h100_node("d", allocatable={GPU: "2"}), fo.gpu_slice("d", fo.h100s("d")))
    assert placed(fl, H100) == {"d": (2, 2)}


# extended/ DeviceClassMapping, extendedresourcecache.go betterDeviceClass: of the classes
# naming nvidia.com/gpu, the newest serves it (the lower name on a tie); its selectors, as the
# API server holds them, decide which devices a pod gets (allocator selectorsMatch).

A100_ONLY = f"device.attributes['{DRIVER}'].productName == '{fo.A100}'"


TWO_MODELS = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": "4",
              "nvidia.com/gpu.heterogeneous": "true", "nvidia.com/gpu.memory": "81559",
              "nvidia.com/gpu.memory.min": "81559",
              "nvidia.com/gpu.product.NVIDIA-H100-80GB-HBM3": "3",
              "nvidia.com/gpu.product.NVIDIA-A100-SXM4-80GB": "1"}
"""gfd's labels of a node with three H100s and an A100 (80 GB each)."""
BIG = parse(Options(min_memory=40000))
"""A filter both models meet, so any device of the serving class is the pod's."""


def _dra_node_of_two_models() -> list[Obj]:
    return [fo.node("d", labels=TWO_MODELS), fo.gpu_slice("d", [*fo.h100s("d", 3), fo.device(
        "gpu-a", product=fo.A100)])]


def test_the_class_serving_the_resource_is_the_newest_naming_it_with_its_selectors() -> None:
    """The newest class admits A100s only: of the node's four devices one is the pod's."""
    fl = fo.fleet(*_dra_node_of_two_models(),
                  fo.device_class("gpu.nvidia.com", fo.GPU_SELECTOR, extended=GPU,
                                  created="2026-01-01T00:00:00Z"),
                  fo.device_class("a100.example.com", fo.GPU_SELECTOR, A100_ONLY, extended=GPU,
                                  created="2026-02-01T00:00:00Z"))
    assert placed(fl, BIG) == {"d": (1, 1)}


def test_of_two_classes_created_together_the_lower_name_serves_the_resource() -> None:
    at = "2026-01-01T00:00:00Z"
    fl = fo.fleet(*_dra_node_of_two_models(),
                  fo.device_class("b-all", fo.GPU_SELECTOR, extended=GPU, created=at),
                  fo.device_class("a-a100", fo.GPU_SELECTOR, A100_ONLY, extended=GPU,
                                  created=at))
    assert placed(fl, BIG) == {"d": (1, 1)}


def test_classes_read_and_none_naming_the_resource_serve_no_plain_gpu_pod() -> None:
    """The cluster's gpu.nvidia.com has no extendedResourceName: the chart's copy, which has
    one, does not stand in."""
    fl = fo.fleet(*_dra_node_of_two_models(), fo.device_class("gpu.nvidia.com",
                                                              fo.GPU_SELECTOR))
    assert placed(fl, BIG) == {}


def test_without_classes_read_the_charts_class_serves_the_resource() -> None:
    assert placed(fo.fleet(*_dra_node_of_two_models()), BIG) == {"d": (4, 4)}


def test_a_dra_claim_uses_the_cluster_class_of_its_name_with_its_selectors() -> None:
    """--dra claims gpu.nvidia.com; the cluster's class of that name admits A100s only and
    the claim's CEL asks for an H100: no device is both."""
    fl = fo.fleet(*_dra_node_of_two_models(),
                  fo.device_class("gpu.nvidia.com", fo.GPU_SELECTOR, A100_ONLY))
    assert placed(fl, H100_DRA) == {}
    assert placed(fo.fleet(*_dra_node_of_two_models()), H100_DRA) == {"d": (3, 3)}


# GatherPools collects every pool for the node and the allocator searches them all.


@pytest.mark.parametrize("f", [H100, H100_DRA], ids=["extended resource", "--dra"])
def test_a_node_of_two_pools_is_listed_once_with_the_devices_of_both(f: Filters) -> None:
    fl = fo.fleet(h100_node("d"), fo.gpu_slice("d", fo.h100s("d", 3), pool="d-a"),
                  fo.gpu_slice("d", fo.h100s("d", 2), pool="d-b"))
    answer = fits(fl, count(fl), f)
    assert [(n.node, n.free, n.pods) for n in answer.nodes] == [("d", 5, 5)]


# NodeUnschedulable and TaintToleration filter a node out for the pods as printed.


@pytest.mark.parametrize("f", [H100, H100_DRA], ids=["extended resource", "--dra"])
@pytest.mark.parametrize("state", [{"cordoned": True}, {"ready": False, "taints": [
    {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]}, {"taints": [
        {"key": "dedicated", "effect": "NoSchedule"}]}],
    ids=["cordoned", "not Ready and tainted so", "tainted"])
def test_no_pod_fits_on_a_node_no_gpu_pod_can_use(f: Filters, state: dict[str, Any]) -> None:
    fl = fo.fleet(h100_node("d", **state), fo.gpu_slice("d", fo.h100s("d")),
                  h100_node("p", allocatable={GPU: "8"}, **state))
    assert placed(fl, f) == {}


# The stanza as printed must bind where the answer says it fits: TaintToleration refuses a
# node with a NoSchedule/NoExecute taint the pod does not tolerate, and nothing adds the
# toleration for it (ExtendedResourceToleration is off by default and never applies to a
# claim). So the stanza carries the toleration of every assumed-tolerated key the counted
# nodes carry (nvidia.com/gpu, --tolerate), and only those.

GPU_TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}
DEDICATED = {"key": "dedicated", "value": "ml", "effect": "NoExecute"}


def _tolerations(answer: Fits) -> list[Any]:
    docs = answer.selector
    pod_spec = docs[0] if len(docs) == 1 else docs[-1]["spec"]
    return list(pod_spec.get("tolerations", []))


TOLERATIONS: list[tuple[str, list[list[Obj]], tuple[str, ...], list[Obj]]] = [
    ("no counted node is tainted: no toleration", [[], []], (), []),
    ("a counted node tainted nvidia.com/gpu", [[GPU_TAINT], []], (), [GPU_TOLERATION]),
    ("a taint key the user tolerates, and nvidia.com/gpu", [[GPU_TAINT], [DEDICATED]],
     ("dedicated",), [GPU_TOLERATION, {"key": "dedicated", "operator": "Exists"}]),
    ("a tolerated key no counted node carries", [[], []], ("dedicated",), []),
    ("a PreferNoSchedule taint needs no toleration",
     [[{**GPU_TAINT, "effect": "PreferNoSchedule"}], []], (), []),
]


@pytest.mark.parametrize("f", [H100, H100_DRA], ids=["label form", "--dra Pod"])
@pytest.mark.parametrize("taints, tolerate, expected", [(t, k, e) for _, t, k, e in TOLERATIONS],
                         ids=[n for n, *_ in TOLERATIONS])
def test_the_stanza_tolerates_the_assumed_tolerated_taints_of_the_nodes_it_counts(
        f: Filters, taints: list[list[Obj]], tolerate: tuple[str, ...],
        expected: list[Obj]) -> None:
    objects: list[Obj] = []
    for i, node_taints in enumerate(taints):
        name = f"n{i}"
        objects += [h100_node(name, taints=node_taints), fo.gpu_slice(name, fo.h100s(name, 2))]
    fl = fo.fleet(*objects)
    answer = fits(fl, count(fl, tolerated=(GPU, *tolerate)), f)
    assert answer.pods == 4
    assert _tolerations(answer) == expected


def test_a_taint_only_on_a_node_where_nothing_fits_needs_no_toleration() -> None:
    fl = fo.fleet(h100_node("full", allocatable={GPU: "8"}, taints=[GPU_TAINT]),
                  fo.pod("train", "full", {GPU: 8}), h100_node("free", allocatable={GPU: "8"}))
    answer = fits(fl, count(fl), H100)
    assert pods_on(fl, H100) == {"free": 8}
    assert _tolerations(answer) == []
