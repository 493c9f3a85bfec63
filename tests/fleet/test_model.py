"""API objects reduced to the plain values the counting needs: a Node's GPU labels, GPU
allocatable and capacity, and state; a Pod's node, GPU requests (the scheduler's rule, less
what a DeviceClass's ``extendedResourceName`` turned into a claim), placement and whether it
is a gfd agent; a ResourceSlice's devices (attributes unqualified in the driver's domain,
capacities as numbers, counters, taints); a ResourceClaim's allocated devices and node.

The objects are written as the API server returns them (core/v1, resource.k8s.io/v1); the
slices are those the NVIDIA DRA driver publishes (``gfd.devices.resource_slices``)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gfd.devices import resource_slices
from gfd.fleet.model import Taint, claim_of, node_of, pod_of, slice_of
from gfd.readers.simulate import simulate

GPU = "nvidia.com/gpu"
DRIVER = "gpu.nvidia.com"


# --------------------------------------------------------------------------------- nodes

NODE: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Node",
    "metadata": {"name": "gpu-a", "uid": "9f1c", "labels": {
        "kubernetes.io/hostname": "gpu-a", "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "p5.48xlarge",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8",
        "nvidia.com/mig.strategy": "mixed",
        "feature.node.kubernetes.io/pci-10de.present": "true"},
        "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
    "spec": {"podCIDR": "10.0.3.0/24", "unschedulable": True, "taints": [
        {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
        {"key": "dedicated", "value": "ml", "effect": "NoExecute"},
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule",
         "timeAdded": "2025-11-28T10:00:00Z"}]},
    "status": {
        "capacity": {"cpu": "192", "memory": "2113531164Ki", "pods": "110",
                     "ephemeral-storage": "7499362Mi", GPU: "8",
                     "nvidia.com/mig-1g.10gb": "7", "hugepages-1Gi": "0"},
        "allocatable": {"cpu": "191500m", "memory": "2100000000Ki", "pods": "110",
                        GPU: "7", "nvidia.com/mig-1g.10gb": "7",
                        "vpc.amazonaws.com/efa": "32"},
        "conditions": [
            {"type": "MemoryPressure", "status": "False"},
            {"type": "Ready", "status": "False", "reason": "KubeletNotReady"}],
        "nodeInfo": {"kubeletVersion": "v1.34.2"}},
}


def test_a_node_keeps_its_gpu_labels_and_hostname() -> None:
    node = node_of(NODE)
    assert node.name == "gpu-a"
    for key in ("nvidia.com/gpu.product", "nvidia.com/gpu.count", "nvidia.com/mig.strategy",
                "kubernetes.io/hostname"):
        assert node.labels[key] == NODE["metadata"]["labels"][key]


def test_a_node_keeps_every_allocatable_resource_and_the_device_plugins_capacity() -> None:
    """Allocatable as the scheduler holds it (``framework.NewResource``): CPU in thousandths
    (``MilliValue``), the rest in whole units (``Value``), the pod slots among them; capacity
    only of the device plugin's resources (what ``--check`` compares)."""
    node = node_of(NODE)
    assert node.allocatable == {"cpu": 191500, "memory": 2100000000 * 1024, "pods": 110,
                                GPU: 7, "nvidia.com/mig-1g.10gb": 7,
                                "vpc.amazonaws.com/efa": 32}
    assert node.capacity == {GPU: 8, "nvidia.com/mig-1g.10gb": 7}
    assert node.slots == 110


def test_a_nodes_state_is_read_from_spec_and_conditions() -> None:
    node = node_of(NODE)
    assert node.unschedulable is True
    assert node.ready is False
    assert set(node.taints) == {
        Taint(key="nvidia.com/gpu", effect="NoSchedule"),
        Taint(key="dedicated", value="ml", effect="NoExecute"),
        Taint(key="node.kubernetes.io/unschedulable", effect="NoSchedule")}


@pytest.mark.parametrize("conditions, ready", [
    ([{"type": "Ready", "status": "True"}], True),
    ([{"type": "Ready", "status": "False"}], False),
    ([{"type": "Ready", "status": "Unknown"}], False),
    ([{"type": "MemoryPressure", "status": "True"}], False),
    ([], False),
], ids=["True", "False", "Unknown", "no Ready condition", "no conditions"])
def test_a_node_is_ready_only_when_its_ready_condition_is_true(
        conditions: list[dict[str, str]], ready: bool) -> None:
    obj = copy.deepcopy(NODE)
    obj["status"]["conditions"] = conditions
    assert node_of(obj).ready is ready


def test_a_schedulable_node_without_taints() -> None:
    obj = copy.deepcopy(NODE)
    obj["spec"] = {}
    node = node_of(obj)
    assert node.unschedulable is False and node.taints == ()


# ---------------------------------------------------------------------------------- pods


def pod(name: str = "train-0", *, node: str = "gpu-a", phase: str = "Running",
        limits: dict[str, str] | None = None, **more: Any) -> dict[str, Any]:
    containers = [{"name": "main", "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                   "resources": {"limits": limits if limits is not None else {GPU: "2"}}}]
    obj: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": "1234",
                     "labels": {"app": "trainer"}},
        "spec": {"containers": containers, "restartPolicy": "Never",
                 "schedulerName": "default-scheduler"},
        "status": {"phase": phase, "qosClass": "BestEffort"}}
    if node:
        obj["spec"]["nodeName"] = node
    for key, value in more.items():
        where, _, field = key.partition("__")
        obj[where][field] = value
    return obj


def test_a_bound_pod_holds_its_gpu_request_on_its_node() -> None:
    p = pod_of(pod(limits={GPU: "2", "cpu": "8", "memory": "64Gi"}))
    assert p is not None
    assert (p.namespace, p.name, p.node) == ("ml", "train-0", "gpu-a")
    assert p.requests == {GPU: 2}


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_pod_that_ended_holds_nothing(phase: str) -> None:
    assert pod_of(pod(phase=phase)) is None


@pytest.mark.parametrize("phase", ["Pending", "Running", "Unknown"])
def test_a_bound_pod_that_has_not_ended_holds_its_request(phase: str) -> None:
    p = pod_of(pod(phase=phase))
    assert p is not None and p.requests == {GPU: 2}


def test_a_terminating_pod_still_holds_its_request() -> None:
    obj = pod()
    obj["metadata"]["deletionTimestamp"] = "2025-11-28T10:00:00Z"
    p = pod_of(obj)
    assert p is not None and p.requests == {GPU: 2} and p.node == "gpu-a"


def test_an_unscheduled_pod_has_no_node_and_keeps_its_placement() -> None:
    obj = pod(node="", phase="Pending", spec__nodeSelector={"nvidia.com/gpu.product": "X"},
              spec__affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                  "nodeSelectorTerms": [
                      {"matchExpressions": [{"key": "nvidia.com/gpu.memory", "operator": "Gt",
                                             "values": ["40000"]},
                                            {"key": "nvidia.com/mig.capable",
                                             "operator": "Exists"}]},
                      {"matchExpressions": [{"key": "nvidia.com/gpu.family", "operator": "In",
                                             "values": ["hopper", "blackwell"]}]}]}}},
              spec__tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists",
                                  "effect": "NoSchedule"},
                                 {"key": "dedicated", "operator": "Equal", "value": "ml"}])
    p = pod_of(obj)
    assert p is not None
    assert p.node == ""
    assert p.node_selector == {"nvidia.com/gpu.product": "X"}
    assert p.affinity == (
        (("nvidia.com/gpu.memory", "Gt", ("40000",)), ("nvidia.com/mig.capable", "Exists", ())),
        (("nvidia.com/gpu.family", "In", ("hopper", "blackwell")),))
    assert set(p.tolerations) == {("nvidia.com/gpu", "Exists", "", "NoSchedule"),
                                  ("dedicated", "Equal", "ml", "")}


def test_preferred_affinity_is_not_a_requirement() -> None:
    obj = pod(node="", phase="Pending", spec__affinity={"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {
            "matchExpressions": [{"key": "k", "operator": "In", "values": ["v"]}]}}]}})
    p = pod_of(obj)
    assert p is not None and p.affinity is None and p.node_selector is None


def test_a_pod_without_gpus_claims_or_agent_role_is_not_kept() -> None:
    assert pod_of(pod(limits={"cpu": "1", "memory": "1Gi"})) is None


@pytest.mark.parametrize("labels, image", [
    ({"app.kubernetes.io/name": "gfd"}, "example.com/anything:1"),
    ({"app": "gpu-feature-discovery"}, "example.com/anything:1"),
    ({"app.kubernetes.io/name": "gpu-feature-discovery"}, "example.com/anything:1"),
    ({}, "nvcr.io/nvidia/k8s/gpu-feature-discovery:v0.17.0"),
    ({}, "ghcr.io/example/gfd:1.0"),
], ids=["app.kubernetes.io/name=gfd", "app=gpu-feature-discovery", "name=GFD",
        "GFD's image", "gfd's image"])
def test_a_gfd_or_gfd_like_agent_pod_is_kept_with_its_readiness(
        labels: dict[str, str], image: str) -> None:
    obj = pod("gfd-x7k2p", limits={})
    obj["metadata"]["labels"] = labels
    obj["spec"]["containers"][0]["image"] = image
    obj["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    p = pod_of(obj)
    assert p is not None and p.agent and p.agent_ready and p.requests == {}
    obj["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    p = pod_of(obj)
    assert p is not None and p.agent and not p.agent_ready


def test_gfd_fleets_own_pod_is_no_agent_though_it_runs_gfds_image() -> None:
    obj = pod("gfd-fleet-6d9f8-x7k2p", limits={})
    obj["metadata"]["labels"] = {"app.kubernetes.io/name": "gfd-fleet",
                                 "app.kubernetes.io/component": "fleet"}
    obj["spec"]["containers"][0]["image"] = "ghcr.io/gfd-project/gfd:0.1.0"
    assert pod_of(obj) is None  # nothing the counting needs: no GPU, no claim, no agent


def test_an_ordinary_pod_is_no_agent() -> None:
    p = pod_of(pod())
    assert p is not None and not p.agent


def test_requests_an_extended_resource_claim_serves_are_counted_through_the_claim() -> None:
    """DRAExtendedResource: the scheduler writes status.extendedResourceClaimStatus; each
    requestMapping (container, resource) is served by that claim, not the device plugin."""
    obj = pod(limits={GPU: "2", "nvidia.com/mig-1g.10gb": "1"})
    obj["spec"]["containers"].append({"name": "side", "image": "busybox",
                                      "resources": {"limits": {GPU: "1"}}})
    obj["status"]["extendedResourceClaimStatus"] = {
        "resourceClaimName": "train-0-extended-resources-k8x2q",
        "requestMappings": [{"containerName": "main", "resourceName": GPU,
                             "requestName": "container-0-request-0"}]}
    p = pod_of(obj)
    assert p is not None
    assert p.requests == {GPU: 1, "nvidia.com/mig-1g.10gb": 1}
    assert "train-0-extended-resources-k8x2q" in p.claims


def test_a_pod_whose_every_gpu_request_a_claim_serves_is_kept_for_its_claim() -> None:
    obj = pod()
    obj["status"]["extendedResourceClaimStatus"] = {
        "resourceClaimName": "train-0-extended-resources-k8x2q",
        "requestMappings": [{"containerName": "main", "resourceName": GPU,
                             "requestName": "container-0-request-0"}]}
    p = pod_of(obj)
    assert p is not None and p.requests == {} and p.claims == (
        "train-0-extended-resources-k8x2q",)


def test_a_pods_claims_are_named_by_its_spec_and_its_status() -> None:
    obj = pod(limits={})
    obj["spec"]["resourceClaims"] = [
        {"name": "shared", "resourceClaimName": "team-gpu"},
        {"name": "own", "resourceClaimTemplateName": "one-gpu"}]
    obj["status"]["resourceClaimStatuses"] = [
        {"name": "own", "resourceClaimName": "train-0-own-5xq2z"}]
    p = pod_of(obj)
    assert p is not None and set(p.claims) == {"team-gpu", "train-0-own-5xq2z"}


# -------------------------------------------------------------------------------- slices


def _bytes(text: str) -> int:
    """A capacity the driver writes (``81559Mi``, ``14``) in bytes or units."""
    for suffix, factor in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) * factor
    return int(text)


def _unwrap(value: dict[str, Any]) -> Any:
    ((_, inner),) = value.items()
    return inner


@pytest.mark.parametrize("machine, gates", [
    ("hgx-h100", None), ("dgx-a100-mig-mixed", None), ("h100-mig", {"DynamicMIG": True}),
    ("gb200-nvl", {"DynamicMIG": True}), ("t4-time-sliced", {"PassthroughSupport": True}),
], ids=str)
def test_a_slice_keeps_each_devices_attributes_capacities_and_counters(
        machine: str, gates: dict[str, bool] | None) -> None:
    for obj in resource_slices(simulate(machine).snapshot, node="node-1", gates=gates):
        s = slice_of(obj)
        spec = obj["spec"]
        assert (s.driver, s.pool, s.node) == (DRIVER, "node-1", "node-1")
        assert (s.generation, s.count) == (spec["pool"]["generation"],
                                           spec["pool"]["resourceSliceCount"])
        assert [d.name for d in s.devices] == [d["name"] for d in spec.get("devices", [])]
        for d, raw in zip(s.devices, spec.get("devices", []), strict=True):
            assert (d.driver, d.pool, d.node) == (DRIVER, "node-1", "node-1")
            want_attrs = {k.removeprefix(f"{DRIVER}/"): _unwrap(v)
                          for k, v in raw["attributes"].items()}
            assert d.attributes == want_attrs
            assert d.capacity == {k: _bytes(v["value"]) for k, v in raw["capacity"].items()}
            assert dict(d.consumes) == {
                c["counterSet"]: {k: _bytes(v["value"]) for k, v in c["counters"].items()}
                for c in raw.get("consumesCounters", [])}
            assert d.tainted is False
        assert dict(s.counters) == {
            c["name"]: {k: _bytes(v["value"]) for k, v in c["counters"].items()}
            for c in spec.get("sharedCounters", [])}


def test_attributes_of_the_drivers_domain_are_unqualified_others_stay_qualified() -> None:
    obj = resource_slices(simulate("hgx-h100").snapshot, node="n")[0]
    raw = obj["spec"]["devices"][0]
    raw["attributes"][f"{DRIVER}/brand"] = raw["attributes"].pop("brand")
    d = slice_of(obj).devices[0]
    assert d.attributes["brand"] == "Nvidia"
    assert d.attributes["type"] == "gpu"
    assert d.attributes["cudaComputeCapability"] == "9.0.0"
    assert d.attributes["resource.kubernetes.io/pciBusID"] == "0000:18:00.0"


@pytest.mark.parametrize("effect, tainted", [
    ("NoSchedule", True), ("NoExecute", True), ("None", False)])
def test_a_device_tainted_noschedule_or_noexecute_is_marked(effect: str, tainted: bool) -> None:
    obj = resource_slices(simulate("hgx-h100").snapshot, node="n")[0]
    obj["spec"]["devices"][3]["taints"] = [
        {"key": "gpu.nvidia.com/unhealthy", "value": "xid-79", "effect": effect}]
    devices = slice_of(obj).devices
    assert [d.tainted for d in devices] == [tainted if i == 3 else False
                                            for i in range(len(devices))]


def test_a_slice_for_no_node_belongs_to_no_node() -> None:
    obj = resource_slices(simulate("hgx-h100").snapshot, node="n")[0]
    del obj["spec"]["nodeName"]
    obj["spec"]["allNodes"] = True
    s = slice_of(obj)
    assert s.node == "" and all(d.node == "" for d in s.devices)


# -------------------------------------------------------------------------------- claims


def claim(results: list[dict[str, Any]] | None, **exactly: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "train-0-gpu-x2k", "namespace": "ml",
                     "ownerReferences": [{"kind": "Pod", "name": "train-0"}]},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 2,
            **exactly}}]}},
        "status": {}}
    if results is not None:
        obj["status"] = {
            "allocation": {
                "devices": {"results": results},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": ["gpu-b"]}]}]}},
            "reservedFor": [{"resource": "pods", "name": "train-0", "uid": "1234"}]}
    return obj


def result(device: str, **more: Any) -> dict[str, Any]:
    return {"request": "gpu", "driver": DRIVER, "pool": "gpu-b", "device": device, **more}


def test_an_allocated_claim_holds_its_devices_on_its_allocations_node() -> None:
    c = claim_of(claim([result("gpu-0"), result("gpu-1")]))
    assert (c.namespace, c.name) == ("ml", "train-0-gpu-x2k")
    assert c.allocated == ((DRIVER, "gpu-b", "gpu-0"), (DRIVER, "gpu-b", "gpu-1"))
    assert c.node == "gpu-b"
    assert c.requests == ()


def test_an_admin_access_result_does_not_hold_its_device() -> None:
    c = claim_of(claim([result("gpu-0"), result("gpu-1", adminAccess=True),
                        result("gpu-2", adminAccess=False)]))
    assert c.allocated == ((DRIVER, "gpu-b", "gpu-0"), (DRIVER, "gpu-b", "gpu-2"))


def test_a_share_holds_the_capacity_its_result_consumed_and_not_the_device() -> None:
    """resource.k8s.io/v1 DeviceRequestAllocationResult: ``shareID`` marks a share of a
    device that allows multiple allocations; ``consumedCapacity`` is a map of capacity name
    to quantity (``map[QualifiedName]resource.Quantity``, as allocator_incubating.go fills
    it from GetConsumedCapacityFromRequest), not of ``{value: ...}`` objects."""
    c = claim_of(claim([result("gpu-0"), result("gpu-1", shareID="9f0c",
                                                  consumedCapacity={"memory": "10Gi",
                                                                    "cores": "1500m"})]))
    assert c.allocated == ((DRIVER, "gpu-b", "gpu-0"),)
    assert c.shares == (((DRIVER, "gpu-b", "gpu-1"), {"memory": 10 * 2**30, "cores": 2}),)


def test_the_node_can_come_from_a_hostname_requirement() -> None:
    obj = claim([result("gpu-0")])
    obj["status"]["allocation"]["nodeSelector"] = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-c"]}]}]}
    assert claim_of(obj).node == "gpu-c"


def test_an_allocation_for_no_node_names_no_node() -> None:
    obj = claim([result("gpu-0")])
    del obj["status"]["allocation"]["nodeSelector"]
    assert claim_of(obj).node == ""


def test_an_unallocated_claim_keeps_what_it_asks() -> None:
    expr = "device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('h100')"
    c = claim_of(claim(None, selectors=[{"cel": {"expression": expr}}]))
    assert c.allocated == () and c.node == ""
    assert [(r.device_class, r.count, r.selectors) for r in c.requests] == [
        ("gpu.nvidia.com", 2, (expr,))]


def test_a_request_for_all_devices_asks_no_fixed_count() -> None:
    c = claim_of(claim(None, allocationMode="All", count=None))
    assert [(r.device_class, r.count) for r in c.requests] == [("gpu.nvidia.com", 0)]


def test_a_count_left_out_is_one() -> None:
    obj = claim(None)
    del obj["spec"]["devices"]["requests"][0]["exactly"]["count"]
    assert [r.count for r in claim_of(obj).requests] == [1]


def test_a_claims_constraints_are_counted_and_its_requests_tolerations_kept() -> None:
    obj = claim(None, tolerations=[{"key": "maint", "operator": "Exists",
                                    "effect": "NoSchedule"}])
    obj["spec"]["devices"]["constraints"] = [{"matchAttribute": "gpu.nvidia.com/productName"}]
    c = claim_of(obj)
    assert c.constraints == 1
    assert [r.tolerations for r in c.requests] == [(("maint", "Exists", "", "NoSchedule"),)]


def test_a_devices_taints_are_kept_for_the_tolerations_of_a_request() -> None:
    obj = resource_slices(simulate("hgx-h100").snapshot, node="n")[0]
    obj["spec"]["devices"][0]["taints"] = [{"key": "k", "value": "v", "effect": "NoExecute"}]
    assert slice_of(obj).devices[0].taints == (Taint(key="k", value="v", effect="NoExecute"),)


def test_the_pod_gfd_why_explains_is_kept_whatever_it_asks() -> None:
    web = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "ml"},
           "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
           "status": {"phase": "Pending"}}
    assert pod_of(web) is None
    kept = pod_of(web, always=True)
    assert kept is not None and kept.usage == {"cpu": 1000} and kept.requests == {}
