"""Small fleets, one rule of ../shared/reference/fleet.md each, on a control plane of their
own, for `gfd fleet` against kube-scheduler (tests/realapi/test_fleet_truths.py).

A control plane of their own: the rules include which DeviceClass serves an extended resource
and what a class's own selector admits, and DeviceClasses are cluster-scoped; the session's
fleet (``helpers.fleetbuild``) relies on the driver chart's ``gpu.nvidia.com`` as it is.
Scenarios run one after the other here, each setting the classes it needs
(``Truths.device_classes``) and ending with nothing of its own left (``Truths.end``).

The objects are what the real components leave: Nodes as a kubelet would
(``ControlPlane.create_node``: Ready, ``pods: 110`` unless told otherwise), their labels as a
deployed gfd publishes them (``placement.node_labels``), the device plugin's allocatable units
(``placement.units``), the ResourceSlices the NVIDIA DRA driver publishes
(``gfd.devices.resource_slices``). The batch machinery is ``fleetbuild.Fleet``'s (``run``,
``release``, ``settle``, ``barrier``), on this control plane's own marker node.

``Truths.sync`` is the barrier a scenario passes before its first probe: a pod that only a
fresh Node, a fresh ResourceSlice on it and a fresh DeviceClass (naming the extended resource
the pod asks for) can place is bound. kube-scheduler's informers deliver each resource's
events in order, so once it binds, every Node, slice, DeviceClass, pod and claim change made
before it is in its caches, the extended-resource mapping of the classes included (the pod
reaches its device only through that mapping: ``dynamicresources/extended``)."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from gfd.cli import cli
from gfd.devices import resource_slices
from gfd.dra import DEVICE_CLASSES, DRIVER
from gfd.snapshot import Snapshot
from helpers import fleetbuild, placement
from helpers.controlplane import ControlPlane
from helpers.fleetbuild import (
    BATCH_LABEL,
    HOSTNAME,
    IMAGE,
    MARKER_DRIVER,
    NAMESPACE,
    WAIT,
    Batch,
    Fleet,
)

JSON = dict[str, Any]
SCENARIO_LABEL = "gfd-test.example/truth"
"""Every Node of a scenario carries it (value: the scenario): `gfd fleet -l` reads those
alone, and pods made from a printed stanza are kept to them."""
CLASSES = "/apis/resource.k8s.io/v1/deviceclasses"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
CLAIMS = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"
SYNC_PREFIX = "sync-"
GPU_CLASS = fleetbuild.GPU_CLASS
_serial = itertools.count(1)


def machine(name: str, gpus: int | None = None) -> Snapshot:
    """A simulated machine (``placement.machines``), its first ``gpus`` GPUs only."""
    snapshot = placement.machines()[name]
    return snapshot if gpus is None else replace(snapshot, gpus=snapshot.gpus[:gpus])


def device_class(name: str, *selectors: str, extended: str | None = None) -> JSON:
    spec: JSON = {"selectors": [{"cel": {"expression": s}} for s in selectors]}
    if extended:
        spec["extendedResourceName"] = extended
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": name}, "spec": spec}


def chart_classes() -> dict[str, JSON]:
    """The DRA driver chart's DeviceClasses (``deviceclass-gpu.yaml``, ``-mig.yaml``;
    ``gpu.nvidia.com`` names ``nvidia.com/gpu`` on resource.k8s.io/v1), as fleetbuild installs
    them."""
    return {name: device_class(name, cel, extended=fleetbuild.EXTENDED_RESOURCE.get(name))
            for name, cel in DEVICE_CLASSES.items()}


@dataclass
class Truths:
    """The control plane, kube-scheduler on it, and the batch machinery."""

    plane: ControlPlane
    fleet: Fleet
    created: list[JSON | str] = field(default_factory=list)
    """What the current scenario made besides its pods and claims, in order."""

    @property
    def kubeconfig(self) -> Path:
        return self.plane.admin_kubeconfig

    # -- building

    def node(self, name: str, scenario: str, snapshot: Snapshot, *, dra: bool = False,
             allocatable: Mapping[str, str] | None = None, unschedulable: bool = False,
             taints: Iterable[tuple[str, str, str]] = (), gates: Mapping[str, bool] | None = None,
             alter: Callable[[list[JSON]], list[JSON]] | None = None) -> list[JSON]:
        """A GPU Node of the scenario: the device plugin's allocatable units (``dra=False``)
        or none and the DRA driver's ResourceSlices (``alter`` may change them before they are
        created); ``allocatable`` adds to or overrides what the node advertises; cordoned and
        tainted ((key, value, effect)) after it is made, as an admin or the GPU Operator
        would. Returns the slices as the API server holds them."""
        manager = "dra" if dra else "device-plugin"
        labels = placement.node_labels(snapshot, "none", None, "extended", manager)
        assert labels, f"gfd publishes no labels for {name}"
        resources: dict[str, str] = {}
        if not dra:
            units = placement.units(snapshot, "none", None, "device-plugin")
            resources = {r: str(len(us)) for r, us in units.items()}
        resources.update(allocatable or {})
        self.plane.create_node(name, labels={**labels, HOSTNAME: name,
                                             "kubernetes.io/os": "linux",
                                             SCENARIO_LABEL: scenario},
                               allocatable=resources)
        self.created.append(f"/api/v1/nodes/{name}")
        slices: list[JSON] = []
        if dra:
            made = resource_slices(snapshot, node=name, gates=dict(gates) if gates else None)
            assert made, f"the DRA driver does not start on {name}"
            for rs in alter(made) if alter else made:
                slices.append(self.plane.create(rs))
                self.created.append(slices[-1])
        patch: JSON = {}
        if unschedulable:
            patch["unschedulable"] = True
        if taints := list(taints):
            patch["taints"] = [{"key": k, "value": v, "effect": e} for k, v, e in taints]
        if patch:
            self.plane.patch(f"/api/v1/nodes/{name}", {"spec": patch})
        return slices

    def make(self, obj: JSON) -> JSON:
        """Create an object the scenario deletes at its end."""
        made = self.plane.create(obj)
        self.created.append(made)
        return made

    def device_classes(self, classes: Mapping[str, JSON]) -> dict[str, JSON]:
        """Make the cluster's DeviceClasses exactly ``classes`` (besides the marker's): the
        others deleted, these created, or replaced where their spec differs (an unchanged
        class keeps its creationTimestamp). Returns them as the API server holds them."""
        current = {c["metadata"]["name"]: c for c in self.fleet.list(CLASSES)}
        for name in current.keys() - classes.keys() - {MARKER_DRIVER}:
            if not name.startswith(SYNC_PREFIX):
                self.plane.delete(f"{CLASSES}/{name}")
        out = {}
        for name, obj in classes.items():
            was = current.get(name)
            if was is None:
                out[name] = self.plane.create(obj)
            elif any(was["spec"].get(k) != obj["spec"].get(k)
                     for k in ("selectors", "extendedResourceName", "config")):
                out[name] = self.plane.request(
                    "PUT", f"{CLASSES}/{name}", {**obj, "metadata": was["metadata"]})[1]
            else:
                out[name] = was
        return out

    # -- the barrier

    def sync(self) -> None:
        """Return once kube-scheduler has seen every change made so far (module docstring):
        a fresh Node with one device of the marker driver, a fresh DeviceClass mapping a fresh
        extended resource to that driver's devices, and a pod pinned there asking for one unit
        of it, bound. A pod tried before the class reached the scheduler's mapping is refused
        and made again. Everything it made is deleted."""
        n = next(_serial)
        node, resource = f"{SYNC_PREFIX}{n}", f"gfd-test.example/{SYNC_PREFIX}{n}"
        cls = f"{SYNC_PREFIX}{n}.gfd-test.example"
        cp = self.plane
        cp.create_node(node)
        rs = cp.create({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                        "metadata": {"name": node},
                        "spec": {"driver": MARKER_DRIVER, "nodeName": node,
                                 "pool": {"name": node, "generation": 1,
                                          "resourceSliceCount": 1},
                                 "devices": [{"name": "s-0"}]}})
        cp.create(device_class(cls, f"device.driver == '{MARKER_DRIVER}'", extended=resource))
        deadline = time.monotonic() + WAIT
        try:
            for attempt in itertools.count():
                label = f"{node}-{attempt}"
                cp.create(fleetbuild.pod(label, label, nodes=[node], limits=[{resource: 1}],
                                         tolerate=False))
                outcome = self.fleet.settle(label, 1)
                if outcome.bound:
                    break
                self.fleet.release(label)
                assert time.monotonic() < deadline, (
                    f"kube-scheduler never placed the sync pod on {node}: {outcome.refused}\n"
                    f"{self.fleet.scheduler.tail(10)}")
        finally:
            for pod in self.fleet.list(PODS):
                if pod["metadata"]["name"].startswith(f"{node}-"):
                    self.fleet.release(pod["metadata"]["labels"][BATCH_LABEL])
            cp.delete(f"{CLASSES}/{cls}", wait=False)
            cp.delete(rs, wait=False)
            cp.delete(f"/api/v1/nodes/{node}", wait=False)

    # -- ending a scenario

    def end(self) -> None:
        """Delete every pod and claim of the namespace (claims' finalizers removed) and
        what the scenario made, newest first."""
        for pod in self.fleet.list(PODS):
            self.plane.request("DELETE", f"{PODS}/{pod['metadata']['name']}",
                               query={"gracePeriodSeconds": "0"}, expect=(200, 404))
        for claim in self.fleet.list(CLAIMS):
            self.fleet._delete_claim(f"{CLAIMS}/{claim['metadata']['name']}")
        for obj in reversed(self.created):
            self.plane.delete(obj, wait=False)
        self.created.clear()


def start(assets: Path, workdir: Path) -> Truths:
    """etcd, kube-apiserver and kube-scheduler, the namespace of fleetbuild's batches, its
    marker node and the marker driver's DeviceClass."""
    plane = ControlPlane.start(assets, workdir, audit=False)
    try:
        scheduler = plane.start_scheduler()
        plane.create_namespace(NAMESPACE)
        fleetbuild.install_marker(plane)
        plane.create(device_class(MARKER_DRIVER, f"device.driver == '{MARKER_DRIVER}'"))
    except BaseException:
        plane.stop()
        raise
    return Truths(plane, Fleet(plane, scheduler, {}))


# ----------------------------------------------------------------------------- gfd fleet


def gfd_fleet(truths: Truths, scenario: str, *args: str, codes: Iterable[int] = (0,)) -> JSON:
    """What `gfd fleet <args> -o json` prints for the scenario's Nodes (in this process)."""
    argv = ["fleet", *args, "-o", "json", "--kubeconfig", str(truths.kubeconfig),
            "-l", f"{SCENARIO_LABEL}={scenario}"]
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code in tuple(codes), (argv, result.output, result.exception)
    return dict(json.loads(result.stdout))


def rows(report: JSON, node: str) -> list[JSON]:
    """The node's rows of ``nodes[]``."""
    return [r for r in report["nodes"] if r["node"] == node]


def row(report: JSON, node: str, resource: str) -> JSON:
    found = [r for r in rows(report, node) if r["resource"] == resource]
    assert len(found) == 1, f"gfd fleet has {len(found)} rows of {resource} on {node}: " \
                            f"{rows(report, node)}"
    return found[0]


# ----------------------------------------------------------------------------- pods


def one_unit_pods(label: str, node: str, count: int, *, resource: str = "",
                  device_class: str = "", cel: str = "") -> Batch:
    """``count`` pods pinned to ``node`` by hostname, tolerating ``nvidia.com/gpu`` alone,
    each asking one unit: of the extended resource ``resource``, or one device of
    ``device_class`` (its own claim, ``cel`` selecting among the class's devices)."""
    names = [f"{label}-{i}" for i in range(count)]
    if resource:
        return Batch(label, [fleetbuild.pod(n, label, nodes=[node], limits=[{resource: 1}])
                             for n in names])
    return Batch(label, [fleetbuild.pod(n, label, nodes=[node], claims=[n]) for n in names],
                 [fleetbuild.claim(n, label, device_class, count=1, cel=cel) for n in names])


def stanza_pods(fits: JSON, count: int, label: str, scenario: str,
                tolerate: Iterable[str] = ()) -> Batch:
    """``count`` pods made exactly from `fits.selector` as a user pastes it: the label form's
    pod fragment with an image, or the DRA form's ResourceClaimTemplate and Pod (one claim per
    pod from the template). Nothing is added but the image, a grace period of 0 and a
    nodeSelector on the scenario's label (the scenario's Nodes are all `gfd fleet -l`
    read): no toleration of the test's own, unless ``tolerate`` names taint keys (a control:
    what the stanza would bind if it tolerated them)."""
    stanza = fits["selector"]
    template: JSON | None = None
    if isinstance(stanza, list) or stanza.get("kind") == "List":
        docs = stanza if isinstance(stanza, list) else stanza["items"]
        template = next(d for d in docs if d["kind"] == "ResourceClaimTemplate")
        spec = json.loads(json.dumps(next(d for d in docs if d["kind"] == "Pod")["spec"]))
        name = f"{template['metadata']['name']}-{label}"
        template = {**template, "metadata": {"name": name, "namespace": NAMESPACE,
                                             "labels": {BATCH_LABEL: label}}}
        for ref in spec["resourceClaims"]:
            ref["resourceClaimTemplateName"] = name
    else:
        spec = json.loads(json.dumps(stanza))
        spec["containers"] = [{**c, "image": IMAGE} for c in spec["containers"]]
    spec["terminationGracePeriodSeconds"] = 0
    spec["nodeSelector"] = {**spec.get("nodeSelector", {}), SCENARIO_LABEL: scenario}
    if tolerate := list(tolerate):
        spec["tolerations"] = [*spec.get("tolerations", []),
                               *({"key": k, "operator": "Exists"} for k in tolerate)]
    pods = [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"{label}-{i}", "namespace": NAMESPACE,
                          "labels": {BATCH_LABEL: label}},
             "spec": json.loads(json.dumps(spec))} for i in range(count)]
    return Batch(label, pods, template=template)


__all__ = ["DRIVER", "GPU_CLASS", "SCENARIO_LABEL", "Truths", "chart_classes", "device_class",
           "gfd_fleet", "machine", "one_unit_pods", "row", "rows", "stanza_pods", "start"]
