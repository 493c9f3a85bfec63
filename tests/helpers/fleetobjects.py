"""API objects for the fleet's unit tests, as the API server stores them (the JSON of
``kubectl get -o json``), and the fleet ``gfd fleet`` reads from them: every object goes
through ``gfd.fleet.source.Reader``, the reader of a live LIST and of ``--from``, so a pod that
asks for no GPU becomes its node's ``Load`` and the DeviceClasses count as read.

- ``node``: a Node with its allocatable (``pods`` included unless ``pods=None``), capacity,
  labels, cordon, Ready condition and taints;
- ``pod``: a Pod, bound (``node``) or pending, with its containers' limits, init containers,
  pod-level resources, overhead, claims, priority and ``status.nominatedNodeName``;
- ``device`` / ``gpu_slice`` / ``counter_slice``: the DRA driver's ResourceSlices, by hand
  (attributes as ``gpu.nvidia.com`` publishes them, counters, shared devices);
- ``claim``: a ResourceClaim, pending (its requests) or allocated (its results, shares);
- ``device_class``: a DeviceClass with its selectors, ``extendedResourceName`` and creation
  time."""

from __future__ import annotations

from typing import Any

from gfd.fleet.model import Fleet
from gfd.fleet.source import KINDS, Reader

Obj = dict[str, Any]
DRIVER = "gpu.nvidia.com"
GPU = "nvidia.com/gpu"
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"
GPU_SELECTOR = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'"
"""The driver chart's selector of its gpu.nvidia.com class, in the single-quoted form."""


def node(name: str, *, allocatable: dict[str, str] | None = None,
         capacity: dict[str, str] | None = None, pods: str | None = "110",
         labels: dict[str, str] | None = None, cordoned: bool = False, ready: bool = True,
         taints: list[Obj] | None = None) -> Obj:
    """A Node; ``capacity`` defaults to the allocatable GPU resources."""
    alloc = {"cpu": "64", "memory": "512Gi", **(allocatable or {})}
    if pods is not None:
        alloc["pods"] = pods
    cap = capacity if capacity is not None else {
        k: v for k, v in (allocatable or {}).items() if k.startswith("nvidia.com/")}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": f"node-{name}",
                         "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "spec": {"unschedulable": cordoned, "taints": taints or []},
            "status": {"allocatable": alloc, "capacity": {"cpu": "64", **cap},
                       "conditions": [{"type": "Ready", "status": "True" if ready
                                       else "False"}]}}


def container(name: str, limits: dict[str, Any] | None = None,
              requests: dict[str, Any] | None = None, *, sidecar: bool = False) -> Obj:
    resources: Obj = {}
    if limits:
        resources["limits"] = {k: str(v) for k, v in limits.items()}
    if requests:
        resources["requests"] = {k: str(v) for k, v in requests.items()}
    out: Obj = {"name": name, "image": "nvcr.io/nvidia/cuda:12.4.0-base",
                "resources": resources}
    if sidecar:
        out["restartPolicy"] = "Always"
    return out


def pod(name: str, node_name: str = "", limits: dict[str, Any] | None = None, *,
        namespace: str = "ml", phase: str = "", priority: int | None = None,
        nominated: str = "", claims: tuple[str, ...] = (),
        node_selector: dict[str, str] | None = None, containers: list[Obj] | None = None,
        init: list[Obj] | None = None, spec: Obj | None = None) -> Obj:
    """A Pod: bound to ``node_name`` (Running) or pending; ``limits`` of its one container."""
    body: Obj = {"containers": containers if containers is not None
                 else [container("main", limits)]}
    if init:
        body["initContainers"] = init
    if node_name:
        body["nodeName"] = node_name
    if priority is not None:
        body["priority"] = priority
    if node_selector:
        body["nodeSelector"] = node_selector
    if claims:
        body["resourceClaims"] = [{"name": c, "resourceClaimName": c} for c in claims]
    body.update(spec or {})
    status: Obj = {"phase": phase or ("Running" if node_name else "Pending")}
    if nominated:
        status["nominatedNodeName"] = nominated
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": f"pod-{namespace}-{name}"},
            "spec": body, "status": status}


def device(name: str, *, product: str = H100, kind: str = "gpu", memory: str = "81559Mi",
           profile: str = "", consumes: list[tuple[str, dict[str, str]]] | None = None,
           multiple: bool = False, capacity: dict[str, Obj] | None = None,
           taints: list[Obj] | None = None) -> Obj:
    """A device as the NVIDIA driver publishes it (``type``, ``productName``, ``memory``)."""
    attributes: Obj = {"type": {"string": kind}, "productName": {"string": product}}
    if profile:
        attributes["profile"] = {"string": profile}
    out: Obj = {"name": name, "attributes": attributes,
                "capacity": capacity if capacity is not None else {"memory": {"value": memory}}}
    if consumes:
        out["consumesCounters"] = [
            {"counterSet": s, "counters": {k: {"value": v} for k, v in c.items()}}
            for s, c in consumes]
    if multiple:
        out["allowMultipleAllocations"] = True
    if taints:
        out["taints"] = taints
    return out


def gpu_slice(node_name: str, devices: list[Obj], *, pool: str = "", generation: int = 1,
              count: int = 1, name: str = "", driver: str = DRIVER) -> Obj:
    """A ResourceSlice of the node's pool (the driver names the pool after the node)."""
    pool = pool or node_name
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": name or f"{node_name}-{driver}-{pool}-{generation}",
                         "uid": f"slice-{name or pool}-{generation}-{len(devices)}"},
            "spec": {"driver": driver, "nodeName": node_name,
                     "pool": {"name": pool, "generation": generation,
                              "resourceSliceCount": count},
                     "devices": devices}}


def counter_slice(node_name: str, counters: dict[str, dict[str, str]], *, pool: str = "",
                  generation: int = 1, count: int = 1, name: str = "",
                  devices: list[Obj] | None = None) -> Obj:
    """A slice that publishes counter sets (``sharedCounters``)."""
    out = gpu_slice(node_name, devices or [], pool=pool, generation=generation, count=count,
                    name=name or f"{node_name}-counters-{len(counters)}")
    out["spec"]["sharedCounters"] = [
        {"name": s, "counters": {k: {"value": v} for k, v in c.items()}}
        for s, c in counters.items()]
    if not devices:
        del out["spec"]["devices"]
    return out


def exactly(device_class: str = DRIVER, count: int = 1, *, mode: str = "ExactCount",
            selectors: tuple[str, ...] = ()) -> Obj:
    out: Obj = {"deviceClassName": device_class, "allocationMode": mode,
                "selectors": [{"cel": {"expression": e}} for e in selectors]}
    if mode == "ExactCount":
        out["count"] = count
    return out


def claim(name: str, *, node_name: str = "", devices: tuple[str, ...] = (),
          shares: tuple[tuple[str, dict[str, str]], ...] = (), pool: str = "",
          requests: list[Obj] | None = None, namespace: str = "ml",
          reserved: tuple[str, ...] = ()) -> Obj:
    """A ResourceClaim: its requests (one ``exactly`` for one device of gpu.nvidia.com by
    default), and, when ``devices`` or ``shares`` are given, its allocation on ``node_name``."""
    spec = {"devices": {"requests": requests if requests is not None else [
        {"name": "gpu", "exactly": exactly()}]}}
    out: Obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": namespace,
                             "uid": f"claim-{namespace}-{name}"},
                "spec": spec, "status": {}}
    if devices or shares:
        results = [{"request": "gpu", "driver": DRIVER, "pool": pool or node_name, "device": d}
                   for d in devices]
        results += [{"request": "gpu", "driver": DRIVER, "pool": pool or node_name,
                     "device": d, "shareID": f"{name}-share-{i}",
                     "consumedCapacity": consumed}
                    for i, (d, consumed) in enumerate(shares)]
        out["status"]["allocation"] = {
            "devices": {"results": results},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}}
    if reserved:
        out["status"]["reservedFor"] = [
            {"resource": "pods", "name": p, "uid": f"pod-{namespace}-{p}"} for p in reserved]
    return out


def device_class(name: str, *selectors: str, extended: str = "", created: str = "") -> Obj:
    spec: Obj = {"selectors": [{"cel": {"expression": e}} for e in selectors]}
    if extended:
        spec["extendedResourceName"] = extended
    meta: Obj = {"name": name, "uid": f"class-{name}"}
    if created:
        meta["creationTimestamp"] = created
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": meta,
            "spec": spec}


def fleet(*objects: Obj) -> Fleet:
    """The objects as ``gfd fleet`` reads them (``Reader``: ended pods hold nothing, a pod
    without GPUs or claims is its node's load); DeviceClasses count as read when any is
    given."""
    f = Fleet(nodes={}, pods=[], slices=[], claims={}, incomplete=[])
    reader = Reader(f)
    for obj in objects:
        reader.take(KINDS[obj["kind"]], obj)
    assert not f.skipped, f.skipped
    f.classes_read = any(obj["kind"] == "DeviceClass" for obj in objects)
    return f


def h100s(node_name: str, n: int = 8, **more: Any) -> list[Obj]:
    """``n`` whole H100s, ``gpu-0`` ..."""
    return [device(f"gpu-{i}", **more) for i in range(n)]
