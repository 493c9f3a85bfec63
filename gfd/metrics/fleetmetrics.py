"""``gfd fleet --serve``'s metrics: what a view of the fleet holds, as Prometheus families.
Per GPU kind (labels ``model``, ``memory``, ``mig_profile``, ``sharing``, ``resource``,
``manager``): its units by state, its nodes by state, the largest free block one node can
give one pod, its pending pods, the most one of them asks and how long the oldest has
waited; the findings by check (and per node, where the operator asks for it); the view's
health per collection and when its numbers last changed. Every figure is read from the
view as ``gfd.fleet`` counted it (``count.pending_pods``, the rows' ``largest``): nothing
here counts.

The heavy part (``figures``) depends on the view alone, so a server computes it once per
view; the families are made from it at each scrape (the ages move with the clock). The
second module that imports ``prometheus_client``; it knows no socket."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import choose_encoder

from gfd.fleet.checks import CHECKS
from gfd.fleet.count import NodeRow, index, pending_pods
from gfd.fleet.health import ViewHealth
from gfd.fleet.kinds import Kind
from gfd.fleet.placement import STATES
from gfd.fleet.view import View

KIND_LABELS: Final = ("model", "memory", "mig_profile", "sharing", "resource", "manager")
"""The labels of a kind's series, in this order."""
UNIT_STATES: Final = ("total", "allocated", "free", "pending", "unschedulable")


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetFamily:
    """One family as /metrics shows it (a counter's samples end in ``_total``)."""

    name: str
    kind: str
    help: str
    labels: tuple[str, ...] = ()


FAMILIES: Final[tuple[FleetFamily, ...]] = (
    FleetFamily(name="gfd_fleet_units", kind="gauge", labels=(*KIND_LABELS, "state"),
                help=("GPU units of a kind, as the scheduler counts them, by state: total "
                      "(schedulable nodes), allocated, free (what one-unit pods can still "
                      "get), pending (what unscheduled pods ask), unschedulable (on cordoned, "
                      "not-Ready or tainted nodes).")),
    FleetFamily(name="gfd_fleet_nodes", kind="gauge", labels=(*KIND_LABELS, "state"),
                help="Nodes with units of a kind, by state (ready, cordoned, not-ready, "
                     "tainted)."),
    FleetFamily(name="gfd_fleet_largest_free_block", kind="gauge", labels=KIND_LABELS,
                help=("The most units of a kind one node can give one pod now (less than "
                      "the free units: fragmentation).")),
    FleetFamily(name="gfd_fleet_pending_pods", kind="gauge", labels=KIND_LABELS,
                help="Unscheduled pods that ask for units of a kind and admit one of its "
                     "nodes."),
    FleetFamily(name="gfd_fleet_largest_pending_request", kind="gauge", labels=KIND_LABELS,
                help="The most units of a kind one unscheduled pod asks (0: none pending)."),
    FleetFamily(name="gfd_fleet_oldest_pending_pod_age_seconds", kind="gauge",
                labels=KIND_LABELS,
                help="How long the oldest unscheduled pod asking for a kind has existed "
                     "(0: none pending)."),
    FleetFamily(name="gfd_fleet_pending_gpu_pods", kind="gauge",
                help="Unscheduled pods that ask for a GPU resource or use a ResourceClaim, "
                     "whether or not any node has what they ask."),
    FleetFamily(name="gfd_fleet_oldest_pending_gpu_pod_age_seconds", kind="gauge",
                help="How long the oldest of them has existed (0: none)."),
    FleetFamily(name="gfd_fleet_findings", kind="gauge", labels=("check",),
                help="What gfd fleet --check finds, by check: nodes whose labels disagree "
                     "with what the scheduler sees, and the like."),
    FleetFamily(name="gfd_fleet_node_findings", kind="gauge", labels=("node", "check"),
                help="The findings per node and check (only with --node-findings)."),
    FleetFamily(name="gfd_fleet_complete", kind="gauge",
                help=("1 when every collection is read and current and nothing was left out; "
                      "0 while a collection is refused, failing or not yet read (the figures "
                      "are then the last known).")),
    FleetFamily(name="gfd_fleet_collection_synced", kind="gauge", labels=("collection",),
                help="1 once the collection's first LIST is in."),
    FleetFamily(name="gfd_fleet_collection_refused", kind="gauge", labels=("collection",),
                help="1 while the collection's LIST or WATCH is refused or failing."),
    FleetFamily(name="gfd_fleet_watch_restarts", kind="counter", labels=("collection",),
                help="Restarts of the collection's WATCH (a dropped connection, a 410 Gone)."),
    FleetFamily(name="gfd_fleet_relists", kind="counter", labels=("collection",),
                help="LISTs of the collection after its first (a WATCH that expired)."),
    FleetFamily(name="gfd_fleet_last_change_timestamp_seconds", kind="gauge",
                help="Unix time of the last change to the view's numbers (0: none yet)."),
    FleetFamily(name="gfd_build_info", kind="gauge", labels=("version",),
                help="Always 1; the version label says which gfd is running."),
)
"""Every family ``gfd fleet --serve`` exports, in the order /metrics lists them."""
_BY_NAME: Final = {f.name: f for f in FAMILIES}


def kind_labels(kind: Kind) -> tuple[str, ...]:
    """A kind's label values: memory in MiB ("" when unknown); sharing with its replicas
    when there are several (``time-slicingx4``), so that no two kinds share a series."""
    sharing = kind.sharing if kind.replicas == 1 else f"{kind.sharing}x{kind.replicas}"
    memory = "" if kind.memory is None else str(kind.memory)
    return (kind.model, memory, kind.mig_profile, sharing, kind.resource, kind.manager)


def _created(text: str) -> float | None:
    """Unix seconds of an RFC 3339 creation time (None: not known)."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class KindFigures:
    labels: tuple[str, ...]
    units: tuple[int, ...]
    """By ``UNIT_STATES``."""
    nodes: tuple[int, ...]
    """By ``placement.STATES``."""
    largest_free: int
    pending_pods: int
    largest_request: int
    oldest_created: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Figures:
    """What a view's metrics show, but the ages (which move with the clock)."""

    kinds: tuple[KindFigures, ...]
    pending_gpu_pods: int
    oldest_gpu_pod_created: float | None
    findings: tuple[tuple[str, int], ...]
    """By check: every known check, then any other."""
    node_findings: tuple[tuple[str, str, int], ...]
    complete: bool
    health: ViewHealth = field(repr=False)


def figures(view: View) -> Figures:
    counted = view.counted
    rows: dict[Kind, list[NodeRow]] = {}
    for row in counted.rows:
        rows.setdefault(row.kind, []).append(row)
    # the count's own index (a count kept incrementally may hold none: made here then)
    ix = counted.index or index(view.fleet, tolerated=counted.tolerated)
    kinds = []
    for k in counted.kinds:
        here = rows.get(k.kind, [])
        asks = pending_pods(ix, k.kind, here)
        created = [c for pod, _ in asks if (c := _created(pod.created)) is not None]
        states = Counter(r.state for r in here)
        kinds.append(KindFigures(
            labels=kind_labels(k.kind),
            units=(k.total, k.allocated, k.free, k.pending, k.unschedulable_total),
            nodes=tuple(states.get(s, 0) for s in STATES), largest_free=k.largest,
            pending_pods=len(asks), largest_request=max((u for _, u in asks), default=0),
            oldest_created=min(created, default=None)))
    gpu_pods = [m for _, _, members in ix.groups for m in members]
    created = [c for pod in gpu_pods if (c := _created(pod.created)) is not None]
    by_check = Counter(f.check for f in view.findings)
    per_node = Counter((f.node, f.check) for f in view.findings)
    fleet = view.fleet
    return Figures(
        kinds=tuple(kinds), pending_gpu_pods=len(gpu_pods),
        oldest_gpu_pod_created=min(created, default=None),
        findings=tuple((c, by_check.get(c, 0)) for c in
                       (*CHECKS, *sorted(set(by_check) - set(CHECKS)))),
        node_findings=tuple((n, c, v) for (n, c), v in sorted(per_node.items())),
        complete=view.health.complete and not fleet.incomplete and not fleet.skipped,
        health=view.health)


def _age(now: float, created: float | None) -> float:
    return max(0.0, now - created) if created is not None else 0.0


def families(figs: Figures, *, now: float, version: str, node_findings: bool = False
             ) -> list[Any]:
    """The families of ``FAMILIES`` for ``figs`` at ``now`` (Unix seconds)."""
    def family(name: str) -> Any:
        f = _BY_NAME[name]
        make = CounterMetricFamily if f.kind == "counter" else GaugeMetricFamily
        return make(f.name, f.help, labels=list(f.labels))

    out: dict[str, Any] = {}
    for f in FAMILIES:
        if f.name == "gfd_fleet_node_findings" and not node_findings:
            continue
        out[f.name] = family(f.name)
    for k in figs.kinds:
        for state, value in zip(UNIT_STATES, k.units, strict=True):
            out["gfd_fleet_units"].add_metric([*k.labels, state], value)
        for state, value in zip(STATES, k.nodes, strict=True):
            out["gfd_fleet_nodes"].add_metric([*k.labels, state], value)
        out["gfd_fleet_largest_free_block"].add_metric(list(k.labels), k.largest_free)
        out["gfd_fleet_pending_pods"].add_metric(list(k.labels), k.pending_pods)
        out["gfd_fleet_largest_pending_request"].add_metric(list(k.labels), k.largest_request)
        out["gfd_fleet_oldest_pending_pod_age_seconds"].add_metric(
            list(k.labels), _age(now, k.oldest_created))
    out["gfd_fleet_pending_gpu_pods"].add_metric([], figs.pending_gpu_pods)
    out["gfd_fleet_oldest_pending_gpu_pod_age_seconds"].add_metric(
        [], _age(now, figs.oldest_gpu_pod_created))
    for check, value in figs.findings:
        out["gfd_fleet_findings"].add_metric([check], value)
    if node_findings:
        for node, check, value in figs.node_findings:
            out["gfd_fleet_node_findings"].add_metric([node, check], value)
    out["gfd_fleet_complete"].add_metric([], 1 if figs.complete else 0)
    for c in figs.health.collections:
        out["gfd_fleet_collection_synced"].add_metric([c.name], 1 if c.synced else 0)
        out["gfd_fleet_collection_refused"].add_metric([c.name], 1 if c.refused else 0)
        out["gfd_fleet_watch_restarts"].add_metric([c.name], c.restarts)
        out["gfd_fleet_relists"].add_metric([c.name], c.relists)
    out["gfd_fleet_last_change_timestamp_seconds"].add_metric([], figs.health.last_change)
    out["gfd_build_info"].add_metric([version], 1)
    return list(out.values())


class _Collected:
    """What the encoders take: something whose ``collect`` yields the families."""

    def __init__(self, found: list[Any]) -> None:
        self._found = found

    def collect(self) -> list[Any]:
        return self._found


def render(figs: Figures, *, now: float, version: str, node_findings: bool = False,
           accept: str = "") -> tuple[bytes, str]:
    """The exposition and its content type: OpenMetrics where ``accept`` (the request's
    Accept header) asks for it, else Prometheus' text format."""
    encoder, content_type = choose_encoder(accept)
    found = families(figs, now=now, version=version, node_findings=node_findings)
    return encoder(_Collected(found)), content_type
