"""Small fleets for what serves a view (``gfd fleet --serve``: its metrics, its page, its
alerts): Nodes and Pods as ``kubectl get -o json`` prints them (gfd's labels under the
device plugin, ``nvidia.com/gpu`` allocatable, a Ready gfd pod on each labelled node), a
dump of them (``--from``), the ``View`` gfd makes of a dump, and ``ChangingSource``: a
``ViewSource`` whose view a test replaces (each replacement a new generation), as the live
view replaces its own when a pod binds."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from gfd.fleet.checks import check
from gfd.fleet.count import count
from gfd.fleet.health import ViewHealth
from gfd.fleet.source import from_dump
from gfd.fleet.view import View, one_read

JSON = dict[str, Any]
H100 = ("NVIDIA-H100-80GB-HBM3", 81559)
A100 = ("NVIDIA-A100-SXM4-80GB", 81920)
L40S = ("NVIDIA-L40S", 46068)
CREATED = "2026-01-01T00:00:00Z"


def node(name: str, model: tuple[str, int], gpus: int, *, labelled_gpus: int | None = None,
         cordoned: bool = False) -> JSON:
    """A GPU node as gfd labels it; ``labelled_gpus``: what its labels say when that differs
    from what the device plugin advertises (one GPU lost: capacity keeps it)."""
    product, memory = model
    said = gpus if labelled_gpus is None else labelled_gpus
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
              "nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": str(said),
              "nvidia.com/gpu.product": product, "nvidia.com/gpu.memory": str(memory),
              "nvidia.com/gpu.replicas": "1", "nvidia.com/gpu.sharing-strategy": "none",
              "nvidia.com/mig.strategy": "none", "nvidia.com/gfd.timestamp": "1767225600",
              f"nvidia.com/gpu.product.{product}": str(said),
              "nvidia.com/gpu.heterogeneous": "false"}
    allocatable = {"nvidia.com/gpu": str(gpus), "pods": "110", "cpu": "64", "memory": "512Gi"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": f"uid-{name}", "labels": labels},
            "spec": {"unschedulable": True} if cordoned else {},
            "status": {"allocatable": allocatable,
                       "capacity": {**allocatable, "nvidia.com/gpu": str(max(gpus, said))},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(name: str, gpus: int, *, node: str = "", product: str = "", created: str = CREATED,
        namespace: str = "ml") -> JSON:
    """A pod asking ``gpus`` GPUs: bound to ``node`` (Running), or pending; ``product`` its
    nodeSelector on ``gpu.product``."""
    spec: JSON = {"containers": [{"name": "main", "image": "registry.example/train:1",
                                  "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
                  "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                   "effect": "NoSchedule"}]}
    if node:
        spec["nodeName"] = node
    if product:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": product}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}",
                         "creationTimestamp": created},
            "spec": spec, "status": {"phase": "Running" if node else "Pending"}}


def agent(node: str) -> JSON:
    """gfd's Ready pod on ``node`` (its labels are kept current: no ``no-agent`` finding)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"gfd-{node}", "namespace": "gfd", "uid": f"uid-gfd-{node}",
                         "labels": {"app.kubernetes.io/name": "gfd"},
                         "creationTimestamp": CREATED},
            "spec": {"nodeName": node, "containers": [{"name": "gfd", "image": "gfd:1"}]},
            "status": {"phase": "Running",
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def dump(objects: Sequence[JSON], *, agents: bool = True) -> JSON:
    """``kubectl get nodes,pods,... -A -o json`` of ``objects`` (with a gfd pod on each node)."""
    extra = [agent(o["metadata"]["name"]) for o in objects if o["kind"] == "Node"] \
        if agents else []
    return {"apiVersion": "v1", "kind": "List", "items": [*objects, *extra]}


def view_of(doc: JSON, *, generation: int = 0, when: float = 1767225600.0,
            health: ViewHealth | None = None) -> View:
    """The view ``gfd fleet --serve --from`` makes of a dump (findings included)."""
    fleet = from_dump("-", stdin=io.StringIO(json.dumps(doc)))
    counted = count(fleet)
    view = one_read(fleet, counted, tuple(check(fleet, counted)), when=when)
    return replace(view, generation=generation, health=health or view.health)


class ChangingSource:
    """A ``ViewSource`` whose view the test replaces: ``change`` makes the next generation
    (a pod bound, a node cordoned) and wakes every ``wait``."""

    def __init__(self, view: View) -> None:
        self._view = view
        self._changed = threading.Condition()
        self._stopped = False

    @contextmanager
    def read(self) -> Iterator[View]:
        with self._changed:
            view = self._view
        yield view

    def wait(self, after: int, timeout: float) -> int:
        with self._changed:
            self._changed.wait_for(lambda: self._view.generation > after or self._stopped,
                                   timeout)
            return self._view.generation

    def change(self, view: View) -> View:
        with self._changed:
            self._view = replace(view, generation=self._view.generation + 1)
            self._changed.notify_all()
            return self._view

    def stop(self) -> None:
        with self._changed:
            self._stopped = True
            self._changed.notify_all()
