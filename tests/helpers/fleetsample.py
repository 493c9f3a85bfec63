"""The sample fleet gfd ships (``gfd fleet --from @sample``): a small cluster as
``kubectl get nodes,pods,resourceslices,resourceclaims,deviceclasses -A -o json`` prints
it (the DeviceClasses as the DRA driver's chart makes them on resource.k8s.io/v1, the
``gpu.nvidia.com`` one serving ``nvidia.com/gpu``), built from the
simulated machines by the device plugin's rules (tests/helpers/placement.py: allocatable)
and gfd's label pipeline (the labels ``gfd run`` publishes), the DRA nodes' ResourceSlices as
``gfd devices`` writes them. ``python -m helpers.fleetsample`` (from tests/) rewrites it;
tests/fleet/test_sample.py holds the shipped file equal to this."""

from __future__ import annotations

import json
from typing import Any

from gfd import dra
from gfd.devices import resource_slices
from gfd.readers.simulate import simulate
from helpers import placement

JSON = dict[str, Any]

DEVICE_PLUGIN_NODES = (
    # name, machine, MIG strategy, sharing config, cordoned
    ("dgx-a100-1", "dgx-a100-mig-mixed", "mixed", "none", False),
    ("hgx-h100-1", "hgx-h100", "none", "none", False),
    ("hgx-h100-2", "hgx-h100", "none", "none", False),
    ("hgx-h100-3", "hgx-h100", "none", "none", True),
    ("t4-1", "t4-time-sliced", "none", "ts4", False),
)
DRA_NODES = (
    # name, machine, driver gates
    ("h100-dra-1", "hgx-h100", None),
    ("gb200-dra-1", "gb200-nvl", {"DynamicMIG": True}),
)


def _node(name: str, labels: dict[str, str], allocatable: dict[str, str],
          cordoned: bool = False) -> JSON:
    node: JSON = {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {**labels, "kubernetes.io/hostname": name,
                                              "kubernetes.io/os": "linux"}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
        "status": {"capacity": {"cpu": "64", "pods": "110", **allocatable},
                   "allocatable": {"cpu": "64", "pods": "110", **allocatable},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }
    if cordoned:
        node["spec"]["unschedulable"] = True
        node["spec"]["taints"].append({"key": "node.kubernetes.io/unschedulable",
                                       "effect": "NoSchedule"})
    return node


def _pod(name: str, node: str, limits: dict[str, int], *, namespace: str = "ml",
         claims: tuple[str, ...] = (), labels: dict[str, str] | None = None,
         ready: bool = False) -> JSON:
    container: JSON = {"name": "main", "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                       "resources": {"limits": {k: str(v) for k, v in limits.items()},
                                     "requests": {k: str(v) for k, v in limits.items()}}}
    spec: JSON = {"containers": [container],
                  "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}
    if node:
        spec["nodeName"] = node
    status: JSON = {"phase": "Running" if node else "Pending"}
    if claims:
        spec["resourceClaims"] = [{"name": c, "resourceClaimName": c} for c in claims]
        container["resources"]["claims"] = [{"name": c} for c in claims]
    if ready:
        status["conditions"] = [{"type": "Ready", "status": "True"}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
            "spec": spec, "status": status}


def _claim(name: str, node: str, device: str, device_class: str) -> JSON:
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": device_class, "allocationMode": "ExactCount", "count": 1}}]}},
        "status": {"allocation": {
            "devices": {"results": [{"request": "gpu", "driver": "gpu.nvidia.com",
                                     "pool": node, "device": device}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}},
    }


def build() -> JSON:
    items: list[JSON] = []
    machines = placement.machines()
    for name, machine, strategy, sharing, cordoned in DEVICE_PLUGIN_NODES:
        snap, cfg = machines[machine], placement.SHARING[sharing]
        labels = placement.node_labels(snap, strategy, cfg, "extended", "device-plugin")
        labels["nvidia.com/gfd.timestamp"] = "1764288000"
        units = placement.units(snap, strategy, cfg, "device-plugin")
        items.append(_node(name, labels, {r: str(len(u)) for r, u in units.items()}, cordoned))
    for name, machine, _ in DRA_NODES:
        snap = machines[machine]
        labels = placement.node_labels(snap, "none", None, "extended", "dra")
        labels["nvidia.com/gfd.timestamp"] = "1764288000"
        items.append(_node(name, labels, {}))
    for name, _, _, _, _ in DEVICE_PLUGIN_NODES + tuple((n, "", "", "", False)
                                                        for n, _, _ in DRA_NODES):
        items.append(_pod(f"gfd-{name}", name, {}, namespace="gfd",
                          labels={"app.kubernetes.io/name": "gfd"}, ready=True))
    items += [
        _pod("train-0", "hgx-h100-1", {"nvidia.com/gpu": 8}),
        _pod("train-1", "hgx-h100-2", {"nvidia.com/gpu": 4}),
        _pod("notebook-0", "t4-1", {"nvidia.com/gpu": 1}),
        _pod("notebook-1", "t4-1", {"nvidia.com/gpu": 1}),
        _pod("infer-0", "dgx-a100-1", {"nvidia.com/mig-1g.5gb": 2}),
        _pod("train-2", "", {"nvidia.com/gpu": 8}),
        _pod("dra-0", "h100-dra-1", {}, claims=("dra-0-gpu",)),
        _pod("dra-1", "gb200-dra-1", {}, claims=("dra-1-gpu",)),
    ]
    for name, machine, gates in DRA_NODES:
        items += resource_slices(simulate(machine).snapshot, node=name, gates=gates)
    items.append(_claim("dra-0-gpu", "h100-dra-1", "gpu-0", "gpu.nvidia.com"))
    dynamic = [d for s in resource_slices(simulate("gb200-nvl").snapshot, node="gb200-dra-1",
                                          gates={"DynamicMIG": True})
               for d in s["spec"].get("devices", [])
               if d["attributes"]["type"]["string"] == "mig"]
    items.append(_claim("dra-1-gpu", "gb200-dra-1", dynamic[0]["name"], "mig.nvidia.com"))
    items += [{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
               "metadata": {"name": name},
               "spec": {"selectors": [{"cel": {"expression": cel}}],
                        **({"extendedResourceName": dra.EXTENDED_RESOURCES[name]}
                           if name in dra.EXTENDED_RESOURCES else {})}}
              for name, cel in sorted(dra.DEVICE_CLASSES.items())]
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
            "items": items}


def text() -> str:
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    from helpers.paths import ROOT

    (ROOT / "gfd" / "data" / "fleet-sample.json").write_text(text())
