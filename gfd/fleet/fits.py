"""Where a pod fits now: ``gfd selector``'s one parsed value (``Filters``) applied to the free
units the fleet was counted to have, by the selector's own rules.

Device plugin: a node qualifies when its labels meet the selector's node-selector terms
(``selector.labels.terms``: every unit of the resource there meets the filters) and it has at
least ``count`` free units of the resource, or, without that resource allocatable, ``count``
free devices of a DeviceClass whose ``extendedResourceName`` is the resource.

DRA (``--dra``): a node qualifies when its labels meet the example Pod's node affinity
(``selector.claims.requirements``) and it has ``count`` free devices that the claim's CEL
(``selector.claims.cel``, with the DeviceClass's selector) accepts, within the shared
counters. Only nodes a GPU pod can use now count."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gfd import dra
from gfd.fleet import pools
from gfd.fleet.cel import Evaluator
from gfd.fleet.count import Counted
from gfd.fleet.kinds import DRA
from gfd.fleet.model import Device, Fleet
from gfd.fleet.placement import terms_match
from gfd.selector import claims, labels
from gfd.selector.filters import Filters


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeFit:
    node: str
    free: int
    pods: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Fits:
    resource: str
    count: int
    nodes: tuple[NodeFit, ...]
    selector: list[dict[str, Any]]
    """What ``gfd selector`` prints for these filters."""

    @property
    def pods(self) -> int:
        return sum(n.pods for n in self.nodes)

    def to_api(self) -> dict[str, Any]:
        return {"resource": self.resource, "count": self.count, "pods": self.pods,
                "nodes": [{"node": n.node, "free": n.free, "pods": n.pods} for n in self.nodes],
                "selector": self.selector[0] if len(self.selector) == 1 else self.selector}


def fits(fleet: Fleet, counted: Counted, f: Filters, *, label_set: str = "extended",
         gates: dict[str, bool] | None = None) -> Fits:
    if f.dra:
        return _dra(fleet, counted, f, label_set, gates)
    terms = labels.terms(f, label_set)
    found = []
    for row in counted.rows:
        node = fleet.nodes.get(row.node)
        if (row.kind.manager == DRA or row.kind.resource != f.resource or not row.usable
                or node is None or not terms_match([list(t) for t in terms], node.labels)):
            continue
        if row.free >= f.count:
            found.append(NodeFit(node=row.node, free=row.free, pods=row.free // f.count))
    found += _extended(fleet, counted, f, terms)
    return Fits(resource=f.resource, count=f.count,
                nodes=tuple(sorted(found, key=lambda n: n.node)),
                selector=[labels.stanza(f, label_set=label_set)])


def _extended(fleet: Fleet, counted: Counted, f: Filters,
              terms: list[labels.Term]) -> list[NodeFit]:
    """Nodes where a DeviceClass's ``extendedResourceName`` serves the resource: a pod asking
    for it on a node that does not have it allocatable gets devices of that class through a
    claim the scheduler makes (``DRAExtendedResource``, beta and on by default in 1.36)."""
    classes = [c for c in fleet.classes.values() if c.extended_resource == f.resource]
    usable = {r.node for r in counted.rows if r.usable}
    evaluator = Evaluator()
    found = []
    for pool in counted.gathered.values():
        if not pool.devices or not classes:
            continue
        name = pool.devices[0].node or pool.name
        node = fleet.nodes.get(name)
        if (name not in usable or node is None or f.resource in node.allocatable
                or not terms_match([list(t) for t in terms], node.labels)):
            continue
        free = max(pools.free_count(
            pool, counted.held,
            lambda d, c=c: all(evaluator.matches(e, d) is True  # type: ignore[misc]
                               for e in c.selectors))
                   for c in classes)
        if free >= f.count:
            found.append(NodeFit(node=name, free=free, pods=free // f.count))
    return found


def _dra(fleet: Fleet, counted: Counted, f: Filters, label_set: str,
         gates: dict[str, bool] | None) -> Fits:
    device_class = dra.device_class(claims.device_type(f))
    expressions = [dra.DEVICE_CLASSES[device_class], *claims.cel(f, gates)]
    affinity = claims.requirements(f, label_set, gates)
    usable = {r.node for r in counted.rows if r.usable}

    evaluator = Evaluator()

    def wanted(device: Device) -> bool:
        return all(evaluator.matches(e, device) is True for e in expressions)

    found = []
    for pool in counted.gathered.values():
        if not pool.devices:
            continue
        name = pool.devices[0].node or pool.name
        node = fleet.nodes.get(name)
        if name not in usable or node is None or not terms_match(affinity, node.labels):
            continue
        free = pools.free_count(pool, counted.held, wanted)
        if free >= f.count:
            found.append(NodeFit(node=name, free=free, pods=free // f.count))
    return Fits(resource=device_class, count=f.count,
                nodes=tuple(sorted(found, key=lambda n: n.node)),
                selector=claims.documents(f, label_set=label_set, gates=gates))
