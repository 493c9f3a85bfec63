"""Why a pod is pending: every node judged by kube-scheduler's filters in the scheduler's
order, each node counted at the first filter it fails under each reason that filter gives,
with the scheduler's own reason strings, and the GPU words behind each reason
(``gfd why``; docs/why.md).

The filter order is the default profile's (``pkg/scheduler/apis/config/v1/default_plugins.go``):
NodeUnschedulable, TaintToleration, NodeAffinity, NodePorts, NodeResourcesFit, the volume
plugins, PodTopologySpread, InterPodAffinity, DynamicResources. Before any node:

- NodeAffinity's PreFilter pins a pod whose every required term names nodes by
  ``metadata.name``: the other nodes are "node(s) didn't satisfy plugin(s) [NodeAffinity]";
  terms that name no node in common are "pod affinity terms conflict" (no counts);
- DynamicResources' PreEnqueue and PreFilter: a claim that does not exist or was not yet made
  from its template (the scheduler does not even try the pod), a DeviceClass that does not
  exist, a claim allocated and not reservable for the pod (no counts).

Then per node, each rule written once in ``gfd.fleet``: a cordon the pod does not tolerate
("node(s) were unschedulable"), a ``NoSchedule``/``NoExecute`` taint it does not tolerate
(``placement.untolerated``: "node(s) had untolerated taint(s)"), its node selector and
required affinity (``placement.admits``), every resource the node lacks
(``noderesources.insufficient``: "Too many pods", "Insufficient <name>"), and its claims and
the claim the scheduler makes for extended resources a DeviceClass serves where the node has
none allocatable, allocated together (``allocator.allocate``: "cannot allocate all claims",
"invalid resource pools were encountered"); an allocated claim whose node is another is
"resourceclaim not available on the node".

What the scheduler checks that these objects cannot show (host ports, persistent volumes,
topology spread, inter-pod affinity) is never guessed: a node that reaches such a filter is
"not judged here: see the scheduler's message"."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gfd import dra
from gfd.fleet import allocator, noderesources, placement, pools
from gfd.fleet.count import Index
from gfd.fleet.kinds import label_prefix
from gfd.fleet.model import (
    FIELD,
    PODS,
    Claim,
    Device,
    Node,
    Pod,
    Request,
    count_label,
    gpu_resource,
)
from gfd.fleet.subject import DEFAULT_SCHEDULER, Subject, claim_from

FILTERS = ("NodeUnschedulable", "TaintToleration", "NodeAffinity", "NodePorts",
           "NodeResourcesFit", "VolumeRestrictions", "NodeVolumeLimits", "VolumeBinding",
           "VolumeZone", "PodTopologySpread", "InterPodAffinity", "DynamicResources")
"""The default profile's Filter plugins that can keep a pod off a node, in order (NodeName
is left out: a pod with ``spec.nodeName`` is not scheduled)."""
UNSCHEDULABLE = "node(s) were unschedulable"
UNTOLERATED = "node(s) had untolerated taint(s)"
AFFINITY = "node(s) didn't match Pod's node affinity/selector"
PINNED_ELSEWHERE = "node(s) didn't satisfy plugin(s) [NodeAffinity]"
CONFLICT = "pod affinity terms conflict"
CANNOT_ALLOCATE = "cannot allocate all claims"
INVALID_POOLS = "invalid resource pools were encountered"
NOT_AVAILABLE = "resourceclaim not available on the node"
NOT_JUDGED = "not judged here: see the scheduler's message"
GATED = "Scheduling is blocked due to non-empty scheduling gates"
"""The ``PodScheduled`` message of a gated pod (``SchedulingGated``): the scheduler does not
try it until its gates are removed."""
RESERVED_MAX = 256
"""``ResourceClaimReservedForMaxSize``: an allocated claim reserved for this many pods takes
no more (``CanBeReserved``)."""
P = "nvidia.com/"
SHOWN = 3
"""Nodes a group shows in text (all with ``-o wide`` and in the document)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """One node, judged."""

    node: str
    filter: str = ""
    """The first filter that keeps the pod off it ("" when none does)."""
    reasons: tuple[str, ...] = ()
    details: tuple[tuple[str, str], ...] = ()
    """(reason, GPU words) for the node."""
    judged: bool = True
    """False: a filter gfd cannot judge was reached (or a claim could not be decided)."""

    @property
    def fits(self) -> bool:
        return not self.filter


@dataclass(frozen=True, slots=True, kw_only=True)
class PreFilter:
    """The pod rejected before any node is filtered (the scheduler's message has no counts
    then)."""

    filter: str
    reason: str
    tried: bool = True
    """False: the scheduler does not try the pod at all (PreEnqueue): no message appears."""

    def to_api(self) -> dict[str, Any]:
        return {"filter": self.filter, "schedulerReason": self.reason, "tried": self.tried}


@dataclass(frozen=True, slots=True, kw_only=True)
class Judgement:
    subject: Subject
    claims: tuple[Claim, ...] = ()
    """The pod's claims as the scheduler would allocate them (made from templates where
    none exists yet)."""
    verdicts: tuple[Verdict, ...] = ()
    pre_filter: PreFilter | None = None
    nodes: int = 0

    @property
    def fits_on(self) -> tuple[str, ...]:
        return tuple(v.node for v in self.verdicts if v.fits and v.judged)

    @property
    def fits(self) -> bool | None:
        """True: some node takes it now; None: no node is known to, and some cannot be
        judged; False: none does."""
        if self.pre_filter is not None:
            return False
        if self.fits_on:
            return True
        return None if any(not v.judged for v in self.verdicts) else False


@dataclass(frozen=True, slots=True, kw_only=True)
class Group:
    filter: str
    reason: str
    nodes: tuple[str, ...]
    explanation: tuple[str, ...] = ()

    @property
    def count(self) -> int:
        return len(self.nodes)

    def to_api(self) -> dict[str, Any]:
        return {"filter": self.filter, "schedulerReason": self.reason, "count": self.count,
                "nodes": list(self.nodes), "explanation": list(self.explanation)}


# --------------------------------------------------------------------------- the claims


def allocated(claim: Claim) -> bool:
    """The claim has an allocation (an unallocated one always has requests)."""
    return not claim.requests


def resolve(ix: Index, subject: Subject) -> tuple[tuple[Claim, ...], PreFilter | None]:
    """The pod's claims as the scheduler finds them (``foreachPodResourceClaim``), or the
    PreEnqueue/PreFilter rejection: a claim that does not exist, one not yet made from its
    template, a DeviceClass that does not exist, an allocated claim it cannot reserve."""
    out: list[Claim] = []
    ns = subject.namespace
    for ref in subject.pod_claims:
        if ref.template and ("ResourceClaimTemplate", ref.template) in subject.given:
            raw = subject.given[("ResourceClaimTemplate", ref.template)]
            out.append(claim_from(raw, ns, ref.claim or f"{subject.name}-{ref.name}"))
            continue
        if ref.claim and ("ResourceClaim", ref.claim) in subject.given:
            out.append(claim_from(subject.given[("ResourceClaim", ref.claim)], ns, ref.claim))
            continue
        if ref.claim and (ns, ref.claim) in ix.fleet.claims:
            out.append(ix.fleet.claims[(ns, ref.claim)])
            continue
        if ref.template:
            raw_t = subject.fetched.get(("ResourceClaimTemplate", ref.template))
            if raw_t is not None and not ref.claim:
                out.append(claim_from(raw_t, ns, f"{subject.name}-{ref.name}"))
                continue
            if not ref.claim:
                return (), PreFilter(filter="DynamicResources", tried=False,
                                     reason=f'pod "{ns}/{subject.name}": ResourceClaim not '
                                            "created yet")
        return (), PreFilter(filter="DynamicResources", tried=False,
                             reason=f'resourceclaim.resource.k8s.io "{ref.claim}" not found')
    for claim in out:
        if allocated(claim) and len(claim.reserved) >= RESERVED_MAX \
                and subject.pod.uid not in claim.reserved:
            return tuple(out), PreFilter(filter="DynamicResources", reason="resourceclaim in use")
        for request in claim.requests:
            for name, wanted in _classes_of(request):
                if wanted not in ix.classes.by_name:
                    return tuple(out), PreFilter(
                        filter="DynamicResources",
                        reason=f"request {name}: device class {wanted} does not exist")
    return tuple(out), None


def _classes_of(request: Request) -> list[tuple[str, str]]:
    if request.alternatives:
        return [(f"{request.name}/{a.name}", a.device_class) for a in request.alternatives]
    return [(request.name, request.device_class)]


def extended_claim(ix: Index, subject: Subject, node: Node) -> Claim | None:
    """The claim the scheduler makes on this node for the pod's extended resources that a
    DeviceClass serves and the node has none of allocatable (``filterExtendedResources``)."""
    requests = []
    asked = {**subject.pod.usage, **subject.pod.requests}
    for resource in sorted(asked):
        device_class = ix.classes.serving(resource)
        if device_class is None or not asked[resource] or node.allocatable.get(resource, 0):
            continue
        requests.append(Request(device_class=device_class.name, count=asked[resource],
                                name=f"{resource} ({device_class.name})"))
    if not requests:
        return None
    return Claim(namespace=subject.namespace, name=allocator.EXTENDED, requests=tuple(requests))


# --------------------------------------------------------------------------- judging


def judge(ix: Index, subject: Subject) -> Judgement:
    """Every node judged for the pod as the scheduler's filters judge it."""
    names = sorted(ix.fleet.nodes)
    if subject.scheduler != DEFAULT_SCHEDULER:
        return Judgement(subject=subject, nodes=len(names), pre_filter=PreFilter(
            filter="schedulerName", tried=False,
            reason=f"spec.schedulerName is {subject.scheduler}: kube-scheduler's "
                   f"{DEFAULT_SCHEDULER} does not schedule it"))
    if subject.gated:
        return Judgement(subject=subject, nodes=len(names), pre_filter=PreFilter(
            filter="SchedulingGates", tried=False, reason=GATED))
    if placement.node_names(subject.pod.affinity) == frozenset():
        return Judgement(subject=subject, nodes=len(names),
                         pre_filter=PreFilter(filter="NodeAffinity", reason=CONFLICT))
    claims, rejected = resolve(ix, subject)
    if rejected is not None:
        return Judgement(subject=subject, claims=claims, nodes=len(names), pre_filter=rejected)
    pinned = placement.node_names(subject.pod.affinity)
    pools_of = _pools_by_node(ix)
    verdicts = tuple(verdict(ix, subject, claims, ix.fleet.nodes[n], pinned, pools_of=pools_of)
                     for n in names)
    return Judgement(subject=subject, claims=claims, verdicts=verdicts, nodes=len(names))


def _pools_by_node(ix: Index) -> dict[str, list[pools.Pool]]:
    """Every driver's pools by node (``allocator.node_pools`` for each node at once)."""
    return pools.by_node(ix.gathered.values())


def verdict(ix: Index, subject: Subject, claims: tuple[Claim, ...], node: Node,
            pinned: frozenset[str] | None = None, *,
            pools_of: dict[str, list[pools.Pool]] | None = None) -> Verdict:
    """The first filter that keeps the pod off ``node``, its reasons and GPU words
    (``pools_of``: every driver's pools by node, when the caller has them)."""
    pod = subject.pod
    if pinned is not None and node.name not in pinned:
        return Verdict(node=node.name, filter="NodeAffinity", reasons=(PINNED_ELSEWHERE,),
                       details=((PINNED_ELSEWHERE, "not one of the nodes the pod's affinity "
                                 "names by metadata.name"),))
    if node.unschedulable and not any(placement.tolerates(t, placement.CORDON)
                                      for t in pod.tolerations):
        return Verdict(node=node.name, filter="NodeUnschedulable", reasons=(UNSCHEDULABLE,),
                       details=((UNSCHEDULABLE, "cordoned (spec.unschedulable); the pod does "
                                 "not tolerate node.kubernetes.io/unschedulable:NoSchedule"),))
    taints = placement.untolerated(pod.tolerations, node.taints)
    if taints:
        return Verdict(node=node.name, filter="TaintToleration", reasons=(UNTOLERATED,),
                       details=((UNTOLERATED, _taint_words(taints)),))
    if not placement.admits(pod, node):
        return Verdict(node=node.name, filter="NodeAffinity", reasons=(AFFINITY,),
                       details=((AFFINITY, _affinity_words(pod, node)),))
    unjudged = dict(subject.not_judged)
    if "NodePorts" in unjudged:
        return _unjudged(ix, subject, claims, node, "NodePorts", unjudged, pools_of)
    shorts = noderesources.insufficient(ix, node, {**pod.usage, **pod.requests}, pod=pod,
                                        priority=pod.priority)
    if shorts:
        reasons = tuple(dict.fromkeys(s.reason for s in shorts))
        return Verdict(node=node.name, filter="NodeResourcesFit", reasons=reasons,
                       details=tuple((s.reason, _short_words(ix, node, s)) for s in shorts))
    later = [f for f in FILTERS[5:-1] if f in unjudged]
    if later:
        return _unjudged(ix, subject, claims, node, later[0], unjudged, pools_of)
    here = pools_of.get(node.name, []) if pools_of is not None \
        else allocator.node_pools(ix, node.name)
    return _dynamic(ix, subject, claims, node, here)


def _unjudged(ix: Index, subject: Subject, claims: tuple[Claim, ...], node: Node, plugin: str,
              unjudged: dict[str, str],
              pools_of: dict[str, list[pools.Pool]] | None) -> Verdict:
    rest = dataclasses.replace(subject, not_judged=())
    after = verdict(ix, rest, claims, node, pools_of=pools_of)
    words = f"{plugin} checks {unjudged[plugin]}, which gfd cannot see"
    if not after.fits:
        words += f"; beyond it: {', '.join(after.reasons)} [{after.filter}]"
    return Verdict(node=node.name, filter=plugin, reasons=(NOT_JUDGED,), judged=False,
                   details=((NOT_JUDGED, words),))


def _dynamic(ix: Index, subject: Subject, claims: tuple[Claim, ...], node: Node,
             here: list[pools.Pool]) -> Verdict:
    extended = extended_claim(ix, subject, node)
    if extended is None and not claims:
        return Verdict(node=node.name)
    todo = [c for c in claims if not allocated(c)] + ([extended] if extended else [])
    elsewhere = [c for c in claims if allocated(c) and c.node and c.node != node.name]
    if todo:
        found = allocator.allocate(ix, node.name, todo, here=here)
        if found.allocated is None:
            return Verdict(node=node.name, filter="DynamicResources", reasons=(NOT_JUDGED,),
                           judged=False, details=((NOT_JUDGED, f"cannot tell: "
                                                   f"{found.why_not_told}"),))
        if found.allocated is False:
            why = INVALID_POOLS if found.invalid else CANNOT_ALLOCATE
            words = [w for c in todo for w in claim_words(ix, node, c, here)]
            if found.invalid:
                words.insert(0, f"a pool is invalid ({found.invalid}): the allocator skips it")
            return Verdict(node=node.name, filter="DynamicResources", reasons=(why,),
                           details=tuple((why, w) for w in words))
    if elsewhere:
        return Verdict(node=node.name, filter="DynamicResources", reasons=(NOT_AVAILABLE,),
                       details=tuple((NOT_AVAILABLE, f"claim {c.name} is allocated on node "
                                      f"{c.node}" + (f", used by {len(c.reserved)} pod(s)"
                                                     if c.reserved else ""))
                                     for c in elsewhere))
    return Verdict(node=node.name)


# --------------------------------------------------------------------------- groups


def groups(judgement: Judgement) -> list[Group]:
    """One group per reason the scheduler's message counts, in filter order then reason;
    each node under every reason of its first failing filter."""
    found: dict[tuple[str, str], list[Verdict]] = {}
    for v in judgement.verdicts:
        for reason in v.reasons:
            found.setdefault((v.filter, reason), []).append(v)
    out = []
    for (filter_, reason), members in sorted(
            found.items(), key=lambda kv: (FILTERS.index(kv[0][0]), kv[0][1])):
        lines = [f"{v.node}: {words}" for v in members for r, words in v.details if r == reason]
        out.append(Group(filter=filter_, reason=reason, nodes=tuple(v.node for v in members),
                         explanation=tuple(lines)))
    return out


def largest(judgement: Judgement) -> Group | None:
    """The group of most nodes (the earlier filter on a tie): a pending pod's one-line
    reason."""
    found = groups(judgement)
    if not found:
        return None
    return max(found, key=lambda g: (g.count, -FILTERS.index(g.filter)))


# --------------------------------------------------------------------------- GPU words


def _taint_words(taints: list[Any]) -> str:
    keys = ", ".join(str(t) for t in taints)
    gpu = [t for t in taints if t.key.startswith(P)]
    hint = " (a GPU node's taint: the pod must tolerate it itself)" if gpu else ""
    return f"taint {keys} not tolerated{hint}"


def _label_meaning(key: str, value: str) -> str:
    if not key.startswith(P):
        return ""
    if value.upper().endswith("-SHARED"):
        return " (a shared unit's product: time-slicing or MPS appends -SHARED)"
    if "-MIG-" in value:
        return " (a MIG device's product: the device plugin's mig-strategy single appends " \
               "-MIG-<profile>)"
    return ""


def _affinity_words(pod: Pod, node: Node) -> str:
    out = []
    for key, want in sorted((pod.node_selector or {}).items()):
        have = node.labels.get(key)
        if have != want:
            shown = "absent" if have is None else f"{have!r}{_label_meaning(key, have)}"
            out.append(f"nodeSelector {key}={want!r}: the node's is {shown}")
    if not out and pod.affinity is not None:
        labels = {**node.labels, f"{FIELD}metadata.name": node.name}
        for i, term in enumerate(pod.affinity, 1):
            for req in term:
                if not placement.requirement_matches(req, labels):
                    key, op, values = req
                    have = labels.get(key)
                    name = key.removeprefix(FIELD)
                    shown = "absent" if have is None else f"{have!r}{_label_meaning(key, have)}"
                    out.append(f"affinity term {i}: {name} {op} {list(values)}: the node's is "
                               f"{shown}")
                    break
            else:
                if not term:
                    out.append(f"affinity term {i} is empty (selects nothing)")
    return "; ".join(out) or "its labels do not meet the pod's node selector or affinity"


def amount(resource: str, value: int) -> str:
    """A quantity as a person reads it (CPU from thousandths, bytes in binary units)."""
    if resource == "cpu":
        return f"{value // 1000}" if value % 1000 == 0 else f"{value}m"
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if value >= size and value % size == 0:
                return f"{value // size}{unit}"
        return str(value)
    return str(value)


def _gpu_offer(node: Node, skip: str) -> str:
    offers = [f"{r} ({node.allocatable.get(r, 0)})" for r in sorted(node.allocatable)
              if gpu_resource(r) and r != skip and node.allocatable.get(r, 0) > 0]
    return ", ".join(offers)


def _plugin_words(node: Node, resource: str) -> str:
    """What the device plugin offers on the node instead of ``resource``, and whether its
    labels promise units it does not advertise."""
    words = ""
    offer = _gpu_offer(node, resource)
    if offer:
        words += f"; it offers {offer} instead"
    prefix = label_prefix(resource)
    labelled = node.labels.get(f"{P}{prefix}.count", "")
    if not node.allocatable.get(resource, 0) and (count_label(labelled) or 0) > 0 \
            and not node.capacity.get(resource, 0):
        words += (f"; its labels say {labelled} ({P}{prefix}.count={labelled}) but none is "
                  "allocatable: is the device plugin running?")
    elif not node.allocatable.get(resource, 0) and node.capacity.get(resource, 0):
        words += f"; capacity {node.capacity[resource]}, none allocatable (unhealthy devices?)"
    return words


def _short_words(ix: Index, node: Node, short: noderesources.Short) -> str:
    r = short.resource
    if r == PODS:
        return f"{short.used} of {short.allocatable} pod slots taken"
    words = (f"{r}: asks {amount(r, short.asked)}, {amount(r, short.allocatable)} allocatable, "
             f"{amount(r, short.free)} free")
    if short.holders and short.used:
        shown = ", ".join(short.holders[:SHOWN]) + (
            f" and {len(short.holders) - SHOWN} more" if len(short.holders) > SHOWN else "")
        words += f" (taken by {shown})"
    if not gpu_resource(r):
        return words
    if short.asked > short.allocatable > 0:
        words += "; more than the node has"
    words += _plugin_words(node, r)
    if r == f"{P}gpu" and node.labels.get(f"{P}gpu.heterogeneous") == "true":
        models = sorted(k.removeprefix(f"{P}gpu.product.") for k in node.labels
                        if k.startswith(f"{P}gpu.product."))
        words += f"; nvidia.com/gpu here is any of its models ({' + '.join(models)})"
    return words


_ATTRIBUTE = re.compile(r"device\.(attributes|capacity)\['([^']+)'\]\.([A-Za-z0-9_]+)")


def _values(devices: Iterable[Device], where: str, domain: str, name: str) -> list[str]:
    found = []
    for d in devices:
        if domain != d.driver:
            continue
        value = d.attributes.get(name) if where == "attributes" else d.capacity.get(name)
        if value is not None:
            found.append(str(value))
    return sorted(set(found))


def _selector_words(ix: Index, request: Request, devices: list[Device]) -> list[str]:
    """Each selector of the request that no device of its class here meets, beside the
    values the devices have."""
    out = []
    for i, expression in enumerate(request.selectors):
        verdicts = [ix.classes.evaluator.matches(expression, d) for d in devices]
        if any(v is True for v in verdicts):
            continue
        if any(v is None for v in verdicts):
            out.append(f"selector #{i} ({expression}) cannot be decided here")
            continue
        refs = _ATTRIBUTE.findall(expression)
        have = "; ".join(f"the devices' {n} is " + ", ".join(repr(v) for v in
                                                               _values(devices, w, dom, n))
                         for w, dom, n in dict.fromkeys(refs)
                         if _values(devices, w, dom, n))
        out.append(f"selector #{i} ({expression}) matches none of them"
                   + (f": {have}" if have else ""))
    return out


def _request_words(ix: Index, node: Node, claim: Claim, request: Request,
                   here: list[pools.Pool]) -> list[str]:
    """One line per request (per subrequest of a ``firstAvailable`` one): what it asks, how
    many devices of its class the node has, how many meet its selectors, and what holds,
    squeezes or taints the rest (or which selector meets none, beside the devices' values)."""
    if request.alternatives:
        return [w for alt in request.alternatives
                for w in _request_words(ix, node, claim, alt, here)]
    want = request.count if request.mode != "All" else "all"
    if claim.name == allocator.EXTENDED:
        resource = request.name.split(" (")[0]
        label = f"{resource} through DeviceClass {request.device_class} (asks {want})"
    else:
        label = f"claim {claim.name} request {request.name} (asks {want} {request.device_class})"
    device_class = ix.classes.by_name.get(request.device_class)
    every = [(p, d) for p in here for d in p.devices]
    if not every:
        words = f"{label}: the node has no DRA devices"
        if claim.name == allocator.EXTENDED:
            words += f" and no {resource} allocatable" + _plugin_words(node, resource)
        return [words]
    of_class = [(p, d) for p, d in every
                if device_class is not None and ix.classes.judge(device_class, d) is True]
    if not of_class:
        return [f"{label}: none of the node's {len(every)} devices is of the class"]
    meets = [(p, d) for p, d in of_class
             if all(ix.classes.evaluator.matches(e, d) for e in request.selectors)]
    head = f"{label}: {len(of_class)} of the class here"
    if request.selectors:
        head += f", {len(meets)} meeting its selectors"
    if not meets:
        return [head] + [f"{label}: {w}" for w in
                         _selector_words(ix, request, [d for _, d in of_class])]
    return [f"{head}; {w}" for w in _held_words(ix, meets, request)]


def _held_words(ix: Index, meets: list[tuple[pools.Pool, Device]], request: Request) -> list[str]:
    out = []
    held: dict[str, list[str]] = {}
    squeezed: dict[str, list[str]] = {}
    tainted = []
    for pool, device in meets:
        key = pools.key(device)
        if not pool.usable:
            continue
        if key in ix.held.devices and not request.admin:
            held.setdefault(ix.held.devices[key], []).append(device.name)
        elif not allocator.tolerated(request, device):
            tainted.append(f"{device.name} ({', '.join(str(t) for t in device.taints)})")
        elif device.consumes and not pools.counters_fit(pools.counters_left(pool, ix.held),
                                                       device):
            sets = {s for s, _ in device.consumes}
            for other in pool.devices:
                if pools.key(other) in ix.held.devices and sets & {s for s, _ in other.consumes}:
                    who = ix.held.devices[pools.key(other)]
                    squeezed.setdefault(f"{other.name} (claim {who})", []).append(device.name)
    for pool, _ in meets:
        if not pool.complete:
            out.append(f"pool {pool.name} generation {pool.generation} has {pool.slices} of "
                       f"{pool.expected} slices: incomplete, the allocator skips it")
        elif pool.invalid:
            out.append(f"pool {pool.name} is invalid ({pool.invalid}): the allocator skips it")
    out = list(dict.fromkeys(out))
    free = sum(1 for p, d in meets if p.usable and pools.key(d) not in ix.held)
    out.append(f"{free} free")
    for who, names in sorted(held.items()):
        out.append(f"{len(names)} held by claim {who}")
    for holder, names in sorted(squeezed.items()):
        out.append(f"{len(names)} free but their shared counters are consumed by {holder}")
    if tainted:
        out.append(f"{len(tainted)} tainted and not tolerated: {', '.join(tainted[:SHOWN])}")
    return ["; ".join(out)]


def claim_words(ix: Index, node: Node, claim: Claim,
                here: list[pools.Pool] | None = None) -> list[str]:
    """What stands in the way of each request of an unallocated claim on this node (``here``:
    the node's pools, when the caller has them)."""
    here = allocator.node_pools(ix, node.name) if here is None else here
    return [w for r in claim.requests for w in _request_words(ix, node, claim, r, here)]


# --------------------------------------------------------------------------- later


def freed(ix: Index) -> Index:
    """The index with every GPU unit free: no device held by a claim, no bound pod's GPU
    request (what "once units free up" judges against)."""
    bound = {n: [dataclasses.replace(p, requests={}) for p in ps] for n, ps in ix.bound.items()}
    nodes_pods = [p if not p.node else dataclasses.replace(p, requests={})
                  for p in ix.fleet.pods]
    fleet = dataclasses.replace(ix.fleet, pods=nodes_pods)
    return dataclasses.replace(ix, fleet=fleet, bound=bound, held=pools.Held())


@dataclass(frozen=True, slots=True, kw_only=True)
class Later:
    """A node that could take the pod once GPU units free up, and who holds them."""

    node: str
    held_by: tuple[str, ...] = field(default_factory=tuple)

    def to_api(self) -> dict[str, Any]:
        return {"node": self.node, "heldBy": list(self.held_by)}


def later(ix: Index, judgement: Judgement) -> list[Later]:
    """The nodes where the pod would fit if no pod or claim held GPU units (capacity
    suffices, all held), with the pods and claims holding them."""
    if judgement.pre_filter is not None or judgement.fits:
        return []
    again = judge(freed(ix), judgement.subject)
    out = []
    for v in again.verdicts:
        if not (v.fits and v.judged):
            continue
        who = sorted({f"pod {p.namespace}/{p.name}" for p in ix.bound.get(v.node, ())
                      if p.requests} | {f"claim {c}" for k, c in ix.held.devices.items()
                                        if _pool_node(ix, k) == v.node})
        out.append(Later(node=v.node, held_by=tuple(who)))
    return out


def _pool_node(ix: Index, key: pools.DeviceKey) -> str:
    pool = ix.gathered.get((key[0], key[1]))
    return pool.node if pool is not None else ""


def asks_gpu(subject: Subject, claims: Iterable[Claim] = (),
             known: Iterable[str] = ()) -> bool:
    """The pod asks for a GPU: a GPU resource, or a claim of the NVIDIA driver's classes
    (allocated to its devices), or of a class the cluster lacks (``known``: the classes it
    has; the driver may not be installed)."""
    known = set(known)
    if any(gpu_resource(r) for r in subject.pod.requests):
        return True
    for claim in claims:
        if allocated(claim) and any(d[0] == dra.DRIVER for d in claim.allocated):
            return True
        for r in claim.requests:
            for _, c in _classes_of(r):
                if c in dra.DEVICE_CLASSES or c.endswith(dra.DRIVER) or c not in known:
                    return True
    return False
