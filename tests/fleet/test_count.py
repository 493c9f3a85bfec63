"""The fleet counted as the scheduler counts it, on hand-built fleets (API objects through
the model's reductions, as ``gfd fleet`` reads them):

- TOTAL is a node's ``status.allocatable`` (device plugin), or the devices of the newest
  generation of each pool (DRA);
- ALLOCATED is what the pods bound to the node that have not ended request (PodRequests;
  terminating pods included: the scheduler's cache keeps them until they are deleted), or the
  devices claims' allocations name (not ``adminAccess`` results);
- FREE is what one-unit pods (one-device claims) can still get: TOTAL less ALLOCATED; under
  DRA neither allocated nor tainted, within the shared counters, from a complete pool;
- PENDING is what unscheduled pods ask of a node whose labels their nodeSelector and required
  node affinity admit;
- cordoned, not-Ready and tainted nodes are counted apart (UNSCHEDULABLE).

The truth is worked out by hand from the objects written here; the device plugin's units come
from ``placement.units`` and the DRA driver's devices from ``gfd.devices.resource_slices``."""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import pytest
from helpers import fleetobjects as fo
from helpers import placement

from gfd.devices import resource_slices
from gfd.fleet.count import Counted, KindRow, NodeRow, count
from gfd.fleet.model import Fleet, claim_of, node_of, pod_of, slice_of
from gfd.readers.simulate import simulate

GPU = "nvidia.com/gpu"
DRIVER = "gpu.nvidia.com"
Obj = dict[str, Any]


@cache
def labels_of(machine: str, strategy: str = "none", sharing: str = "none",
              manager: str = "device-plugin") -> dict[str, str]:
    snap = placement.machines()[machine]
    return placement.node_labels(snap, strategy, placement.SHARING[sharing], "extended",
                                 manager)


@cache
def allocatable_of(machine: str, strategy: str = "none", sharing: str = "none") -> dict[str, str]:
    snap = placement.machines()[machine]
    units = placement.units(snap, strategy, placement.SHARING[sharing], "device-plugin")
    return {r: str(len(u)) for r, u in units.items()}


def api_node(name: str, machine: str = "", *, strategy: str = "none", sharing: str = "none",
             manager: str = "device-plugin", cordoned: bool = False, ready: bool = True,
             taints: list[Obj] | None = None, extra_labels: dict[str, str] | None = None,
             allocatable: dict[str, str] | None = None) -> Obj:
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
              **(labels_of(machine, strategy, sharing, manager) if machine else {}),
              **(extra_labels or {})}
    alloc = allocatable if allocatable is not None else (
        allocatable_of(machine, strategy, sharing) if machine and manager == "device-plugin"
        else {})
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels},
            "spec": {"unschedulable": cordoned, "taints": taints or []},
            "status": {"capacity": {"cpu": "64", **alloc},
                       "allocatable": {"cpu": "63", "pods": "110", **alloc},
                       "conditions": [{"type": "Ready", "status": str(ready)}]}}


def api_pod(name: str, node: str = "", limits: dict[str, int] | None = None, *,
            phase: str = "", init: dict[str, int] | None = None, terminating: bool = False,
            node_selector: dict[str, str] | None = None, claims: tuple[str, ...] = (),
            status: Obj | None = None) -> Obj:
    def container(cname: str, amounts: dict[str, int]) -> Obj:
        return {"name": cname, "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                "resources": {"limits": {k: str(v) for k, v in amounts.items()}}}
    spec: Obj = {"containers": [container("main", limits or {})],
                 "tolerations": [{"key": GPU, "operator": "Exists"}]}
    if init:
        spec["initContainers"] = [container("warm", init)]
    if node:
        spec["nodeName"] = node
    if node_selector:
        spec["nodeSelector"] = node_selector
    if claims:
        spec["resourceClaims"] = [{"name": c, "resourceClaimName": c} for c in claims]
    meta: Obj = {"name": name, "namespace": "ml"}
    if terminating:
        meta["deletionTimestamp"] = "2025-11-28T10:00:00Z"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
            "status": {"phase": phase or ("Running" if node else "Pending"), **(status or {})}}


def api_claim(name: str, node: str = "", devices: tuple[str, ...] = (), *,
              admin: tuple[str, ...] = (), device_class: str = DRIVER, count_: int = 1,
              selectors: tuple[str, ...] = ()) -> Obj:
    obj: Obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": "ml"},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                    "deviceClassName": device_class, "allocationMode": "ExactCount",
                    "count": count_,
                    "selectors": [{"cel": {"expression": e}} for e in selectors]}}]}},
                "status": {}}
    if devices or admin:
        obj["status"]["allocation"] = {
            "devices": {"results": [
                {"request": "gpu", "driver": DRIVER, "pool": node, "device": d}
                for d in devices] + [
                {"request": "gpu", "driver": DRIVER, "pool": node, "device": d,
                 "adminAccess": True} for d in admin]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}
    return obj


def fleet(*objects: Obj) -> Fleet:
    """The objects reduced as ``gfd fleet`` reduces them (ended pods hold nothing)."""
    f = Fleet(nodes={}, pods=[], slices=[], claims={}, incomplete=[])
    for obj in objects:
        kind = obj["kind"]
        if kind == "Node":
            n = node_of(obj)
            f.nodes[n.name] = n
        elif kind == "Pod":
            p = pod_of(obj)
            if p is not None:
                f.pods.append(p)
        elif kind == "ResourceSlice":
            f.slices.append(slice_of(obj))
        else:
            c = claim_of(obj)
            f.claims[(c.namespace, c.name)] = c
    return f


def row(counted: Counted, node: str, resource: str, profile: str = "") -> NodeRow:
    (found,) = [r for r in counted.rows if r.node == node and r.kind.resource == resource
                and r.kind.mig_profile == profile]
    return found


def kind_row(counted: Counted, resource: str, model: str, profile: str = "") -> KindRow:
    (found,) = [k for k in counted.kinds if k.kind.resource == resource
                and k.kind.model == model and k.kind.mig_profile == profile]
    return found


def numbers(r: NodeRow | KindRow) -> tuple[int, int, int, int]:
    return (r.total, r.allocated, r.free, r.pending)


H100 = "NVIDIA-H100-80GB-HBM3"


# -------------------------------------------------------------------------- device plugin


def test_allocated_is_what_bound_pods_that_have_not_ended_request() -> None:
    c = count(fleet(
        api_node("h100-a", "hgx-h100"),
        api_pod("running", "h100-a", {GPU: 2}),
        api_pod("bound-not-started", "h100-a", {GPU: 1}, phase="Pending"),
        api_pod("terminating", "h100-a", {GPU: 1}, terminating=True),
        api_pod("init-larger", "h100-a", {GPU: 1}, init={GPU: 3}),
        api_pod("succeeded", "h100-a", {GPU: 4}, phase="Succeeded"),
        api_pod("failed", "h100-a", {GPU: 4}, phase="Failed"),
        api_pod("cpu-only", "h100-a", {"cpu": 4}),
    ))
    # 8 allocatable; 2 + 1 + 1 + max(3, 1) held; the ended pods hold nothing
    assert numbers(row(c, "h100-a", GPU)) == (8, 7, 1, 0)


def test_units_of_each_resource_are_counted_apart() -> None:
    c = count(fleet(
        api_node("a100-mixed", "dgx-a100-mig-mixed", strategy="mixed"),
        api_pod("infer-0", "a100-mixed", {"nvidia.com/mig-1g.5gb": 2}),
        api_pod("infer-1", "a100-mixed", {"nvidia.com/mig-3g.20gb": 1, GPU: 1}),
    ))
    units = placement.units(placement.machines()["dgx-a100-mig-mixed"], "mixed", None,
                            "device-plugin")
    expected = {r: len(u) for r, u in units.items()}
    held = {"nvidia.com/mig-1g.5gb": 2, "nvidia.com/mig-3g.20gb": 1, GPU: 1}
    for resource, total in expected.items():
        profile = resource.removeprefix("nvidia.com/mig-") if "mig-" in resource else ""
        r = row(c, "a100-mixed", resource, profile)
        assert numbers(r) == (total, held.get(resource, 0), total - held.get(resource, 0), 0)


def test_a_node_whose_pods_hold_more_than_it_can_give_has_nothing_free() -> None:
    """The device plugin marked GPUs unhealthy after the pods were bound."""
    c = count(fleet(api_node("h100-a", "hgx-h100", allocatable={GPU: "6"}),
                    api_pod("train", "h100-a", {GPU: 8})))
    assert numbers(row(c, "h100-a", GPU)) == (6, 8, 0, 0)


def test_time_sliced_units_are_the_replicas_the_api_server_counts() -> None:
    c = count(fleet(api_node("t4", "t4-time-sliced", sharing="ts4"),
                    api_pod("nb-0", "t4", {GPU: 1}), api_pod("nb-1", "t4", {GPU: 1})))
    assert numbers(row(c, "t4", GPU)) == (16, 2, 14, 0)


def test_pending_is_what_unscheduled_pods_ask_of_nodes_they_admit() -> None:
    c = count(fleet(
        api_node("h100-a", "hgx-h100"), api_node("t4", "t4-time-sliced"),
        api_pod("wants-h100", limits={GPU: 2}, node_selector={"nvidia.com/gpu.product": H100}),
        api_pod("wants-any", limits={GPU: 1}),
        api_pod("wants-a-mig", limits={"nvidia.com/mig-1g.5gb": 1}),
        api_pod("wants-nothing-here", limits={GPU: 4},
                node_selector={"nvidia.com/gpu.product": "NVIDIA-B200"}),
        api_pod("ended-before-scheduling", limits={GPU: 8}, phase="Failed"),
    ))
    assert row(c, "h100-a", GPU).pending == 3
    assert row(c, "t4", GPU).pending == 1
    assert kind_row(c, GPU, H100).pending == 3
    assert kind_row(c, GPU, "Tesla-T4").pending == 1


def test_unschedulable_nodes_are_counted_apart() -> None:
    c = count(fleet(
        api_node("h100-a", "hgx-h100"),
        api_node("h100-cordoned", "hgx-h100", cordoned=True),
        api_node("h100-down", "hgx-h100", ready=False),
        api_node("h100-tainted", "hgx-h100",
                 taints=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]),
        api_node("h100-gpu-tainted", "hgx-h100",
                 taints=[{"key": GPU, "value": "present", "effect": "NoSchedule"}]),
        api_pod("a", "h100-a", {GPU: 2}), api_pod("b", "h100-cordoned", {GPU: 3}),
        api_pod("c", "h100-gpu-tainted", {GPU: 1}),
    ))
    states = {r.node: r.state for r in c.rows}
    # a NotReady node the node lifecycle controller has not tainted yet still takes pods
    # (TaintToleration reads taints, not the Ready condition)
    assert states == {"h100-a": "ready", "h100-cordoned": "cordoned", "h100-down": "ready",
                      "h100-tainted": "tainted", "h100-gpu-tainted": "ready"}
    k = kind_row(c, GPU, H100)
    assert (k.nodes, k.total, k.allocated, k.free) == (3, 24, 3, 21)
    assert (k.unschedulable_nodes, k.unschedulable_total, k.unschedulable_allocated) == (
        2, 16, 3)


def test_a_taint_the_user_says_gpu_pods_tolerate_leaves_the_node_usable() -> None:
    f = fleet(api_node("h100-tainted", "hgx-h100",
                       taints=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]))
    assert row(count(f), "h100-tainted", GPU).state == "tainted"
    tolerant = count(f, tolerated=(GPU, "dedicated"))
    assert row(tolerant, "h100-tainted", GPU).state == "ready"
    assert kind_row(tolerant, GPU, H100).nodes == 1


def test_every_node_and_kind_is_one_row() -> None:
    c = count(fleet(api_node("b", "hgx-h100"), api_node("a", "t4-time-sliced", sharing="ts4"),
                    api_node("cpu-only")))
    assert [(r.node, r.kind.resource) for r in c.rows] == [("a", GPU), ("b", GPU)]


def test_pending_counts_a_pod_selecting_any_node_label() -> None:
    c = count(fleet(api_node("h100-a", "hgx-h100"),
                    api_pod("wants-linux", limits={GPU: 2},
                            node_selector={"kubernetes.io/os": "linux"})))
    assert row(c, "h100-a", GPU).pending == 2


# ----------------------------------------------------------------------------------- DRA


@cache
def _slices(machine: str, node: str, gates: str = "") -> tuple[Obj, ...]:
    g = {"DynamicMIG": True} if gates == "dynamic" else None
    return tuple(resource_slices(simulate(machine).snapshot, node=node, gates=g))


def slices(machine: str, node: str, gates: str = "") -> list[Obj]:
    return copy.deepcopy(list(_slices(machine, node, gates)))


def dra_node(name: str, machine: str) -> Obj:
    return api_node(name, machine, manager="dra")


def test_dra_devices_are_counted_by_their_claims_allocations() -> None:
    raw = slices("hgx-h100", "dra-1")
    raw[0]["spec"]["devices"][7]["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "79",
                                               "effect": "NoSchedule"}]
    c = count(fleet(dra_node("dra-1", "hgx-h100"), *raw,
                    api_claim("train-gpu", "dra-1", ("gpu-0", "gpu-3")),
                    api_claim("monitor", "dra-1", admin=("gpu-1",)),
                    api_pod("train", "dra-1", claims=("train-gpu",))))
    # 8 devices; gpu-0 and gpu-3 allocated; gpu-1 only admin access; gpu-7 tainted
    assert numbers(row(c, "dra-1", "gpu.nvidia.com")) == (8, 2, 5, 0)


def test_a_claim_an_extended_resource_request_became_is_counted_once() -> None:
    """DRAExtendedResource: the pod asks nvidia.com/gpu, the scheduler allocates a claim for
    it and records the mapping in status.extendedResourceClaimStatus."""
    status = {"extendedResourceClaimStatus": {
        "resourceClaimName": "job-extended-resources-x1",
        "requestMappings": [{"containerName": "main", "resourceName": GPU,
                             "requestName": "container-0-request-0"}]}}
    c = count(fleet(dra_node("dra-1", "hgx-h100"), *slices("hgx-h100", "dra-1"),
                    api_node("h100-a", "hgx-h100"),
                    api_claim("job-extended-resources-x1", "dra-1", ("gpu-2",)),
                    api_pod("job", "dra-1", {GPU: 1}, status=status)))
    assert row(c, "dra-1", "gpu.nvidia.com").allocated == 1
    assert sum(r.allocated for r in c.rows if r.kind.resource == GPU) == 0


def test_only_the_newest_generation_of_a_pool_is_counted() -> None:
    old = slices("hgx-h100", "dra-1")
    new = copy.deepcopy(old)
    new[0]["spec"]["pool"]["generation"] = 2
    new[0]["spec"]["devices"] = new[0]["spec"]["devices"][:6]  # two GPUs lost
    c = count(fleet(dra_node("dra-1", "hgx-h100"), *old, *new))
    assert numbers(row(c, "dra-1", "gpu.nvidia.com")) == (6, 0, 6, 0)


def test_pending_dra_devices_are_what_unallocated_claims_of_pending_pods_ask() -> None:
    hopper = "device.attributes['gpu.nvidia.com'].architecture == 'Hopper'"
    ampere = "device.attributes['gpu.nvidia.com'].architecture == 'Ampere'"
    c = count(fleet(dra_node("dra-1", "hgx-h100"), *slices("hgx-h100", "dra-1"),
                    api_claim("wait-two", count_=2, selectors=(hopper,)),
                    api_claim("wait-ampere", count_=1, selectors=(ampere,)),
                    api_claim("wait-mig", count_=1, device_class="mig.nvidia.com"),
                    api_pod("p2", claims=("wait-two",)), api_pod("pa", claims=("wait-ampere",)),
                    api_pod("pm", claims=("wait-mig",))))
    assert row(c, "dra-1", "gpu.nvidia.com").pending == 2
    assert kind_row(c, "gpu.nvidia.com", H100).pending == 2


def test_under_dynamic_mig_a_whole_gpu_and_its_partitions_are_alternatives() -> None:
    """gb200-nvl under DynamicMIG: a claim holds one 1g partition of GPU 0; the whole GPU 0 is
    no longer free, nor a 7g partition of it; the other three GPUs are."""
    raw = slices("gb200-nvl", "gb-1", "dynamic")
    devices = [d for s in raw for d in s["spec"].get("devices", [])]
    small = next(d["name"] for d in devices if d["name"].startswith("gpu-0-mig-1g")
                 and "+" not in d["attributes"]["profile"]["string"])
    c = count(fleet(dra_node("gb-1", "gb200-nvl"), *raw, api_claim("p", "gb-1", (small,))))
    whole = row(c, "gb-1", "gpu.nvidia.com")
    assert numbers(whole) == (4, 0, 3, 0)
    largest = [r for r in c.rows if r.kind.mig_profile.startswith("7g")]
    assert [(r.total, r.allocated, r.free) for r in largest] == [(4, 0, 3)]


def test_a_pool_for_a_node_with_no_node_object_is_unschedulable() -> None:
    c = count(fleet(*slices("hgx-h100", "gone")))
    r = row(c, "gone", "gpu.nvidia.com")
    assert r.state == "not-ready" and r.total == 8
    assert kind_row(c, "gpu.nvidia.com", H100).unschedulable_total == 8


def test_an_incomplete_pool_has_nothing_free() -> None:
    raw = slices("hgx-h100", "dra-1")
    raw[0]["spec"]["pool"]["resourceSliceCount"] = 2  # the second slice has not arrived
    c = count(fleet(dra_node("dra-1", "hgx-h100"), *raw))
    assert row(c, "dra-1", "gpu.nvidia.com").free == 0


def test_an_invalid_pool_has_nothing_free() -> None:
    first = slices("hgx-h100", "dra-1")
    second = copy.deepcopy(first)
    for s in first + second:
        s["spec"]["pool"]["resourceSliceCount"] = 2
    second[0]["metadata"]["name"] = "dra-1-gpu.nvidia.com-again"
    c = count(fleet(dra_node("dra-1", "hgx-h100"), *first, *second))
    assert row(c, "dra-1", "gpu.nvidia.com").free == 0


# ------------------------------------------------------------------------------ pod slots
# NodeResourcesFit (kube-scheduler pkg/scheduler/framework/plugins/noderesources/fit.go,
# fitsRequest): "Too many pods" when len(nodeInfo.Pods)+1 > AllowedPodNumber, where the
# node's pods are every pod the scheduler's cache holds on it (pkg/scheduler/scheduler.go,
# newPodInformer: status.phase!=Succeeded,status.phase!=Failed), GPU or not, and
# AllowedPodNumber is allocatable `pods` (0 when the node has none). So the one-unit pods a
# node can still take are min(units left, pods allocatable - pods there).

P = "nvidia.com/"


def one_row(counted: Counted, node: str, manager: str = "device-plugin") -> NodeRow:
    (found,) = [r for r in counted.rows if r.node == node and r.kind.manager == manager]
    return found


def test_free_is_never_more_than_the_nodes_free_pod_slots() -> None:
    """fit.go: pods=5 with three CPU pods and one GPU pod bound leaves one slot, although
    seven GPUs are left: one more pod binds there."""
    c = count(fo.fleet(
        fo.node("n", allocatable={GPU: "8"}, pods="5"),
        fo.pod("web-0", "n", {"cpu": "1"}), fo.pod("web-1", "n"), fo.pod("web-2", "n"),
        fo.pod("train", "n", {GPU: 1})))
    r = one_row(c, "n")
    assert (r.total, r.allocated, r.free, r.free_slots) == (8, 1, 1, 1)


def test_pods_that_ended_take_no_pod_slot() -> None:
    """scheduler.go newPodInformer: Succeeded and Failed pods are not in the scheduler's
    cache, so they fill no slot; a terminating one (still Running) does."""
    terminating = fo.pod("stopping", "n")
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    c = count(fo.fleet(
        fo.node("n", allocatable={GPU: "8"}, pods="4"),
        fo.pod("done", "n", phase="Succeeded"), fo.pod("crashed", "n", phase="Failed"),
        fo.pod("gpu-done", "n", {GPU: 2}, phase="Succeeded"), terminating))
    assert (one_row(c, "n").free, one_row(c, "n").free_slots) == (3, 3)


def test_a_node_without_pods_allocatable_takes_no_pod() -> None:
    """fit.go: AllowedPodNumber is 0 without allocatable `pods`: 0+1 > 0, Too many pods."""
    c = count(fo.fleet(fo.node("n", allocatable={GPU: "8"}, pods=None),
                       fo.node("d", pods=None), fo.gpu_slice("d", fo.h100s("d"))))
    assert (one_row(c, "n").total, one_row(c, "n").free, one_row(c, "n").free_slots) == (8, 0, 0)
    assert (one_row(c, "d", "dra").total, one_row(c, "d", "dra").free) == (8, 0)


def test_the_pod_slots_of_a_node_are_the_same_for_each_of_its_kinds() -> None:
    """fit.go counts the node's pods, whatever they ask: every kind of a node (here two MIG
    profiles and the whole GPUs) sees the same free slots, and none counts more than them."""
    alloc = {GPU: "2", f"{P}mig-1g.10gb": "7", f"{P}mig-3g.40gb": "2"}
    c = count(fo.fleet(fo.node("n", allocatable=alloc, pods="4"),
                       fo.pod("a", "n", {f"{P}mig-1g.10gb": 1}), fo.pod("b", "n")))
    rows = {r.kind.resource: (r.free, r.free_slots) for r in c.rows}
    assert rows == {GPU: (2, 2), f"{P}mig-1g.10gb": (2, 2), f"{P}mig-3g.40gb": (2, 2)}


def test_dra_rows_are_bounded_by_the_pod_slots_too() -> None:
    """A claim's pod needs a slot like any other (fit.go runs before the DRA filter's
    allocation): eight free devices, two slots left."""
    c = count(fo.fleet(fo.node("d", pods="3"), fo.gpu_slice("d", fo.h100s("d")),
                       fo.pod("x", "d")))
    r = one_row(c, "d", "dra")
    assert (r.total, r.allocated, r.free, r.free_slots) == (8, 0, 2, 2)


# ---------------------------------------------------------------------------- nominated pods
# kube-scheduler pkg/scheduler/framework/runtime/framework.go, addGENominatedPods: before the
# filters run, every pod nominated to the node (status.nominatedNodeName) whose priority is
# >= the pod's own (corev1.PodPriority: spec.priority, 0 when unset) is added to the node:
# its requests and its pod slot. The pod FREE counts for has priority 0.


@pytest.mark.parametrize("priority, held", [(None, True), (0, True), (1000, True), (-1, False)],
                         ids=["no priority (0)", "priority 0", "priority 1000",
                              "priority -1"])
def test_a_pod_nominated_to_a_node_holds_its_request_and_a_slot_unless_its_priority_is_lower(
        priority: int | None, held: bool) -> None:
    c = count(fo.fleet(fo.node("n", allocatable={GPU: "8"}, pods="10"),
                       fo.pod("preemptor", limits={GPU: 3}, nominated="n", priority=priority)))
    r = one_row(c, "n")
    if held:
        assert (r.nominated, r.free, r.free_slots) == (3, 5, 9)
    else:
        assert (r.nominated, r.free, r.free_slots) == (0, 8, 10)
    assert r.pending == 3  # unscheduled either way: still demand


def test_a_nominated_pod_that_asks_no_gpu_still_takes_a_slot() -> None:
    """addGENominatedPods adds the pod itself (nodeInfo.AddPodInfo): one more pod there."""
    c = count(fo.fleet(fo.node("n", allocatable={GPU: "8"}, pods="2"), fo.pod("web", "n"),
                       fo.pod("preemptor", limits={"cpu": "2"}, nominated="n")))
    assert (one_row(c, "n").free, one_row(c, "n").free_slots) == (0, 0)


def test_a_nominated_pod_holds_only_on_the_node_it_is_nominated_to() -> None:
    c = count(fo.fleet(fo.node("a", allocatable={GPU: "8"}), fo.node("b", allocatable={GPU: "8"}),
                       fo.pod("preemptor", limits={GPU: 8}, nominated="a")))
    assert (one_row(c, "a").free, one_row(c, "b").free) == (0, 8)
    assert kind_row(c, GPU, "").nominated == 8


# ------------------------------------------------------------------------- DRA migration
# dynamicresources/extendeddynamicresources.go, filterExtendedResources: "isBackedByDRA &&
# allocatable == 0" -> the node provides the resource through DRA; noderesources/fit.go
# shouldDelegateResourceToDRA: allocatable > 0 -> the device plugin's. The kubelet keeps a
# removed device plugin's resource at 0 (pkg/kubelet/nodestatus/setters.go).


def test_a_node_whose_gpu_allocatable_is_0_has_no_device_plugin_row() -> None:
    c = count(fo.fleet(fo.node("d", allocatable={GPU: "0"}, capacity={GPU: "0"}),
                       fo.gpu_slice("d", fo.h100s("d"))))
    assert [(r.kind.manager, r.kind.resource, r.total) for r in c.rows] == [
        ("dra", DRIVER, 8)]


@pytest.mark.parametrize("allocatable", [{}, {GPU: "0"}], ids=["none", "0"])
def test_a_pending_gpu_pod_is_demand_on_the_dra_kind_where_the_node_has_none_allocatable(
        allocatable: dict[str, str]) -> None:
    """The class serving nvidia.com/gpu (the chart's gpu.nvidia.com) gets the pod's devices
    where the node has none or 0 of it allocatable."""
    c = count(fo.fleet(fo.node("d", allocatable=allocatable), fo.gpu_slice("d", fo.h100s("d")),
                       fo.pod("wants-two", limits={GPU: 2})))
    assert one_row(c, "d", "dra").pending == 2
    assert kind_row(c, DRIVER, H100).pending == 2


def test_a_pending_gpu_pod_is_no_demand_on_dra_where_the_device_plugin_serves_it() -> None:
    """allocatable > 0: NodeResourcesFit checks the device plugin's units, no claim is made."""
    c = count(fo.fleet(fo.node("d", allocatable={GPU: "4"}), fo.gpu_slice("d", fo.h100s("d")),
                       fo.pod("wants-two", limits={GPU: 2})))
    assert (one_row(c, "d").pending, one_row(c, "d", "dra").pending) == (2, 0)


# -------------------------------------------------------------------------- DeviceClasses
# The allocator selects a class's devices by the class the API server holds
# (allocator_incubating.go isSelectable -> selectorsMatch on class.Spec.Selectors); a request
# naming a class that does not exist cannot be allocated (validateDeviceRequest: "could not
# retrieve device class").

A100_ONLY = f"device.attributes['{DRIVER}'].productName == '{fo.A100}'"


def test_dra_kinds_follow_the_classes_as_read_not_the_charts() -> None:
    """The cluster's gpu.nvidia.com class admits A100s only: the node's H100s belong to no
    class, so no claim can get one (FREE 0), while its A100s are that class's."""
    c = count(fo.fleet(fo.node("d"), fo.device_class(DRIVER, fo.GPU_SELECTOR, A100_ONLY),
                       fo.gpu_slice("d", [*fo.h100s("d", 2),
                                          fo.device("gpu-a", product=fo.A100)])))
    got = sorted((r.kind.resource, r.kind.model, r.total, r.free) for r in c.rows)
    assert got == [("", "NVIDIA-H100-80GB-HBM3", 2, 0), (DRIVER, "NVIDIA-A100-SXM4-80GB", 1, 1)]


def test_without_any_class_read_the_charts_classes_stand_in() -> None:
    c = count(fo.fleet(fo.node("d"), fo.gpu_slice("d", fo.h100s("d", 2))))
    assert [(r.kind.resource, r.free) for r in c.rows] == [(DRIVER, 2)]


def test_classes_read_that_select_nothing_leave_nothing_free() -> None:
    """DeviceClasses were read and none is gpu.nvidia.com: no claim of that class can be
    allocated, the chart's copy does not stand in."""
    c = count(fo.fleet(fo.node("d"), fo.device_class("other.example.com",
                                                      "device.driver == 'other.example.com'"),
                       fo.gpu_slice("d", fo.h100s("d", 2))))
    assert [(r.kind.resource, r.total, r.free) for r in c.rows] == [("", 2, 0)]


# -------------------------------------------------------------------------- invalid pools
# pools_incubating.go buildPool: validateDeviceNames, getAndValidateCounterSets,
# validateDeviceCounterConsumption -> IsInvalid; allocator_incubating.go allocateOne: "if
# pool.IsIncomplete || pool.IsInvalid { continue }": none of the pool's devices is allocated.


def _invalid(reason: str) -> list[Obj]:
    """The slices of a pool invalid for ``reason``; beside the culprit, a whole GPU that
    consumes no counter (it would be free in a valid pool)."""
    counters = {"gpu-0-counter-set": {"memory": "80Gi"}}
    whole = fo.device("gpu-9")
    if reason == "duplicate device name":
        return [fo.gpu_slice("d", [*fo.h100s("d", 2), whole], count=2, name="a"),
                fo.gpu_slice("d", [fo.device("gpu-0", kind="mig")], count=2, name="b")]
    consumes = {"counter set published twice": ("gpu-0-counter-set", {"memory": "10Gi"}),
                "counter set no slice publishes": ("gpu-1-counter-set", {"memory": "10Gi"}),
                "counter its set lacks": ("gpu-0-counter-set", {"memory": "10Gi",
                                                                "multiprocessors": "14"})}
    sets = [fo.counter_slice("d", counters, count=3, name="c1")]
    if reason == "counter set published twice":
        sets.append(fo.counter_slice("d", counters, count=3, name="c2"))
    else:
        sets.append(fo.gpu_slice("d", [], count=3, name="empty"))
    return [*sets, fo.gpu_slice("d", [fo.device("mig-0", kind="mig", consumes=[
        consumes[reason]]), whole], count=3)]


INVALID = ["duplicate device name", "counter set published twice",
           "counter set no slice publishes", "counter its set lacks"]


@pytest.mark.parametrize("reason", INVALID)
def test_every_device_of_an_invalid_pool_has_nothing_free(reason: str) -> None:
    c = count(fo.fleet(fo.node("d"), *_invalid(reason)))
    assert {r.kind.resource: r.free for r in c.rows} == {DRIVER: 0, "mig.nvidia.com": 0}
    assert sum(r.total for r in c.rows) >= 2


# ------------------------------------------------------------------------ PENDING per claim
# A claim is allocated once however many pods share it (status.reservedFor); firstAvailable:
# the first subrequest that can be satisfied is allocated (allocator_incubating.go
# allocateOne, "If allocation with a subrequest succeeds, return without attempting the
# remaining subrequests"); allocationMode All: every device of the node's pools the request
# selects (validateDeviceRequest, requestData.allDevices), allocated ones included.

def test_a_claim_two_pending_pods_share_is_demand_once() -> None:
    c = count(fo.fleet(fo.node("d"), fo.gpu_slice("d", fo.h100s("d")),
                       fo.claim("shared", requests=[{"name": "gpu", "exactly":
                                                     fo.exactly(count=2)}]),
                       fo.pod("worker-0", claims=("shared",)),
                       fo.pod("worker-1", claims=("shared",),
                              node_selector={"kubernetes.io/hostname": "d"})))
    assert one_row(c, "d", "dra").pending == 2
    assert kind_row(c, DRIVER, H100).pending == 2


def test_first_available_is_demand_for_the_first_alternative_the_kind_can_serve() -> None:
    """[an A100 (none here), three H100s of gpu.nvidia.com]: on an H100 node the second."""
    request = {"name": "gpu", "firstAvailable": [
        {"name": "a100", **fo.exactly(count=1, selectors=(A100_ONLY,))},
        {"name": "h100", **fo.exactly(count=3)}]}
    c = count(fo.fleet(fo.node("d"), fo.gpu_slice("d", fo.h100s("d")),
                       fo.claim("either", requests=[request]), fo.pod("p", claims=("either",))))
    assert one_row(c, "d", "dra").pending == 3


def test_all_devices_is_demand_for_every_matching_device_of_the_node() -> None:
    """Allocated devices included: All needs every one (allocateDevice with must=true)."""
    c = count(fo.fleet(fo.node("d"), fo.gpu_slice("d", fo.h100s("d")),
                       fo.claim("held", node_name="d", devices=("gpu-0", "gpu-1")),
                       fo.claim("everything", requests=[{"name": "gpu", "exactly":
                                                         fo.exactly(mode="All")}]),
                       fo.pod("p", claims=("everything",))))
    assert one_row(c, "d", "dra").pending == 8


# ---------------------------------------------------------------------------- unusable nodes
# NodeUnschedulable (spec.unschedulable) and TaintToleration (NoSchedule/NoExecute taints
# the pod does not tolerate) filter the node out for every pod; a NotReady node is tainted
# node.kubernetes.io/not-ready:NoSchedule by the node lifecycle controller, which keeps pods
# off it (the scheduler never reads the Ready condition itself).
NOT_READY_TAINT = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}


@pytest.mark.parametrize("manager", ["device-plugin", "dra"])
@pytest.mark.parametrize("state", [{"cordoned": True}, {"ready": False, "taints": [
    NOT_READY_TAINT]}, {"taints": [
    {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]}, {"taints": [
        {"key": "maintenance", "effect": "NoExecute"}]}],
    ids=["cordoned", "not Ready and tainted so", "NoSchedule taint", "NoExecute taint"])
def test_a_node_no_gpu_pod_can_use_has_nothing_free(manager: str, state: dict[str, Any]) -> None:
    objects: list[Obj] = [fo.node("n", allocatable={GPU: "8"} if manager != "dra" else {},
                                  **state)]
    if manager == "dra":
        objects.append(fo.gpu_slice("n", fo.h100s("n")))
    r = one_row(count(fo.fleet(*objects)), "n", manager)
    assert (r.usable, r.total, r.free) == (False, 8, 0)


@pytest.mark.parametrize("manager", ["device-plugin", "dra"])
def test_a_not_ready_node_not_yet_tainted_still_has_its_free_units(manager: str) -> None:
    """TaintToleration: no taint, no filter; the Ready condition is read by no filter."""
    objects: list[Obj] = [fo.node("n", allocatable={GPU: "8"} if manager != "dra" else {},
                                  ready=False)]
    if manager == "dra":
        objects.append(fo.gpu_slice("n", fo.h100s("n")))
    r = one_row(count(fo.fleet(*objects)), "n", manager)
    assert (r.usable, r.total, r.free) == (True, 8, 8)
    assert r.reasons == ["not Ready, and not yet tainted: the scheduler still places pods here"]


def test_a_prefer_no_schedule_taint_leaves_the_node_usable() -> None:
    """TaintToleration filters on NoSchedule and NoExecute only."""
    r = one_row(count(fo.fleet(fo.node("n", allocatable={GPU: "8"}, taints=[
        {"key": "dedicated", "effect": "PreferNoSchedule"}]))), "n")
    assert (r.usable, r.free) == (True, 8)


# ------------------------------------------------------------------------ two pools, one node


def test_two_pools_on_one_node_are_both_counted() -> None:
    """GatherPools collects every pool whose slices are for the node; the allocator searches
    them all (allocateOne, for poolIndex ...)."""
    c = count(fo.fleet(fo.node("d"), fo.gpu_slice("d", fo.h100s("d", 4), pool="d-a"),
                       fo.gpu_slice("d", fo.h100s("d", 4), pool="d-b"),
                       fo.claim("one", node_name="d", pool="d-b", devices=("gpu-2",))))
    r = one_row(c, "d", "dra")
    assert (r.total, r.allocated, r.free) == (8, 1, 7)


def test_a_nominated_pods_claim_holds_no_device_but_the_pod_takes_a_slot() -> None:
    """DynamicResources has no PreFilterExtensions (dynamicresources.go: it returns nil), so
    addGENominatedPods adds nothing to the allocator's state; NodeResourcesFit still counts
    the pod."""
    c = count(fo.fleet(fo.node("d", pods="4"), fo.gpu_slice("d", fo.h100s("d")),
                       fo.claim("wants-all", requests=[{"name": "gpu", "exactly":
                                                        fo.exactly(mode="All")}]),
                       fo.pod("preemptor", claims=("wants-all",), nominated="d")))
    r = one_row(c, "d", "dra")
    assert (r.allocated, r.nominated, r.free, r.free_slots) == (0, 0, 3, 3)


def test_one_share_claims_of_a_shared_device_without_capacity_are_bounded_by_pod_slots() -> None:
    """consumable_capacity.go CmpRequestOverCapacity: a device without capacity has nothing to
    run out of, and a device that allows multiple allocations is never in use
    (allocateDevice): only the pod slots bound the claims' pods."""
    c = count(fo.fleet(fo.node("d", pods="6"), fo.gpu_slice("d", [
        fo.device("gpu-0", multiple=True, capacity={})])))
    assert one_row(c, "d", "dra").free == 6


def test_a_shared_devices_row_counts_its_one_share_claims() -> None:
    """80Gi of memory, 10Gi a share by default, 30Gi held by a share: five more."""
    c = count(fo.fleet(fo.node("d"), fo.gpu_slice("d", [fo.device(
        "gpu-0", multiple=True, capacity={"memory": {"value": "80Gi",
                                                     "requestPolicy": {"default": "10Gi"}}})]),
        fo.claim("tenant", node_name="d", shares=(("gpu-0", {"memory": "30Gi"}),))))
    r = one_row(c, "d", "dra")
    assert (r.kind.sharing, r.total, r.allocated, r.free) == ("shared", 1, 1, 5)


def test_the_largest_block_is_what_one_pod_can_get_on_one_node_even_past_free_slots() -> None:
    """FREE is what one-unit pods can get (at most one a slot); one pod takes one slot, so
    the most one pod can get there is the free units: a node with one slot left offers one
    pod all 6 of its free GPUs."""
    few = api_node("h100-few", "hgx-h100", allocatable={GPU: "8", "pods": "2"})
    c = count(fleet(api_node("h100-a", "hgx-h100"), few,
                    api_pod("a", "h100-a", {GPU: 5}), api_pod("b", "h100-few", {GPU: 2}),
                    api_node("t4", "t4-time-sliced", cordoned=True)))
    assert (row(c, "h100-a", GPU).free, row(c, "h100-a", GPU).largest) == (3, 3)
    assert (row(c, "h100-few", GPU).free, row(c, "h100-few", GPU).largest) == (1, 6)
    assert kind_row(c, GPU, H100).largest == 6
    assert row(c, "t4", GPU).largest == 0  # cordoned: nothing for a pod


def test_a_node_without_a_free_slot_gives_no_pod_a_block() -> None:
    full = api_node("h100-full", "hgx-h100", allocatable={GPU: "8", "pods": "1"})
    c = count(fleet(full, api_pod("a", "h100-full", {GPU: 1})))
    assert (row(c, "h100-full", GPU).free, row(c, "h100-full", GPU).largest) == (0, 0)


def test_pending_pods_are_the_pods_demand_counts_with_each_ones_ask() -> None:
    from gfd.fleet.count import pending_pods

    c = count(fleet(
        api_node("h100-a", "hgx-h100"), api_node("t4", "t4-time-sliced"),
        api_pod("wants-h100", limits={GPU: 2}, node_selector={"nvidia.com/gpu.product": H100}),
        api_pod("wants-any", limits={GPU: 1}),
        api_pod("wants-nothing-here", limits={GPU: 4},
                node_selector={"nvidia.com/gpu.product": "NVIDIA-B200"})))
    assert c.index is not None
    for k in c.kinds:
        rows = [r for r in c.rows if r.kind == k.kind]
        asks = pending_pods(c.index, k.kind, rows)
        assert sum(units for _, units in asks) == k.pending
    h100 = kind_row(c, GPU, H100)
    got = pending_pods(c.index, h100.kind, [r for r in c.rows if r.kind == h100.kind])
    assert sorted((p.name, units) for p, units in got) == [("wants-any", 1), ("wants-h100", 2)]


def test_pending_dra_pods_are_those_whose_claims_ask_the_kind() -> None:
    from gfd.fleet.count import pending_pods

    hopper = "device.attributes['gpu.nvidia.com'].architecture == 'Hopper'"
    c = count(fleet(dra_node("dra-1", "hgx-h100"), *slices("hgx-h100", "dra-1"),
                    api_claim("wait-two", count_=2, selectors=(hopper,)),
                    api_claim("wait-mig", count_=1, device_class="mig.nvidia.com"),
                    api_pod("p2", claims=("wait-two",)), api_pod("p2b", claims=("wait-two",)),
                    api_pod("pm", claims=("wait-mig",))))
    k = kind_row(c, "gpu.nvidia.com", H100)
    assert c.index is not None
    got = pending_pods(c.index, k.kind, [r for r in c.rows if r.kind == k.kind])
    # one claim two pods share: each pod asks it; the kind's demand counts it once
    assert sorted((p.name, units) for p, units in got) == [("p2", 2), ("p2b", 2)]
    assert k.pending == 2
