"""A fleet of simulated GPU machines on a real control plane where pods stay pending for GPU
reasons, for `gfd why` against the real kube-scheduler (tests/realapi/test_why_scheduler.py).

The machines are tests/helpers/fleetbuild.py's (``truth_of``: the device plugin's allocatable,
gfd's labels, the DRA driver's ResourceSlices), each node changed the one way its case needs:
a device plugin that is down (labels, 0 allocatable), a node whose pod slots are full, a pool
with a slice missing, a pool that repeats a device name, devices carrying a taint. Nodes carry
``FLEET_LABEL`` and every pod selects it, so whatever other nodes the session's control plane
holds count for the pods only as nodes they do not select. The driver chart's DeviceClasses are
installed (``gpu.nvidia.com`` serves ``nvidia.com/gpu``) and put back as they were afterwards.

kube-controller-manager's resourceclaim controller runs beside kube-scheduler (the caller
starts it), so a pod naming a ResourceClaimTemplate gets its claim as in a cluster.

The truth of each pending pod is the scheduler's own message (its ``PodScheduled`` condition),
never gfd's: ``reasons`` parses "0/N nodes are available: 3 Insufficient nvidia.com/gpu, 2
node(s) had untolerated taint(s). preemption: ..." into its counts per reason."""

from __future__ import annotations

import copy
import re
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from helpers import fleetbuild
from helpers.controlplane import ApiStatus, ControlPlane
from helpers.fleetbuild import Spec, truth_of

JSON = dict[str, Any]

FLEET_LABEL = "gfd-test.example/why"
FLEET = "scheduler"
NAMESPACE = "why-sched"
CASE_LABEL = "gfd-test.example/case"
HOSTNAME = "kubernetes.io/hostname"
IMAGE = "registry.invalid/cuda:1"
GPU = "nvidia.com/gpu"
GPU_CLASS, MIG_CLASS = "gpu.nvidia.com", "mig.nvidia.com"
WAIT = 120.0
"""Seconds for kube-scheduler (and the resourceclaim controller) to try a pod, or for what a
released pod held to be freed: well under one on a quiet machine, the bound is for a loaded
2-core one."""
DEVICE_TAINT = {"key": "example.com/maintenance", "value": "firmware", "effect": "NoSchedule"}
PODS_API = f"/api/v1/namespaces/{NAMESPACE}/pods"
CLAIMS_API = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"
TEMPLATES_API = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaimtemplates"


@dataclass(frozen=True)
class Machine:
    """One Node to build: fleetbuild's spec, and how it is changed."""

    spec: Spec
    allocatable: Mapping[str, str] = field(default_factory=dict)
    """Overrides of what the device plugin would advertise."""
    slices: str = ""
    """DRA: ``incomplete`` (a pool of 2 slices with 1 published), ``invalid`` (a device name
    repeated across the pool's 2 slices), ``tainted`` (every device NoSchedule-tainted)."""


MACHINES = [
    Machine(Spec("wy-h100-a", "hgx-h100")),
    Machine(Spec("wy-h100-taint", "hgx-h100", taint=("nvidia.com/gpu", "present"))),
    Machine(Spec("wy-h100-cordon", "hgx-h100", cordon=True)),
    Machine(Spec("wy-h100-down", "hgx-h100"), allocatable={GPU: "0"}),
    Machine(Spec("wy-h100-full", "hgx-h100"), allocatable={"pods": "1"}),
    Machine(Spec("wy-h100-mig", "h100-mig", strategy="mixed")),
    Machine(Spec("wy-a100-single", "dgx-a100-mig-single", strategy="single")),
    Machine(Spec("wy-t4-shared", "t4-time-sliced", sharing="ts4")),
    Machine(Spec("wy-laptop-renamed", "geforce-laptop", sharing="ts4-renamed")),
    Machine(Spec("wy-a100-a10", "mixed-a100-a10")),
    Machine(Spec("wy-dra-h100", "hgx-h100", manager="dra")),
    Machine(Spec("wy-dra-dyn", "h100-mig", manager="dra", dynamic_mig=True)),
    Machine(Spec("wy-dra-incomplete", "geforce-laptop", manager="dra"), slices="incomplete"),
    Machine(Spec("wy-dra-invalid", "geforce-laptop", manager="dra"), slices="invalid"),
    Machine(Spec("wy-dra-tainted", "geforce-laptop", manager="dra"), slices="tainted"),
]
NODES = [m.spec.name for m in MACHINES]


# ----------------------------------------------------------------------------- objects


def pod(name: str, *, limits: Iterable[Mapping[str, Any]] = ({},), hosts: Iterable[str] = (),
        init: Iterable[tuple[Mapping[str, Any], bool]] = (), tolerate: bool = True,
        claims: Iterable[str] = (), templates: Iterable[str] = (),
        selector: Mapping[str, str] | None = None, fields: Iterable[str] = (),
        label: str = "") -> JSON:
    """A pod of the fleet (it selects ``FLEET_LABEL``): containers with these limits, init
    containers (limits, sidecar), pinned by hostname to ``hosts`` (required node affinity) or
    by ``metadata.name`` to ``fields``, tolerating ``nvidia.com/gpu`` unless told not to, using
    the named claims and the claims of the named templates (all from its first container)."""
    containers: list[JSON] = [{"name": f"c{i}", "image": IMAGE,
                               "resources": {"limits": {k: str(v) for k, v in lim.items()}}}
                              for i, lim in enumerate(limits)]
    refs = [{"name": f"claim-{i}", "resourceClaimName": c} for i, c in enumerate(claims)]
    refs += [{"name": f"tmpl-{i}", "resourceClaimTemplateName": t}
             for i, t in enumerate(templates)]
    if refs:
        containers[0]["resources"]["claims"] = [{"name": r["name"]} for r in refs]
    spec: JSON = {"containers": containers, "terminationGracePeriodSeconds": 0,
                  "nodeSelector": {FLEET_LABEL: FLEET, **(selector or {})}}
    inits = [{"name": f"i{i}", "image": IMAGE,
              "resources": {"limits": {k: str(v) for k, v in lim.items()}},
              **({"restartPolicy": "Always"} if sidecar else {})}
             for i, (lim, sidecar) in enumerate(init)]
    if inits:
        spec["initContainers"] = inits
    if refs:
        spec["resourceClaims"] = refs
    hosts, fields = sorted(hosts), list(fields)
    if hosts:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": HOSTNAME, "operator": "In", "values": hosts}]}]}}}
    if fields:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [f]}]} for f in fields]}}}
    if tolerate:
        spec["tolerations"] = [dict(fleetbuild.GPU_TOLERATION)]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE,
                         "labels": {CASE_LABEL: label or name}},
            "spec": spec}


def _exactly(device_class: str, count: int, cel: str = "") -> JSON:
    exactly: JSON = {"deviceClassName": device_class, "allocationMode": "ExactCount",
                     "count": count}
    if cel:
        exactly["selectors"] = [{"cel": {"expression": cel}}]
    return exactly


def claim(name: str, device_class: str = GPU_CLASS, *, count: int = 1, cel: str = "",
          label: str = "") -> JSON:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": NAMESPACE,
                         "labels": {CASE_LABEL: label or name}},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly":
                                               _exactly(device_class, count, cel)}]}}}


def template(name: str, device_class: str = GPU_CLASS, *, count: int = 1, cel: str = "",
             label: str = "") -> JSON:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": NAMESPACE,
                         "labels": {CASE_LABEL: label or name}},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly":
                                                        _exactly(device_class, count, cel)}]}}}}


# ----------------------------------------------------------------------------- the fleet


def _slices(machine: Machine, slices: list[JSON]) -> list[JSON]:
    out = copy.deepcopy(slices)
    if machine.slices == "incomplete":
        for rs in out:
            rs["spec"]["pool"]["resourceSliceCount"] = 2
    elif machine.slices == "invalid":
        (rs,) = out
        rs["spec"]["pool"]["resourceSliceCount"] = 2
        twin = copy.deepcopy(rs)
        twin["metadata"]["name"] += "-twin"
        out.append(twin)
    elif machine.slices == "tainted":
        for rs in out:
            for device in rs["spec"].get("devices", []):
                device["taints"] = [dict(DEVICE_TAINT)]
    return out


@dataclass
class Fleet:
    control_plane: ControlPlane
    created: list[str] = field(default_factory=list)
    restore: list[JSON] = field(default_factory=list)
    device_taints: bool = True
    """The API server kept the devices' taints (``DRADeviceTaints``)."""

    def list(self, path: str, selector: str = "") -> list[JSON]:
        query = {"labelSelector": selector} if selector else None
        return list(self.control_plane.request("GET", path, query=query)[1]["items"])

    def get_pod(self, name: str) -> JSON | None:
        return self.control_plane.get(f"{PODS_API}/{name}")

    def tried(self, name: str, timeout: float = WAIT) -> JSON:
        """The pod once kube-scheduler has tried it: bound (``spec.nodeName``), or its
        ``PodScheduled`` condition False (Unschedulable)."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.get_pod(name)
            if found is not None and (found["spec"].get("nodeName") or message(found)):
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"kube-scheduler did not try pod {name} within "
                                     f"{timeout:.0f} s: {found and found.get('status')}")
            time.sleep(0.1)

    def bound(self, name: str, timeout: float = WAIT) -> str:
        """The node the pod gets bound to (its ``spec.nodeName``), waiting for it."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.get_pod(name)
            if found is not None and found["spec"].get("nodeName"):
                return str(found["spec"]["nodeName"])
            if time.monotonic() > deadline:
                raise AssertionError(f"pod {name} not bound within {timeout:.0f} s: "
                                     f"{found and message(found)}")
            time.sleep(0.1)

    def create(self, objects: Iterable[JSON]) -> None:
        """Claims and templates first, then pods (a pod's claims exist when it is tried)."""
        objects = list(objects)
        for obj in sorted(objects, key=lambda o: o["kind"] == "Pod"):
            self.control_plane.create(copy.deepcopy(obj))

    def release(self, label: str) -> None:
        """Delete a case's pods (ended first: the scheduler frees what an ended pod held at
        once), its claims (the scheduler's finalizer removed: no driver runs), its templates,
        and the claims made for its pods; return once the claims are gone."""
        cp = self.control_plane
        pods = self.list(PODS_API, f"{CASE_LABEL}={label}")
        uids = {p["metadata"]["uid"] for p in pods}
        for p in pods:
            path = f"{PODS_API}/{p['metadata']['name']}"
            if p["spec"].get("nodeName"):
                try:
                    cp.patch(f"{path}/status", {"status": {"phase": "Succeeded"}})
                except ApiStatus as exc:
                    if exc.status != 404:
                        raise
            cp.request("DELETE", path, query={"gracePeriodSeconds": "0"}, expect=(200, 404))
        names = [c["metadata"]["name"] for c in self.list(CLAIMS_API)
                 if c["metadata"].get("labels", {}).get(CASE_LABEL) == label
                 or {o["uid"] for o in c["metadata"].get("ownerReferences", [])} & uids]
        for name in names:
            delete_claim(cp, f"{CLAIMS_API}/{name}")
        for t in self.list(TEMPLATES_API, f"{CASE_LABEL}={label}"):
            cp.delete(f"{TEMPLATES_API}/{t['metadata']['name']}", wait=False)
        deadline = time.monotonic() + WAIT
        while [n for n in names if cp.get(f"{CLAIMS_API}/{n}") is not None] or \
                [p for p in pods if cp.get(f"{PODS_API}/{p['metadata']['name']}") is not None]:
            assert time.monotonic() < deadline, f"case {label} not deleted"
            time.sleep(0.05)


def delete_claim(cp: ControlPlane, path: str) -> None:
    """No driver removes the scheduler's delete-protection finalizer: the test does."""
    try:
        cp.patch(path, {"metadata": {"finalizers": None}})
    except ApiStatus as exc:
        if exc.status != 404:
            raise
    cp.delete(path, wait=False)


PREFILL: list[JSON] = [
    # 3 of wy-h100-a's 8 GPUs held
    pod("hold-h100-a", limits=[{GPU: 3}], hosts=["wy-h100-a"], label="prefill"),
    # wy-h100-full's one pod slot taken (by a pod that asks for no GPU)
    pod("hold-slot", limits=[{"cpu": "1"}], hosts=["wy-h100-full"], label="prefill"),
    # 2 of wy-dra-h100's devices held by a claim that another pod shares
    claim("shared", count=2, label="prefill"),
    pod("hold-shared", claims=["shared"], hosts=["wy-dra-h100"], label="prefill"),
    # both GPUs of wy-dra-dyn whole: every MIG partition's counters consumed
    claim("whole-gpus", count=2, label="prefill"),
    pod("hold-whole-gpus", claims=["whole-gpus"], hosts=["wy-dra-dyn"], label="prefill"),
]


def build(cp: ControlPlane) -> Fleet:
    """The nodes, their slices and the prefill, bound; ``teardown`` removes it (call it also
    when this raises: ``created`` holds what was made)."""
    fleet = Fleet(cp)
    fleet.restore = fleetbuild._device_classes(cp)
    cp.create_namespace(NAMESPACE)
    try:
        for machine in MACHINES:
            spec = machine.spec
            node = truth_of(spec)
            labels = {**node.labels, HOSTNAME: spec.name, "kubernetes.io/os": "linux",
                      FLEET_LABEL: FLEET}
            allocatable = {r: str(len(us)) for r, us in node.units.items()}
            fleet.created.append(f"/api/v1/nodes/{spec.name}")
            cp.create_node(spec.name, labels=labels,
                           allocatable={**allocatable, **machine.allocatable})
            for rs in _slices(machine, node.slices):
                made = cp.create(rs)
                fleet.created.append(f"/apis/resource.k8s.io/v1/resourceslices/"
                                     f"{made['metadata']['name']}")
                if machine.slices == "tainted":
                    fleet.device_taints &= all(
                        d.get("taints") for d in made["spec"].get("devices", []))
            patch: JSON = {}
            if spec.cordon:
                patch["unschedulable"] = True
            if spec.taint:
                patch["taints"] = [{"key": spec.taint[0], "value": spec.taint[1],
                                    "effect": "NoSchedule"}]
            if patch:
                cp.patch(f"/api/v1/nodes/{spec.name}", {"spec": patch})
        fleet.create(PREFILL)
        for p in PREFILL:
            if p["kind"] == "Pod":
                fleet.bound(p["metadata"]["name"])
    except BaseException:
        teardown(fleet)
        raise
    return fleet


def teardown(fleet: Fleet) -> None:
    cp = fleet.control_plane
    for p in fleet.list(PODS_API):
        cp.request("DELETE", f"{PODS_API}/{p['metadata']['name']}",
                   query={"gracePeriodSeconds": "0"}, expect=(200, 404))
    for c in fleet.list(CLAIMS_API):
        delete_claim(cp, f"{CLAIMS_API}/{c['metadata']['name']}")
    for t in fleet.list(TEMPLATES_API):
        cp.delete(f"{TEMPLATES_API}/{t['metadata']['name']}", wait=False)
    for path in reversed(fleet.created):
        cp.delete(path, wait=False)
    fleetbuild._restore_device_classes(cp, fleet.restore)


# ----------------------------------------------------------------------------- the truth


def message(pod: JSON) -> str:
    """The pod's ``PodScheduled=False`` (Unschedulable) message, "" when it has none."""
    for c in pod.get("status", {}).get("conditions", []):
        if c.get("type") == "PodScheduled" and c.get("status") == "False" \
                and c.get("reason") == "Unschedulable":
            return str(c.get("message", ""))
    return ""


_HEAD = re.compile(r"0/(\d+) nodes are available: ")
_ENTRY = re.compile(r"(\d+) (.+)")


@dataclass(frozen=True)
class Reasons:
    """A FailedScheduling message read: the nodes, each reason's count, or the PreFilter
    message (no counts), and what PostFilter (preemption) added."""

    nodes: int
    counts: Counter[str]
    pre_filter: str = ""
    post_filter: str = ""


def reasons(text: str) -> Reasons:
    """``FitError.Error()`` read back (pkg/scheduler/framework/types.go): "0/N nodes are
    available:", then the PreFilter message or the sorted "<count> <reason>" histogram joined
    by ", ", each part ended by ". ", then PostFilter's message."""
    head = _HEAD.match(text)
    assert head, f"not a FailedScheduling message: {text!r}"
    rest = text[head.end():]
    body, _, post = rest.partition(". ")
    body = body.removesuffix(".")
    parts = re.split(r", (?=\d+ )", body)
    entries = [_ENTRY.fullmatch(p) for p in parts]
    if all(entries):
        counts = Counter({m.group(2): int(m.group(1)) for m in entries if m})
        return Reasons(int(head.group(1)), counts, post_filter=post)
    return Reasons(int(head.group(1)), Counter(), pre_filter=body, post_filter=post)
