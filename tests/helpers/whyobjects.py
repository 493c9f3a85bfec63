"""API objects for hand-built fleets, as the API server returns them (core/v1,
resource.k8s.io/v1), and the fleet they make read the way `gfd fleet` and `gfd why` read a
cluster (``source.Reader``: every object through the model's reductions), for the tests of
``gfd.fleet``'s scheduler rules (tests/fleet/test_why.py and its neighbours).

Device-plugin nodes take their allocatable and labels from the simulated machines
(``placement.units``, ``placement.node_labels``); DRA nodes their ResourceSlices from
``gfd.devices.resource_slices``, as the NVIDIA DRA driver publishes them."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any

from gfd.devices import resource_slices
from gfd.dra import DEVICE_CLASSES, DYNAMIC_MIG
from gfd.fleet.count import Index, index
from gfd.fleet.model import Fleet
from gfd.fleet.source import KINDS, Reader
from helpers import placement

JSON = dict[str, Any]
GPU = "nvidia.com/gpu"
DRIVER = "gpu.nvidia.com"
NS = "ml"
TOLERATE_GPU = {"key": GPU, "operator": "Exists"}


@cache
def _labels(machine: str, strategy: str, sharing: str, manager: str) -> dict[str, str]:
    snap = placement.machines()[machine]
    return placement.node_labels(snap, strategy, placement.SHARING[sharing], "extended",
                                 manager)


@cache
def _allocatable(machine: str, strategy: str, sharing: str) -> dict[str, str]:
    snap = placement.machines()[machine]
    units = placement.units(snap, strategy, placement.SHARING[sharing], "device-plugin")
    return {r: str(len(u)) for r, u in units.items()}


def node(name: str, machine: str = "", *, strategy: str = "none", sharing: str = "none",
         manager: str = "device-plugin", cordoned: bool = False,
         taints: Iterable[Mapping[str, str]] = (), labels: Mapping[str, str] | None = None,
         allocatable: Mapping[str, str] | None = None, pods: int = 110, cpu: str = "16",
         memory: str = "64Gi") -> JSON:
    """A Ready Node of a simulated machine (its gfd labels; its device plugin's allocatable,
    none under DRA), ``allocatable`` overriding."""
    node_labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                   **(_labels(machine, strategy, sharing, manager) if machine else {}),
                   **(labels or {})}
    gpus = _allocatable(machine, strategy, sharing) if machine and manager == "device-plugin" \
        else {}
    resources = {"cpu": cpu, "memory": memory, "pods": str(pods), **gpus, **(allocatable or {})}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": name,
                                                             "labels": node_labels},
            "spec": {"unschedulable": cordoned, "taints": [dict(t) for t in taints]},
            "status": {"capacity": dict(resources), "allocatable": resources,
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def slices(node_name: str, machine: str, *, dynamic_mig: bool = False) -> list[JSON]:
    """The driver's ResourceSlices for the machine on this node."""
    snap = placement.machines()[machine]
    gates = {DYNAMIC_MIG: True} if dynamic_mig else None
    return [copy.deepcopy(s) for s in resource_slices(snap, node=node_name, gates=gates)]


def pod(name: str, *, limits: Mapping[str, Any] | None = None, node_name: str = "",
        init: Iterable[tuple[Mapping[str, Any], bool]] = (),
        selector: Mapping[str, str] | None = None, hosts: Iterable[str] = (),
        fields: Iterable[str] = (), tolerations: Iterable[Mapping[str, str]] = (TOLERATE_GPU,),
        claims: Iterable[str] = (), templates: Iterable[str] = (),
        made: Mapping[str, str] | None = None, phase: str = "", priority: int = 0,
        nominated: str = "", extra: Mapping[str, Any] | None = None,
        namespace: str = NS) -> JSON:
    """A pod: one container with these limits (requests equal), init containers (limits,
    sidecar), pinned by hostname to ``hosts`` or by ``metadata.name`` to ``fields``, using
    named claims and templates (``made``: pod claim name -> the claim made from its template,
    as the resourceclaim controller records it)."""
    container: JSON = {"name": "main", "image": "cuda",
                       "resources": {"limits": {k: str(v) for k, v in (limits or {}).items()}}}
    refs = [{"name": c, "resourceClaimName": c} for c in claims]
    refs += [{"name": t, "resourceClaimTemplateName": t} for t in templates]
    if refs:
        container["resources"]["claims"] = [{"name": r["name"]} for r in refs]
    spec: JSON = {"containers": [container], "tolerations": [dict(t) for t in tolerations],
                  "priority": priority}
    inits = [{"name": f"init-{i}", "image": "cuda",
              "resources": {"limits": {k: str(v) for k, v in lim.items()}},
              **({"restartPolicy": "Always"} if sidecar else {})}
             for i, (lim, sidecar) in enumerate(init)]
    if inits:
        spec["initContainers"] = inits
    if refs:
        spec["resourceClaims"] = refs
    if node_name:
        spec["nodeName"] = node_name
    if selector is not None:
        spec["nodeSelector"] = dict(selector)
    hosts, fields = list(hosts), list(fields)
    if hosts:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": hosts}]}]}}}
    if fields:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [f]}]} for f in fields]}}}
    spec.update(extra or {})
    status: JSON = {"phase": phase or ("Running" if node_name else "Pending")}
    if made:
        status["resourceClaimStatuses"] = [{"name": k, "resourceClaimName": v}
                                           for k, v in made.items()]
    if nominated:
        status["nominatedNodeName"] = nominated
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
            "spec": spec, "status": status}


def request(device_class: str = DRIVER, count: int = 1, *, selectors: Iterable[str] = (),
            name: str = "gpu", mode: str = "ExactCount", admin: bool = False,
            tolerations: Iterable[Mapping[str, str]] = ()) -> JSON:
    exactly: JSON = {"deviceClassName": device_class, "allocationMode": mode}
    if mode == "ExactCount":
        exactly["count"] = count
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    if admin:
        exactly["adminAccess"] = True
    if tolerations:
        exactly["tolerations"] = [dict(t) for t in tolerations]
    return {"name": name, "exactly": exactly}


def claim(name: str, *requests: JSON, node_name: str = "", devices: Iterable[str] = (),
          reserved: Iterable[str] = (), namespace: str = NS) -> JSON:
    """A ResourceClaim of these requests (one GPU of the driver's class by default),
    allocated to ``devices`` of ``node_name``'s pool when any are named."""
    obj: JSON = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                 "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
                 "spec": {"devices": {"requests": list(requests) or [request()]}},
                 "status": {}}
    devices = list(devices)
    if devices:
        obj["status"]["allocation"] = {
            "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": node_name,
                                     "device": d} for d in devices]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}}
        obj["status"]["reservedFor"] = [{"resource": "pods", "name": r, "uid": f"uid-{r}"}
                                        for r in reserved]
    return obj


def template(name: str, *requests: JSON, namespace: str = NS) -> JSON:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": list(requests) or [request()]}}}}


def device_classes(extended: bool = True) -> list[JSON]:
    """The driver chart's DeviceClasses (``gpu.nvidia.com`` serving ``nvidia.com/gpu``)."""
    return [{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
             "metadata": {"name": name, "creationTimestamp": "2025-01-01T00:00:00Z"},
             "spec": {"selectors": [{"cel": {"expression": expression}}],
                      **({"extendedResourceName": GPU}
                         if extended and name == DRIVER else {})}}
            for name, expression in DEVICE_CLASSES.items()]


def fleet(*objects: JSON | Iterable[JSON]) -> Fleet:
    """The objects read as a dump is read (DeviceClasses read whenever any is given)."""
    f = Fleet(nodes={}, pods=[], slices=[], claims={}, incomplete=[], source="test")
    reader = Reader(f)
    for item in objects:
        for obj in ([item] if isinstance(item, dict) else list(item)):
            kind = obj["kind"]
            if kind in KINDS:
                reader.take(KINDS[kind], obj)
                f.classes_read |= kind == "DeviceClass"
    return f


def indexed(*objects: JSON | Iterable[JSON]) -> Index:
    return index(fleet(*objects))
