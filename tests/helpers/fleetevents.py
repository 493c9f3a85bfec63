"""A small cluster of API objects in many states, and random changes to it, for holding the
live view to the one-shot (tests/fleet/test_live.py, tests/fleet/test_livesource.py).

``Cluster`` holds the objects as the API server would (by namespace and name) and answers a
LIST of each collection in the server's order; ``Cluster.one_shot()`` reads it exactly as
``gfd fleet`` reads the API server (``gfd.fleet.source.Reader``, collection by collection,
page order) and ``count()``s it. ``Cluster.step(rng)`` makes one random change and returns
it as the watch event the API server would send: a Node cordoned, tainted, relabelled, its
GPUs gone unhealthy or its pod slots cut; a pod bound, pending (placed by a nodeSelector, by
hostname affinity, nominated, gated), ended, asking for no GPU, keeping a node's labels, using
claims, malformed; a ResourceSlice's pool republished at a higher generation, a device
tainted, a pool incomplete; a claim allocated (whole devices, admin access, shares of a
device that allows several), unallocated, holding a device no slice publishes; DeviceClasses
changed, added, removed. Device-plugin Nodes are simulated machines under the device
plugin's rules (``placement``); DRA Nodes publish the slices ``gfd devices`` writes."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from gfd.devices import resource_slices
from gfd.dra import DEVICE_CLASSES, DRIVER, DYNAMIC_MIG, EXTENDED_RESOURCES
from gfd.fleet.count import Counted, count
from gfd.fleet.model import Fleet
from gfd.fleet.source import READS, Reader
from helpers import placement

JSON = dict[str, Any]
GPU = "nvidia.com/gpu"
NAMESPACES = ("ml", "ops")


@dataclass(frozen=True)
class NodeSpec:
    name: str
    machine: str
    manager: str = "device-plugin"
    strategy: str = "none"
    sharing: str = "none"
    dynamic: bool = False


NODES = (
    NodeSpec("dp-a", "hgx-h100"),
    NodeSpec("dp-b", "hgx-h100"),
    NodeSpec("dp-mig", "dgx-a100-mig-mixed", strategy="mixed"),
    NodeSpec("dp-t4", "t4-time-sliced", sharing="ts4"),
    NodeSpec("dra-h100", "hgx-h100", manager="dra"),
    NodeSpec("dra-dyn", "h100-mig", manager="dra", dynamic=True),
    NodeSpec("dra-share", "hgx-h100", manager="dra"),
)
BY_NAME = {n.name: n for n in NODES}
NODE_VARIANTS = ("plain", "plain", "plain", "cordoned", "tainted", "gpu-tainted", "not-ready",
                 "pool-x", "pool-y", "unhealthy", "two-slots")
POD_NAMES = tuple(f"p{i}" for i in range(14))
CLAIM_NAMES = tuple(f"c{i}" for i in range(6))
SHARE = "dra-share"


@cache
def _labels(spec: NodeSpec) -> tuple[tuple[str, str], ...]:
    snap = placement.machines()[spec.machine]
    labels = placement.node_labels(snap, spec.strategy, placement.SHARING[spec.sharing],
                                   "extended", spec.manager)
    return tuple(sorted(labels.items()))


@cache
def _units(spec: NodeSpec) -> tuple[tuple[str, int], ...]:
    if spec.manager == "dra":
        return ()
    snap = placement.machines()[spec.machine]
    units = placement.units(snap, spec.strategy, placement.SHARING[spec.sharing],
                            "device-plugin")
    return tuple(sorted((r, len(u)) for r, u in units.items()))


@cache
def _slices(spec: NodeSpec) -> tuple[JSON, ...]:
    if spec.name == SHARE:
        return (_share_slice(),)
    snap = placement.machines()[spec.machine]
    return tuple(resource_slices(snap, node=spec.name,
                                 gates={DYNAMIC_MIG: True} if spec.dynamic else None))


def _share_slice() -> JSON:
    """Two GPUs that several claims may share, 10 Gi of memory each by default."""
    devices = [{"name": f"gpu-{i}", "allowMultipleAllocations": True,
                "attributes": {"type": {"string": "gpu"},
                               "productName": {"string": "NVIDIA H100 80GB HBM3"}},
                "capacity": {"memory": {"value": "80Gi",
                                        "requestPolicy": {"default": "10Gi"}}}}
               for i in range(2)]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{SHARE}-{DRIVER}"},
            "spec": {"driver": DRIVER, "nodeName": SHARE,
                     "pool": {"name": SHARE, "generation": 1, "resourceSliceCount": 1},
                     "devices": devices}}


def device_names(node: str) -> list[str]:
    return [d["name"] for s in _slices(BY_NAME[node]) for d in s["spec"].get("devices", [])]


def node_object(spec: NodeSpec, variant: str = "plain") -> JSON:
    labels = {"kubernetes.io/hostname": spec.name, "kubernetes.io/os": "linux",
              **dict(_labels(spec))}
    if variant in ("pool-x", "pool-y"):
        labels["pool"] = variant[-1]
    units = {r: str(n) for r, n in _units(spec)}
    if variant == "unhealthy" and GPU in units:
        units[GPU] = str(max(0, int(units[GPU]) - 2))
    allocatable = {"cpu": "63", "memory": "500Gi", "pods": "2" if variant == "two-slots"
                   else "110", **units}
    taints = []
    if variant == "tainted":
        taints.append({"key": "dedicated", "value": "x", "effect": "NoSchedule"})
    if variant == "gpu-tainted":
        taints.append({"key": GPU, "value": "present", "effect": "NoSchedule"})
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": spec.name, "labels": labels},
            "spec": {"unschedulable": variant == "cordoned", "taints": taints},
            "status": {"capacity": {"cpu": "64", **{r: str(n) for r, n in _units(spec)}},
                       "allocatable": allocatable,
                       "conditions": [{"type": "Ready",
                                       "status": str(variant != "not-ready")}]}}


def pod_object(name: str, namespace: str = "ml", *, node: str = "",
               limits: dict[str, int] | None = None, phase: str = "",
               node_selector: dict[str, str] | None = None, hostname: str = "",
               claims: tuple[str, ...] = (), nominated: str = "", priority: int | None = None,
               agent: bool = False, ready: bool = True, gated: bool = False,
               malformed: bool = False, cpu: str = "") -> JSON:
    resources: JSON = {"limits": {k: str(v) for k, v in (limits or {}).items()}}
    if cpu:
        resources["requests"] = {"cpu": cpu, "memory": "1Gi"}
    container: JSON = {"name": "main", "image": "gfd:test" if agent else "cuda:12",
                       "resources": resources}
    spec: JSON = {"containers": "not a list" if malformed else [container],
                  "tolerations": [{"key": GPU, "operator": "Exists"}]}
    if node:
        spec["nodeName"] = node
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    if hostname:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [hostname]}]}]}}}
    if claims:
        spec["resourceClaims"] = [{"name": c, "resourceClaimName": c} for c in claims]
    if priority is not None:
        spec["priority"] = priority
    if gated:
        spec["schedulingGates"] = [{"name": "example.com/wait"}]
    status: JSON = {"phase": phase or ("Running" if node else "Pending"),
                    "conditions": [{"type": "Ready", "status": str(ready)}]}
    if nominated:
        status["nominatedNodeName"] = nominated
    labels = {"app.kubernetes.io/name": "gfd" if agent else "job"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels,
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": spec, "status": status}


def claim_object(name: str, namespace: str = "ml", *, device_class: str = "gpu.nvidia.com",
                 count_: int = 1, cel: str = "", node: str = "",
                 devices: tuple[str, ...] = (), admin: bool = False,
                 shares: tuple[str, ...] = ()) -> JSON:
    exactly: JSON = {"deviceClassName": device_class, "allocationMode": "ExactCount",
                     "count": count_}
    if cel:
        exactly["selectors"] = [{"cel": {"expression": cel}}]
    obj: JSON = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                 "metadata": {"name": name, "namespace": namespace},
                 "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
                 "status": {}}
    results = [{"request": "gpu", "driver": DRIVER, "pool": node, "device": d,
                **({"adminAccess": True} if admin else {})} for d in devices]
    results += [{"request": "gpu", "driver": DRIVER, "pool": node, "device": d,
                 "shareID": f"{name}-{i}", "consumedCapacity": {"memory": "10Gi"}}
                for i, d in enumerate(shares)]
    if results:
        obj["status"]["allocation"] = {
            "devices": {"results": results},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}
    return obj


def class_object(name: str, expression: str, extended: str = "") -> JSON:
    spec: JSON = {"selectors": [{"cel": {"expression": expression}}]}
    if extended:
        spec["extendedResourceName"] = extended
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": spec}


def chart_classes() -> list[JSON]:
    return [class_object(n, e, EXTENDED_RESOURCES.get(n, "")) for n, e in DEVICE_CLASSES.items()]


H100_ONLY = (f"device.driver == '{DRIVER}' && "
             f"device.attributes['{DRIVER}'].productName == 'NVIDIA H100 80GB HBM3'")


@dataclass(frozen=True)
class Event:
    resource: str
    type: str
    """ADDED, MODIFIED or DELETED."""
    object: JSON


def _key(obj: JSON) -> tuple[str, str]:
    meta = obj["metadata"]
    return (meta.get("namespace", ""), meta["name"])


@dataclass
class Cluster:
    """API objects by collection, keyed by (namespace, name)."""

    objects: dict[str, dict[tuple[str, str], JSON]] = field(
        default_factory=lambda: {r: {} for r, _ in READS})

    def put(self, resource: str, obj: JSON) -> Event:
        key = _key(obj)
        kind = "MODIFIED" if key in self.objects[resource] else "ADDED"
        self.objects[resource][key] = copy.deepcopy(obj)
        return Event(resource, kind, copy.deepcopy(obj))

    def delete(self, resource: str, key: tuple[str, str]) -> Event | None:
        obj = self.objects[resource].pop(key, None)
        return None if obj is None else Event(resource, "DELETED", obj)

    def list(self, resource: str) -> list[JSON]:
        """What a LIST answers: every object, by namespace then name."""
        return [copy.deepcopy(o) for _, o in sorted(self.objects[resource].items())]

    def one_shot(self, tolerated: tuple[str, ...] = ("nvidia.com/gpu",)) -> tuple[Fleet,
                                                                                    Counted]:
        """The fleet ``gfd fleet`` reads from this cluster, and its count."""
        fleet = Fleet(nodes={}, pods=[], slices=[], claims={}, incomplete=[])
        reader = Reader(fleet)
        for resource, _ in READS:
            for obj in self.list(resource):
                reader.take(resource, obj)
        fleet.classes_read = True
        return fleet, count(fleet, tolerated=tolerated)

    # -- a starting state, and random changes

    def seed(self, rng: random.Random) -> None:
        for spec in NODES:
            self.put("nodes", node_object(spec))
            for rs in _slices(spec):
                self.put("resourceslices", rs)
        for obj in chart_classes():
            self.put("deviceclasses", obj)
        for _ in range(rng.randrange(4, 12)):
            self.step(rng)

    def step(self, rng: random.Random) -> Event:
        """One random change, as the watch event that tells it; a change that changes
        nothing is still told (a status the reduction ignores)."""
        while True:
            maker = rng.choices(_CHANGES, weights=[w for w, _ in _CHANGES_W])[0]
            event = maker(self, rng)
            if event is not None:
                return event

    def events(self, rng: random.Random, n: int) -> Iterator[Event]:
        for _ in range(n):
            yield self.step(rng)


# ----------------------------------------------------------------------------- changes


def _change_node(c: Cluster, rng: random.Random) -> Event | None:
    spec = rng.choice(NODES)
    if rng.random() < 0.1:
        event = c.delete("nodes", ("", spec.name))
        if event is not None:
            return event
    return c.put("nodes", node_object(spec, rng.choice(NODE_VARIANTS)))


def _dp_resource(rng: random.Random, node: str) -> str:
    return rng.choice([r for r, _ in _units(BY_NAME[node])])


def _gpu_pod(c: Cluster, rng: random.Random, name: str, namespace: str) -> JSON:
    dp = [n.name for n in NODES if n.manager == "device-plugin"]
    shape = rng.choice(["bound", "bound", "bound", "selector", "hostname", "nominated",
                        "any", "served", "gated", "ended"])
    node = rng.choice(dp)
    resource = _dp_resource(rng, node)
    amount = rng.choice([1, 1, 2, 3, 9])
    if shape == "bound":
        return pod_object(name, namespace, node=node, limits={resource: amount})
    if shape == "ended":
        return pod_object(name, namespace, node=node, limits={resource: amount},
                          phase=rng.choice(["Succeeded", "Failed"]))
    if shape == "selector":
        return pod_object(name, namespace, limits={resource: amount},
                          node_selector={"pool": rng.choice("xy")})
    if shape == "hostname":
        return pod_object(name, namespace, limits={resource: amount}, hostname=node)
    if shape == "nominated":
        return pod_object(name, namespace, limits={resource: amount}, nominated=node,
                          priority=rng.choice([None, 0, -5, 100]))
    if shape == "gated":
        return pod_object(name, namespace, limits={GPU: amount}, gated=True)
    if shape == "served":  # nvidia.com/gpu, which the gpu class serves on DRA nodes
        return pod_object(name, namespace, limits={GPU: amount},
                          node_selector={"nvidia.com/gpu.present": "true"})
    return pod_object(name, namespace, limits={GPU: amount})


def _change_pod(c: Cluster, rng: random.Random) -> Event | None:
    name, namespace = rng.choice(POD_NAMES), rng.choice(NAMESPACES)
    roll = rng.random()
    if roll < 0.15:
        return c.delete("pods", (namespace, name))
    all_nodes = [n.name for n in NODES] + ["gone-node"]
    if roll < 0.5:
        obj = _gpu_pod(c, rng, name, namespace)
    elif roll < 0.65:
        obj = pod_object(name, namespace, node=rng.choice(all_nodes) if rng.random() < 0.8
                         else "", cpu=rng.choice(["100m", "2", "500m"]))
    elif roll < 0.72:
        obj = pod_object(name, namespace, node=rng.choice(all_nodes), agent=True,
                         ready=rng.random() < 0.7)
    elif roll < 0.9:
        claim = rng.choice(CLAIM_NAMES)
        node = rng.choice(["dra-h100", "dra-dyn", SHARE, ""])
        obj = pod_object(name, "ml", node=node, claims=(claim,),
                         node_selector={"pool": "x"} if not node and rng.random() < 0.3
                         else None)
    elif roll < 0.95:
        obj = pod_object(name, namespace, malformed=True, node=rng.choice(all_nodes))
    else:  # a status change the count ignores, or a pod being renamed in place
        key = rng.choice(sorted(c.objects["pods"])) if c.objects["pods"] else None
        if key is None:
            return None
        obj = copy.deepcopy(c.objects["pods"][key])
        obj.setdefault("status", {})["podIP"] = f"10.0.0.{rng.randrange(250)}"
    return c.put("pods", obj)


def _change_claim(c: Cluster, rng: random.Random) -> Event | None:
    name = rng.choice(CLAIM_NAMES)
    roll = rng.random()
    if roll < 0.15:
        return c.delete("resourceclaims", ("ml", name))
    if roll < 0.4:
        return c.put("resourceclaims", claim_object(
            name, device_class=rng.choice(["gpu.nvidia.com", "mig.nvidia.com"]),
            count_=rng.choice([1, 2]), cel=H100_ONLY if rng.random() < 0.3 else ""))
    node = rng.choice(["dra-h100", "dra-dyn", SHARE, "dra-gone"])
    names = device_names(node) if node in BY_NAME else ["gpu-0", "gpu-1"]
    if node == SHARE:
        return c.put("resourceclaims", claim_object(
            name, node=node, shares=tuple(rng.sample(names, rng.choice([1, 2])))))
    chosen = tuple(rng.sample(names, rng.choice([1, 1, 2])))
    return c.put("resourceclaims", claim_object(name, node=node, devices=chosen,
                                                admin=rng.random() < 0.2))


def _change_slice(c: Cluster, rng: random.Random) -> Event | None:
    spec = rng.choice([n for n in NODES if n.manager == "dra"])
    base = _slices(spec)
    i = rng.randrange(len(base))
    obj = copy.deepcopy(base[i])
    key = _key(obj)
    roll = rng.random()
    if roll < 0.15:
        return c.delete("resourceslices", key)
    current = c.objects["resourceslices"].get(key)
    if roll < 0.4 and current is not None:  # the driver republishes: a newer generation
        obj = copy.deepcopy(current)
        obj["spec"]["pool"]["generation"] += 1
    elif roll < 0.6 and obj["spec"].get("devices"):
        obj["spec"]["devices"][0]["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "79",
                                                "effect": "NoSchedule"}]
    elif roll < 0.7:
        obj["spec"]["pool"]["resourceSliceCount"] += 1  # a slice still to come
    return c.put("resourceslices", obj)


def _change_class(c: Cluster, rng: random.Random) -> Event | None:
    roll = rng.random()
    if roll < 0.25:
        name = rng.choice(["gpu.nvidia.com", "h100-only"])
        return c.delete("deviceclasses", ("", name))
    if roll < 0.5:
        return c.put("deviceclasses", class_object("h100-only", H100_ONLY,
                                                   rng.choice(["", "example.com/h100"])))
    if roll < 0.75:
        return c.put("deviceclasses", class_object(
            "gpu.nvidia.com", DEVICE_CLASSES["gpu.nvidia.com"],
            rng.choice(["", "nvidia.com/gpu"])))
    return c.put("deviceclasses", chart_classes()[rng.randrange(len(DEVICE_CLASSES))])


_CHANGES_W: list[tuple[int, Callable[[Cluster, random.Random], Event | None]]] = [
    (3, _change_node), (10, _change_pod), (4, _change_claim), (2, _change_slice),
    (1, _change_class)]
_CHANGES = [f for _, f in _CHANGES_W]
