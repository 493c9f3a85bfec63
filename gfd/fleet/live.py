"""The fleet kept current object by object: what the one-shot reduces pages to, held by key so
that one changed object (a watch event) replaces its old value, and the count kept by the
same code as ``count()``: each change recounts the node(s) it touches (``count.node_rows``),
takes their old rows out of their kinds' sums and adds the new ones (``count.tally``); what
only unscheduled pods and unallocated claims decide (PENDING) is worked out again where they
changed, when the view is next read (``count.refresh_pending``, ``count.demand``). Nothing is
counted cluster-wide per change; ``counted()`` equals ``count()`` of the held fleet at any
moment (tests/fleet/test_live.py holds it after random changes).

What is held:

- Nodes, ResourceSlices, ResourceClaims and DeviceClasses as the model's values, by name (and
  namespace); each pool gathered again from its own slices when one of them changes;
- a Pod that asks for GPUs, holds claims, keeps a node's labels or is nominated to a node as
  the model's ``Pod``; any other bound, unfinished pod as no more than the node it takes a pod
  slot on and what it requests there (one shared tuple for all pods alike: a Deployment's
  replicas on one node cost one); an ended pod as nothing;
- a malformed object as its skip line (the counts lack it, as the one-shot's do).

Not thread-safe: its owner (``gfd.fleet.livesource``) serialises changes and reads."""

from __future__ import annotations

import bisect
import dataclasses
import sys
from collections.abc import Iterable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Literal

from gfd.dra import DRIVER
from gfd.fleet import pools
from gfd.fleet.classes import Classes
from gfd.fleet.count import (
    ORDINARY_PRIORITY,
    Counted,
    Group,
    Index,
    KindRow,
    NodeRow,
    Placement,
    count,
    demand,
    kind_order,
    node_rows,
    placement,
    refresh_pending,
    tally,
)
from gfd.fleet.kinds import DRA, Kind
from gfd.fleet.model import (
    Claim,
    DeviceClass,
    Fleet,
    Load,
    Malformed,
    Node,
    Pod,
    Slice,
    claim_of,
    device_class_of,
    ident,
    node_of,
    pod_of,
    slice_of,
    usage_of,
)
from gfd.fleet.placement import DEFAULT_TOLERATED, admits
from gfd.fleet.pools import DeviceKey, Pool

Resource = Literal["nodes", "pods", "resourceslices", "resourceclaims", "deviceclasses"]
RESOURCES: tuple[Resource, ...] = ("nodes", "pods", "resourceslices", "resourceclaims",
                                   "deviceclasses")
"""The five collections, in the order the one-shot reads them."""
KIND_OF = {"nodes": "Node", "pods": "Pod", "resourceslices": "ResourceSlice",
           "resourceclaims": "ResourceClaim", "deviceclasses": "DeviceClass"}
Used = tuple[str, tuple[tuple[str, int], ...]]
"""A bound pod that asks for no GPU: its node and its requests (``model.Usage``), shared."""
Value = Node | Pod | Used | Slice | Claim | DeviceClass
KEPT_PLACEMENTS = 256
SHARED_FLOOR = 4096
"""Shared ``Used`` values kept before the unused ones are dropped (when there are twice as
many as pods holding them)."""
"""Placements no unscheduled pod has any more whose admitted Nodes are still kept current
(the next pod of a Deployment so placed is then counted without looking at every Node)."""


def key_of(raw: Any) -> str:
    """How an object is held: ``namespace\\0name`` ("" for a cluster-scoped one), sorting as
    the API server lists (by namespace, then name); "" for an object without a name."""
    meta = raw.get("metadata") if isinstance(raw, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    name, namespace = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str) or not name:
        return ""
    return f"{namespace if isinstance(namespace, str) else ''}\x00{name}"


@dataclass(slots=True)
class _Touched:
    """What one change (or one relist) touched: nodes to recount, whether their kinds'
    demand may have changed with them, and what PENDING must be worked out again."""

    nodes: set[str] = field(default_factory=set)
    structural: set[str] = field(default_factory=set)
    """Nodes whose labels, resources, devices or classes changed (their kinds' demand too)."""
    resources: set[str] = field(default_factory=set)
    """Device-plugin resources unscheduled pods ask for differently now."""
    dra: bool = False
    """DRA demand may have changed (a pending pod with claims or a class-served request, an
    unallocated claim, a DeviceClass)."""


@dataclass(frozen=True, slots=True)
class Staged:
    """One collection's listing reduced (``stage``), to be put in place at once (``commit``)."""

    resource: Resource
    values: dict[str, Value]
    skipped: dict[tuple[int, str], str]


def stage(resource: Resource, objects: Iterable[Any]) -> Staged:
    """One collection's whole listing reduced, object by object as the pages arrive; nothing
    held changes (a LIST that fails midway leaves no trace). Safe beside the owner's
    changes: it reads nothing held."""
    values: dict[str, Value] = {}
    skipped: dict[tuple[int, str], str] = {}
    order = RESOURCES.index(resource)
    for raw in objects:
        key = key_of(raw)
        value, line = reduce(resource, raw)
        if line:
            skipped[(order, key)] = line
        if key and value is not None:
            values[key] = value
    return Staged(resource, values, skipped)


def reduce(resource: Resource, raw: Any) -> tuple[Value | None, str]:
    """The object's value (None: an ended pod, or one that is no part of the count) and its
    skip line ("" unless malformed)."""
    kind = KIND_OF[resource]
    if not isinstance(raw, dict):
        return None, f"{kind}: not an object"
    try:
        if resource == "nodes":
            return node_of(raw), ""
        if resource == "pods":
            pod = pod_of(raw)
            if pod is not None:
                return pod, ""
            usage = usage_of(raw)
            if usage is None:
                return None, ""
            return (usage.node, tuple(sorted(usage.requests.items()))), ""
        if resource == "resourceslices":
            return slice_of(raw), ""
        if resource == "resourceclaims":
            return claim_of(raw), ""
        return device_class_of(raw), ""
    except Malformed as exc:
        return None, f"{ident(kind, raw)}: {exc}"


class LiveFleet:
    """The held fleet and its count. Fill it with ``replace`` (one collection's whole
    listing; or ``stage`` it, then ``commit``) and ``build()`` (the count of everything
    listed, by ``count()`` itself), then keep it current with ``apply`` (one watch event)
    and ``replace`` (a relist); read it with ``view()``."""

    def __init__(self, *, source: str = "", selected: bool = False,
                 tolerated: tuple[str, ...] = DEFAULT_TOLERATED) -> None:
        self.tolerated = tolerated
        self.fleet = Fleet(nodes={}, pods=[], slices=[], claims={}, incomplete=[],
                           source=source, selected=selected)
        self._pods: dict[str, Pod] = {}
        self._used: dict[str, Used] = {}
        self._shared: dict[Used, Used] = {}
        self._slices: dict[str, Slice] = {}
        self._pool_slices: dict[tuple[str, str], dict[str, Slice]] = {}
        self._node_pools: dict[str, set[tuple[str, str]]] = {}
        self._claims: dict[str, Claim] = {}
        self._holders: dict[DeviceKey, set[tuple[str, str]]] = {}
        self._skipped: dict[tuple[int, str], str] = {}
        self.ix: Index | None = None
        self._rows: dict[str, list[NodeRow]] = {}
        self._names: list[str] = []
        self._kinds: dict[Kind, KindRow] = {}
        self._kind_rows: dict[Kind, dict[str, NodeRow]] = {}
        self._groups: dict[Placement, Group] = {}
        self._placed: dict[Placement, Pod] = {}
        """A pod of each placement whose admitted Nodes ``Index.admitted`` keeps."""
        self._stale = _Touched()
        """What PENDING is to be worked out again for at the next read."""
        self._dirty: set[Kind] = set()
        self._changed_lists: set[str] = {"pods", "resourceslices", "skipped"}
        """What ``view()`` lists again: ``pods``, ``resourceslices``, ``skipped``."""
        self.changes = 0
        """Changes applied since the start (a relist's count as one each)."""

    # ------------------------------------------------------------------ filling

    @property
    def built(self) -> bool:
        return self.ix is not None

    def replace(self, resource: Resource, objects: Iterable[Any]) -> bool:
        """One collection's whole listing in place of what is held of it (a relist: only
        what differs is changed). Until ``build()`` it is only held. True when anything
        changed. ``deviceclasses`` listed: the cluster's classes are the ones counted."""
        return self.commit(stage(resource, objects))

    def commit(self, staged: Staged) -> bool:
        """Put a staged listing in place of what is held of its collection (``replace``)."""
        resource, skipped = staged.resource, staged.skipped
        order = RESOURCES.index(resource)
        fresh = staged.values
        for key, value in fresh.items():
            if isinstance(value, tuple):
                fresh[key] = self._share(value)
        store = self._store(resource)
        if resource == "deviceclasses" and not self.fleet.classes_read:
            self.fleet.classes_read = True
            classes_now_read = True
        else:
            classes_now_read = False
        old_skipped = {k: v for k, v in self._skipped.items() if k[0] == order}
        for k in old_skipped:
            del self._skipped[k]
        self._skipped.update(skipped)
        changed = old_skipped != skipped or classes_now_read
        if old_skipped != skipped:
            self._changed_lists.add("skipped")
        if not self.built:
            store.clear()
            if resource == "pods":
                self._used.clear()
            for key, value in fresh.items():
                self._hold(resource, key, value)
            return True
        touched = _Touched()
        for key in [k for k in self._held_keys(resource) if k not in fresh]:
            changed |= self._change(resource, key, None, touched)
        for key, value in fresh.items():
            changed |= self._change(resource, key, value, touched)
        if classes_now_read:
            self._classes_changed(touched)
        self._settle(touched)
        return changed

    def build(self) -> None:
        """Count everything held, by ``count()`` itself; from now on changes are counted
        one by one."""
        fleet = self.fleet
        fleet.pods = self._pod_list()
        fleet.slices = [self._slices[k] for k in sorted(self._slices)]
        fleet.claims = {(c.namespace, c.name): c for _, c in sorted(self._claims.items())}
        fleet.load = {}
        for node, requests in self._used.values():
            fleet.load.setdefault(node, Load()).add(dict(requests))
        counted = count(fleet, tolerated=self.tolerated)
        assert counted.index is not None
        ix = self.ix = counted.index
        for pk, pool in ix.gathered.items():
            self._node_pools.setdefault(pool.node, set()).add(pk)
        for s in self._slices.values():
            self._pool_slices.setdefault((s.driver, s.pool), {})[s.name] = s
        for claim in self._claims.values():
            for device in claim.allocated:
                self._holders.setdefault(device, set()).add((claim.namespace, claim.name))
        for group in ix.groups:
            self._groups[placement(group[0])] = group
            self._placed[placement(group[0])] = group[0]
        ix.admitted = {p: names for p, names in ix.admitted.items() if p in self._placed}
        for row in counted.rows:
            self._rows.setdefault(row.node, []).append(row)
            self._kind_rows.setdefault(row.kind, {})[row.node] = row
        self._names = sorted(self._rows)
        self._kinds = {k.kind: k for k in counted.kinds}
        self._changed_lists.update(("pods", "resourceslices", "skipped"))

    # ------------------------------------------------------------------ changing

    def apply(self, resource: Resource, kind: str, raw: Any) -> bool:
        """One watch event (``ADDED``, ``MODIFIED``, ``DELETED``) of the collection; True
        when it changed what is held."""
        if not self.built:
            raise RuntimeError("LiveFleet.apply before build()")
        key = key_of(raw)
        order = RESOURCES.index(resource)
        if kind == "DELETED":
            value, line = None, ""
        else:
            value, line = reduce(resource, raw)
            if isinstance(value, tuple):
                value = self._share(value)
        changed = self._skipped.get((order, key), "") != line
        if changed:
            self._changed_lists.add("skipped")
        if line:
            self._skipped[(order, key)] = line
        else:
            self._skipped.pop((order, key), None)
        if not key:
            return changed
        touched = _Touched()
        changed |= self._change(resource, key, value, touched)
        self._settle(touched)
        return changed

    def set_incomplete(self, lines: list[str]) -> bool:
        """What is not read now (refused or failing collections), one line each."""
        if lines == self.fleet.incomplete:
            return False
        self.fleet.incomplete = list(lines)
        return True

    # ------------------------------------------------------------------ reading

    def view(self) -> tuple[Fleet, Counted]:
        """The held fleet and its count, as ``count()`` would give them now: a snapshot,
        which later changes leave as it is (its containers are copies; the values in them
        are never changed in place), so it can be read while changes go on."""
        ix = self.ix
        if ix is None:
            raise RuntimeError("LiveFleet.view before build()")
        live = self.fleet
        if "pods" in self._changed_lists:
            live.pods = self._pod_list()
        if "resourceslices" in self._changed_lists:
            live.slices = [self._slices[k] for k in sorted(self._slices)]
        if "skipped" in self._changed_lists:
            live.skipped = [self._skipped[k] for k in sorted(self._skipped)]
        self._changed_lists.clear()
        self._refresh()
        rows = [r for name in self._names for r in self._rows[name]]
        seen: dict[Kind, KindRow] = {}
        for row in rows:
            if row.kind not in seen:
                seen[row.kind] = dataclasses.replace(self._kinds[row.kind])
        nodes = dict(live.nodes)
        pods, load = live.pods, live.load
        if live.selected:
            pods = [p for p in pods if not p.node or p.node in nodes]
            load = {n: found for n, found in load.items() if n in nodes}
        fleet = Fleet(nodes=nodes, pods=pods, slices=live.slices, claims=dict(live.claims),
                      incomplete=list(live.incomplete), source=live.source,
                      selected=live.selected, classes=dict(live.classes),
                      classes_read=live.classes_read,
                      load={n: Load(found.pods, dict(found.requests))
                            for n, found in load.items()},
                      skipped=list(live.skipped))
        held = pools.Held(devices=dict(ix.held.devices),
                          shares={k: dict(v) for k, v in ix.held.shares.items()},
                          sharers={k: list(v) for k, v in ix.held.sharers.items()})
        gathered = dict(ix.gathered)
        index = Index(fleet=fleet, tolerated=ix.tolerated, classes=ix.classes,
                      gathered=gathered, held=held, pools_of=dict(ix.pools_of),
                      bound={n: list(found) for n, found in ix.bound.items()},
                      nominated={n: list(found) for n, found in ix.nominated.items()},
                      pending=list(ix.pending),
                      groups=[(rep, dict(asked), list(members))
                              for rep, asked, members in ix.groups],
                      samples=dict(ix.samples))
        counted = Counted(rows=rows, kinds=sorted(seen.values(), key=kind_order),
                          tolerated=self.tolerated, gathered=gathered, held=held, index=index)
        return fleet, counted

    def _refresh(self) -> None:
        """Work out PENDING again where unscheduled pods or unallocated claims changed (on
        copies of the rows: a row a snapshot holds is never changed)."""
        ix = self.ix
        assert ix is not None
        stale, self._stale = self._stale, _Touched()
        if stale.resources or stale.dra:
            for name in self._names:
                held = self._rows[name]
                if not any((r.kind.manager == DRA and stale.dra)
                           or (r.kind.manager != DRA and r.kind.resource in stale.resources)
                           for r in held):
                    continue
                fresh = [dataclasses.replace(r) for r in held]
                refresh_pending(ix, name, [
                    r for r in fresh if (r.kind.manager == DRA and stale.dra)
                    or (r.kind.manager != DRA and r.kind.resource in stale.resources)])
                self._rows[name] = fresh
                for row in fresh:
                    self._kind_rows[row.kind][name] = row
            for kind in self._kinds:
                if (kind.manager == DRA and stale.dra) or (
                        kind.manager != DRA and kind.resource in stale.resources):
                    self._dirty.add(kind)
        for kind in self._dirty:
            summary = self._kinds.get(kind)
            if summary is not None:
                where = self._kind_rows[kind]
                summary.pending = demand(ix, kind, [where[n] for n in sorted(where)])
        self._dirty.clear()

    # ------------------------------------------------------------------ reductions and stores

    def _share(self, used: Used) -> Used:
        """One value for every pod alike (same node, same requests)."""
        shared = self._shared.get(used)
        if shared is None:
            if len(self._shared) > max(SHARED_FLOOR, 2 * len(self._used)):
                self._shared = {u: u for u in self._used.values()}
            shared = self._shared[used] = (sys.intern(used[0]), used[1])
        return shared

    def _store(self, resource: Resource) -> MutableMapping[str, Any]:
        if resource == "nodes":
            return _Keyed(self.fleet.nodes)
        if resource == "pods":
            return self._pods
        if resource == "resourceslices":
            return self._slices
        if resource == "resourceclaims":
            return self._claims
        return _Keyed(self.fleet.classes)

    def _held_keys(self, resource: Resource) -> list[str]:
        if resource == "pods":
            return [*self._pods, *self._used]
        return list(self._store(resource))

    def _hold(self, resource: Resource, key: str, value: Value) -> None:
        """Keep a value before ``build()`` (no counting)."""
        if resource == "pods" and not isinstance(value, Pod):
            self._used[key] = value  # type: ignore[assignment]
        else:
            self._store(resource)[key] = value

    def _old(self, resource: Resource, key: str) -> Value | None:
        if resource == "pods":
            return self._pods.get(key) or self._used.get(key)
        found: Value | None = self._store(resource).get(key)
        return found

    def _pod_list(self) -> list[Pod]:
        return [self._pods[k] for k in sorted(self._pods)]

    # ------------------------------------------------------------------ one change

    def _change(self, resource: Resource, key: str, value: Value | None,
                touched: _Touched) -> bool:
        """Put ``value`` (None: nothing) in place of what is held under ``key``; what it
        changed goes into ``touched``. False when it equals what was held."""
        old = self._old(resource, key)
        if old == value:
            return False
        self.changes += 1
        self._changed_lists.add(resource)
        if resource == "nodes":
            self._node(key, old, value, touched)  # type: ignore[arg-type]
        elif resource == "pods":
            self._pod(key, old, value, touched)  # type: ignore[arg-type]
        elif resource == "resourceslices":
            self._slice(key, old, value, touched)  # type: ignore[arg-type]
        elif resource == "resourceclaims":
            self._claim(key, old, value, touched)  # type: ignore[arg-type]
        else:
            self._device_class(key, value, touched)  # type: ignore[arg-type]
        return True

    def _node(self, key: str, old: Node | None, new: Node | None, touched: _Touched) -> None:
        ix = self._index()
        name = key.partition("\x00")[2]
        if new is None:
            del self.fleet.nodes[name]
        else:
            self.fleet.nodes[name] = new
        if old is None or new is None or old.labels != new.labels:
            for place, names in list(ix.admitted.items()):
                pod = self._placed.get(place)
                if pod is None:
                    del ix.admitted[place]
                elif new is not None and admits(pod, new):
                    names.add(name)
                else:
                    names.discard(name)
        touched.nodes.add(name)
        touched.structural.add(name)

    def _pod(self, key: str, old: Pod | Used | None, new: Pod | Used | None,
             touched: _Touched) -> None:
        for value, sign in ((old, -1), (new, 1)):
            if value is None:
                continue
            if isinstance(value, Pod):
                self._count_pod(value, sign, touched)
            else:
                node, requests = value
                load = self.fleet.load.setdefault(node, Load())
                load.add(dict(requests), sign)
                if load.pods == 0:
                    del self.fleet.load[node]
                else:
                    load.requests = {r: n for r, n in load.requests.items() if n}
                touched.nodes.add(node)
        self._pods.pop(key, None)
        self._used.pop(key, None)
        if isinstance(new, Pod):
            self._pods[key] = new
        elif new is not None:
            self._used[key] = new

    def _count_pod(self, pod: Pod, sign: int, touched: _Touched) -> None:
        ix = self._index()
        if pod.node:
            _keep(ix.bound, pod.node, pod, sign)
            touched.nodes.add(pod.node)
            return
        _put(ix.pending, pod, sign)
        if pod.nominated and pod.priority >= ORDINARY_PRIORITY:
            _keep(ix.nominated, pod.nominated, pod, sign)
            touched.nodes.add(pod.nominated)
        if not pod.requests and not pod.claims:
            return
        place = placement(pod)
        group = self._groups.get(place)
        if group is None:
            group = self._groups[place] = (pod, {}, [])
        rep, asked, members = group
        _put(members, pod, sign)
        for resource, amount in pod.requests.items():
            asked[resource] = asked.get(resource, 0) + sign * amount
            if not asked[resource] and sign < 0 and not any(
                    resource in m.requests for m in members):
                del asked[resource]
        if not members:
            del self._groups[place]
            self._forget(place)
        elif rep is not members[0]:
            self._groups[place] = (members[0], asked, members)
        self._placed[place] = members[0] if members else pod
        ix.groups = list(self._groups.values())
        touched.resources.update(pod.requests)
        if pod.claims or any(ix.classes.serving(r) is not None for r in pod.requests):
            touched.dra = True

    def _forget(self, place: Placement) -> None:
        """A placement no unscheduled pod has now: its admitted Nodes stay kept for the
        ``KEPT_PLACEMENTS`` most recent such."""
        ix = self._index()
        empty = [p for p in self._placed if p not in self._groups]
        for stale in empty[:max(0, len(empty) - KEPT_PLACEMENTS)]:
            del self._placed[stale]
            ix.admitted.pop(stale, None)
        if place in self._placed:  # the most recent: last in order
            self._placed[place] = self._placed.pop(place)

    def _slice(self, key: str, old: Slice | None, new: Slice | None, touched: _Touched) -> None:
        name = key.partition("\x00")[2]
        affected = set()
        if old is not None:
            pk = (old.driver, old.pool)
            self._pool_slices[pk].pop(name, None)
            affected.add(pk)
        if new is None:
            del self._slices[key]
        else:
            self._slices[key] = new
            pk = (new.driver, new.pool)
            self._pool_slices.setdefault(pk, {})[name] = new
            affected.add(pk)
        for pk in affected:
            self._regather(pk, touched)

    def _regather(self, pk: tuple[str, str], touched: _Touched) -> None:
        """Gather one pool again from its own slices, in the order the API server lists
        them (``pools.gather``)."""
        ix = self._index()
        slices = self._pool_slices.get(pk) or {}
        old = ix.gathered.pop(pk, None)
        new: Pool | None = None
        if old is not None:
            self._node_pools[old.node].discard(pk)
        if slices:
            new = ix.gathered[pk] = pools.gather(slices[n] for n in sorted(slices))[pk]
            self._node_pools.setdefault(new.node, set()).add(pk)
        else:
            self._pool_slices.pop(pk, None)
        for node in {p.node for p in (old, new) if p is not None}:
            keys = self._node_pools.get(node, set())
            if not keys:
                self._node_pools.pop(node, None)
            mine = sorted((ix.gathered[k] for k in keys if ix.gathered[k].driver == DRIVER),
                          key=lambda p: (p.driver, p.name))
            if mine:
                ix.pools_of[node] = mine
            else:
                ix.pools_of.pop(node, None)
            touched.nodes.add(node)
            touched.structural.add(node)

    def _claim(self, key: str, old: Claim | None, new: Claim | None, touched: _Touched) -> None:
        ix = self._index()
        held = ix.held
        for claim, sign in ((old, -1), (new, 1)):
            if claim is None:
                continue
            who = (claim.namespace, claim.name)
            for device in claim.allocated:
                holders = self._holders.setdefault(device, set())
                (holders.add if sign > 0 else holders.discard)(who)
                if holders:
                    held.devices[device] = "/".join(max(holders))
                else:
                    del self._holders[device]
                    held.devices.pop(device, None)
                self._touch_device(device, touched)
            for device, consumed in claim.shares:
                into = held.shares.setdefault(device, {})
                for name, amount in consumed.items():
                    into[name] = into.get(name, 0) + sign * amount
                sharers = held.sharers.setdefault(device, [])
                if sign > 0:
                    sharers.append("/".join(who))
                else:
                    sharers.remove("/".join(who))
                if not sharers:
                    del held.sharers[device]
                    del held.shares[device]
                self._touch_device(device, touched)
            if claim.requests:
                touched.dra = True
        if old is not None:
            del self.fleet.claims[(old.namespace, old.name)]
            del self._claims[key]
        if new is not None:
            self.fleet.claims[(new.namespace, new.name)] = new
            self._claims[key] = new

    def _touch_device(self, device: DeviceKey, touched: _Touched) -> None:
        pool = self._index().gathered.get(device[:2])
        if pool is not None:
            touched.nodes.add(pool.node)

    def _device_class(self, key: str, new: DeviceClass | None, touched: _Touched) -> None:
        name = key.partition("\x00")[2]
        if new is None:
            del self.fleet.classes[name]
        else:
            self.fleet.classes[name] = new
        self._classes_changed(touched)

    def _classes_changed(self, touched: _Touched) -> None:
        """The classes the scheduler allocates by changed: every DRA node is counted again."""
        ix = self._index()
        ix.classes = Classes(self.fleet)
        for name in ix.pools_of:
            touched.nodes.add(name)
            touched.structural.add(name)
        touched.dra = True

    # ------------------------------------------------------------------ counting

    def _index(self) -> Index:
        if self.ix is None:
            raise RuntimeError("LiveFleet: not built")
        return self.ix

    def _counted(self, name: str) -> bool:
        """Whether the node has rows: a Node read, or a node a DRA pool is for (unless a
        selection chose the Nodes: ``count.node_names``)."""
        return name in self.fleet.nodes or (
            bool(name) and not self.fleet.selected and name in self._index().pools_of)

    def _settle(self, touched: _Touched) -> None:
        """Recount the touched nodes and move their rows' units between kinds."""
        ix = self._index()
        for name in touched.nodes:
            old = self._rows.get(name, [])
            new = node_rows(ix, name) if self._counted(name) else []
            if not new:
                ix.samples.pop(name, None)
            if old == new:
                continue
            before = {r.kind: r for r in old}
            after = {r.kind: r for r in new}
            for row in old:
                tally(self._kinds[row.kind], row, -1)
                del self._kind_rows[row.kind][name]
            for row in new:
                summary = self._kinds.get(row.kind)
                if summary is None:
                    summary = self._kinds[row.kind] = KindRow(kind=row.kind)
                    self._dirty.add(row.kind)
                tally(summary, row)
                self._kind_rows.setdefault(row.kind, {})[name] = row
            for kind in before.keys() | after.keys():
                was, now = before.get(kind), after.get(kind)
                summary = self._kinds.get(kind)
                if summary is not None and summary.largest_stale:
                    summary.largest = max((r.largest for r in self._kind_rows[kind].values()
                                           if r.usable), default=0)
                    summary.largest_stale = False
                if not self._kind_rows.get(kind):
                    self._kinds.pop(kind, None)
                    self._kind_rows.pop(kind, None)
                    self._dirty.discard(kind)
                elif name in touched.structural or was is None or now is None \
                        or was.total != now.total:
                    self._dirty.add(kind)
            if new:
                self._rows[name] = new
                if not old:
                    bisect.insort(self._names, name)
            else:
                del self._rows[name]
                at = bisect.bisect_left(self._names, name)
                del self._names[at]
        self._stale.resources |= touched.resources
        self._stale.dra |= touched.dra


class _Keyed(MutableMapping[str, Any]):
    """The fleet's name-keyed dict (Nodes, DeviceClasses) seen through ``key_of``'s keys
    (``\\0name``)."""

    __slots__ = ("_by_name",)

    def __init__(self, by_name: dict[str, Any]) -> None:
        self._by_name = by_name

    def __getitem__(self, key: str) -> Any:
        return self._by_name[key.partition("\x00")[2]]

    def __setitem__(self, key: str, value: Any) -> None:
        self._by_name[key.partition("\x00")[2]] = value

    def __delitem__(self, key: str) -> None:
        del self._by_name[key.partition("\x00")[2]]

    def __iter__(self) -> Iterator[str]:
        return (f"\x00{name}" for name in list(self._by_name))

    def __len__(self) -> int:
        return len(self._by_name)


def _keep(by_node: dict[str, list[Pod]], node: str, pod: Pod, sign: int) -> None:
    pods = by_node.setdefault(node, [])
    _put(pods, pod, sign)
    if not pods:
        del by_node[node]


def _put(pods: list[Pod], pod: Pod, sign: int) -> None:
    """Add the pod, or take that very pod out (not one equal to it)."""
    if sign > 0:
        pods.append(pod)
        return
    for i, held in enumerate(pods):
        if held is pod:
            del pods[i]
            return
    raise ValueError(f"pod {pod.namespace}/{pod.name} is not held")
