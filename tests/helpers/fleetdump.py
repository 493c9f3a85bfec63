"""A small fleet written by hand as ``kubectl get
nodes,pods,resourceslices,resourceclaims,deviceclasses -A -o json`` prints it, and what ``gfd
fleet`` must count on it, worked out by hand from docs/fleet.md's rules (``rows``), for the
tests that damage it: fleet/test_source.py (malformed objects, repeated objects, encodings)
and fuzz/test_fuzz_fleet_dump.py.

The fleet (every object with a ``metadata.uid``; ``objects(uids=False)`` leaves them out):

- Node ``gpu-node-0``: 8 ``nvidia.com/gpu`` (H100), Ready, 110 pod slots.
- Node ``gpu-node-1``: the DRA node; ResourceSlice ``gpu-node-1-xyz`` publishes ``gpu-0`` and
  ``gpu-1`` (driver ``gpu.nvidia.com``, pool ``gpu-node-1``, generation 1, one slice).
- Node ``gpu-node-2``: 4 ``nvidia.com/gpu`` (H100), tainted ``nvidia.com/gpu:NoSchedule``
  (the taint a GPU pod is assumed to tolerate), Ready.
- Pods ``team/train-0`` (2 GPUs) and ``team/train-1`` (1 GPU), Running on ``gpu-node-0``;
  ``team/wait-0``, Pending and unscheduled, asks 1 GPU with a nodeSelector on the H100
  product and a required affinity ``nvidia.com/gpu.count Gt 3``; ``team/dra-0``, Running on
  ``gpu-node-1`` with claim ``team/claim-0``.
- ResourceClaims ``team/claim-0`` (allocated: ``gpu-node-1``'s ``gpu-0``) and
  ``team/claim-1`` (unallocated, asks one ``gpu.nvidia.com`` device; no pod uses it).
- DeviceClass ``gpu.nvidia.com`` (the DRA driver chart's selector, no extended resource).
"""

from __future__ import annotations

import copy
import json
import math
import re
from typing import Any

from click.testing import CliRunner

from gfd.cli import cli

GPU = "nvidia.com/gpu"
DRA_CLASS = "gpu.nvidia.com"
H100 = "NVIDIA-H100-80GB-HBM3"
Obj = dict[str, Any]
Row = tuple[int, int, int, int]
"""(total, allocated, free, pending) of one node and resource."""

KINDS = ("Node", "Pod", "ResourceSlice", "ResourceClaim", "DeviceClass")


def _meta(name: str, namespace: str = "") -> Obj:
    meta: Obj = {"name": name, "uid": f"uid-{namespace or 'cluster'}-{name}"}
    if namespace:
        meta["namespace"] = namespace
    return meta


def gpu_node(name: str, gpus: int, *, taints: list[Obj] | None = None) -> Obj:
    meta = _meta(name)
    meta["labels"] = {"kubernetes.io/hostname": name, "nvidia.com/gpu.product": H100,
                      "nvidia.com/gpu.count": str(gpus), "nvidia.com/gpu.memory": "81559",
                      "nvidia.com/gpu.replicas": "1"}
    resources = {"cpu": "32", "memory": "263856824Ki", "pods": "110", GPU: str(gpus)}
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta,
            "spec": {"taints": taints or []},
            "status": {"allocatable": dict(resources), "capacity": dict(resources),
                       "conditions": [{"type": "MemoryPressure", "status": "False"},
                                      {"type": "Ready", "status": "True"}]}}


def dra_node(name: str) -> Obj:
    meta = _meta(name)
    meta["labels"] = {"kubernetes.io/hostname": name}
    resources = {"cpu": "32", "memory": "263856824Ki", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": {},
            "status": {"allocatable": dict(resources), "capacity": dict(resources),
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def gpu_pod(name: str, node: str, gpus: int, *, phase: str = "Running",
            namespace: str = "team") -> Obj:
    spec: Obj = {"containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                                 "resources": {"limits": {GPU: str(gpus)},
                                               "requests": {GPU: str(gpus)}}}],
                 "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": _meta(name, namespace),
            "spec": spec, "status": {"phase": phase, "conditions": [
                {"type": "Ready", "status": "True" if phase == "Running" else "False"}]}}


def waiting_pod(name: str) -> Obj:
    obj = gpu_pod(name, "", 1, phase="Pending")
    obj["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": H100}
    obj["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["3"]}]}]}}}
    return obj


def claim_pod(name: str, node: str, claim: str) -> Obj:
    obj = gpu_pod(name, node, 0)
    obj["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
    return obj


def device(name: str) -> Obj:
    return {"name": name, "attributes": {
        "type": {"string": "gpu"}, "productName": {"string": "NVIDIA H100 80GB HBM3"},
        "uuid": {"string": f"GPU-{name}"}, "driverVersion": {"version": "580.95.5"}},
        "capacity": {"memory": {"value": "81559Mi"}}}


def resource_slice(node: str, devices: list[str], *, name: str = "",
                   generation: int = 1, count: int = 1) -> Obj:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": _meta(name or f"{node}-xyz"),
            "spec": {"driver": DRA_CLASS, "nodeName": node,
                     "pool": {"name": node, "generation": generation,
                              "resourceSliceCount": count},
                     "devices": [device(d) for d in devices]}}


def request(count: int = 1) -> Obj:
    return {"name": "gpu", "exactly": {"deviceClassName": DRA_CLASS, "allocationMode": "ExactCount",
                                       "count": count, "selectors": [{"cel": {
                                           "expression": "device.attributes['gpu.nvidia.com']"
                                                         ".type == 'gpu'"}}]}}


def allocated_claim(name: str, node: str, dev: str, *, pod: str = "") -> Obj:
    status: Obj = {"allocation": {
        "devices": {"results": [{"request": "gpu", "driver": DRA_CLASS, "pool": node,
                                 "device": dev}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}
    if pod:
        status["reservedFor"] = [{"resource": "pods", "name": pod,
                                  "uid": f"uid-team-{pod}"}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": _meta(name, "team"),
            "spec": {"devices": {"requests": [request()]}}, "status": status}


def pending_claim(name: str) -> Obj:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": _meta(name, "team"),
            "spec": {"devices": {"requests": [request()]}}, "status": {}}


def device_class() -> Obj:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": _meta(DRA_CLASS),
            "spec": {"selectors": [{"cel": {"expression": (
                "device.driver == 'gpu.nvidia.com' && "
                "device.attributes['gpu.nvidia.com'].type == 'gpu'")}}]}}


REQUESTS = {"train-0": 2, "train-1": 1}
"""GPUs each bound device-plugin pod asks for."""


def objects(*, uids: bool = True) -> list[Obj]:
    """The fleet's objects, in the order kubectl lists them (a fresh copy each call)."""
    items = [
        gpu_node("gpu-node-0", 8), dra_node("gpu-node-1"),
        gpu_node("gpu-node-2", 4, taints=[{"key": GPU, "effect": "NoSchedule"}]),
        gpu_pod("train-0", "gpu-node-0", REQUESTS["train-0"]),
        gpu_pod("train-1", "gpu-node-0", REQUESTS["train-1"]),
        waiting_pod("wait-0"), claim_pod("dra-0", "gpu-node-1", "claim-0"),
        resource_slice("gpu-node-1", ["gpu-0", "gpu-1"]),
        allocated_claim("claim-0", "gpu-node-1", "gpu-0", pod="dra-0"),
        pending_claim("claim-1"), device_class(),
    ]
    if not uids:
        for item in items:
            item["metadata"].pop("uid")
    return items


def find(items: list[Obj], name: str) -> Obj:
    """The object named ``name`` (names are unique across kinds in this fleet)."""
    return next(i for i in items if isinstance(i, dict) and i.get("metadata", {}).get(
        "name") == name)


def rows(without: tuple[str, ...] = ()) -> dict[tuple[str, str], Row]:
    """What gfd fleet counts per node and resource on this fleet, less the objects named in
    ``without``, by docs/fleet.md: TOTAL the node's allocatable (device plugin) or the devices
    of the newest complete pool (DRA); ALLOCATED the requests of bound, unfinished pods, or the
    devices allocated claims name; FREE the rest (never more than the node's free pod slots:
    110 here, which no count of this fleet reaches); PENDING what unscheduled pods ask whose
    nodeSelector and required affinity admit the node (DRA: through their claims)."""
    out: dict[tuple[str, str], Row] = {}
    held = sum(n for pod, n in REQUESTS.items() if pod not in without)
    # wait-0 admits both H100 nodes: its product label matches, and 8 > 3, 4 > 3
    waiting = 0 if "wait-0" in without else 1
    if "gpu-node-0" not in without:
        out[("gpu-node-0", GPU)] = (8, held, 8 - held, waiting)
    if "gpu-node-2" not in without:
        out[("gpu-node-2", GPU)] = (4, 0, 4, waiting)
    if "gpu-node-1-xyz" not in without:
        taken = 0 if "claim-0" in without else 1
        out[("gpu-node-1", DRA_CLASS)] = (2, taken, 2 - taken, 0)
    return out


def as_list(items: list[Any]) -> Obj:
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
            "items": items}


INFINITE = "\x00the JSON number 1e400\x00"
"""Written as the literal ``1e400`` (a number no float holds: Python reads it as inf)."""


def json_text(doc: Any, indent: int | None = 1) -> str:
    """``doc`` as JSON, an infinite float or ``INFINITE`` written as the literal 1e400."""

    def literal(value: Any) -> Any:
        if isinstance(value, float) and math.isinf(value):
            return INFINITE if value > 0 else "-" + INFINITE
        if isinstance(value, dict):
            return {k: literal(v) for k, v in value.items()}
        if isinstance(value, list):
            return [literal(v) for v in value]
        return value

    marker = json.dumps(INFINITE)
    return (json.dumps(literal(doc), indent=indent)
            .replace('"-' + marker[1:], "-1e400").replace(marker, "1e400"))


def node_rows(doc: Obj) -> dict[tuple[str, str], Row]:
    """``gfd fleet -o json``'s node rows as (node, resource) -> (total, allocated, free,
    pending)."""
    return {(r["node"], r["resource"]): (r["total"], r["allocated"], r["free"], r["pending"])
            for r in doc["nodes"]}


def fleet(*args: str, stdin: str | bytes | None = None) -> tuple[int, str, str, Any]:
    """``gfd fleet ARGS`` in this process: exit code, stdout, stderr, and the exception that
    ended it when it is not the exit (a traceback, for the caller to fail on)."""
    result = CliRunner().invoke(cli, ["fleet", *args], input=stdin)
    escaped = result.exception if not isinstance(result.exception, SystemExit) else None
    return result.exit_code, result.stdout, result.stderr, escaped


def damaged(items: list[Obj], name: str, path: str, value: Any) -> list[Obj]:
    """A copy of ``items`` with the field at ``path`` (dots and ``[i]``, within the object
    named ``name``) replaced by ``value``."""
    out = copy.deepcopy(items)
    target: Any = find(out, name)
    parts = _parts(path)
    for part in parts[:-1]:
        target = target[part]
    target[parts[-1]] = value
    return out


def _parts(path: str) -> list[str | int]:
    """``spec.devices[0].capacity`` -> ["spec", "devices", 0, "capacity"]; a key holding dots
    is written in brackets: ``metadata.labels[nvidia.com/gpu.count]``."""
    return [int(inner) if inner.isdigit() else inner or plain
            for inner, plain in re.findall(r"\[([^\]]*)\]|([^.\[\]]+)", path)]
