"""The fleet counted as the scheduler counts it: per node and GPU kind, the units the
scheduler can give (TOTAL), those bound pods or allocated claims hold (ALLOCATED), those
nominated pods hold (NOMINATED), what one-unit pods can still get (FREE) and what unscheduled
pods ask (PENDING); then per kind over the nodes a pod can use now, with cordoned, not-Ready
and tainted nodes apart.

Device plugin: TOTAL is ``status.allocatable``; a bound pod that has not ended holds its
request (``requests.pod_requests``), terminating or not; a pod nominated to the node
(``status.nominatedNodeName``, preemption) of priority 0 or more holds its request against an
ordinary pod (kube-scheduler ``framework.go``, ``RunFilterPluginsWithNominatedPods``: nominated
pods of equal or higher priority are added before the filters run). DRA: TOTAL is the devices
of the newest generation of each pool that a DeviceClass of the cluster selects; a claim's
allocation holds its devices (``adminAccess`` results do not); FREE is what one-device claims
can still get one after the other, within the shared counters and not tainted
(``pools.free_count``). FREE is never more than the node's free pod slots (``pods``
allocatable less its bound, unfinished pods and nominated ones: ``NodeResourcesFit``, "Too
many pods"), and 0 on a node a GPU pod cannot use. Time-slicing and MPS replicas are units as
the API server sees them: which GPU a replica is on is the kubelet's business.

The counting is per node (``node_rows``) over an ``Index`` of the rest of the fleet, so that a
node's rows can be counted again alone; a kind's summary is its rows added up (``tally``, which
also takes a row away again) and its demand (``demand``); a row's PENDING can be worked out
again alone when only the pending pods changed (``refresh_pending``). The served view keeps its
rows so (``gfd.fleet.live``): one counting, kept current."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from gfd.dra import DRIVER
from gfd.fleet import pools
from gfd.fleet.classes import Classes
from gfd.fleet.kinds import DRA, Kind, device_kind, plugin_kind
from gfd.fleet.model import Device, Fleet, Node, Pod, Request, gpu_resource
from gfd.fleet.placement import DEFAULT_TOLERATED, admits, state
from gfd.fleet.pools import Held, Pool

ORDINARY_PRIORITY = 0
"""The priority of the pod FREE counts for (no PriorityClass, no global default)."""


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
    nominated: int = 0
    cannot_tell: int = 0
    free_slots: int = 0
    largest: int = 0
    """The most units one pod can get here: FREE without the pod-slot cap (one pod takes
    one slot), 0 where FREE is 0 for want of a slot or on a node a GPU pod cannot use."""

    @property
    def usable(self) -> bool:
        return self.state == "ready"

    def to_api(self) -> dict[str, object]:
        return {"node": self.node, "state": self.state, "reasons": list(self.reasons),
                **self.kind.to_api(), "total": self.total, "allocated": self.allocated,
                "free": self.free, "pending": self.pending, "nominated": self.nominated,
                "cannotTell": self.cannot_tell, "freePodSlots": self.free_slots}


@dataclass(slots=True, kw_only=True)
class KindRow:
    kind: Kind
    nodes: int = 0
    total: int = 0
    allocated: int = 0
    free: int = 0
    pending: int = 0
    nominated: int = 0
    cannot_tell: int = 0
    unschedulable_nodes: int = 0
    unschedulable_total: int = 0
    unschedulable_allocated: int = 0
    largest: int = 0
    largest_stale: bool = False
    """A row holding the largest block was taken away (``tally``): whoever keeps the sums
    current looks at the kind's rows again."""
    """The most units one node of the kind can give one pod (fragmentation: FREE may be
    more)."""

    def to_api(self) -> dict[str, object]:
        return {**self.kind.to_api(), "nodes": self.nodes, "total": self.total,
                "allocated": self.allocated, "free": self.free, "pending": self.pending,
                "nominated": self.nominated, "cannotTell": self.cannot_tell,
                "unschedulable": {"nodes": self.unschedulable_nodes,
                                  "total": self.unschedulable_total,
                                  "allocated": self.unschedulable_allocated}}


Group = tuple[Pod, dict[str, int], list[Pod]]
"""Unscheduled pods of one placement: one of them (its nodeSelector and affinity), what they
ask together of the device plugin's resources, and all of them."""
Placement = tuple[tuple[tuple[str, str], ...], object]
"""Where a pod may go, as far as labels decide: its nodeSelector and required node affinity."""


def placement(pod: Pod) -> Placement:
    return (tuple(sorted((pod.node_selector or {}).items())), pod.affinity)


@dataclass(slots=True)
class Index:
    """What counting one node needs of the rest of the fleet."""

    fleet: Fleet
    tolerated: tuple[str, ...]
    classes: Classes
    gathered: dict[tuple[str, str], Pool]
    held: Held
    pools_of: dict[str, list[Pool]]
    bound: dict[str, list[Pod]] = field(default_factory=dict)
    nominated: dict[str, list[Pod]] = field(default_factory=dict)
    pending: list[Pod] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)
    admitted: dict[Placement, set[str]] = field(default_factory=dict)
    """Per placement, the names of the Nodes it admits (``admitted_names``: worked out on first
    use; whoever changes a Node of the fleet keeps it current or drops it)."""
    samples: dict[str, dict[Kind, Device]] = field(default_factory=dict)
    """Per node, the first device of each DRA kind it has (what a pending claim's CEL is tried
    on), as ``node_rows`` last found them."""


def index(fleet: Fleet, *, tolerated: tuple[str, ...] = DEFAULT_TOLERATED,
          classes: Classes | None = None) -> Index:
    gathered = pools.gather(fleet.slices)
    ix = Index(fleet=fleet, tolerated=tolerated, classes=classes or Classes(fleet),
               gathered=gathered, held=pools.allocated(fleet.claims.values()),
               pools_of=pools.by_node(p for p in gathered.values() if p.driver == DRIVER))
    for pod in fleet.pods:
        if pod.node:
            ix.bound.setdefault(pod.node, []).append(pod)
        else:
            ix.pending.append(pod)
            if pod.nominated and pod.priority >= ORDINARY_PRIORITY:
                ix.nominated.setdefault(pod.nominated, []).append(pod)
    ix.groups = _groups(ix.pending)
    return ix


@dataclass(slots=True, kw_only=True)
class Counted:
    rows: list[NodeRow]
    """One per node and kind, by node then kind."""
    kinds: list[KindRow]
    tolerated: tuple[str, ...]
    gathered: dict[tuple[str, str], Pool] = field(default_factory=dict)
    held: Held = field(default_factory=Held)
    index: Index | None = None


def count(fleet: Fleet, *, tolerated: tuple[str, ...] = DEFAULT_TOLERATED,
          classes: Classes | None = None) -> Counted:
    """Every node's GPU units by kind, and the kinds' totals."""
    ix = index(fleet, tolerated=tolerated, classes=classes)
    rows = [r for name in node_names(ix) for r in node_rows(ix, name)]
    return Counted(rows=rows, kinds=kinds(ix, rows), tolerated=tolerated,
                   gathered=ix.gathered, held=ix.held, index=ix)


def node_names(ix: Index) -> list[str]:
    """The nodes counted: every Node read, and every node a DRA pool is for (a pool of a node
    the selection left out is not counted)."""
    names = set(ix.fleet.nodes)
    if not ix.fleet.selected:
        names |= {n for n in ix.pools_of if n}
    return sorted(names)


def free_slots(ix: Index, name: str) -> int:
    """The pod slots the node has for one more ordinary pod: ``pods`` allocatable less its
    bound, unfinished pods and the pods nominated to it."""
    node = ix.fleet.nodes.get(name)
    if node is None:
        return 0
    used = len(ix.bound.get(name, ())) + len(ix.nominated.get(name, ()))
    load = ix.fleet.load.get(name)
    if load is not None:
        used += load.pods
    return max(0, node.slots - used)


def node_rows(ix: Index, name: str) -> list[NodeRow]:
    """The node's rows, one per GPU kind, by kind."""
    node = ix.fleet.nodes.get(name)
    if node is not None:
        node_state, reasons = state(node, ix.tolerated)
    else:
        node_state, reasons = "not-ready", ["no such Node"]
    slots = free_slots(ix, name)
    rows = _plugin_rows(ix, node, node_state, reasons, slots) if node is not None else []
    rows += _dra_rows(ix, name, node, node_state, reasons, slots)
    return sorted(rows, key=lambda r: r.kind)


def admitted_names(ix: Index, pod: Pod) -> set[str]:
    """The names of the fleet's Nodes the pod's placement admits (``placement.admits``),
    worked out once per placement (``Index.admitted``)."""
    key = placement(pod)
    found = ix.admitted.get(key)
    if found is None:
        found = ix.admitted[key] = {name for name, node in ix.fleet.nodes.items()
                                    if admits(pod, node)}
    return found


def _admits(ix: Index, pod: Pod, node: Node) -> bool:
    """``admits(pod, node)``, from the placement's admitted names for a Node of the fleet."""
    if ix.fleet.nodes.get(node.name) is node:
        return node.name in admitted_names(ix, pod)
    return admits(pod, node)


def plugin_pending(ix: Index, node: Node, resource: str) -> int:
    """What unscheduled pods that admit the node ask of one of its device-plugin resources."""
    return sum(asked[resource] for pod, asked, _ in ix.groups
               if resource in asked and _admits(ix, pod, node))


def refresh_pending(ix: Index, name: str, rows: Iterable[NodeRow]) -> None:
    """Work out again the PENDING of rows ``node_rows`` gave for the node, after only the
    unscheduled pods or the unallocated claims changed."""
    node = ix.fleet.nodes.get(name)
    samples = ix.samples.get(name, {})
    for row in rows:
        if row.kind.manager == DRA:
            row.pending = (dra_demand(ix, [node], row.kind, samples[row.kind], row.total)
                           if node is not None and row.kind in samples else 0)
        elif node is not None:
            row.pending = plugin_pending(ix, node, row.kind.resource)


def _plugin_rows(ix: Index, node: Node, node_state: str, reasons: list[str],
                 slots: int) -> list[NodeRow]:
    holds: dict[str, int] = {}
    for pod in ix.bound.get(node.name, ()):
        for resource, amount in pod.requests.items():
            holds[resource] = holds.get(resource, 0) + amount
    nominated: dict[str, int] = {}
    for pod in ix.nominated.get(node.name, ()):
        for resource, amount in pod.requests.items():
            nominated[resource] = nominated.get(resource, 0) + amount
    rows = []
    for resource in sorted(node.allocatable.keys() | node.capacity.keys()):
        if not gpu_resource(resource):
            continue
        total = node.allocatable.get(resource, 0)
        if total == 0 and node.capacity.get(resource, 0) == 0:
            continue  # a device plugin gone (the kubelet keeps its resource at 0)
        row = NodeRow(node=node.name, kind=plugin_kind(node, resource), state=node_state,
                      reasons=reasons, total=total, allocated=holds.get(resource, 0),
                      nominated=nominated.get(resource, 0), free_slots=slots)
        if row.usable:
            unslotted = max(0, total - row.allocated - row.nominated)
            row.free = min(unslotted, slots)
            row.largest = unslotted if slots else 0
        row.pending = plugin_pending(ix, node, resource)
        rows.append(row)
    return rows


def device_kinds(ix: Index, device: Device) -> list[tuple[Kind, bool]]:
    """The kinds a DRA device is counted under, one per DeviceClass of the cluster that
    selects it (decided: True) or may (cannot tell: False); one kind of no class ("") when no
    class can select it."""
    members = ix.classes.members(device)
    if not members:
        return [(device_kind(device, ""), True)]
    return [(device_kind(device, m.device_class.name), m.decided) for m in members]


def _dra_rows(ix: Index, name: str, node: Node | None, node_state: str, reasons: list[str],
              slots: int) -> list[NodeRow]:
    rows: dict[Kind, NodeRow] = {}
    members: dict[Kind, set[pools.DeviceKey]] = {}
    samples: dict[Kind, Device] = {}
    for pool in ix.pools_of.get(name, ()):
        for device in pool.devices:
            for kind, decided in device_kinds(ix, device):
                row = rows.get(kind)
                if row is None:
                    row = rows[kind] = NodeRow(node=name, kind=kind, state=node_state,
                                               reasons=reasons, free_slots=slots)
                if not decided:
                    row.cannot_tell += 1
                    continue
                samples.setdefault(kind, device)
                row.total += 1
                row.allocated += pools.key(device) in ix.held
                members.setdefault(kind, set()).add(pools.key(device))
    for kind, row in rows.items():
        chosen = members.get(kind, set())
        if row.usable and kind.resource:
            free = sum(pools.free_count(pool, ix.held, lambda d, c=chosen:  # type: ignore[misc]
                                        pools.key(d) in c)
                       for pool in ix.pools_of.get(name, ()))
            row.free = min(free, slots)
            row.largest = free if slots else 0
        if node is not None and kind in samples:
            row.pending = dra_demand(ix, [node], kind, samples[kind], row.total)
    ix.samples[name] = samples
    return list(rows.values())


def _groups(pending: list[Pod]) -> list[Group]:
    """Unscheduled pods by where they may go (nodeSelector and required affinity): one pod
    of each placement, what they all ask together, and the pods, so that each node is matched
    once per placement, not once per pod."""
    out: dict[Placement, Group] = {}
    for pod in pending:
        if not pod.requests and not pod.claims:
            continue
        _, asked, members = out.setdefault(placement(pod), (pod, {}, []))
        members.append(pod)
        for resource, amount in pod.requests.items():
            asked[resource] = asked.get(resource, 0) + amount
    return list(out.values())


def _request_demand(ix: Index, request: Request, device: Device, kind: Kind,
                    devices_here: int) -> int:
    """Devices of ``kind`` one request asks for (a request whose class is the kind's and
    whose selectors this device meets, or cannot be told not to): its count, every matching
    device of the node for ``All``; a ``firstAvailable`` request, its first alternative the
    kind can serve."""
    if request.alternatives:
        for alternative in request.alternatives:
            found = _request_demand(ix, alternative, device, kind, devices_here)
            if found:
                return found
        return 0
    if request.admin or request.device_class != kind.resource:
        return 0
    evaluator = ix.classes.evaluator
    if any(evaluator.matches(e, device) is False for e in request.selectors):
        return 0
    return devices_here if request.mode == "All" else request.count


def dra_demand(ix: Index, nodes: Iterable[Node], kind: Kind, device: Device,
               devices_here: int) -> int:
    """What unscheduled pods that admit one of ``nodes`` ask of ``kind``: each unallocated
    claim once, however many pods share it, and each pod's extended resources the kind's
    class serves where the node has none allocatable."""
    wanted = 0
    claims: dict[tuple[str, str], int] = {}
    for _, claim, units in dra_asks(ix, nodes, kind, device, devices_here):
        if claim is None:
            wanted += units
        else:
            claims[claim] = units
    return wanted + sum(claims.values())


def dra_asks(ix: Index, nodes: Iterable[Node], kind: Kind, device: Device, devices_here: int
             ) -> Iterator[tuple[Pod, tuple[str, str] | None, int]]:
    """Each ask of ``kind`` by an unscheduled pod that admits one of ``nodes``: the pod, the
    claim it asks through (None: an extended resource the kind's class serves, where the
    node has none allocatable) and the devices it asks."""
    nodes = list(nodes)
    units_of: dict[tuple[str, str], int] = {}
    served = [r for r in {r for _, asked, _ in ix.groups for r in asked}
              if (c := ix.classes.serving(r)) is not None and c.name == kind.resource]
    for pod, _, members in ix.groups:
        admitted = [n for n in nodes if _admits(ix, pod, n)]
        if not admitted:
            continue
        for member in members:
            for claim_name in member.claims:
                claim = ix.fleet.claims.get((member.namespace, claim_name))
                if claim is None or not claim.requests:
                    continue
                key = (claim.namespace, claim.name)
                if key not in units_of:
                    units_of[key] = sum(_request_demand(ix, r, device, kind, devices_here)
                                        for r in claim.requests)
                yield member, key, units_of[key]
            for resource in served:
                if member.requests.get(resource) and any(
                        n.allocatable.get(resource, 0) == 0 for n in admitted):
                    yield member, None, member.requests[resource]


def kinds(ix: Index, rows: list[NodeRow]) -> list[KindRow]:
    out: dict[Kind, KindRow] = {}
    where: dict[Kind, list[NodeRow]] = {}
    for row in rows:
        k = out.setdefault(row.kind, KindRow(kind=row.kind))
        where.setdefault(row.kind, []).append(row)
        tally(k, row)
    for kind, summary in out.items():
        summary.pending = demand(ix, kind, where[kind])
    return sorted(out.values(), key=kind_order)


def kind_order(row: KindRow) -> tuple[object, ...]:
    """How kinds are listed: the device plugin's first, then by model, memory, MIG profile,
    resource and sharing (kinds alike in all of these: in the order their first node comes)."""
    k = row.kind
    return (k.manager == DRA, k.model, k.memory or 0, k.mig_profile, k.resource, k.sharing)


def tally(summary: KindRow, row: NodeRow, sign: int = 1) -> None:
    """Add one node's row to its kind's summary (``sign`` -1: take it away again): usable
    nodes' units, and apart those of the nodes a GPU pod cannot use. PENDING is not a sum
    (``demand``)."""
    summary.cannot_tell += sign * row.cannot_tell
    if row.usable:
        summary.nodes += sign
        summary.total += sign * row.total
        summary.allocated += sign * row.allocated
        summary.nominated += sign * row.nominated
        summary.free += sign * row.free
        if sign > 0:
            summary.largest = max(summary.largest, row.largest)
        elif row.largest >= summary.largest:
            summary.largest_stale = True  # the largest block may have gone: look again
    else:
        summary.unschedulable_nodes += sign
        summary.unschedulable_total += sign * row.total
        summary.unschedulable_allocated += sign * row.allocated


def demand(ix: Index, kind: Kind, rows: list[NodeRow]) -> int:
    """What unscheduled pods ask of ``kind``: each pod (each claim) once, when it admits one
    of the kind's nodes (so a pod that could go to two kinds is demand on both)."""
    if kind.manager != DRA:
        return sum(units for _, units in pending_pods(ix, kind, rows))
    nodes = [ix.fleet.nodes[r.node] for r in rows if r.node in ix.fleet.nodes]
    sample = _sample(ix, kind, rows)
    if sample is None:
        return 0
    return dra_demand(ix, nodes, kind, sample, max((r.total for r in rows), default=0))


def pending_pods(ix: Index, kind: Kind, rows: list[NodeRow]) -> list[tuple[Pod, int]]:
    """The unscheduled pods ``demand`` counts on ``kind`` (``rows``: the kind's), each with
    what it asks of the kind (a claim two pods share, in each one's ask)."""
    nodes = [ix.fleet.nodes[r.node] for r in rows if r.node in ix.fleet.nodes]
    if kind.manager != DRA:
        names = {n.name for n in nodes}
        return [(member, member.requests[kind.resource]) for pod, asked, members in ix.groups
                if kind.resource in asked and not admitted_names(ix, pod).isdisjoint(names)
                for member in members if member.requests.get(kind.resource)]
    sample = _sample(ix, kind, rows)
    if sample is None:
        return []
    asks: dict[tuple[str, str], tuple[Pod, int]] = {}
    for pod, _, units in dra_asks(ix, nodes, kind, sample,
                                  max((r.total for r in rows), default=0)):
        if units:
            key = (pod.namespace, pod.name)
            asks[key] = (pod, asks[key][1] + units if key in asks else units)
    return list(asks.values())


def _sample(ix: Index, kind: Kind, rows: list[NodeRow]) -> Device | None:
    """One device of the kind: what a pending claim's CEL is tried on."""
    for row in rows:
        found = ix.samples.get(row.node)
        if found is not None:  # node_rows found them
            if kind in found:
                return found[kind]
            continue
        for pool in ix.pools_of.get(row.node, ()):
            for device in pool.devices:
                if any(k == kind and decided for k, decided in device_kinds(ix, device)):
                    return device
    return None
