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
    assert states == {"h100-a": "ready", "h100-cordoned": "cordoned", "h100-down": "not-ready",
                      "h100-tainted": "tainted", "h100-gpu-tainted": "ready"}
    k = kind_row(c, GPU, H100)
    assert (k.nodes, k.total, k.allocated, k.free) == (2, 16, 3, 13)
    assert (k.unschedulable_nodes, k.unschedulable_total, k.unschedulable_allocated) == (
        3, 24, 3)


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
