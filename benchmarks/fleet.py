"""API load at fleet scale: gfd's API sinks side by side with a GFD-style baseline.

One local fake API server (tests/fakes/apiserver/, real HTTP, real ``kubernetes``
client through gfd's ``Kube``) serves N simulated GPU nodes for each of:

* ``node``: gfd's NodeSink (server-side apply on the Node, cached, resync hourly),
* ``nodefeature``: gfd's NodeFeatureSink (NodeFeature in namespace ``gfd``),
* ``baseline``: GFD's NodeFeature update algorithm, written from gfd-behaviour.md §8.2
  (GET every 60 s cycle, create on 404, deep-copy + overwrite, PUT when different),
  in namespace ``gfd-baseline``.

Time is simulated: the sinks get a fake clock and ``publish()`` is called once per
simulated cycle (gfd: every 10 s, its default; baseline: every 60 s, GFD's default).
Nothing sleeps. Phases: start-up (first publish of every node at t=0), ``--hours`` of
steady state (t in (0, H h], so each node's hourly resync falls in it exactly once
per hour), then a change-wave hour in which ``--change-fraction`` of the nodes get
``nvidia.com/gpu.count`` 8 -> 7 at a random time.

Bytes are HTTP body bytes as the fake server logs them (headers not counted). The
fake's objects are smaller than a real cluster's (no Node status, managedFields only
for metadata), so absolute bytes are lower bounds; request counts are exact.

    python -m benchmarks.fleet [--nodes 1000] [--hours 1] [--change-fraction 0.1] [--write]
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))  # the fakes import each other as ``fakes.*``

from fakes.apiserver import FakeApiServer, RequestRecord  # noqa: E402

from benchmarks.agent import machine_info, write_report  # noqa: E402
from gfd.kube import Kube  # noqa: E402
from gfd.labelers.options import LabelOptions  # noqa: E402
from gfd.labelers.pipeline import compute_labels  # noqa: E402
from gfd.readers.simulate import simulate  # noqa: E402
from gfd.sharing import Sharing  # noqa: E402
from gfd.sinks.node import NodeSink  # noqa: E402
from gfd.sinks.nodefeature import (  # noqa: E402
    API_VERSION,
    NODE_NAME_LABEL,
    NodeFeatureSink,
    object_name,
)
from gfd.sinks.objectwatch import WATCH_TIMEOUT  # noqa: E402
from gfd.sinks.retry import Retry  # noqa: E402
from gfd.triggers import Trigger  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "fleet.json"
NAMESPACE = "gfd"
BASELINE_NAMESPACE = "gfd-baseline"
DAEMONSET = "gfd"
HOUR = 3600.0
GFD_INTERVAL = 60.0  # gfd run --sleep-interval default
BASELINE_INTERVAL = 60.0  # GFD's --sleep-interval default
WATCH_NAMESPACE = "gfd-watch"
WATCHED_SUFFIX = "-w"
"""Nodes of the watched Node sinks are separate Nodes, named with this suffix."""
KINDS = ("node", "nodefeature", "node_watch", "nodefeature_watch", "baseline")
WATCH_KINDS = ("node_watch", "nodefeature_watch")
TITLES = {"node": "gfd Node sink, no watch", "nodefeature": "gfd NodeFeature sink, no watch",
          "node_watch": "gfd Node sink + watch", "nodefeature_watch":
          "gfd NodeFeature sink + watch", "baseline": "GFD-style baseline"}
CHANGED_KEY = "nvidia.com/gpu.count"
STEADY_TARGET = 1.0  # SPEC §9: <= 1 request per node per hour in steady state


@dataclass(slots=True)
class FakeClock:
    """The sinks' monotonic clock, moved by the simulation instead of by time."""

    now: float = 0.0

    def __call__(self) -> float:
        return self.now


def _no_sleep(_seconds: float) -> None:
    """Retry backoff under simulated time: never sleep for real."""


# ----------------------------------------------------------------------------- baseline


class GfdStyleBaseline:
    """GFD's NodeFeature writer as gfd-behaviour.md §8.2 describes it (not upstream code).

    Every cycle: GET the object by name; if it does not exist, CREATE it and stop;
    otherwise deep-copy what was fetched, overwrite its metadata labels, its
    ownerReferences ([DaemonSet (controller), Pod]) and its whole spec, and send a
    full Update (PUT) only if the result differs from what was fetched. No retry on
    conflict: a 409 propagates (fatal in GFD). The owning pod is looked up once, at
    start-up, which is the cheapest reading of the reference.
    """

    def __init__(self, api: Kube, node: str, namespace: str, pod_name: str) -> None:
        self.api = api
        self.node = node
        self.namespace = namespace
        self.pod_name = pod_name
        self.name = object_name(node)
        self._owners: list[dict[str, Any]] | None = None

    def _owner_references(self) -> list[dict[str, Any]]:
        if self._owners is None:
            pod = self.api.get_pod(self.namespace, self.pod_name)
            meta = pod.get("metadata", {})
            owners = [
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": ref["name"],
                 "uid": ref["uid"], "controller": True}
                for ref in meta.get("ownerReferences") or [] if ref.get("kind") == "DaemonSet"
            ]
            if owners:
                owners.append({"apiVersion": "v1", "kind": "Pod", "name": self.pod_name,
                               "uid": meta["uid"]})
            self._owners = owners
        return self._owners

    def cycle(self, labels: dict[str, str]) -> str:
        """One GFD cycle; returns what it did: ``create``, ``update`` or ``none``."""
        owners = self._owner_references()
        current = self.api.get_nodefeature(self.namespace, self.name)
        if current is None:
            metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace,
                                        "labels": {NODE_NAME_LABEL: self.node}}
            if owners:
                metadata["ownerReferences"] = copy.deepcopy(owners)
            self.api.create_nodefeature(self.namespace, {
                "apiVersion": API_VERSION, "kind": "NodeFeature", "metadata": metadata,
                "spec": {"features": {}, "labels": dict(labels)}})
            return "create"
        updated = copy.deepcopy(current)
        meta = updated.setdefault("metadata", {})
        meta["labels"] = {NODE_NAME_LABEL: self.node}
        if owners:
            meta["ownerReferences"] = copy.deepcopy(owners)
        else:
            meta.pop("ownerReferences", None)
        updated["spec"] = {"features": {}, "labels": dict(labels)}
        if updated == current:
            return "none"
        self.api.replace_nodefeature(self.namespace, updated)
        return "update"


# ----------------------------------------------------------------------------- accounting


@dataclass(slots=True)
class Tally:
    """Requests and HTTP body bytes of one sink kind in one phase."""

    requests: int = 0
    bytes_sent: int = 0
    """Request bodies, client to API server."""
    bytes_received: int = 0
    """Response bodies, API server to client."""
    calls: Counter[str] = field(default_factory=Counter)
    """``METHOD status`` -> count."""
    per_node: Counter[str] = field(default_factory=Counter)

    def add(self, record: RequestRecord, node: str) -> None:
        self.requests += 1
        self.bytes_sent += record.request_bytes
        self.bytes_received += record.response_bytes
        self.calls[f"{record.method} {record.status}"] += 1
        self.per_node[node] += 1

    def to_json(self, nodes: int, hours: float = 1.0) -> dict[str, Any]:
        scale = nodes * hours
        return {
            "requests": self.requests,
            "bytes_sent": self.bytes_sent,
            "bytes_received": self.bytes_received,
            "requests_per_node": round(self.requests / scale, 4),
            "bytes_sent_per_node": round(self.bytes_sent / scale, 1),
            "bytes_received_per_node": round(self.bytes_received / scale, 1),
            "max_requests_on_one_node": max(self.per_node.values(), default=0),
            "calls": dict(sorted(self.calls.items())),
        }


def classify(record: RequestRecord) -> tuple[str, str]:
    """(sink kind, node name) of a logged request, from its path (or a create's body, or
    the field selector of a list or watch)."""
    parts = record.path.strip("/").split("/")
    selected = str(record.query.get("fieldSelector", "")).removeprefix("metadata.name=")
    if parts[:3] == ["api", "v1", "nodes"]:
        name = parts[3] if len(parts) > 3 else selected
        kind = "node_watch" if name.endswith(WATCHED_SUFFIX) else "node"
        return kind, name.removesuffix(WATCHED_SUFFIX)
    namespace = parts[parts.index("namespaces") + 1] if "namespaces" in parts else ""
    kind = {BASELINE_NAMESPACE: "baseline", WATCH_NAMESPACE: "nodefeature_watch"}.get(
        namespace, "nodefeature")
    last = parts[-1]
    if last == "nodefeatures":  # a create (the name is in the body), a list or a watch
        last = selected or str((record.json() or {}).get("metadata", {}).get("name", ""))
    return kind, last.removeprefix(object_name("")).removeprefix(f"{DAEMONSET}-")


def tally(records: Iterable[RequestRecord], nodes: set[str] | None = None) -> dict[str, Tally]:
    out = {kind: Tally() for kind in KINDS}
    for record in records:
        kind, node = classify(record)
        if nodes is None or node in nodes:
            out[kind].add(record, node)
    return out


# ----------------------------------------------------------------------------- the fleet


@dataclass
class Fleet:
    """N nodes, each with a Node sink, a NodeFeature sink and a baseline writer."""

    server: FakeApiServer
    clock: FakeClock
    names: list[str]
    node_sinks: list[NodeSink]
    nodefeature_sinks: list[NodeFeatureSink]
    baselines: list[GfdStyleBaseline]
    kubes: list[Kube]
    watched: dict[str, list[NodeSink | NodeFeatureSink]] = field(default_factory=dict)
    """The sinks with a watch, by kind (the first ``--watch-nodes`` nodes)."""
    drift_triggers: int = 0
    """Triggers the watches fired: none is expected (gfd's own writes are no drift)."""
    pending: list[Trigger] = field(default_factory=list)
    resync_due: float = 0.0
    """gfd run's resync duty (every --resync-interval, 1 h): every node started at t=0."""

    def close(self) -> None:
        for sinks in self.watched.values():
            for sink in sinks:
                sink.close()
        for kube in self.kubes:
            kube.close()

    def fire(self, trigger: Trigger) -> None:
        self.drift_triggers += 1
        self.pending.append(trigger)

    def repair(self, labels: dict[str, str]) -> None:
        """What gfd run's loop does with the triggers fired meanwhile: each one's action, then
        a cycle that publishes the same labels through the sink that fired it."""
        pending, self.pending = self.pending, []
        for trigger in pending:
            if trigger.action is not None:
                trigger.action()
                sink = getattr(trigger.action, "__self__", None)
                if isinstance(sink, (NodeSink, NodeFeatureSink)):
                    sink.publish(labels)

    def run(self, ticks: Sequence[float], labels_for: Callable[[int, float], dict[str, str]]
            ) -> dict[str, float]:
        """Publish at each simulated time in ``ticks`` (gfd every tick, the baseline on its
        60 s cycle); returns the wall seconds spent in each kind's calls."""
        wall = dict.fromkeys(KINDS, 0.0)
        for now in ticks:
            self.clock.now = now
            watched = [s for sinks in self.watched.values() for s in sinks]
            if now >= self.resync_due:
                if self.resync_due:  # the scheduler's resync duty, what gfd run does
                    for sink in (*self.node_sinks, *self.nodefeature_sinks, *watched):
                        sink.refresh()
                self.resync_due = now + HOUR
            started = time.perf_counter()
            for i, sink in enumerate(self.node_sinks):
                sink.publish(labels_for(i, now))
            middle = time.perf_counter()
            for i, nf_sink in enumerate(self.nodefeature_sinks):
                nf_sink.publish(labels_for(i, now))
            done = time.perf_counter()
            wall["node"] += middle - started
            wall["nodefeature"] += done - middle
            for kind, sinks in self.watched.items():
                before = time.perf_counter()
                for i, any_sink in enumerate(sinks):
                    any_sink.publish(labels_for(i, now))
                wall[kind] += time.perf_counter() - before
            done = time.perf_counter()
            if now % BASELINE_INTERVAL == 0:
                for i, baseline in enumerate(self.baselines):
                    baseline.cycle(labels_for(i, now))
                wall["baseline"] += time.perf_counter() - done
        return wall


def build_fleet(server: FakeApiServer, kubeconfig: Path, nodes: int) -> Fleet:
    names = [f"gpu-node-{i:04d}" for i in range(nodes)]
    for name in names:
        server.add_node(name, labels={"kubernetes.io/hostname": name})
        for namespace in (NAMESPACE, BASELINE_NAMESPACE, WATCH_NAMESPACE):
            server.add_pod(namespace, f"{DAEMONSET}-{name}", owner_daemonset=DAEMONSET,
                           node_name=name)
    clock = FakeClock()
    # one ApiClient (one connection pool) per sink kind, shared by all of its nodes
    kubes = [Kube(kubeconfig=str(kubeconfig), qps=0) for _ in ("node", "nodefeature", "baseline")]
    node_kube, nodefeature_kube, baseline_kube = kubes
    retry = Retry(sleep=_no_sleep)
    return Fleet(
        server=server,
        clock=clock,
        names=names,
        node_sinks=[NodeSink(node_kube, name, retry=retry) for name in names],
        nodefeature_sinks=[
            NodeFeatureSink(nodefeature_kube, name, namespace=NAMESPACE,
                            pod_name=f"{DAEMONSET}-{name}", retry=retry)
            for name in names
        ],
        baselines=[GfdStyleBaseline(baseline_kube, name, BASELINE_NAMESPACE,
                                    f"{DAEMONSET}-{name}") for name in names],
        kubes=kubes,
    )


def add_watched(fleet: Fleet, kubeconfig: Path, count: int) -> None:
    """Node and NodeFeature sinks with their watch (one Kube each, as on a real node) for the
    first ``count`` nodes; their Nodes are separate ones (``-w``), as is their namespace."""
    retry = Retry(sleep=_no_sleep)
    fleet.watched = {kind: [] for kind in WATCH_KINDS}
    for name in fleet.names[:count]:
        watched_node = name + WATCHED_SUFFIX
        fleet.server.add_node(watched_node, labels={"kubernetes.io/hostname": watched_node})
        node_kube = Kube(kubeconfig=str(kubeconfig), qps=0)
        nf_kube = Kube(kubeconfig=str(kubeconfig), qps=0)
        fleet.kubes += [node_kube, nf_kube]
        fleet.watched["node_watch"].append(NodeSink(
            node_kube, watched_node, retry=retry, clock=fleet.clock, watch_api=node_kube))
        fleet.watched["nodefeature_watch"].append(NodeFeatureSink(
            nf_kube, name, namespace=WATCH_NAMESPACE, pod_name=f"{DAEMONSET}-{name}",
            retry=retry, clock=fleet.clock, watch_api=nf_kube))


def node_labels() -> dict[str, str]:
    """A realistic label set: what ``gfd labels --simulate hgx-h100`` prints."""
    sim = simulate("hgx-h100")
    options = LabelOptions(timestamp=1_767_225_600,  # gfd.timestamp: fixed for a run
                           sharing=sim.sharing or Sharing())
    return compute_labels(sim.snapshot, options).labels


def ticks(start: float, end: float) -> list[float]:
    """gfd cycle times in (start, end]."""
    first = int(start // GFD_INTERVAL) + 1
    last = int(end // GFD_INTERVAL)
    return [n * GFD_INTERVAL for n in range(first, last + 1)]


def published_count(fleet: Fleet, kind: str, name: str) -> str:
    """The value of the changed key that the server holds now for this node and kind."""
    if kind in ("node", "node_watch"):
        suffix = WATCHED_SUFFIX if kind == "node_watch" else ""
        return str(fleet.server.labels(name + suffix).get(CHANGED_KEY, ""))
    namespace = {"nodefeature": NAMESPACE, "nodefeature_watch": WATCH_NAMESPACE}.get(
        kind, BASELINE_NAMESPACE)
    obj = fleet.server.nodefeature(namespace, object_name(name)) or {}
    return str(obj.get("spec", {}).get("labels", {}).get(CHANGED_KEY, ""))


# ----------------------------------------------------------------------------- the run


@dataclass(frozen=True, slots=True)
class Config:
    nodes: int
    hours: int
    change_fraction: float
    seed: int
    watch_nodes: int = 100


def run(config: Config) -> dict[str, Any]:
    base = node_labels()
    changed = {**base, CHANGED_KEY: str(int(base[CHANGED_KEY]) - 1)}
    rng = random.Random(config.seed)
    steady_end = config.hours * HOUR
    wave_end = steady_end + HOUR
    wave_nodes = rng.sample(range(config.nodes), round(config.nodes * config.change_fraction))
    change_at = {i: rng.uniform(steady_end, wave_end) for i in wave_nodes}

    def labels_for(i: int, now: float) -> dict[str, str]:
        return changed if change_at.get(i, wave_end + 1) <= now else base

    started = time.perf_counter()
    phases: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="gfd-fleet-") as tmp, FakeApiServer() as server:
        kubeconfig = server.write_kubeconfig(Path(tmp) / "kubeconfig")
        fleet = build_fleet(server, kubeconfig, config.nodes)
        add_watched(fleet, kubeconfig, config.watch_nodes)
        per_kind = {k: config.watch_nodes if k in WATCH_KINDS else config.nodes for k in KINDS}
        watches = len(WATCH_KINDS) * config.watch_nodes
        try:
            setup = time.perf_counter() - started
            for name, window, hours in (("startup", [0.0], 1),
                                        ("steady", ticks(0.0, steady_end), config.hours),
                                        ("wave", ticks(steady_end, wave_end), 1)):
                server.clear_log()
                if name == "startup":  # as gfd run: the sinks' watch() before the first cycle
                    for sink in (s for sinks in fleet.watched.values() for s in sinks):
                        sink.watch(fleet.fire)
                wall = fleet.run(window, labels_for)
                if name == "startup":
                    _wait(lambda: server.open_watches == watches, "the watches to open")
                    time.sleep(0.5)  # a drift the watches' first reads report arrives by now
                    fleet.repair(base)  # and costs its repair here
                records = server.requests
                tallies = tally(records)
                phase: dict[str, Any] = {
                    "simulated_seconds": 0.0 if name == "startup" else hours * HOUR,
                    "gfd_cycles_per_node": len(window),
                    "wall_seconds": {k: round(v, 3) for k, v in wall.items()},
                    "kinds": {k: t.to_json(per_kind[k], hours) for k, t in tallies.items()},
                }
                if name == "wave":
                    names = {fleet.names[i] for i in wave_nodes}
                    watched_changed = {fleet.names[i] for i in wave_nodes
                                       if i < config.watch_nodes}
                    phase["changed_nodes"] = len(names)
                    phase["changed_only"] = {
                        k: t.to_json(max(len(watched_changed if k in WATCH_KINDS else names), 1))
                        for k, t in tally(records, names).items()
                    }
                phases[name] = phase
            phases["renewal"] = measure_renewal(server, watches, per_kind)
            if server.errors:
                raise RuntimeError(f"fake API server failed: {server.errors[0]}")
            verified = {
                kind: sum(
                    published_count(fleet, kind, name)
                    == labels_for(i, wave_end)[CHANGED_KEY]
                    for i, name in enumerate(fleet.names[:per_kind[kind]])
                )
                for kind in KINDS
            }
            drift_triggers = fleet.drift_triggers
        finally:
            fleet.close()
    return summarise(config, phases, verified, setup, time.perf_counter() - started,
                     drift_triggers)


def _wait(check: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def measure_renewal(server: FakeApiServer, watches: int,
                    per_kind: dict[str, int]) -> dict[str, Any]:
    """What renewing every watch costs: the server ends each one cleanly, as it does when
    its ``timeoutSeconds`` (one hour) runs out, and every watch reconnects."""
    server.clear_log()
    # ended this early, a watch looks unproductive and reconnects after its first backoff
    # step (1 s) instead of at once, and says so; the request count is the same
    logging.getLogger("gfd.sinks.objectwatch").setLevel(logging.ERROR)
    ended = server.end_watches()
    _wait(lambda: server.open_watches == watches and sum(
        1 for r in server.requests if r.query.get("watch")) >= watches,
        "the watches to reconnect")
    time.sleep(0.5)  # anything else that would follow (a re-read) would be here by now
    tallies = tally(server.requests)
    return {"ended": ended, "open_after": server.open_watches,
            "kinds": {k: tallies[k].to_json(per_kind[k]) for k in WATCH_KINDS}}


def summarise(config: Config, phases: dict[str, Any], verified: dict[str, int], setup: float,
              total: float, drift_triggers: int) -> dict[str, Any]:
    steady = phases["steady"]["kinds"]
    base_requests = steady["baseline"]["requests_per_node"]
    ratios = {
        kind: {
            "requests": round(steady[kind]["requests_per_node"] / base_requests, 4),
            "bytes": round(
                (steady[kind]["bytes_sent_per_node"] + steady[kind]["bytes_received_per_node"])
                / (steady["baseline"]["bytes_sent_per_node"]
                   + steady["baseline"]["bytes_received_per_node"]), 4),
        }
        for kind in ("node", "nodefeature", *WATCH_KINDS)
    }
    worst = max(steady[k]["requests_per_node"] for k in ("node", "nodefeature"))
    renewal = phases["renewal"]["kinds"]
    watched_steady = max(steady[k]["requests_per_node"] for k in WATCH_KINDS)
    renewals = max(renewal[k]["requests_per_node"] for k in WATCH_KINDS) * HOUR / WATCH_TIMEOUT
    open_per_node = phases["renewal"]["open_after"] / (len(WATCH_KINDS) * config.watch_nodes)
    command = (f"python -m benchmarks.fleet --nodes {config.nodes} --hours {config.hours} "
               f"--change-fraction {config.change_fraction} --write")
    return {
        "benchmark": "fleet",
        "config": {"nodes": config.nodes, "hours": config.hours,
                   "watch_nodes": config.watch_nodes,
                   "change_fraction": config.change_fraction, "seed": config.seed,
                   "gfd_interval_s": GFD_INTERVAL, "baseline_interval_s": BASELINE_INTERVAL,
                   "resync_interval_s": HOUR, "labels_per_node": len(node_labels())},
        "machine": machine_info(),
        "phases": phases,
        "steady_ratio_to_baseline": ratios,
        "verified_nodes": verified,
        "setup_seconds": round(setup, 1),
        "runtime_seconds": round(total, 1),
        "drift_triggers": drift_triggers,
        "targets": [{
            "id": "api-watch",
            "target": "With the watch: <= 1 request per node-hour in steady state plus one "
                      "open watch",
            "measured": f"{watched_steady:g} requests per node-hour (publishes and resyncs) + "
                        f"{renewals:g} watch renewal per hour (one request, no re-read); "
                        f"{open_per_node:g} open watch per node ({config.watch_nodes} nodes "
                        "per sink)",
            "value": watched_steady + renewals,
            "limit": STEADY_TARGET + 1,
            "met": watched_steady <= STEADY_TARGET and renewals <= 1 and open_per_node == 1,
            "command": command,
        }, {
            "id": "api-load",
            "target": "API load: <= 1 request per node per hour in steady state "
                      f"({config.nodes} nodes, side by side with a GFD-style baseline)",
            "measured": f"Node sink {steady['node']['requests_per_node']:g}, NodeFeature sink "
                        f"{steady['nodefeature']['requests_per_node']:g}; baseline "
                        f"{base_requests:g} req/node-hour",
            "value": worst,
            "limit": STEADY_TARGET,
            "met": worst <= STEADY_TARGET,
            "command": command,
        }],
    }


# ----------------------------------------------------------------------------- report


def _kib(n: float) -> str:
    return f"{n / 1024:.1f}"


def table(result: dict[str, Any]) -> str:
    """The results as a Markdown table (also printed to the terminal)."""
    p = result["phases"]
    s, st, w, c = (p["steady"]["kinds"], p["startup"]["kinds"], p["wave"]["kinds"],
                   p["wave"]["changed_only"])
    nodes, hours = result["config"]["nodes"], result["config"]["hours"]
    wn = result["config"]["watch_nodes"]
    r = p["renewal"]["kinds"]

    def row(title: str, cell: Callable[[str], str]) -> str:
        return f"| {title} | " + " | ".join(cell(k) for k in KINDS) + " |"

    def both(t: dict[str, Any], per: str = "_per_node") -> Callable[[str], str]:
        return lambda k: f"{_kib(t[k]['bytes_sent' + per])} / {_kib(t[k]['bytes_received' + per])}"

    ratio = result["steady_ratio_to_baseline"]
    lines = [
        "| | " + " | ".join(TITLES[k] for k in KINDS) + " |",
        "|---|" + "---:|" * len(KINDS),
        row("start-up: requests per node", lambda k: f"{st[k]['requests_per_node']:g}"),
        row("start-up: KiB per node (sent / received)", both(st)),
        row(f"**steady state: requests per node-hour** ({hours} h)",
            lambda k: f"**{s[k]['requests_per_node']:g}**"),
        row("steady state: most requests on one node, per hour",
            lambda k: f"{s[k]['max_requests_on_one_node'] / hours:g}"),
        row("steady state: KiB per node-hour (sent / received)", both(s)),
        row(f"steady state: API requests/s for {nodes} nodes",
            lambda k: f"{s[k]['requests'] / (hours * HOUR):.3f}"),
        row("steady state: request calls", lambda k: ", ".join(
            f"{call} x{n}" for call, n in s[k]["calls"].items())),
        row("steady state vs baseline (requests / bytes)", lambda k: (
            f"{ratio[k]['requests']:.3f} / {ratio[k]['bytes']:.3f}" if k in ratio else "1 / 1")),
        row(f"change wave ({p['wave']['changed_nodes']} nodes change): requests in the hour",
            lambda k: f"{w[k]['requests']}"),
        row("change wave: requests per changed node in that hour",
            lambda k: f"{c[k]['requests_per_node']:g}"),
        row("change wave: KiB per changed node (sent / received)", both(c)),
        row("change wave: extra requests over a steady hour", lambda k: (
            f"{w[k]['requests'] - s[k]['requests'] / hours:+g}")),
        row("watch: open watches per node", lambda k: (
            f"{p['renewal']['open_after'] / (len(WATCH_KINDS) * wn):g}" if k in WATCH_KINDS
            else "0")),
        row(f"watch: its hourly renewal (timeoutSeconds={WATCH_TIMEOUT:g}), requests per node",
            lambda k: (", ".join(f"{call} x{n}" for call, n in r[k]["calls"].items())
                       + f" = {r[k]['requests_per_node']:g}") if k in WATCH_KINDS else "-"),
        row("nodes holding the right labels at the end", lambda k: (
            f"{result['verified_nodes'][k]} / {wn if k in WATCH_KINDS else nodes}")),
        row("wall s in the simulated steady hour (client + fake server)", lambda k: (
            f"{p['steady']['wall_seconds'][k] / hours:.1f}")),
    ]
    return "\n".join(lines)


def markdown(result: dict[str, Any]) -> str:
    m, cfg = result["machine"], result["config"]
    return "\n".join([
        f"Command: `{result['targets'][0]['command']}` — {m['date']}, {m['cpu']} "
        f"x{m['nproc']}, Python {m['python']}; ran {result['runtime_seconds']:.0f} s "
        f"({cfg['nodes']} nodes x 3 sink kinds and {cfg['watch_nodes']} x 2 watched ones, "
        f"{cfg['labels_per_node']} labels each; gfd "
        f"cycles every {cfg['gfd_interval_s']:g} s, the baseline every "
        f"{cfg['baseline_interval_s']:g} s, resync {cfg['resync_interval_s']:g} s; simulated "
        "time).",
        "",
        table(result),
        "",
        "Bytes are HTTP bodies (headers not counted) as the fake API server logs them; its "
        "objects are leaner than a real cluster's (no Node status, managedFields for "
        "metadata only), so bytes are lower bounds and request counts are the exact figure.",
        "",
        f"The watched sinks run on the first {cfg['watch_nodes']} nodes (one client and one "
        "real watch each, on Nodes and a namespace of their own); per-node figures are per "
        "watched node. As in gfd run, each sink's watch() comes before its first publish "
        "(the sink opens the watch after it), and whatever the watches fire at start is "
        "repaired as the loop would (its action, then a publish), so a phantom drift would "
        "show in the start-up figure, which includes the LIST and the watch request; the watch "
        "stays open through the simulated hours (the fake server ends it only when told), "
        "so its hourly renewal is measured apart: the server ends every watch as its "
        "timeout would, and each reconnects. With a healthy watch the resync runs once a "
        "day, so the simulated steady hour holds none. Watches that fired a drift trigger "
        f"for gfd's own writes: {result['drift_triggers']}.",
    ])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fleet", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--hours", type=int, default=1, help="steady-state hours (default 1)")
    parser.add_argument("--change-fraction", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--watch-nodes", type=int, default=100,
                        help="nodes whose sinks also watch (one real watch each)")
    parser.add_argument("--write", action="store_true",
                        help="update BENCHMARKS.md (section between the fleet markers)")
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.hours < 1 or not 0 <= args.change_fraction <= 1:
        parser.error("need --nodes >= 1, --hours >= 1 and 0 <= --change-fraction <= 1")
    result = run(Config(args.nodes, args.hours, args.change_fraction, args.seed,
                        min(args.watch_nodes, args.nodes)))
    print(table(result))
    print(f"\nran {result['runtime_seconds']:.0f} s (setup {result['setup_seconds']:.0f} s)")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")
    if args.write:
        write_report("fleet", markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
