"""``NodeResourcesFit`` as kube-scheduler's Filter judges one node for one pod
(``pkg/scheduler/framework/plugins/noderesources/fit.go``, ``fitsRequest``): what the node's
pods already take, and each resource the pod asks more of than is left.

- The node's pods are every bound, unfinished pod on it (GPU or not) and the pods nominated
  to it of at least the pod's priority (``RunFilterPluginsWithNominatedPods``), the pod itself
  never; one more pod than ``pods`` allocatable is "Too many pods".
- CPU (thousandths), memory and ephemeral storage are compared only when the pod asks for
  some; every other scalar resource it asks (extended resources, hugepages) likewise, its
  absence on the node being 0 allocatable: "Insufficient <name>".
- An extended resource a DeviceClass serves (``extendedResourceName``) on a node with none or
  0 of it allocatable is left to ``DynamicResources`` (``shouldDelegateResourceToDRA``).

The reasons come in the scheduler's order: pods, cpu, memory, ephemeral-storage, then the
other resources by name (the scheduler walks a map; its message counts reasons, so their order
within one node does not show)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gfd.fleet.classes import Classes
from gfd.fleet.count import Index
from gfd.fleet.model import PODS, Node, Pod

CPU, MEMORY, STORAGE = "cpu", "memory", "ephemeral-storage"
NATIVE = (CPU, MEMORY, STORAGE)
TOO_MANY_PODS = "Too many pods"


def reason(resource: str) -> str:
    """The scheduler's reason for one resource (``InsufficientResource.Reason``)."""
    return TOO_MANY_PODS if resource == PODS else f"Insufficient {resource}"


def scalar(name: str) -> bool:
    """``IsScalarResourceName``: extended and prefixed native resources (a ``/`` in the
    name), hugepages and attachable volumes; other names the scheduler does not compare."""
    return "/" in name or name.startswith(("hugepages-", "attachable-volumes-"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Short:
    """One resource the node lacks for the pod."""

    resource: str
    asked: int
    allocatable: int
    used: int
    holders: tuple[str, ...] = ()
    """The pods (``namespace/name``) on the node taking some of it, most first."""

    @property
    def reason(self) -> str:
        return reason(self.resource)

    @property
    def free(self) -> int:
        return max(0, self.allocatable - self.used)


@dataclass(slots=True)
class Taken:
    """What a node's pods take: how many, their summed requests, and who takes what."""

    pods: int = 0
    requests: dict[str, int] = field(default_factory=dict)
    by: dict[str, dict[str, int]] = field(default_factory=dict)
    """resource -> pod (``namespace/name``) -> its request (pods that ask for no GPU are
    summed under ``other pods``)."""

    def add(self, who: str, requests: dict[str, int], pods: int = 1) -> None:
        self.pods += pods
        for name, amount in requests.items():
            if amount:
                self.requests[name] = self.requests.get(name, 0) + amount
                into = self.by.setdefault(name, {})
                into[who] = into.get(who, 0) + amount


def _same(a: Pod, b: Pod) -> bool:
    if a.uid and b.uid:
        return a.uid == b.uid
    return (a.namespace, a.name) == (b.namespace, b.name)


def taken(ix: Index, name: str, *, pod: Pod | None = None, priority: int = 0) -> Taken:
    """What the node's bound, unfinished pods and its nominated pods of priority ``priority``
    or more take, ``pod`` left out (the Index keeps the nominated pods of priority 0 or more:
    those a pod of no priority class must count)."""
    out = Taken()
    nominated = [p for p in ix.nominated.get(name, ()) if p.priority >= priority]
    for p in (*ix.bound.get(name, ()), *nominated):
        if pod is not None and _same(p, pod):
            continue
        out.add(f"{p.namespace}/{p.name}", {**p.usage, **p.requests})
    load = ix.fleet.load.get(name)
    if load is not None:
        out.add("other pods", load.requests, load.pods)
    return out


def delegated(classes: Classes, node: Node, resource: str) -> bool:
    """The scheduler leaves ``resource`` to DynamicResources on this node: a DeviceClass
    serves it and the node has none or 0 allocatable."""
    return node.allocatable.get(resource, 0) == 0 and classes.serving(resource) is not None


def _asked(requests: dict[str, int]) -> Iterable[str]:
    yield from (r for r in NATIVE if requests.get(r, 0) > 0)
    yield from sorted(r for r in requests if r not in NATIVE and scalar(r) and requests[r] > 0)


def insufficient(ix: Index, node: Node, requests: dict[str, int], *, pod: Pod | None = None,
                 priority: int = 0) -> list[Short]:
    """Each resource the node lacks for a pod asking ``requests`` (CPU in thousandths), in
    the scheduler's order; empty when it fits."""
    have = taken(ix, node.name, pod=pod, priority=priority)
    out = []
    if have.pods + 1 > node.slots:
        out.append(Short(resource=PODS, asked=1, allocatable=node.slots, used=have.pods))
    for resource in _asked(requests):
        if resource not in NATIVE and delegated(ix.classes, node, resource):
            continue
        total = node.allocatable.get(resource, 0)
        used = have.requests.get(resource, 0)
        if requests[resource] > total - used:
            holders = sorted(have.by.get(resource, {}).items(), key=lambda kv: (-kv[1], kv[0]))
            out.append(Short(resource=resource, asked=requests[resource], allocatable=total,
                             used=used, holders=tuple(w for w, _ in holders)))
    return out
