"""Where a pod fits now: ``gfd selector``'s one parsed value (``Filters``) applied to the free
units the fleet was counted to have, by the selector's own rules, each node once.

Device plugin: a node qualifies when its labels meet the selector's node-selector terms
(``selector.labels.terms``: every unit of the resource there meets the filters) and it has at
least ``count`` free units of the resource; or, where the node has **none or 0** of it
allocatable (a removed device plugin's resource stays at 0), ``count`` free devices of the
DeviceClass the scheduler maps the resource to (``DRAExtendedResource``: the newest class
naming it, ``classes.Classes.serving``; ``extendeddynamicresources.go``: "isBackedByDRA &&
allocatable == 0").

DRA (``--dra``): a node qualifies when its labels meet the example Pod's node affinity
(``selector.claims.requirements``) and it has ``count`` free devices that the cluster's
DeviceClass of that name (its selectors as the API server holds them) and the claim's CEL
(``selector.claims.cel``) accept, within the shared counters.

Only nodes a GPU pod can use count, and never more pods than a node has pod slots. Devices
whose match cannot be decided are counted apart (``cannotTell``), never as a mismatch. The
stanza printed carries the tolerations of the assumed-tolerated taints the counted nodes
carry, so that the pods as printed bind where this says they fit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gfd import dra
from gfd.fleet import pools
from gfd.fleet.count import Counted, Index, free_slots
from gfd.fleet.kinds import DRA
from gfd.fleet.model import NO_SCHEDULE, Device, DeviceClass, Fleet, Node
from gfd.fleet.placement import terms_match
from gfd.selector import claims, labels
from gfd.selector.filters import Filters


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeFit:
    node: str
    free: int
    """Free units of the resource (devices of the class) there."""
    pods: int
    """Such pods the node takes now: ``free // count``, and no more than its free pod slots
    (each pod takes one slot, whatever it asks)."""
    cannot_tell: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Fits:
    resource: str
    count: int
    nodes: tuple[NodeFit, ...]
    selector: list[dict[str, Any]]
    """What ``gfd selector`` prints for these filters, with the tolerations the nodes need."""
    cannot_tell: int = 0
    """Devices on otherwise fitting nodes whose match could not be decided."""
    notes: tuple[str, ...] = ()

    @property
    def pods(self) -> int:
        return sum(n.pods for n in self.nodes)

    def to_api(self) -> dict[str, Any]:
        return {"resource": self.resource, "count": self.count, "pods": self.pods,
                "cannotTell": self.cannot_tell,
                "nodes": [{"node": n.node, "free": n.free, "pods": n.pods,
                           "cannotTell": n.cannot_tell} for n in self.nodes],
                "selector": self.selector[0] if len(self.selector) == 1 else self.selector}


def _index(counted: Counted) -> Index:
    if counted.index is None:
        raise ValueError("counted without its index")
    return counted.index


def _tolerated_on(nodes: list[Node], tolerated: tuple[str, ...]) -> list[str]:
    """The assumed-tolerated taint keys (``nvidia.com/gpu``, ``--tolerate``) the nodes carry."""
    keys = {t.key for n in nodes for t in n.taints if t.effect in NO_SCHEDULE}
    return [k for k in tolerated if k in keys]


def _count_devices(ix: Index, name: str, accept: Any) -> tuple[int, int]:
    """(free one-device claims, undecided devices) on the node for devices ``accept`` judges
    (True, False or None), over every pool of the node."""
    chosen: set[pools.DeviceKey] = set()
    undecided = 0
    for pool in ix.pools_of.get(name, ()):
        for device in pool.devices:
            verdict = accept(device)
            if verdict is True:
                chosen.add(pools.key(device))
            elif verdict is None:
                undecided += 1
    free = sum(pools.free_count(pool, ix.held, lambda d: pools.key(d) in chosen)
               for pool in ix.pools_of.get(name, ()))
    return free, undecided


def _class_accepts(ix: Index, device_class: DeviceClass, extra: list[str]) -> Any:
    evaluator = ix.classes.evaluator

    def accept(device: Device) -> bool | None:
        verdict = ix.classes.judge(device_class, device)
        if verdict is False:
            return False
        for expression in extra:
            answer = evaluator.matches(expression, device)
            if answer is False:
                return False
            if answer is None:
                verdict = None
        return verdict

    return accept


def fits(fleet: Fleet, counted: Counted, f: Filters, *, label_set: str = "extended",
         gates: dict[str, bool] | None = None) -> Fits:
    ix = _index(counted)
    if f.dra:
        return _dra(ix, counted, f, label_set, gates)
    terms = [list(t) for t in labels.terms(f, label_set)]
    usable = {r.node for r in counted.rows if r.usable}
    serving = ix.classes.serving(f.resource)
    plugin = {r.node: max(0, r.total - r.allocated - r.nominated) for r in counted.rows
              if r.kind.manager != DRA and r.kind.resource == f.resource}
    found: list[NodeFit] = []
    undecided_total = 0
    for name in sorted(usable):
        node = fleet.nodes.get(name)
        if node is None or not terms_match(terms, node.labels):
            continue
        if node.allocatable.get(f.resource, 0) > 0:
            free, undecided = plugin.get(name, 0), 0
        elif serving is not None:
            free, undecided = _count_devices(ix, name, _class_accepts(ix, serving, []))
        else:
            continue
        undecided_total += undecided
        pods = min(free // f.count, free_slots(ix, name))
        if pods or undecided:
            found.append(NodeFit(node=name, free=free, pods=pods, cannot_tell=undecided))
    nodes = [fleet.nodes[n.node] for n in found if n.pods]
    stanza = labels.stanza(f, label_set=label_set,
                           tolerate=_tolerated_on(nodes, counted.tolerated))
    return Fits(resource=f.resource, count=f.count, nodes=tuple(found), selector=[stanza],
                cannot_tell=undecided_total)


def _dra(ix: Index, counted: Counted, f: Filters, label_set: str,
         gates: dict[str, bool] | None) -> Fits:
    name = dra.device_class(claims.device_type(f))
    device_class = ix.classes.by_name.get(name)
    affinity = claims.requirements(f, label_set, gates)
    usable = {r.node for r in counted.rows if r.usable}
    found: list[NodeFit] = []
    notes: list[str] = []
    undecided_total = 0
    if device_class is None:
        notes.append(f"the cluster has no DeviceClass {name}: no claim of that class can be "
                     "allocated")
    else:
        accept = _class_accepts(ix, device_class, claims.cel(f, gates))
        for node_name in sorted(usable):
            node = ix.fleet.nodes.get(node_name)
            if node is None or not terms_match(affinity, node.labels) \
                    or node_name not in ix.pools_of:
                continue
            free, undecided = _count_devices(ix, node_name, accept)
            undecided_total += undecided
            pods = min(free // f.count, free_slots(ix, node_name))
            if pods or undecided:
                found.append(NodeFit(node=node_name, free=free, pods=pods,
                                     cannot_tell=undecided))
    nodes = [ix.fleet.nodes[n.node] for n in found if n.pods]
    documents = claims.documents(f, label_set=label_set, gates=gates,
                                 tolerate=_tolerated_on(nodes, counted.tolerated))
    return Fits(resource=name, count=f.count, nodes=tuple(found), selector=documents,
                cannot_tell=undecided_total, notes=tuple(notes))
