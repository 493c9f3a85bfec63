"""A fleet of simulated GPU machines on a real control plane, partly filled by pods and
claims kube-scheduler placed, and the truth of what each GPU kind holds, for `gfd fleet`
against the real scheduler (tests/realapi/test_fleet_scheduler.py).

Sources of the truth, never gfd's fleet code:

- Device-plugin Nodes: each advertises as allocatable exactly the units
  ``placement.units()`` gives the machine under its MIG strategy and sharing config
  (NVIDIA/k8s-device-plugin's rules), and carries the labels gfd publishes with the same
  ConfigMap (``placement.node_labels``). A kind is one resource's units: the sanitised NVML
  name (../shared/reference/gfd-behaviour.md §3.1), the memory a pod can use (an MPS
  replica's pinned share), the MIG profile, the sharing strategy and replicas of the
  resource's sharing entry. A heterogeneous node's ``nvidia.com/gpu`` hands out any of its
  GPUs: its kind names every model (``+``-joined) and the smallest memory.
- DRA Nodes: no device-plugin resources, the labels of ``gfd labels --resource-manager
  dra``, and the ResourceSlices ``gfd.devices.resource_slices`` writes as the NVIDIA DRA
  driver does (``DynamicMIG`` on one machine: every profile x placement, sharing counters),
  with the DeviceClasses of the driver's chart (``gpu.nvidia.com`` names the extended resource
  ``nvidia.com/gpu``, as the chart does on resource.k8s.io/v1). A kind is the devices of one
  DeviceClass sharing productName, MIG profile and memory capacity; its total counts them.
- Allocated: what the prefill placed, counted by the rules of
  ../shared/reference/fleet.md: a bound, unfinished pod holds its effective request
  (``pod_requests``: regular containers summed, init containers one at a time, sidecars
  adding to both); a claim holds the devices its ``status.allocation`` names (written by
  kube-scheduler, read back from the API); an admin-access allocation holds nothing; a pod
  requesting ``nvidia.com/gpu`` on a DRA node holds the claim kube-scheduler made for it,
  never a device-plugin unit.
- Usable: a GPU pod here tolerates ``nvidia.com/gpu`` (any effect) and nothing else, so a
  cordoned node and a node with another NoSchedule taint are unusable.
- FREE is not computed here: kube-scheduler is its truth (``Fleet.run``: create the pods at
  once, wait until it has tried each; ``Fleet.release`` frees them).

The fleet's Nodes carry ``FLEET_LABEL`` (``gfd fleet -l`` reads them alone, whatever else the
session's control plane holds). A marker node with a foreign driver's devices serves
``Fleet.barrier``: a pod bound there proves kube-scheduler has seen every pod and claim change
made before it (its informers deliver in order), so a freed unit is free before the next
probe.
"""

from __future__ import annotations

import itertools
import re
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from gfd.devices import resource_slices
from gfd.dra import DEVICE_CLASSES, DRIVER, DYNAMIC_MIG
from helpers import placement
from helpers.controlplane import ApiStatus, ControlPlane, Process

JSON = dict[str, Any]

FLEET_LABEL = "gfd-test.example/fleet"
FLEET = "scheduler"
SELECTOR = f"{FLEET_LABEL}={FLEET}"
"""What ``gfd fleet -l`` reads: this fleet's Nodes, none of the session's others."""
BATCH_LABEL = "gfd-test.example/batch"
NAMESPACE = "fleet-sched"
ADMIN_NAMESPACE = "fleet-admin"
"""Admin-access claims are allowed only in a namespace labelled for them."""
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists"}
"""What a GPU pod tolerates here: the device plugin's and the GPU Operator's taint, alone."""
IMAGE = "registry.invalid/cuda:1"
WAIT = 120.0
"""Seconds for kube-scheduler to try a batch of pods, or to free what it held (well under
one each on a quiet machine; the bound is for a loaded 2-core one)."""
MARKER_DRIVER = "marker.gfd-test.example"
MARKER_NODE = "fleet-marker"
MARKER_DEVICES = 128
HOSTNAME = "kubernetes.io/hostname"
GPU_CLASS, MIG_CLASS = "gpu.nvidia.com", "mig.nvidia.com"
CLASS_OF_TYPE = {"gpu": GPU_CLASS, "mig": MIG_CLASS}
"""The driver chart's DeviceClasses by the device ``type`` each selects."""
EXTENDED_RESOURCE = {GPU_CLASS: "nvidia.com/gpu"}
"""The chart's ``extendedResourceName`` (deviceclass-gpu.yaml on resource.k8s.io/v1)."""
_serial = itertools.count(1)


# ----------------------------------------------------------------------------- kinds


@dataclass(frozen=True, order=True)
class Kind:
    """A GPU kind as the truth names it (the fields of a row of `gfd fleet`'s ``kinds``)."""

    manager: str
    resource: str
    model: str
    mig_profile: str
    sharing: str
    replicas: int
    memory: int | None

    def key(self) -> tuple[Any, ...]:
        """What tells kinds apart: a device-plugin kind is one resource of one model, profile
        and sharing; DRA kinds of one class also differ by memory (a DynamicMIG H100's full
        GPU has its largest profile's memory)."""
        return (self.manager, self.resource, _models(self.model), _profile(self.mig_profile),
                self.sharing, self.replicas, self.memory if self.manager == "dra" else None)

    def __str__(self) -> str:
        parts = [self.manager, self.model, self.mig_profile, self.resource,
                 f"{self.sharing}x{self.replicas}" if self.replicas > 1 else "",
                 f"{self.memory}MiB"]
        return " ".join(p for p in parts if p)


def row_key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    """``Kind.key`` of a row of `gfd fleet -o json` (``kinds`` or ``nodes``)."""
    return (row["manager"], row["resource"], _models(row["model"]), _profile(row["migProfile"]),
            row["sharing"], row["replicas"], row["memory"] if row["manager"] == "dra" else None)


def _models(text: str) -> str:
    """A heterogeneous resource's models, ``+``-joined, in any order."""
    return "+".join(sorted(text.split("+")))


def _profile(text: str) -> str:
    """``1g.10gb+me`` (the driver's attribute) and ``1g.10gb.me`` (the device plugin's
    resource) are one profile."""
    return text.replace("+", ".")


def sanitise(name: str) -> str:
    """gfd-behaviour.md §3.1: drop characters outside ``[A-Za-z0-9-_. ]``, join the
    whitespace-separated parts with ``-``."""
    return "-".join(re.sub(r"[^A-Za-z0-9\-_. ]", "", name).split())


_BINARY = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def mebibytes(quantity: str) -> int:
    match = re.fullmatch(r"([0-9]+)(Ki|Mi|Gi|Ti)?", quantity)
    assert match, f"not a binary quantity: {quantity}"
    return int(match.group(1)) * _BINARY[match.group(2) or ""] // 2**20


# ----------------------------------------------------------------------------- the machines


@dataclass(frozen=True)
class Spec:
    """One Node to build."""

    name: str
    machine: str
    manager: str = "device-plugin"
    strategy: str = "none"
    sharing: str = "none"
    dynamic_mig: bool = False
    cordon: bool = False
    taint: tuple[str, str] | None = None
    """(key, value) of a NoSchedule taint."""

    @property
    def usable(self) -> bool:
        """Whether a GPU pod (tolerating ``nvidia.com/gpu`` alone) can go there."""
        return not self.cordon and (self.taint is None or self.taint[0] == "nvidia.com/gpu")

    @property
    def state(self) -> str:
        if self.cordon:
            return "cordoned"
        return "ready" if self.usable else "tainted"


SPECS = [
    # the same H100 machine ready, tolerably tainted, cordoned with a pod on it, tainted
    Spec("fl-h100-a", "hgx-h100"),
    Spec("fl-h100-gpu-taint", "hgx-h100", taint=("nvidia.com/gpu", "present")),
    Spec("fl-h100-cordoned", "hgx-h100", cordon=True),
    Spec("fl-h100-dedicated", "hgx-h100", taint=("dedicated", "x")),
    # one DGX A100 layout under each strategy and sharing: 8 whole GPUs (none), 4 whole and
    # 13 MIG devices (mixed), the same with 1g.5gb replicated twice (ts-mig), 56 1g.5gb
    Spec("fl-a100-mig-none", "dgx-a100-mig-mixed", strategy="none"),
    Spec("fl-a100-mig-mixed", "dgx-a100-mig-mixed", strategy="mixed"),
    Spec("fl-a100-mig-ts", "dgx-a100-mig-mixed", strategy="mixed", sharing="ts-mig"),
    Spec("fl-a100-mig-single", "dgx-a100-mig-single", strategy="single"),
    # sharing: time-slicing in 4 and in 2, MPS, the renamed nvidia.com/gpu.shared
    Spec("fl-t4-ts4", "t4-time-sliced", sharing="ts4"),
    Spec("fl-t4-ts2", "t4-time-sliced", sharing="ts2-fail"),
    Spec("fl-laptop-mps", "geforce-laptop", sharing="mps4"),
    Spec("fl-laptop-renamed", "geforce-laptop", sharing="ts4-renamed"),
    # two A100 80GB and an A10 behind one nvidia.com/gpu
    Spec("fl-a100-a10", "mixed-a100-a10"),
    # the DRA driver's nodes: whole H100s, a mixed node, static MIG, DynamicMIG
    Spec("fl-dra-h100", "hgx-h100", manager="dra"),
    Spec("fl-dra-a100-a10", "mixed-a100-a10", manager="dra"),
    Spec("fl-dra-a100-mig", "dgx-a100-mig-mixed", manager="dra"),
    Spec("fl-dra-h100-dynamic", "h100-mig", manager="dra", dynamic_mig=True),
]


@dataclass(frozen=True)
class Prefill:
    """A pod the scheduler binds before `gfd fleet` runs: its containers' limits (device
    plugin or extended resources), or one ResourceClaim for ``count`` devices of ``cls``
    whose attributes match ``attrs``; pinned to ``node``."""

    node: str
    containers: tuple[Mapping[str, int], ...] = ()
    init: tuple[tuple[Mapping[str, int], bool], ...] = ()
    """Init containers: (limits, sidecar: ``restartPolicy: Always``)."""
    cls: str = ""
    attrs: Mapping[str, str] = field(default_factory=dict)
    count: int = 1
    admin: bool = False


PREFILL = [
    # init 3 GPUs, then 1 + 1: the pod needs max(3, 2) = 3
    Prefill("fl-h100-a", containers=({"nvidia.com/gpu": 1}, {"nvidia.com/gpu": 1}),
            init=(({"nvidia.com/gpu": 3}, False),)),
    Prefill("fl-h100-cordoned", containers=({"nvidia.com/gpu": 2},)),
    # a sidecar of 1 and then an init container of 2 (3 at once), then 1 beside the sidecar
    # (2): the pod needs 3
    Prefill("fl-a100-mig-none", containers=({"nvidia.com/gpu": 1},),
            init=(({"nvidia.com/gpu": 1}, True), ({"nvidia.com/gpu": 2}, False))),
    Prefill("fl-a100-mig-mixed", containers=({"nvidia.com/mig-1g.5gb": 2},)),
    Prefill("fl-a100-mig-mixed", containers=({"nvidia.com/mig-3g.20gb": 1},)),
    Prefill("fl-a100-mig-mixed", containers=({"nvidia.com/gpu": 1},)),
    Prefill("fl-a100-mig-ts", containers=({"nvidia.com/mig-1g.5gb": 1},)),
    Prefill("fl-a100-mig-single", containers=({"nvidia.com/gpu": 10},)),
    Prefill("fl-t4-ts4", containers=({"nvidia.com/gpu": 1},)),
    Prefill("fl-laptop-mps", containers=({"nvidia.com/gpu": 1},)),
    Prefill("fl-laptop-renamed", containers=({"nvidia.com/gpu.shared": 1},)),
    # DRA: two H100s by a claim, one through the class's extended resource
    Prefill("fl-dra-h100", cls=GPU_CLASS, attrs={"productName": "NVIDIA H100 80GB HBM3"},
            count=2),
    Prefill("fl-dra-h100", containers=({"nvidia.com/gpu": 1},)),
    Prefill("fl-dra-a100-a10", cls=GPU_CLASS, attrs={"productName": "NVIDIA A10"}),
    # an admin's access to an A100 80GB leaves it free for others
    Prefill("fl-dra-a100-a10", cls=GPU_CLASS, attrs={"productName": "NVIDIA A100 80GB PCIe"},
            admin=True),
    Prefill("fl-dra-a100-mig", cls=MIG_CLASS, attrs={"profile": "1g.5gb"}),
    # a 3g.40gb partition: its GPU's counters no longer hold the full GPU nor a 7g.80gb
    Prefill("fl-dra-h100-dynamic", cls=MIG_CLASS, attrs={"profile": "3g.40gb"}),
]

PENDING = ("nvidia.com/gpu", 9, ("fl-h100-a", "fl-h100-gpu-taint"))
"""A pod asking for 9 H100s of the device plugin, admitting two 8-GPU nodes: pending."""


def pod_requests(pod: JSON, resource: str) -> int:
    """The scheduler's request of one resource by a pod (component-helpers'
    ``PodRequests``, KEP-753): regular containers and sidecars summed; each init container
    runs with the sidecars started before it; the larger of the two."""
    spec = pod["spec"]

    def of(container: JSON) -> int:
        return int(container.get("resources", {}).get("limits", {}).get(resource, 0))

    sidecars = 0
    init_peak = 0
    for container in spec.get("initContainers", []):
        if container.get("restartPolicy") == "Always":
            sidecars += of(container)
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, sidecars + of(container))
    return max(init_peak, sidecars + sum(of(c) for c in spec["containers"]))


# ----------------------------------------------------------------------------- the nodes


@dataclass
class Node:
    spec: Spec
    labels: dict[str, str]
    units: dict[str, list[placement.Unit]]
    """Device plugin: resource -> its units (``placement.units``)."""
    slices: list[JSON]
    """DRA: the ResourceSlices as the API server holds them."""
    kinds: dict[str, Kind]
    """Device plugin: resource -> its kind; DRA: device name -> its kind."""

    @property
    def name(self) -> str:
        return self.spec.name

    def totals(self) -> Counter[Kind]:
        if self.spec.manager == "dra":
            return Counter(self.kinds.values())
        return Counter({self.kinds[r]: len(us) for r, us in self.units.items()})

    def devices(self) -> Iterator[JSON]:
        for rs in self.slices:
            yield from rs["spec"].get("devices", [])


def _dp_kinds(spec: Spec, units: Mapping[str, list[placement.Unit]]) -> dict[str, Kind]:
    config = placement.SHARING[spec.sharing]
    out: dict[str, Kind] = {}
    for resource, us in units.items():
        model = "+".join(sorted({sanitise(u.model) for u in us}))
        replicas = us[0].replicas
        sharing = "none" if replicas == 1 else ("mps" if config and "mps" in config
                                                 else "time-slicing")
        out[resource] = Kind("device-plugin", resource, model, us[0].profile, sharing,
                             replicas, min(u.memory_mib for u in us))
    return out


def _dra_kind(device: JSON) -> Kind:
    attrs = {k: next(iter(v.values())) for k, v in device["attributes"].items()}
    memory = device.get("capacity", {}).get("memory")
    return Kind("dra", CLASS_OF_TYPE[str(attrs["type"])], sanitise(str(attrs["productName"])),
                str(attrs.get("profile", "")), "none", 1,
                mebibytes(memory["value"]) if memory else None)


# ----------------------------------------------------------------------------- probing


@dataclass
class Outcome:
    """What kube-scheduler did with a batch: pod -> node for the bound, pod -> message for
    the Unschedulable."""

    bound: dict[str, str]
    refused: dict[str, str]

    def per_node(self) -> Counter[str]:
        return Counter(self.bound.values())


@dataclass
class Batch:
    """Pods (and the claims they use) created at once, to be tried and then freed."""

    label: str
    pods: list[JSON]
    claims: list[JSON] = field(default_factory=list)
    template: JSON | None = None
    """A ResourceClaimTemplate the pods name: the claims are made from it per pod, as
    kube-controller-manager's resourceclaim controller makes them (none runs here)."""


@dataclass
class Fleet:
    control_plane: ControlPlane
    scheduler: Process
    nodes: dict[str, Node]
    prefill: list[JSON] = field(default_factory=list)
    """The prefill pods as the API server holds them once bound."""
    created: list[JSON | str] = field(default_factory=list)
    """What to delete at the end, in reverse order."""
    restore: list[JSON] = field(default_factory=list)
    """DeviceClasses as they were before the fleet changed them (None spec: absent)."""

    # -- the truth

    def allocated(self) -> dict[tuple[str, Kind], int]:
        """(node, kind) -> units held: the prefill pods' requests on device-plugin nodes,
        the devices of allocated claims (not admin access) on DRA nodes."""
        held: Counter[tuple[str, Kind]] = Counter()
        for pod in self.prefill:
            node = self.nodes[pod["spec"]["nodeName"]]
            if node.spec.manager == "device-plugin":
                for resource in node.units:
                    held[node.name, node.kinds[resource]] += pod_requests(pod, resource)
        for namespace in (NAMESPACE, ADMIN_NAMESPACE):
            for claim in self.list(f"/apis/resource.k8s.io/v1/namespaces/{namespace}/"
                                   "resourceclaims"):
                for result in claim.get("status", {}).get("allocation", {}).get(
                        "devices", {}).get("results", []):
                    if result.get("adminAccess") or result["pool"] not in self.nodes:
                        continue
                    node = self.nodes[result["pool"]]
                    held[node.name, node.kinds[result["device"]]] += 1
        return dict(held)

    def kinds(self) -> dict[Kind, JSON]:
        """Each kind's row as the truth has it: schedulable nodes, total, allocated, what
        is on unusable nodes, and the units pending pods ask for."""
        held = self.allocated()
        rows: dict[Kind, JSON] = {}
        for node in self.nodes.values():
            for kind, total in node.totals().items():
                row = rows.setdefault(kind, {
                    "nodes": 0, "total": 0, "allocated": 0, "pending": 0,
                    "unschedulable": {"nodes": 0, "total": 0, "allocated": 0}})
                into = row if node.spec.usable else row["unschedulable"]
                into["nodes"] += 1
                into["total"] += total
                into["allocated"] += held.get((node.name, kind), 0)
        resource, count, admitted = PENDING
        for kind in {self.nodes[n].kinds[resource] for n in admitted}:
            rows[kind]["pending"] += count
        return rows

    def node_rows(self) -> dict[tuple[str, Kind], JSON]:
        held = self.allocated()
        return {(node.name, kind): {"state": node.spec.state, "total": total,
                                    "allocated": held.get((node.name, kind), 0)}
                for node in self.nodes.values() for kind, total in node.totals().items()}

    def devices_of(self, key: tuple[Any, ...], nodes: Iterable[str]) -> list[JSON]:
        """The devices of the named DRA nodes whose kind has this key."""
        return [d for n in nodes for d in self.nodes[n].devices()
                if _dra_kind(d).key() == key]

    # -- REST

    def list(self, path: str, selector: str = "") -> list[JSON]:
        query = {"labelSelector": selector} if selector else None
        return list(self.control_plane.request("GET", path, query=query)[1]["items"])

    def pods(self, label: str) -> list[JSON]:
        return self.list(f"/api/v1/namespaces/{NAMESPACE}/pods", f"{BATCH_LABEL}={label}")

    # -- batches

    def run(self, batch: Batch) -> Outcome:
        """Create the batch's claims and pods at once and return once kube-scheduler has
        tried every pod: bound (``spec.nodeName``) or ``PodScheduled=False`` Unschedulable.
        The pods stay until ``release``."""
        self.barrier()
        cp = self.control_plane
        for claim in batch.claims:
            cp.create(claim)
        if batch.template is not None:
            cp.create(batch.template)
        for pod in batch.pods:
            made = cp.create(pod)
            if batch.template is not None:
                self._claim_from_template(made, batch)
        return self.settle(batch.label, len(batch.pods))

    def _claim_from_template(self, pod: JSON, batch: Batch) -> None:
        """What the resourceclaim controller does for a pod naming a template: the claim
        (owned by the pod, annotated with its pod claim name), then the pod's
        ``status.resourceClaimStatuses``."""
        assert batch.template is not None
        (pod_claim,) = pod["spec"]["resourceClaims"]
        meta = pod["metadata"]
        claim = self.control_plane.create({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"generateName": f"{meta['name']}-{pod_claim['name']}-",
                         "namespace": NAMESPACE, "labels": {BATCH_LABEL: batch.label},
                         "annotations": {
                             "resource.kubernetes.io/pod-claim-name": pod_claim["name"]},
                         "ownerReferences": [{
                             "apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                             "uid": meta["uid"], "controller": True,
                             "blockOwnerDeletion": True}]},
            "spec": batch.template["spec"]["spec"]})
        self.control_plane.patch(
            f"/api/v1/namespaces/{NAMESPACE}/pods/{meta['name']}/status",
            {"status": {"resourceClaimStatuses": [{
                "name": pod_claim["name"], "resourceClaimName": claim["metadata"]["name"]}]}})

    def settle(self, label: str, count: int, timeout: float = WAIT) -> Outcome:
        deadline = time.monotonic() + timeout
        while True:
            pods = self.pods(label)
            bound = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods
                     if p["spec"].get("nodeName")}
            refused = {p["metadata"]["name"]: c.get("message", "") for p in pods
                       for c in p["status"].get("conditions", [])
                       if c["type"] == "PodScheduled" and c["status"] == "False"
                       and c.get("reason") == "Unschedulable" and not p["spec"].get("nodeName")}
            if len(pods) == count and len(bound) + len(refused) == count:
                return Outcome(bound, refused)
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"kube-scheduler tried {len(bound) + len(refused)} of {count} pods of "
                    f"batch {label} within {timeout:.0f} s ({len(bound)} bound)\n"
                    f"kube-scheduler:\n{self.scheduler.tail(10)}")
            time.sleep(0.1)

    def release(self, label: str) -> None:
        """Free what the batch holds: its pods end (``Succeeded``: the scheduler drops
        ended pods) and are deleted at once (no kubelet confirms), its claims and template
        are deleted; return once every claim is gone."""
        cp = self.control_plane
        base = f"/api/v1/namespaces/{NAMESPACE}/pods"
        pods = self.pods(label)
        for pod in pods:
            path = f"{base}/{pod['metadata']['name']}"
            if pod["spec"].get("nodeName") and not pod["spec"].get("resourceClaims"):
                cp.patch(f"{path}/status", {"status": {"phase": "Succeeded"}})
            cp.request("DELETE", path, query={"gracePeriodSeconds": "0"}, expect=(200, 404))
        # the batch's own claims, and those kube-scheduler made for a pod's extended
        # resources (owned by the pod; no garbage collector runs)
        uids = {p["metadata"]["uid"] for p in pods}
        claims = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"
        names = [c["metadata"]["name"] for c in self.list(claims)
                 if c["metadata"].get("labels", {}).get(BATCH_LABEL) == label
                 or {o["uid"] for o in c["metadata"].get("ownerReferences", [])} & uids]
        for name in names:
            self._delete_claim(f"{claims}/{name}")
        templates = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaimtemplates"
        for template in self.list(templates, f"{BATCH_LABEL}={label}"):
            cp.delete(f"{templates}/{template['metadata']['name']}", wait=False)
        deadline = time.monotonic() + WAIT
        while [n for n in names if cp.get(f"{claims}/{n}") is not None]:
            assert time.monotonic() < deadline, f"claims of batch {label} not deleted"
            time.sleep(0.05)

    def _delete_claim(self, path: str) -> None:
        """No resourceclaim controller removes the scheduler's delete-protection
        finalizer: the test does, then deletes."""
        try:
            self.control_plane.patch(path, {"metadata": {"finalizers": None}})
        except ApiStatus as exc:
            if exc.status != 404:
                raise
        self.control_plane.delete(path, wait=False)

    def barrier(self) -> None:
        """Return once kube-scheduler has seen every pod and claim change made so far: a
        pod using a claim of the marker driver is bound (both informers deliver in order,
        so the earlier deletions reached its caches first). The marker pod and claim are
        deleted; the marker node has more devices than a run uses."""
        n = next(_serial)
        label = f"marker-{n}"
        self.control_plane.create(claim(f"marker-{n}", label, MARKER_DRIVER, count=1, cel=""))
        self.control_plane.create(pod(f"marker-{n}", label, nodes=[MARKER_NODE],
                                      claims=[f"marker-{n}"], tolerate=False))
        outcome = self.settle(label, 1)
        assert outcome.bound == {f"marker-{n}": MARKER_NODE}, outcome
        cp = self.control_plane
        cp.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/marker-{n}",
                   query={"gracePeriodSeconds": "0"}, expect=(200, 404))
        self._delete_claim(
            f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims/marker-{n}")


def pod(name: str, label: str, *, nodes: Iterable[str] = (),
        limits: Iterable[Mapping[str, int]] = (), claims: Iterable[str] = (),
        init: Iterable[tuple[Mapping[str, int], bool]] = (), tolerate: bool = True,
        namespace: str = NAMESPACE) -> JSON:
    """A pod of the fleet: containers with these limits (or one using the claims), pinned
    by hostname to ``nodes`` (required node affinity), tolerating ``nvidia.com/gpu``."""
    containers: list[JSON] = [{"name": f"c{i}", "image": IMAGE,
                               "resources": {"limits": dict(lim)}}
                              for i, lim in enumerate(limits)]
    claims = list(claims)
    if claims:
        containers = containers or [{"name": "c0", "image": IMAGE, "resources": {}}]
        containers[0]["resources"]["claims"] = [{"name": f"r{i}"} for i in range(len(claims))]
    spec: JSON = {"containers": containers, "terminationGracePeriodSeconds": 0}
    inits = [{"name": f"i{i}", "image": IMAGE, "resources": {"limits": dict(lim)},
              **({"restartPolicy": "Always"} if sidecar else {})}
             for i, (lim, sidecar) in enumerate(init)]
    if inits:
        spec["initContainers"] = inits
    if claims:
        spec["resourceClaims"] = [{"name": f"r{i}", "resourceClaimName": c}
                                  for i, c in enumerate(claims)]
    nodes = list(nodes)
    if nodes:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": HOSTNAME, "operator": "In", "values": sorted(nodes)}]}]}}}
    if tolerate:
        spec["tolerations"] = [dict(GPU_TOLERATION)]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {BATCH_LABEL: label}},
            "spec": spec}


def claim(name: str, label: str, device_class: str, *, count: int, cel: str,
          admin: bool = False, namespace: str = NAMESPACE) -> JSON:
    exactly: JSON = {"deviceClassName": device_class, "allocationMode": "ExactCount",
                     "count": count}
    if cel:
        exactly["selectors"] = [{"cel": {"expression": cel}}]
    if admin:
        exactly["adminAccess"] = True
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace, "labels": {BATCH_LABEL: label}},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}


def _literal(text: str) -> str:
    assert "'" not in text and "\\" not in text, text
    return f"'{text}'"


def device_cel(devices: Iterable[JSON]) -> str:
    """A CEL selector for exactly these devices' kind: productName, MIG profile (absent on a
    full GPU) and memory capacity as the devices carry them (OR-ed where they differ)."""
    terms = set()
    for d in devices:
        attrs = {k: next(iter(v.values())) for k, v in d["attributes"].items()}
        parts = [f"device.attributes['{DRIVER}'].productName == "
                 f"{_literal(str(attrs['productName']))}"]
        if "profile" in attrs:
            parts.append(f"device.attributes['{DRIVER}'].profile == "
                         f"{_literal(str(attrs['profile']))}")
        memory = d.get("capacity", {}).get("memory")
        if memory:
            parts.append(f"device.capacity['{DRIVER}'].memory.compareTo("
                         f"quantity({_literal(memory['value'])})) == 0")
        terms.add(" && ".join(parts))
    assert terms, "no devices"
    return " || ".join(f"({t})" for t in sorted(terms))


def attrs_cel(attrs: Mapping[str, str]) -> str:
    return " && ".join(f"device.attributes['{DRIVER}'].{k} == {_literal(v)}"
                       for k, v in sorted(attrs.items()))


# ----------------------------------------------------------------------------- building


def _device_classes(cp: ControlPlane) -> list[JSON]:
    """The driver chart's DeviceClasses (and the marker driver's); returns what to restore."""
    previous: list[JSON] = []
    wanted = {name: {"selectors": [{"cel": {"expression": expression}}],
                     **({"extendedResourceName": EXTENDED_RESOURCE[name]}
                        if name in EXTENDED_RESOURCE else {})}
              for name, expression in DEVICE_CLASSES.items()}
    wanted[MARKER_DRIVER] = {"selectors": [{"cel": {
        "expression": f"device.driver == '{MARKER_DRIVER}'"}}]}
    for name, spec in wanted.items():
        path = f"/apis/resource.k8s.io/v1/deviceclasses/{name}"
        current = cp.get(path)
        previous.append({"metadata": {"name": name},
                         "spec": current["spec"] if current else None})
        obj = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
               "metadata": {"name": name}, "spec": spec}
        if current is None:
            cp.create(obj)
        else:
            cp.request("PUT", path, {**obj, "metadata": current["metadata"]})
    return previous


def _restore_device_classes(cp: ControlPlane, previous: list[JSON]) -> None:
    for was in previous:
        path = f"/apis/resource.k8s.io/v1/deviceclasses/{was['metadata']['name']}"
        current = cp.get(path)
        if was["spec"] is None:
            cp.delete(path, wait=False)
        elif current is not None:
            cp.request("PUT", path, {**current, "spec": was["spec"]})


def truth_of(spec: Spec) -> Node:
    """The node as the truth has it, before anything is created: its gfd labels, its
    device-plugin units or the driver's ResourceSlices, and its kinds."""
    snapshot = placement.machines()[spec.machine]
    config = placement.SHARING[spec.sharing]
    labels = placement.node_labels(snapshot, spec.strategy, config, "extended", spec.manager)
    assert labels, f"gfd publishes no labels for {spec}"
    if spec.manager == "device-plugin":
        units = placement.units(snapshot, spec.strategy, config, "device-plugin")
        assert units, f"the device plugin does not start on {spec}"
        return Node(spec, labels, units, [], _dp_kinds(spec, units))
    gates = {DYNAMIC_MIG: True} if spec.dynamic_mig else None
    node = Node(spec, labels, {}, resource_slices(snapshot, node=spec.name, gates=gates), {})
    assert node.slices, f"the driver does not start on {spec}"
    node.kinds = {d["name"]: _dra_kind(d) for d in node.devices()}
    return node


def truth_kinds() -> list[Kind]:
    """Every kind of the fleet, known before it is built (for parametrising tests)."""
    return sorted({k for spec in SPECS for k in truth_of(spec).kinds.values()})


def _create_node(cp: ControlPlane, spec: Spec) -> Node:
    node = truth_of(spec)
    labels = {**node.labels, HOSTNAME: spec.name, "kubernetes.io/os": "linux",
              FLEET_LABEL: FLEET}
    cp.create_node(spec.name, labels=labels,
                   allocatable={r: str(len(us)) for r, us in node.units.items()})
    node.slices = [cp.create(rs) for rs in node.slices]
    return node


def install_marker(cp: ControlPlane) -> list[JSON | str]:
    """A node without GPUs or the fleet label, and a foreign driver's devices on it (what
    ``Fleet.barrier`` binds to; its DeviceClass is the caller's); returns what to delete."""
    cp.create_node(MARKER_NODE)
    rs = cp.create({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                    "metadata": {"name": f"{MARKER_NODE}-marker"},
                    "spec": {"driver": MARKER_DRIVER, "nodeName": MARKER_NODE,
                             "pool": {"name": MARKER_NODE, "generation": 1,
                                      "resourceSliceCount": 1},
                             "devices": [{"name": f"m-{i}"} for i in range(MARKER_DEVICES)]}})
    return [f"/api/v1/nodes/{MARKER_NODE}", rs]


def _prefill(fleet: Fleet) -> None:
    cp = fleet.control_plane
    pods: list[str] = []
    for i, p in enumerate(PREFILL):
        name, namespace = f"prefill-{i}", ADMIN_NAMESPACE if p.admin else NAMESPACE
        claims: list[str] = []
        if p.cls:
            cp.create(claim(name, "prefill", p.cls, count=p.count, cel=attrs_cel(p.attrs),
                            admin=p.admin, namespace=namespace))
            claims.append(name)
        cp.create(pod(name, "prefill", nodes=[p.node], limits=p.containers, init=p.init,
                      claims=claims, namespace=namespace))
        pods.append(f"/api/v1/namespaces/{namespace}/pods/{name}")
    deadline = time.monotonic() + WAIT
    while True:
        bound = [cp.get(path) for path in pods]
        if all(b and b["spec"].get("nodeName") for b in bound):
            break
        assert time.monotonic() < deadline, (
            "the prefill was not bound: " + ", ".join(
                f"{b['metadata']['name']}: {b['status']}" for b in bound
                if b and not b["spec"].get("nodeName")) + f"\n{fleet.scheduler.tail(10)}")
        time.sleep(0.1)
    for b, p in zip(bound, PREFILL, strict=True):
        assert b is not None and b["spec"]["nodeName"] == p.node, b
    fleet.prefill = [b for b in bound if b is not None]


def build(cp: ControlPlane, scheduler: Process) -> Fleet:
    """The fleet, prefilled and bound, then cordoned and tainted, with one pending pod.
    ``teardown`` removes it (call it also when this raises: ``created`` holds what was
    made)."""
    fleet = Fleet(cp, scheduler, {})
    fleet.restore = _device_classes(cp)
    cp.create_namespace(NAMESPACE)
    cp.create_namespace(ADMIN_NAMESPACE,
                        labels={"resource.kubernetes.io/admin-access": "true"})
    try:
        fleet.created.extend(install_marker(cp))
        for spec in SPECS:
            fleet.created.append(f"/api/v1/nodes/{spec.name}")
            node = _create_node(cp, spec)
            fleet.created.extend(node.slices)
            fleet.nodes[spec.name] = node
        _prefill(fleet)
        for spec in SPECS:
            patch: JSON = {}
            if spec.cordon:
                patch["unschedulable"] = True
            if spec.taint:
                patch["taints"] = [{"key": spec.taint[0], "value": spec.taint[1],
                                    "effect": "NoSchedule"}]
            if patch:
                cp.patch(f"/api/v1/nodes/{spec.name}", {"spec": patch})
        resource, count, admitted = PENDING
        cp.create(pod("pending", "pending", nodes=admitted, limits=[{resource: count}]))
        fleet.settle("pending", 1)
    except BaseException:
        teardown(fleet)
        raise
    return fleet


def teardown(fleet: Fleet) -> None:
    """Delete the fleet's pods and claims (finalizers removed), Nodes, slices and marker,
    and put the DeviceClasses back as they were."""
    cp = fleet.control_plane
    for namespace in (NAMESPACE, ADMIN_NAMESPACE):
        for p in fleet.list(f"/api/v1/namespaces/{namespace}/pods"):
            cp.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{p['metadata']['name']}",
                       query={"gracePeriodSeconds": "0"}, expect=(200, 404))
        claims = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
        for c in fleet.list(claims):
            fleet._delete_claim(f"{claims}/{c['metadata']['name']}")
    for obj in reversed(fleet.created):
        cp.delete(obj, wait=False)
    _restore_device_classes(cp, fleet.restore)
