"""`gfd selector --dra` with the real kube-scheduler: the claim allocates only devices its
filters describe, on a node that has them; a filter nothing satisfies leaves the pod
unschedulable. And `gfd devices` under the driver's DynamicMIG gate: its partitionable
devices and shared counter sets are accepted by the API server, and the scheduler gives a
profile claim a placement whose counters fit, never two claims the same memory slice.

The fleet: one Node per simulated machine, no kubelet, Ready with allocatable resources,
labelled with exactly what `gfd labels --resource-manager dra --simulate <machine>` prints
(run through the CLI), its ResourceSlice written as the NVIDIA DRA driver writes it (driver
gpu.nvidia.com, the node's name, one pool named after the node) from what
`gfd devices --simulate <machine>` prints, and the driver chart's DeviceClasses.

No kube-controller-manager runs here, so its resourceclaim controller's part is played by
the test: for each pod it creates the ResourceClaim from the template's spec as that
controller does (``generateName: <pod>-<claim>-``, the pod as controlling owner, the
``resource.kubernetes.io/pod-claim-name`` annotation) and then records the claim's name in
the pod's ``status.resourceClaimStatuses``. kube-scheduler 1.36 needs that status for a
claim made from a template: without it the pod is never tried (test below).

The expected nodes of each case are written from the machines in gfd/readers/simulate.py
and the driver's attribute rules (/work/shared/reference/dra.md, docs/dra.md), and checked
against an independent reading of the `gfd devices` output; each allocated device is then
checked against the filters through that reading, not through gfd's CEL."""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from helpers.controlplane import ControlPlane, Process

from gfd.cli import cli
from gfd.devices import resource_slice, resource_slices
from gfd.dra import DEVICE_CLASSES, DYNAMIC_MIG
from gfd.readers.simulate import SIMULATIONS, simulate

JSON = dict[str, Any]
WAIT = 20.0
"""Seconds for the scheduler to bind a pod, or to mark it unschedulable (it takes well
under a second; the bound is for a loaded machine)."""
_serial = itertools.count(1)

# --------------------------------------------------------------------------- the CLI


def gfd(*args: str) -> str:
    """What `gfd <args>` prints on stdout (exit status 0 required)."""
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, (args, result.output, result.exception)
    return result.stdout


def gfd_labels(machine: str) -> dict[str, str]:
    out = json.loads(gfd("labels", "--resource-manager", "dra", "--simulate", machine,
                         "--format", "json"))
    return {str(k): str(v) for k, v in out.items()}


def gfd_devices(machine: str) -> list[JSON]:
    return list(json.loads(gfd("devices", "--simulate", machine, "--format", "json"))["devices"])


def gfd_selector(args: tuple[str, ...]) -> tuple[JSON, JSON]:
    """`gfd selector --dra <args>`: the ResourceClaimTemplate, and the placement and claims
    of the example Pod it prints."""
    docs = list(yaml.safe_load_all(gfd("selector", "--dra", *args)))
    assert len(docs) == 2, docs
    template, pod = docs
    assert template["kind"] == "ResourceClaimTemplate" and pod["kind"] == "Pod"
    return template, {k: pod["spec"][k] for k in ("affinity", "resourceClaims")}


# --------------------------------------------------------------------------- the oracle

_ARCHITECTURE = {"turing": "Turing", "ampere": "Ampere", "ada-lovelace": "Ada Lovelace",
                 "hopper": "Hopper", "blackwell": "Blackwell"}
"""--family -> the driver's ``architecture`` attribute (go-nvlib's names)."""
_BINARY = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}


def _quantity(text: str) -> int:
    match = re.fullmatch(r"([0-9]+)(Ki|Mi|Gi|Ti|Pi)?", text)
    assert match, f"not a binary quantity: {text}"
    return int(match.group(1)) * _BINARY[match.group(2) or ""]


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"[-\s]+", text.lower()) if w]


def _options(args: tuple[str, ...]) -> dict[str, str]:
    return {args[i].removeprefix("--"): args[i + 1] for i in range(0, len(args), 2)
            if args[i] != "--label-set"}


def describes(args: tuple[str, ...], device: JSON) -> bool:
    """Whether the filters describe a device of `gfd devices`' output, read from the
    reference's rules: --product's words are words of the NVML name, in any order, memory in
    MiB against the ``memory`` capacity in bytes, --family as the driver's architecture,
    --min-compute against the semver compute capability, --mig-profile as the driver's
    profile (``1g.10gb.me`` is ``1g.10gb+me``); a MIG device only with --mig-profile and a
    full GPU only without."""
    f = _options(args)
    attrs = {k: next(iter(v.values())) for k, v in device["attributes"].items()}
    capacity = {k: _quantity(v["value"]) for k, v in device["capacity"].items()}
    if attrs["type"] != ("mig" if "mig-profile" in f else "gpu"):
        return False
    if "product" in f:
        want, name = _words(f["product"]), _words(attrs["productName"])
        if not set(want) <= set(name):
            return False
    if "min-memory" in f and capacity["memory"] < int(f["min-memory"]) * 2**20:
        return False
    if "family" in f and attrs["architecture"] != _ARCHITECTURE[f["family"]]:
        return False
    if "min-compute" in f:
        have = tuple(int(p) for p in attrs["cudaComputeCapability"].split(".")[:2])
        if have < tuple(int(p) for p in f["min-compute"].split(".")):
            return False
    if "mig-profile" in f:
        profile = re.sub(r"^([0-9]+g\.[0-9]+gb)\.", r"\1+", f["mig-profile"])
        if attrs["profile"] != profile:
            return False
    return True


# --------------------------------------------------------------------------- the fleet


@dataclass(frozen=True)
class GpuNode:
    machine: str
    name: str
    labels: Mapping[str, str]
    """What `gfd labels --resource-manager dra` printed for the machine."""
    devices: tuple[JSON, ...]
    """What `gfd devices` printed for it: the devices of its ResourceSlice."""

    def device(self, name: str) -> JSON:
        return next(d for d in self.devices if d["name"] == name)


Fleet = dict[str, GpuNode]


@pytest.fixture(scope="module")
def fleet(control_plane: ControlPlane, scheduler: Process) -> Iterator[Fleet]:
    """One Node per simulated machine with its gfd labels and its driver ResourceSlice;
    deleted, with the slices, after the module."""
    for name, expression in DEVICE_CLASSES.items():
        if control_plane.get(f"/apis/resource.k8s.io/v1/deviceclasses/{name}") is None:
            control_plane.create({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                                  "metadata": {"name": name},
                                  "spec": {"selectors": [{"cel": {"expression": expression}}]}})
    nodes: Fleet = {}
    created: list[JSON] = []
    try:
        for machine in sorted(SIMULATIONS):
            name = f"dra-{machine}"
            labels = gfd_labels(machine)
            devices = tuple(gfd_devices(machine))
            control_plane.create_node(name, labels={
                **labels, "kubernetes.io/hostname": name, "kubernetes.io/os": "linux"})
            created.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
            nodes[machine] = GpuNode(machine, name, labels, devices)
            if not devices:
                continue  # no GPU: the driver publishes no slice
            rs = resource_slice(simulate(machine).snapshot, node=name)
            rs["spec"]["devices"] = [{k: d[k] for k in ("name", "attributes", "capacity")}
                                     for d in devices]
            created.append(control_plane.create(rs))
        yield nodes
    finally:
        for obj in reversed(created):
            control_plane.delete(obj, wait=False)


def test_each_node_is_labelled_and_sliced_as_gfd_and_the_driver_say(
        control_plane: ControlPlane, fleet: Fleet) -> None:
    for node in fleet.values():
        api = control_plane.get(f"/api/v1/nodes/{node.name}")
        assert api is not None
        assert {k: v for k, v in api["metadata"]["labels"].items()
                if k.startswith("nvidia.com/")} == node.labels
        ready = {c["type"]: c["status"] for c in api["status"]["conditions"]}
        assert ready["Ready"] == "True" and not api["spec"].get("taints")
        slices = control_plane.request(
            "GET", "/apis/resource.k8s.io/v1/resourceslices",
            query={"fieldSelector": f"spec.nodeName={node.name}"})[1]["items"]
        if node.machine == "no-gpu":
            assert slices == [] and "nvidia.com/gpu.present" not in node.labels
            continue
        assert node.labels["nvidia.com/gpu.present"] == "true"
        [rs] = slices
        assert rs["spec"]["driver"] == "gpu.nvidia.com"
        assert rs["spec"]["pool"]["name"] == node.name
        # what `gfd devices` prints is the projection a slice is written from
        assert rs["spec"]["devices"] == resource_slice(
            simulate(node.machine).snapshot, node=node.name)["spec"]["devices"]
        assert [d["name"] for d in rs["spec"]["devices"]] == [d["name"] for d in node.devices]


# --------------------------------------------------------------------------- pods


@dataclass
class Workload:
    """A namespace holding one pod made from `gfd selector --dra` output, its template and
    the ResourceClaim made from the template."""

    namespace: str
    template: JSON
    fragment: JSON
    pod: JSON
    claim: JSON

    @property
    def pod_path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods/{self.pod['metadata']['name']}"

    @property
    def claim_path(self) -> str:
        return (f"/apis/resource.k8s.io/v1/namespaces/{self.namespace}/resourceclaims/"
                f"{self.claim['metadata']['name']}")


def _pod(namespace: str, fragment: JSON) -> JSON:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "workload", "namespace": namespace},
            "spec": {**fragment, "terminationGracePeriodSeconds": 0, "containers": [{
                "name": "main", "image": "registry.invalid/cuda:1",
                "resources": {"claims": [{"name": c["name"]} for c in
                                         fragment["resourceClaims"]]}}]}}


def _claim_from_template(pod: JSON, pod_claim: str, template: JSON) -> JSON:
    """The ResourceClaim kube-controller-manager's resourceclaim controller makes for the
    pod's claim from the template."""
    meta = pod["metadata"]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {
                "generateName": f"{meta['name']}-{pod_claim}-",
                "namespace": meta["namespace"],
                "annotations": {"resource.kubernetes.io/pod-claim-name": pod_claim},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                     "uid": meta["uid"], "controller": True,
                                     "blockOwnerDeletion": True}]},
            "spec": template["spec"]["spec"]}


@pytest.fixture
def workloads(control_plane: ControlPlane, fleet: Fleet) -> Iterator[list[Workload]]:
    """The test's workloads, removed after it (pod at once, claim without its finalizer:
    no kubelet and no controller finish them), so the next test finds every device free."""
    made: list[Workload] = []
    yield made
    for w in made:
        control_plane.request("DELETE", w.pod_path, query={"gracePeriodSeconds": "0"},
                              expect=(200, 404))
        if control_plane.get(w.claim_path) is not None:
            control_plane.patch(w.claim_path, {"metadata": {"finalizers": None}})
        control_plane.delete(w.claim_path)
        control_plane.delete(w.pod_path)


def submit(control_plane: ControlPlane, workloads: list[Workload], args: tuple[str, ...], *,
           claim_status: bool = True, pin: str = "") -> Workload:
    """Create the template and a pod from `gfd selector --dra <args>` in a fresh namespace,
    then the ResourceClaim from the template and (``claim_status``) its name in the pod's
    status, as the resourceclaim controller would. ``pin``: also select that node by its
    hostname label, on top of gfd's affinity."""
    namespace = f"dra-sched-{next(_serial)}"
    control_plane.create_namespace(namespace)
    template, fragment = gfd_selector(args)
    template["metadata"]["namespace"] = namespace
    control_plane.create(template)
    spec = _pod(namespace, fragment)
    if pin:
        spec["spec"]["nodeSelector"] = {"kubernetes.io/hostname": pin}
    pod = control_plane.create(spec)
    [pod_claim] = fragment["resourceClaims"]
    assert pod_claim["resourceClaimTemplateName"] == template["metadata"]["name"]
    claim = control_plane.create(_claim_from_template(pod, pod_claim["name"], template))
    workload = Workload(namespace, template, fragment, pod, claim)
    workloads.append(workload)
    if claim_status:
        record_claim_status(control_plane, workload)
    return workload


def record_claim_status(control_plane: ControlPlane, w: Workload) -> None:
    control_plane.patch(f"{w.pod_path}/status", {"status": {"resourceClaimStatuses": [
        {"name": w.fragment["resourceClaims"][0]["name"],
         "resourceClaimName": w.claim["metadata"]["name"]}]}})


def wait_for(control_plane: ControlPlane, w: Workload, done: Any, what: str,
             scheduler: Process) -> JSON:
    """Poll the pod until ``done(pod)``; fail after WAIT seconds with the scheduler's log."""
    deadline = time.monotonic() + WAIT
    while True:
        pod = control_plane.get(w.pod_path)
        assert pod is not None
        if done(pod):
            return pod
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {WAIT:.0f} s; pod status {pod['status']}\n"
                        f"kube-scheduler:\n{scheduler.tail(10)}")
        time.sleep(0.05)


def scheduled(pod: JSON) -> JSON | None:
    return next((c for c in pod["status"].get("conditions", [])
                 if c["type"] == "PodScheduled"), None)


# --------------------------------------------------------------------------- the cases


@dataclass(frozen=True)
class Case:
    args: tuple[str, ...]
    machines: frozenset[str]
    """The machines that have ``--count`` devices the filters describe (empty: none)."""
    claim_refuses: bool = False
    """For a case no machine satisfies: some node passes the node affinity (its labels
    allow such a device), and the claim is what the scheduler cannot satisfy there."""

    @property
    def count(self) -> int:
        return int(_options(self.args).get("count", "1"))

    def __str__(self) -> str:
        return " ".join(self.args)


MIXED, DGX_MIG, DGX_SINGLE = "mixed-a100-a10", "dgx-a100-mig-mixed", "dgx-a100-mig-single"
HGX, GB200, H100_MIG = "hgx-h100", "gb200-nvl", "h100-mig"

SCHEDULABLE = [
    # the mixed node's two A100s and dgx-a100-mig-mixed's four whole A100s; no MIG device
    Case(("--product", "A100"), frozenset({MIXED, DGX_MIG})),
    # the mixed node's one A10 (an A100 is not an A10)
    Case(("--product", "A10"), frozenset({MIXED})),
    Case(("--product", "A100 80GB PCIe", "--count", "2"), frozenset({MIXED})),
    Case(("--product", "H100", "--count", "2"), frozenset({HGX})),
    Case(("--product", "T4", "--count", "4"), frozenset({"t4-time-sliced"})),
    Case(("--product", "RTX 3060"), frozenset({"geforce-laptop"})),
    # A100 80GB (81920), A100-SXM4-40GB (40960), H100 (81559), GB200 (190464 MiB)
    Case(("--min-memory", "40000"), frozenset({MIXED, DGX_MIG, HGX, GB200})),
    Case(("--family", "ampere"), frozenset({MIXED, DGX_MIG, "geforce-laptop"})),
    Case(("--min-compute", "9.0"), frozenset({HGX, GB200})),
    # the mixed node's A10 (8.6, 23028 MiB) while its labels describe its A100s (8.0)
    Case(("--min-compute", "8.6", "--min-memory", "20000"), frozenset({MIXED, HGX, GB200})),
    Case(("--family", "hopper", "--min-memory", "80000", "--min-compute", "9.0",
          "--count", "8"), frozenset({HGX})),
    Case(("--family", "blackwell", "--name", "gb200-training"), frozenset({GB200})),
    Case(("--mig-profile", "1g.10gb.me"), frozenset({H100_MIG})),
    Case(("--mig-profile", "1g.5gb", "--count", "7"), frozenset({DGX_MIG, DGX_SINGLE})),
    Case(("--mig-profile", "3g.20gb", "--min-memory", "20000"), frozenset({DGX_MIG})),
]

UNSCHEDULABLE = [
    # the claim matches words of productName, so every GPU node passes the affinity
    Case(("--product", "B200"), frozenset(), claim_refuses=True),
    # the mixed node passes the affinity (gpu.heterogeneous=true: its labels describe its
    # A100s only); no Hopper has 100000 MiB (`--family hopper --min-compute 10.0` is refused:
    # no Hopper has compute capability 10)
    Case(("--family", "hopper", "--min-memory", "100000"), frozenset(), claim_refuses=True),
    # 8 H100s on hgx-h100, 2 MIG-enabled ones on h100-mig
    Case(("--product", "H100", "--count", "9"), frozenset(), claim_refuses=True),
    # the mixed node has three GPUs: two A100 80GB and one A10
    Case(("--product", "A100 80GB PCIe", "--count", "3"), frozenset(), claim_refuses=True),
    Case(("--product", "A10", "--count", "2"), frozenset(), claim_refuses=True),
    # h100-mig has 1g.10gb+me, not 1g.10gb; the A100s' smallest is 1g.5gb
    Case(("--mig-profile", "1g.10gb"), frozenset(), claim_refuses=True),
    # GB200 has 190464 MiB; the mixed node passes the affinity (gpu.heterogeneous=true)
    Case(("--min-memory", "200000"), frozenset(), claim_refuses=True),
]


def machines_with(fleet: Fleet, case: Case) -> set[str]:
    return {m for m, node in fleet.items()
            if sum(describes(case.args, d) for d in node.devices) >= case.count}


def check_allocation(control_plane: ControlPlane, w: Workload, node: GpuNode,
                     case: Case) -> None:
    """The claim is reserved for the pod and allocated ``--count`` distinct devices of the
    node's pool, each one the filters describe."""
    claim = control_plane.get(w.claim_path)
    assert claim is not None
    allocation = claim["status"]["allocation"]
    assert claim["status"]["reservedFor"] == [
        {"resource": "pods", "name": "workload", "uid": w.pod["metadata"]["uid"]}]
    assert allocation["nodeSelector"]["nodeSelectorTerms"] == [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [node.name]}]}]
    results = allocation["devices"]["results"]
    assert len(results) == case.count
    assert len({r["device"] for r in results}) == case.count
    for result in results:
        assert (result["request"], result["driver"], result["pool"]) == (
            "gpu", "gpu.nvidia.com", node.name)
        device = node.device(result["device"])
        assert describes(case.args, device), (case, device)


@pytest.mark.parametrize("case", SCHEDULABLE, ids=str)
def test_the_claim_gets_only_devices_the_filters_describe(
        control_plane: ControlPlane, scheduler: Process, fleet: Fleet,
        workloads: list[Workload], case: Case) -> None:
    """The pod as gfd writes it is bound to a machine that has the devices, and gets only
    devices the filters describe; pinned to each other such machine by hostname, it is
    bound there too (gfd's node affinity leaves out no node that has such devices)."""
    assert machines_with(fleet, case) == case.machines
    w = submit(control_plane, workloads, case.args)
    pod = wait_for(control_plane, w, lambda p: p["spec"].get("nodeName"),
                   f"the pod of `gfd selector --dra {case}` was not bound", scheduler)
    node = next(n for n in fleet.values() if n.name == pod["spec"]["nodeName"])
    assert node.machine in case.machines
    if "name" in _options(case.args):
        assert w.template["metadata"]["name"] == _options(case.args)["name"]
    check_allocation(control_plane, w, node, case)
    for machine in sorted(case.machines - {node.machine}):
        other = fleet[machine]
        pinned = submit(control_plane, workloads, case.args, pin=other.name)
        wait_for(control_plane, pinned, lambda p, n=other.name: p["spec"].get("nodeName") == n,
                 f"the pod of `gfd selector --dra {case}` was not bound to {other.name}",
                 scheduler)
        check_allocation(control_plane, pinned, other, case)


@pytest.mark.parametrize("case", UNSCHEDULABLE, ids=str)
def test_a_filter_nothing_satisfies_leaves_the_pod_unschedulable(
        control_plane: ControlPlane, scheduler: Process, fleet: Fleet,
        workloads: list[Workload], case: Case) -> None:
    assert machines_with(fleet, case) == set()
    w = submit(control_plane, workloads, case.args)
    pod = wait_for(control_plane, w, scheduled, "the pod was not tried", scheduler)
    condition = scheduled(pod)
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable"), condition
    assert not pod["spec"].get("nodeName")
    claim = control_plane.get(w.claim_path)
    assert claim is not None and "allocation" not in claim.get("status", {})
    refused = re.search(r"([0-9]+) cannot allocate all claims", condition["message"])
    assert bool(refused) == case.claim_refuses, condition["message"]


def test_a_mixed_nodes_gpus_go_to_the_claims_that_describe_them(
        control_plane: ControlPlane, scheduler: Process, fleet: Fleet,
        workloads: list[Workload]) -> None:
    """On the mixed node at once: `--product A10` gets gpu-2 (the A10), `--product
    "A100 80GB PCIe" --count 2` gets gpu-0 and gpu-1, and a third claim for one more A10
    finds none left, though no A100 is idle either."""
    mixed = fleet[MIXED]
    a10 = submit(control_plane, workloads, ("--product", "A10"))
    a100 = submit(control_plane, workloads, ("--product", "A100 80GB PCIe", "--count", "2"))
    allocated: dict[str, list[str]] = {}
    for w in (a10, a100):
        wait_for(control_plane, w, lambda p: p["spec"].get("nodeName") == mixed.name,
                 "the pod was not bound to the mixed node", scheduler)
        claim = control_plane.get(w.claim_path)
        assert claim is not None
        allocated[w.namespace] = sorted(
            r["device"] for r in claim["status"]["allocation"]["devices"]["results"])
    assert allocated == {a10.namespace: ["gpu-2"], a100.namespace: ["gpu-0", "gpu-1"]}
    assert [mixed.device(d)["attributes"]["productName"]["string"] for d in
            ("gpu-0", "gpu-1", "gpu-2")] == ["NVIDIA A100 80GB PCIe"] * 2 + ["NVIDIA A10"]
    third = submit(control_plane, workloads, ("--product", "A10"))
    condition = scheduled(wait_for(control_plane, third, scheduled, "the pod was not tried",
                                   scheduler))
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable"), condition


def test_a_templates_claim_is_used_only_once_the_pod_status_names_it(
        control_plane: ControlPlane, scheduler: Process, fleet: Fleet,
        workloads: list[Workload]) -> None:
    """kube-scheduler 1.36 finds a template's claim through the pod's
    ``status.resourceClaimStatuses`` (which the resourceclaim controller writes): with the
    claim created but the status not written, the pod is not tried at all; once written, it
    is bound."""
    w = submit(control_plane, workloads, ("--product", "A10"), claim_status=False)
    time.sleep(2.0)
    pod = control_plane.get(w.pod_path)
    assert pod is not None
    assert not pod["spec"].get("nodeName") and scheduled(pod) is None, pod["status"]
    record_claim_status(control_plane, w)
    wait_for(control_plane, w, lambda p: p["spec"].get("nodeName") == fleet[MIXED].name,
             "the pod was not bound once its claim status was written", scheduler)


def test_compat_labels_place_the_claim_on_a_node_gfd_labelled_with_them(
        control_plane: ControlPlane, scheduler: Process, fleet: Fleet,
        workloads: list[Workload]) -> None:
    """A node labelled with `--label-set compat` (no gpu.product.<model>, gpu.heterogeneous or
    mig.enabled.count): `--dra --label-set compat` places the pod there by its claim; the
    default (extended) affinity cannot see the node's A100s and leaves the pod pending."""
    name = "dra-compat-mixed"
    labels = json.loads(gfd("labels", "--resource-manager", "dra", "--label-set", "compat",
                            "--simulate", MIXED, "--format", "json"))
    assert "nvidia.com/gpu.heterogeneous" not in labels
    control_plane.create_node(name, labels={**labels, "kubernetes.io/hostname": name,
                                            "kubernetes.io/os": "linux"})
    rs = resource_slice(simulate(MIXED).snapshot, node=name)
    created = control_plane.create(rs)
    try:
        args = ("--product", "A100-80GB", "--count", "2")
        compat = submit(control_plane, workloads, (*args, "--label-set", "compat"), pin=name)
        wait_for(control_plane, compat, lambda p: p["spec"].get("nodeName") == name,
                 "the compat pod was not bound to the compat-labelled node", scheduler)
        check_allocation(control_plane, compat, GpuNode(MIXED, name, labels, tuple(
            gfd_devices(MIXED))), Case(args, frozenset({MIXED})))
        extended = submit(control_plane, workloads, args, pin=name)
        condition = scheduled(wait_for(control_plane, extended, scheduled,
                                       "the pod was not tried", scheduler))
        assert condition is not None and condition["reason"] == "Unschedulable", condition
    finally:
        for w in list(workloads):
            control_plane.request("DELETE", w.pod_path, query={"gracePeriodSeconds": "0"},
                                  expect=(200, 404))
        control_plane.delete(created, wait=False)
        control_plane.delete(f"/api/v1/nodes/{name}", wait=False)


# --------------------------------------------------------------------------- DynamicMIG
#
# A node of one H100 with MIG off, its slices written as the driver writes them under
# DynamicMIG=true for Kubernetes 1.35+ (`resource_slices`): one slice with the GPU's shared
# counter set `gpu-0-counter-set`, one with its 26 partitionable devices (the full GPU and
# every profile x placement). DRAPartitionableDevices is beta and on in the 1.36 binaries.
# Claims name the `mig.nvidia.com` class and a profile; pods are pinned to the node by
# hostname, so the fleet's static MIG devices play no part. The oracle reads the counters
# the devices consume from the slices on the API server, not from gfd's projection.

DYNAMIC = {DYNAMIC_MIG: True}


@dataclass(frozen=True)
class DynamicNode:
    name: str
    devices: Mapping[str, JSON]
    """Device name -> the device as the API server holds it."""
    counters: Mapping[str, int]
    """The shared counter set's counters: name -> value."""

    def consumed(self, device: str) -> dict[str, int]:
        [consumption] = self.devices[device]["consumesCounters"]
        assert consumption["counterSet"] == "gpu-0-counter-set"
        return {k: _quantity(v["value"]) for k, v in consumption["counters"].items()}

    def slices(self, device: str) -> set[int]:
        return {int(k.rsplit("-", 1)[1]) for k in self.consumed(device)
                if k.startswith("memory-slice-")}


@pytest.fixture
def dynamic_node(control_plane: ControlPlane, scheduler: Process,
                 fleet: Fleet) -> Iterator[DynamicNode]:
    """The one-H100 node under DynamicMIG, with the driver's DeviceClasses (the fleet's);
    deleted with its slices after the test."""
    name = f"dra-dynamic-h100-{next(_serial)}"
    snap = simulate(HGX).snapshot
    one = replace(snap, gpus=snap.gpus[:1])
    slices = resource_slices(one, node=name, gates=DYNAMIC)
    control_plane.create_node(name)
    created = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}]
    try:
        for rs in slices:
            created.append(control_plane.create(rs))
        stored = control_plane.request(
            "GET", "/apis/resource.k8s.io/v1/resourceslices",
            query={"fieldSelector": f"spec.nodeName={name}"})[1]["items"]
        assert len(stored) == 2
        [counter_slice] = [s for s in stored if s["spec"].get("sharedCounters")]
        [device_slice] = [s for s in stored if s["spec"].get("devices")]
        [counter_set] = counter_slice["spec"]["sharedCounters"]
        assert counter_set["name"] == "gpu-0-counter-set"
        yield DynamicNode(name, {d["name"]: d for d in device_slice["spec"]["devices"]},
                          {k: _quantity(v["value"]) for k, v in counter_set["counters"].items()})
    finally:
        for obj in reversed(created):
            control_plane.delete(obj, wait=False)


def submit_profile(control_plane: ControlPlane, workloads: list[Workload], node: str,
                   profile: str, count: int = 1, device_class: str = "mig.nvidia.com",
                   ) -> Workload:
    """A ResourceClaim for ``count`` devices of ``profile`` (CEL on the driver's ``profile``
    attribute; "" for none) and a pod using it, pinned to ``node``."""
    namespace = f"dra-dynamic-{next(_serial)}"
    control_plane.create_namespace(namespace)
    request: JSON = {"deviceClassName": device_class, "count": count}
    if profile:
        request["selectors"] = [{"cel": {"expression": (
            f"device.attributes['gpu.nvidia.com'].profile == '{profile}'")}}]
    claim = control_plane.create({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "gpu", "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}})
    fragment: JSON = {"resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu"}]}
    spec = _pod(namespace, fragment)
    spec["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    pod = control_plane.create(spec)
    workload = Workload(namespace, {}, fragment, pod, claim)
    workloads.append(workload)
    return workload


def allocated(control_plane: ControlPlane, w: Workload) -> list[str]:
    claim = control_plane.get(w.claim_path)
    assert claim is not None
    return sorted(r["device"] for r in claim["status"]["allocation"]["devices"]["results"])


def bound(control_plane: ControlPlane, scheduler: Process, w: Workload, node: str) -> None:
    wait_for(control_plane, w, lambda p: p["spec"].get("nodeName") == node,
             f"the pod was not bound to {node}", scheduler)


def refused(control_plane: ControlPlane, scheduler: Process, w: Workload) -> None:
    condition = scheduled(wait_for(control_plane, w, scheduled, "the pod was not tried",
                                   scheduler))
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable"), condition
    assert "cannot allocate all claims" in condition["message"], condition["message"]


def within_counters(node: DynamicNode, devices: list[str]) -> None:
    """What the devices consume together fits the shared counter set, and no memory slice is
    consumed twice."""
    total: dict[str, int] = {}
    for d in devices:
        for k, v in node.consumed(d).items():
            total[k] = total.get(k, 0) + v
    assert all(v <= node.counters[k] for k, v in total.items()), (devices, total)
    seen = [s for d in devices for s in node.slices(d)]
    assert len(seen) == len(set(seen)), devices


def test_dynamic_mig_a_3g40gb_claim_gets_a_placement_whose_counters_fit(
        control_plane: ControlPlane, scheduler: Process, dynamic_node: DynamicNode,
        workloads: list[Workload]) -> None:
    node = dynamic_node
    assert len(node.devices) == 26 and "gpu-0" in node.devices
    assert node.counters["memory"] == 80384 * 2**20 and node.counters["multiprocessors"] == 132
    w = submit_profile(control_plane, workloads, node.name, "3g.40gb")
    bound(control_plane, scheduler, w, node.name)
    [device] = allocated(control_plane, w)
    assert device in ("gpu-0-mig-3g40gb-9-0", "gpu-0-mig-3g40gb-9-4")
    attrs = node.devices[device]["attributes"]
    assert attrs["profile"] == {"string": "3g.40gb"} and "uuid" not in attrs
    assert node.consumed(device)["memory"] == 40192 * 2**20
    assert len(node.slices(device)) == 4
    within_counters(node, [device])


def test_dynamic_mig_claims_never_overlap_memory_slices(
        control_plane: ControlPlane, scheduler: Process, dynamic_node: DynamicNode,
        workloads: list[Workload]) -> None:
    """A 4g.40gb takes slices 0-3, so the 3g.40gb that follows gets placement 4, and a third
    3g.40gb finds no free slices; the full GPU cannot be had while partitions hold counters;
    every allocation together stays within the counter set."""
    node = dynamic_node
    first = submit_profile(control_plane, workloads, node.name, "4g.40gb")
    bound(control_plane, scheduler, first, node.name)
    assert allocated(control_plane, first) == ["gpu-0-mig-4g40gb-5-0"]
    second = submit_profile(control_plane, workloads, node.name, "3g.40gb")
    bound(control_plane, scheduler, second, node.name)
    assert allocated(control_plane, second) == ["gpu-0-mig-3g40gb-9-4"]
    held = allocated(control_plane, first) + allocated(control_plane, second)
    within_counters(node, held)
    assert node.slices(held[0]) | node.slices(held[1]) == set(range(8))
    refused(control_plane, scheduler, submit_profile(control_plane, workloads, node.name,
                                                     "1g.10gb"))
    refused(control_plane, scheduler, submit_profile(control_plane, workloads, node.name, "",
                                                     device_class="gpu.nvidia.com"))


def test_dynamic_mig_seven_1g10gb_in_one_claim_take_seven_distinct_slices(
        control_plane: ControlPlane, scheduler: Process, dynamic_node: DynamicNode,
        workloads: list[Workload]) -> None:
    node = dynamic_node
    w = submit_profile(control_plane, workloads, node.name, "1g.10gb", count=7)
    bound(control_plane, scheduler, w, node.name)
    devices = allocated(control_plane, w)
    assert devices == [f"gpu-0-mig-1g10gb-19-{i}" for i in range(7)]
    within_counters(node, devices)
    refused(control_plane, scheduler, submit_profile(control_plane, workloads, node.name,
                                                     "1g.10gb+me"))


@pytest.mark.parametrize("machine", [HGX, DGX_SINGLE, DGX_MIG, H100_MIG])
def test_dynamic_mig_slices_of_each_machine_are_accepted_by_the_api_server(
        control_plane: ControlPlane, machine: str) -> None:
    """The API server validates the split slices (counter sets, consumesCounters) of every
    simulated MIG machine as gfd writes them; they are deleted again."""
    name = f"dra-dynamic-{machine}-{next(_serial)}"
    created = [control_plane.create(rs) for rs in resource_slices(
        simulate(machine).snapshot, node=name, gates=DYNAMIC)]
    try:
        devices = sum(len(rs["spec"].get("devices", [])) for rs in created)
        sets = sum(len(rs["spec"].get("sharedCounters", [])) for rs in created)
        assert (devices, sets) == {HGX: (8 * 26, 8), DGX_SINGLE: (8 * 25, 8),
                                   DGX_MIG: (4 * 25 + 4, 4), H100_MIG: (2 * 26, 2)}[machine]
    finally:
        for obj in created:
            control_plane.delete(obj, wait=False)
