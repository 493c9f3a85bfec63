"""The fleet counted as the scheduler counts it: per node and GPU kind, the units the
scheduler can give (TOTAL), those bound pods or allocated claims hold (ALLOCATED), what
one-unit pods can still get (FREE) and what unscheduled pods ask (PENDING); then per kind
over the nodes a pod can use now, with cordoned, not-Ready and tainted nodes apart.

Device plugin: TOTAL is ``status.allocatable``; a bound pod that has not ended holds its
request (``requests.pod_requests``), terminating or not; FREE is what is left. DRA: TOTAL is
the devices of the newest generation of each pool; a claim's allocation holds its devices
(``adminAccess`` results do not); FREE is what one-device claims can still get one after the
other, within the shared counters and not tainted (``pools.free_count``). Time-slicing and
MPS replicas are units as the API server sees them: which GPU a replica is on is the kubelet's
business, never shown here."""

from __future__ import annotations

from dataclasses import dataclass, field

from gfd.dra import DRIVER
from gfd.fleet import pools
from gfd.fleet.cel import Evaluator
from gfd.fleet.kinds import DRA, Kind, device_kind, plugin_kind
from gfd.fleet.model import Device, Fleet, Pod
from gfd.fleet.placement import DEFAULT_TOLERATED, admits, state
from gfd.fleet.pools import DeviceKey, Pool


@dataclass(slots=True, kw_only=True)
class NodeRow:
    node: str
    kind: Kind
    state: str
    reasons: list[str]
    total: int = 0
    allocated: int = 0
    free: int = 0
    pending: int = 0

    @property
    def usable(self) -> bool:
        return self.state == "ready"

    def to_api(self) -> dict[str, object]:
        return {"node": self.node, "state": self.state, "reasons": list(self.reasons),
                **self.kind.to_api(), "total": self.total, "allocated": self.allocated,
                "free": self.free, "pending": self.pending}


@dataclass(slots=True, kw_only=True)
class KindRow:
    kind: Kind
    nodes: int = 0
    total: int = 0
    allocated: int = 0
    free: int = 0
    pending: int = 0
    unschedulable_nodes: int = 0
    unschedulable_total: int = 0
    unschedulable_allocated: int = 0

    def to_api(self) -> dict[str, object]:
        return {**self.kind.to_api(), "nodes": self.nodes, "total": self.total,
                "allocated": self.allocated, "free": self.free, "pending": self.pending,
                "unschedulable": {"nodes": self.unschedulable_nodes,
                                  "total": self.unschedulable_total,
                                  "allocated": self.unschedulable_allocated}}


@dataclass(slots=True, kw_only=True)
class Counted:
    rows: list[NodeRow]
    """One per node and kind, by node then kind."""
    kinds: list[KindRow]
    tolerated: tuple[str, ...]
    gathered: dict[tuple[str, str], Pool] = field(default_factory=dict)
    held: dict[DeviceKey, str] = field(default_factory=dict)


def _pending_dra(fleet: Fleet, pod: Pod, device: Device, kind: Kind, *,
                 evaluator: Evaluator) -> int:
    """Devices of this kind the pod's unallocated claims ask for (a request whose selectors
    this device meets, or cannot be told not to)."""
    wanted = 0
    for name in pod.claims:
        claim = fleet.claims.get((pod.namespace, name))
        if claim is None:
            continue
        for request in claim.requests:
            if request.device_class != kind.resource:
                continue
            if all(evaluator.matches(expr, device) is not False
                   for expr in request.selectors):
                wanted += request.count
    return wanted


def count(fleet: Fleet, *, tolerated: tuple[str, ...] = DEFAULT_TOLERATED) -> Counted:
    """Every node's GPU units by kind, and the kinds' totals."""
    held_by_node: dict[str, dict[str, int]] = {}
    pending = [p for p in fleet.pods if not p.node]
    for pod in fleet.pods:
        if pod.node:
            mine = held_by_node.setdefault(pod.node, {})
            for resource, amount in pod.requests.items():
                mine[resource] = mine.get(resource, 0) + amount
    groups = _groups(pending)
    rows: list[NodeRow] = []
    for name in sorted(fleet.nodes):
        node = fleet.nodes[name]
        node_state, reasons = state(node, tolerated)
        holds = held_by_node.get(name, {})
        for resource in sorted(node.allocatable.keys() | node.capacity.keys()):
            total = node.allocatable.get(resource, 0)
            allocated = holds.get(resource, 0)
            row = NodeRow(node=name, kind=plugin_kind(node, resource), state=node_state,
                          reasons=reasons, total=total, allocated=allocated,
                          free=max(0, total - allocated))
            row.pending = sum(asked.get(resource, 0) for pod, asked in groups
                              if resource in asked and admits(pod, node))
            rows.append(row)
    gathered = pools.gather(fleet.slices)
    held = pools.allocated(fleet.claims.values())
    evaluator = Evaluator()
    dra_rows, samples = _dra_rows(fleet, gathered, held, pending, tolerated,
                                  evaluator=evaluator)
    rows += dra_rows
    rows.sort(key=lambda r: (r.node, r.kind))
    return Counted(rows=rows, kinds=_kinds(rows, fleet, pending, groups, samples,
                                           evaluator=evaluator),
                   tolerated=tolerated, gathered=gathered, held=held)


def _dra_rows(fleet: Fleet, gathered: dict[tuple[str, str], pools.Pool],
              held: dict[pools.DeviceKey, str], pending: list[Pod],
              tolerated: tuple[str, ...], *,
              evaluator: Evaluator) -> tuple[list[NodeRow], dict[Kind, Device]]:
    """The DRA driver's devices by node and kind, and one device of each kind (what a
    pending claim's CEL is tried on)."""
    rows: dict[tuple[str, Kind], NodeRow] = {}
    samples: dict[Kind, Device] = {}
    for pool in gathered.values():
        if pool.driver != DRIVER:
            continue  # another driver's devices are no GPUs of NVIDIA's
        kinds = {id(d): device_kind(d) for d in pool.devices}
        for device in pool.devices:
            node_name = device.node or pool.name
            node = fleet.nodes.get(node_name)
            if node is None and device.node and fleet.selected:
                continue  # a node the selection left out
            kind = kinds[id(device)]
            samples.setdefault(kind, device)
            row = rows.get((node_name, kind))
            if row is None:
                node_state, reasons = (state(node, tolerated) if node
                                       else ("not-ready", ["no such Node"]))
                row = rows[(node_name, kind)] = NodeRow(node=node_name, kind=kind,
                                                        state=node_state, reasons=reasons)
                if node is not None:
                    row.pending = sum(_pending_dra(fleet, p, device, kind,
                                                   evaluator=evaluator)
                                      for p in pending if p.claims and admits(p, node))
                row.free = pools.free_count(
                    pool, held, lambda d, k=kind, m=kinds: m[id(d)] == k)  # type: ignore[misc]
            row.total += 1
            row.allocated += pools.key(device) in held
    return list(rows.values()), samples


Group = tuple[Pod, dict[str, int]]


def _groups(pending: list[Pod]) -> list[Group]:
    """Unscheduled pods by where they may go (nodeSelector and required affinity): one pod
    of each placement and what they all ask together, so that each node is matched once per
    placement, not once per pod."""
    out: dict[object, Group] = {}
    for pod in pending:
        if not pod.requests:
            continue
        place = (tuple(sorted((pod.node_selector or {}).items())), pod.affinity)
        _, asked = out.setdefault(place, (pod, {}))
        for resource, amount in pod.requests.items():
            asked[resource] = asked.get(resource, 0) + amount
    return list(out.values())


def _kinds(rows: list[NodeRow], fleet: Fleet, pending: list[Pod], groups: list[Group],
           samples: dict[Kind, Device], *, evaluator: Evaluator) -> list[KindRow]:
    out: dict[Kind, KindRow] = {}
    where: dict[Kind, list[NodeRow]] = {}
    for row in rows:
        k = out.setdefault(row.kind, KindRow(kind=row.kind))
        where.setdefault(row.kind, []).append(row)
        if row.usable:
            k.nodes += 1
            k.total += row.total
            k.allocated += row.allocated
            k.free += row.free
        else:
            k.unschedulable_nodes += 1
            k.unschedulable_total += row.total
            k.unschedulable_allocated += row.allocated
    for kind, summary in out.items():
        summary.pending = _demand(pending, groups, fleet, kind, where[kind], samples.get(kind),
                                  evaluator=evaluator)
    return sorted(out.values(), key=lambda r: (r.kind.manager == DRA, r.kind.model,
                                               r.kind.memory or 0, r.kind.mig_profile,
                                               r.kind.resource, r.kind.sharing))


def _demand(pending: list[Pod], groups: list[Group], fleet: Fleet, kind: Kind,
            rows: list[NodeRow], sample: Device | None, *, evaluator: Evaluator) -> int:
    """What unscheduled pods ask of ``kind``: each pod once, when it admits one of the kind's
    nodes (so a pod that could go to two kinds is demand on both)."""
    nodes = [fleet.nodes[r.node] for r in rows if r.node in fleet.nodes]
    if kind.manager != DRA:
        return sum(asked[kind.resource] for pod, asked in groups
                   if kind.resource in asked and any(admits(pod, n) for n in nodes))
    if sample is None:
        return 0
    return sum(_pending_dra(fleet, pod, sample, kind, evaluator=evaluator) for pod in pending
               if pod.claims and any(admits(pod, n) for n in nodes))
