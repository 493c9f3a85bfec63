"""Fleet scale against a real kube-apiserver: gfd's Node and NodeFeature sinks, each with and
without its drift watch, side by side with a GFD-style NodeFeature writer (SPEC §9, issues 18
and 28).

Each mode runs on a control plane of its own (etcd + kube-apiserver v1.36 from
``$KUBEBUILDER_ASSETS``, started as the tests' ``tests/helpers/controlplane.py`` does, etcd with
fsync, loopback only) holding N Nodes and one gfd pod per node, so no mode's memory or
goroutines are left in another's figures. Modes (``--modes``):

* ``node-watch`` / ``node``: N ``NodeSink``s as ``gfd run --sink node`` runs them, with and
  without (``--watch=false``) the watch on their own Node, as the ServiceAccount with the RBAC
  of manifests/overlays/node;
* ``nodefeature-watch`` / ``nodefeature``: N ``NodeFeatureSink``s (``--sink nodefeature``),
  with and without the watch on their own NodeFeature, RBAC of manifests/overlays/nodefeature;
* ``baseline``: N GFD-style writers (``benchmarks.fleet.GfdStyleBaseline``: GET every cycle,
  create on 404, PUT when different), RBAC of manifests/overlays/nodefeature.

Every agent has a ``Kube`` of its own (its own connections, as each node's pod has). Phases of
each mode, measured from the API server itself: idle (the N Nodes, no client); the start-up
burst, every agent's first publish (and its watch) at a time drawn uniformly within
``--burst`` seconds (a fresh install, a ``maxUnavailable: 100%`` rollout), until every node
is labelled and every watch open; then a steady window with every agent cycling once per
60 s, spread over the minute. Requests are deltas of ``apiserver_request_total``, latency
the API server's own ``apiserver_request_duration_seconds`` histogram (WATCH excluded), open
watches ``apiserver_longrunning_requests``, goroutines and Go heap from
its ``/metrics``, CPU the API server's and etcd's utime+stime from /proc, RSS their VmRSS.
Per node figures are the steady window over idle, divided by N.

    export KUBEBUILDER_ASSETS="$(../shared/k8s-assets/unpack.sh)"
    python -m benchmarks.fleet_real [--nodes 500] [--burst 60] [--steady 120] [--write]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import random
import re
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))  # the helpers import each other as ``helpers.*``

from helpers.controlplane import ENABLE_HINT, ControlPlane, assets_from_env  # noqa: E402
from helpers.realserver import daemonset  # noqa: E402

from benchmarks.agent import machine_info, percentile, write_report  # noqa: E402
from benchmarks.fleet import CHANGED_KEY, GfdStyleBaseline, node_labels  # noqa: E402
from gfd.kube import Kube  # noqa: E402
from gfd.sinks.node import NodeSink  # noqa: E402
from gfd.sinks.nodefeature import NodeFeatureSink, object_name  # noqa: E402
from gfd.sinks.retry import Retry  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "fleet_real.json"
NAMESPACE = "gfd"
DAEMONSET = "gfd"
INTERVAL = 60.0  # gfd run's --sleep-interval default and GFD's
HOUR = 3600.0
CLK_TCK = os.sysconf("SC_CLK_TCK")
FLEET_RESOURCES = ("nodes", "nodefeatures", "pods")
WATCHED = ("nodes", "nodefeatures")
HEAP_RATE = 512 * 1024  # Go's default MemProfileRate
_HEAP_RECORD = re.compile(r"^(\d+): (\d+) \[\d+: \d+\] @")
_HEAP_FRAME = re.compile(r"^#\s+0x[0-9a-f]+\s+(\S+)")
LONG_RUNNING = ("WATCH", "CONNECT")
MODES: dict[str, tuple[str, bool]] = {
    "node-watch": ("node", True),
    "node": ("node", False),
    "nodefeature-watch": ("nodefeature", True),
    "nodefeature": ("nodefeature", False),
    "baseline": ("baseline", False),
}
TITLES = {
    "node-watch": "gfd Node sink + watch",
    "node": "gfd Node sink, `--watch=false`",
    "nodefeature-watch": "gfd NodeFeature sink + watch",
    "nodefeature": "gfd NodeFeature sink, `--watch=false`",
    "baseline": "GFD-style NodeFeature writer (60 s)",
}
_SAMPLE = re.compile(r"^(\w+)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


# ----------------------------------------------------------------------------- measuring


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@dataclass(frozen=True)
class Sample:
    """The API server and etcd at one moment."""

    at: float
    apiserver_cpu: float
    etcd_cpu: float
    apiserver_rss: float
    etcd_rss: float
    requests: Counter[str]
    """``VERB resource code`` -> count, fleet resources only."""
    latency: Counter[float]
    """Upper bound ``le`` -> cumulative count of the fleet's non-watch requests."""
    watches: int
    """Open WATCH requests on nodes and nodefeatures."""
    goroutines: int
    heap_inuse: float
    """``go_memstats_heap_inuse_bytes``, MiB."""
    stack_inuse: float
    """``go_memstats_stack_inuse_bytes``, MiB."""
    client_rss: float


def sample(plane: ControlPlane) -> Sample:
    requests: Counter[str] = Counter()
    latency: Counter[float] = Counter()
    watches = goroutines = 0
    heap = stack = 0.0
    for line in plane.metrics().splitlines():
        match = _SAMPLE.match(line)
        if not match:
            continue
        name, value = match.group(1), float(match.group(3))
        labels = dict(_LABEL.findall(match.group(2) or ""))
        if name == "go_goroutines":
            goroutines = int(value)
        elif name == "go_memstats_heap_inuse_bytes":
            heap = value / 2**20
        elif name == "go_memstats_stack_inuse_bytes":
            stack = value / 2**20
        elif labels.get("resource") not in FLEET_RESOURCES:
            continue
        elif name == "apiserver_request_total":
            requests[f"{labels['verb']} {labels['resource']} {labels['code']}"] += int(value)
        elif (name == "apiserver_request_duration_seconds_bucket"
              and labels.get("verb") not in LONG_RUNNING):
            latency[float(labels["le"])] += int(value)
        elif (name == "apiserver_longrunning_requests" and labels.get("verb") == "WATCH"
              and labels["resource"] in WATCHED):
            watches += int(value)
    return Sample(at=time.monotonic(), apiserver_cpu=cpu_seconds(plane.apiserver.pid),
                  etcd_cpu=cpu_seconds(plane.etcd.pid),
                  apiserver_rss=rss_mib(plane.apiserver.pid), etcd_rss=rss_mib(plane.etcd.pid),
                  requests=requests, latency=latency, watches=watches,
                  goroutines=goroutines, heap_inuse=heap, stack_inuse=stack,
                  client_rss=rss_mib(os.getpid()))


def quantile(q: float, buckets: Counter[float]) -> float:
    """Prometheus' ``histogram_quantile`` over cumulative ``le`` -> count: linear within the
    bucket the rank falls in (the last finite bound when it falls in +Inf); NaN if empty."""
    bounds = sorted(buckets)
    total = buckets[math.inf] if math.inf in buckets else (buckets[bounds[-1]] if bounds else 0)
    if total <= 0:
        return math.nan
    rank = q * total
    lower, below = 0.0, 0.0
    for le in bounds:
        count = buckets[le]
        if count >= rank:
            if math.isinf(le):
                return lower
            return lower + (le - lower) * ((rank - below) / (count - below) if count > below
                                           else 1.0)
        lower, below = le, count
    return lower


def heap_sites(text: str) -> Counter[str]:
    """In-use bytes of the API server's heap by allocation site (the first frame outside
    the Go runtime), from ``/debug/pprof/heap?debug=1``, each record scaled up from Go's
    sampling as ``pprof`` does (``scaleHeapSample``)."""
    sites: Counter[str] = Counter()
    size: float | None = None
    for line in text.splitlines():
        record = _HEAP_RECORD.match(line)
        if record:
            count, total = int(record.group(1)), int(record.group(2))
            size = None
            if count and total:
                scale = 1 / (1 - math.exp(-(total / count) / HEAP_RATE))
                size = total * scale
            continue
        frame = _HEAP_FRAME.match(line)
        if frame and size is not None and not frame.group(1).startswith("runtime."):
            sites[frame.group(1).split("+0x")[0]] += round(size)
            size = None
        elif not line.strip():
            size = None
    return sites


def heap_profile(plane: ControlPlane) -> Counter[str]:
    """The API server's heap by site, right after a GC it asks for (``gc=1``)."""
    _status, body = plane.request("GET", "/debug/pprof/heap", query={"debug": "1", "gc": "1"})
    return heap_sites(str(body))


def phase(before: Sample, after: Sample) -> dict[str, Any]:
    seconds = after.at - before.at
    calls = after.requests - before.requests
    latency = Counter({le: after.latency[le] - before.latency.get(le, 0)
                       for le in after.latency})
    p99 = quantile(0.99, latency)
    return {
        "seconds": round(seconds, 1),
        "requests": sum(calls.values()),
        "calls": dict(sorted(calls.items())),
        "p99_ms": None if math.isnan(p99) else round(1000 * p99, 1),
        "apiserver_cpu_s": round(after.apiserver_cpu - before.apiserver_cpu, 2),
        "etcd_cpu_s": round(after.etcd_cpu - before.etcd_cpu, 2),
        "apiserver_cores": round((after.apiserver_cpu - before.apiserver_cpu) / seconds, 4),
        "etcd_cores": round((after.etcd_cpu - before.etcd_cpu) / seconds, 4),
        "apiserver_rss_mib": round(after.apiserver_rss, 1),
        "etcd_rss_mib": round(after.etcd_rss, 1),
        "heap_inuse_mib": round(after.heap_inuse, 1),
        "stack_inuse_mib": round(after.stack_inuse, 1),
        "goroutines": after.goroutines,
        "watches": after.watches,
        "client_rss_mib": round(after.client_rss, 1),
    }


# ----------------------------------------------------------------------------- the agents


@dataclass
class Agent:
    """One node's agent: its first publish (and watch), then one cycle per interval."""

    first: Callable[[], object]
    cycle: Callable[[], object]
    close: Callable[[], object]


@dataclass
class Fleet:
    plane: ControlPlane
    mode: str
    names: list[str]
    labels: dict[str, str]
    agents: list[Agent] = field(default_factory=list)
    kubes: list[Kube] = field(default_factory=list)
    drift: list[int] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    labelled: list[float] = field(default_factory=list)
    """Seconds from the burst's start until each agent's first publish returned."""
    waited: list[float] = field(default_factory=list)
    """Seconds from each agent's own start until its first publish returned."""
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fire(self, _trigger: object) -> None:
        self.drift.append(1)  # a watch took gfd's own write for drift: none expected

    def make(self, kubeconfig: Path) -> None:
        """Every node's agent, its client made before the burst (client CPU stays out)."""
        kind, watched = MODES[self.mode]
        retry = Retry(sleep=lambda _s: None)
        for name in self.names:
            kube = Kube(kubeconfig=str(kubeconfig), qps=0)
            self.kubes.append(kube)
            self.agents.append(self._agent(kind, watched, kube, name, retry))

    def _agent(self, kind: str, watched: bool, kube: Kube, name: str,
               retry: Retry) -> Agent:
        labels = self.labels
        if kind == "baseline":
            writer = GfdStyleBaseline(kube, name, NAMESPACE, f"{DAEMONSET}-{name}")
            return Agent(lambda: writer.cycle(labels), lambda: writer.cycle(labels),
                         lambda: None)
        sink: NodeSink | NodeFeatureSink
        if kind == "node":
            sink = NodeSink(kube, name, retry=retry, watch_api=kube if watched else None)
        else:
            sink = NodeFeatureSink(kube, name, NAMESPACE, f"{DAEMONSET}-{name}", retry=retry,
                                   watch_api=kube if watched else None)

        def first() -> None:
            sink.publish(labels)
            sink.watch(self.fire)  # as gfd run: after the first publish; no-op without one

        return Agent(first, lambda: sink.publish(labels), sink.close)

    def guarded(self, what: str, work: Callable[[], object]) -> bool:
        try:
            work()
            return True
        except Exception as exc:  # counted and reported: the run goes on
            with self.lock:
                self.errors[f"{what}: {type(exc).__name__}: {str(exc)[:120]}"] += 1
            return False

    def burst(self, window: float, rng: random.Random, workers: int) -> None:
        """Every agent's first publish at a uniform random time within ``window`` seconds."""
        starts = sorted(rng.uniform(0, window) for _ in self.agents)
        order = list(range(len(self.agents)))
        rng.shuffle(order)
        t0 = time.monotonic()

        def start(k: int) -> None:
            due = t0 + starts[k]
            self.stop.wait(max(0.0, due - time.monotonic()))
            began = time.monotonic()
            if self.guarded("start", self.agents[order[k]].first):
                done = time.monotonic()
                with self.lock:
                    self.labelled.append(done - t0)
                    self.waited.append(done - max(began, due))

        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(start, range(len(order))))

    def loop(self) -> None:
        """Each agent cycles once every 60 s, the N spread evenly over the minute (gfd's
        publish of unchanged labels is free; the baseline GETs)."""
        n = len(self.agents)
        started = time.monotonic()
        cycle = 0
        while not self.stop.is_set():
            for i, agent in enumerate(self.agents):
                due = started + cycle * INTERVAL + i * INTERVAL / n
                if self.stop.wait(max(0.0, due - time.monotonic())):
                    return
                self.guarded("cycle", agent.cycle)
            cycle += 1

    def close(self) -> None:
        self.stop.set()
        for agent in self.agents:
            self.guarded("close", agent.close)
        for kube in self.kubes:
            kube.close()


def populate(plane: ControlPlane, names: list[str], rbac: str, workers: int) -> None:
    """N Nodes, gfd's DaemonSet and one of its pods per node (the NodeFeatures' owner), the
    ServiceAccount bound to the mode's RBAC of manifests/."""
    plane.install_rbac("node" if rbac == "node" else "nodefeature")
    ds = plane.create(daemonset(NAMESPACE, DAEMONSET))
    owner = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": DAEMONSET,
              "uid": ds["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]

    def node(i: int) -> None:
        name = names[i]
        plane.create({"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": name, "labels": {"kubernetes.io/hostname": name}}}, manager="kubelet")
        plane.create({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": f"{DAEMONSET}-{name}", "namespace": NAMESPACE, "ownerReferences": owner,
            "labels": {"app.kubernetes.io/name": DAEMONSET}},
            "spec": {"nodeName": name, "containers": [{"name": "gfd", "image": "gfd:bench"}]}})

    with ThreadPoolExecutor(min(workers, 8)) as pool:
        list(pool.map(node, range(len(names))))


def wait(check: Callable[[], bool], what: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(1.0)


@dataclass(frozen=True)
class Config:
    nodes: int
    modes: tuple[str, ...]
    burst: float
    steady: float
    idle: float
    seed: int
    workers: int


def run_mode(config: Config, mode: str, assets: Path, tmp: Path) -> dict[str, Any]:
    """One mode on a control plane of its own: idle, start-up burst, steady window."""
    names = [f"gpu-node-{i:04d}" for i in range(config.nodes)]
    labels = node_labels()
    kind, watched = MODES[mode]
    started = time.monotonic()
    plane = ControlPlane.start(assets, tmp / mode, fsync=True, audit=False)
    fleet: Fleet | None = None
    try:
        populate(plane, names, kind, config.workers)
        kubeconfig = plane.service_account_kubeconfig(tmp / f"{mode}.kubeconfig",
                                                      seconds=7200)
        fleet = Fleet(plane, mode, names, labels)
        fleet.make(kubeconfig)
        setup = time.monotonic() - started
        time.sleep(10)  # the creations' aftermath (watch cache, GC of nothing) calms down
        s0 = sample(plane)
        time.sleep(config.idle)
        heap_idle = heap_profile(plane)  # after a GC, as at the steady window's end
        s1 = sample(plane)
        phases = {"idle": phase(s0, s1)}

        peaks: list[float] = []
        done = threading.Event()

        def watch_rate() -> None:
            last = s1
            while not done.wait(5.0):
                now = sample(plane)
                peaks.append(sum((now.requests - last.requests).values()) / (now.at - last.at))
                last = now

        sampler = threading.Thread(target=watch_rate, daemon=True)
        sampler.start()
        try:
            fleet.burst(config.burst, random.Random(config.seed), config.workers)
            if watched:
                wait(lambda: sample(plane).watches >= config.nodes + s1.watches,
                     "the watches to open")
        finally:  # the sampler ends before the control plane does, however this ends
            done.set()
            sampler.join()
        s2 = sample(plane)
        phases["burst"] = phase(s1, s2)
        threading.Thread(target=fleet.loop, daemon=True).start()
        s3 = sample(plane)
        time.sleep(config.steady)
        heap = heap_profile(plane)
        heap.subtract(heap_idle)
        s4 = sample(plane)
        phases["steady"] = phase(s3, s4)
        fleet.stop.set()
        verified = verify(plane, kind, names, labels)
        result = summarise(config, mode, phases, fleet, peaks, verified, setup,
                           time.monotonic() - started)
        result["heap_sites_kib_per_node"] = {
            site: round(b / 1024 / config.nodes, 1) for site, b in heap.most_common(12)}
    finally:
        if fleet is not None:
            fleet.close()
        plane.stop()
    print(mode, json.dumps(result["summary"]), flush=True)
    return result


def verify(plane: ControlPlane, kind: str, names: list[str], labels: dict[str, str]) -> int:
    """Nodes whose Node labels (node sink) or NodeFeature labels hold the right value."""
    want = labels[CHANGED_KEY]
    if kind == "node":
        listed = plane.get("/api/v1/nodes") or {"items": []}
        have = {n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get(CHANGED_KEY)
                for n in listed["items"]}
        return sum(have.get(n) == want for n in names)
    nfs = plane.get(f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{NAMESPACE}/nodefeatures")
    have = {o["metadata"]["name"]: o["spec"]["labels"].get(CHANGED_KEY)
            for o in (nfs or {"items": []})["items"]}
    return sum(have.get(object_name(n)) == want for n in names)


# ----------------------------------------------------------------------------- results


def summarise(config: Config, mode: str, phases: dict[str, Any], fleet: Fleet,
              peaks: list[float], verified: int, setup: float,
              total: float) -> dict[str, Any]:
    n = config.nodes
    idle, burst, steady = phases["idle"], phases["burst"], phases["steady"]

    def per_node(key: str, scale: float = 1024) -> float:
        return round(scale * (steady[key] - idle[key]) / n, 1)

    labelled = max(fleet.labelled) if len(fleet.labelled) == n else None
    return {
        "mode": mode,
        "phases": phases,
        "summary": {
            "burst_requests_per_node": round(burst["requests"] / n, 2),
            "burst_requests_per_s": round(burst["requests"] / burst["seconds"], 1),
            "burst_peak_requests_per_s": round(max(peaks), 1) if peaks else None,
            "burst_p99_ms": burst["p99_ms"],
            "burst_apiserver_cores": burst["apiserver_cores"],
            "all_labelled_s": None if labelled is None else round(labelled, 1),
            "agent_first_publish_p99_s": round(percentile(fleet.waited, 99), 2)
            if fleet.waited else None,
            "steady_requests_per_node_hour": round(
                steady["requests"] / n / (steady["seconds"] / HOUR), 2),
            "steady_p99_ms": steady["p99_ms"],
            "steady_apiserver_millicores_per_node": round(
                1000 * (steady["apiserver_cores"] - idle["apiserver_cores"]) / n, 3),
            "rss_kib_per_node": per_node("apiserver_rss_mib"),
            "heap_kib_per_node": per_node("heap_inuse_mib"),
            "stack_kib_per_node": per_node("stack_inuse_mib"),
            "goroutines_per_node": round((steady["goroutines"] - idle["goroutines"]) / n, 2),
            "watches_per_node": round((steady["watches"] - idle["watches"]) / n, 2),
        },
        "verified_nodes": verified,
        "drift_triggers": len(fleet.drift),
        "errors": dict(fleet.errors),
        "setup_seconds": round(setup, 1),
        "runtime_seconds": round(total, 1),
    }


def command(config: Config) -> str:
    modes = "" if config.modes == tuple(MODES) else f" --modes {','.join(config.modes)}"
    return (f"python -m benchmarks.fleet_real --nodes {config.nodes} --burst "
            f"{config.burst:g} --steady {config.steady:g} --idle {config.idle:g}{modes} "
            f"--write")


def combine(config: Config, runs: dict[str, dict[str, Any]], total: float,
            load: tuple[float, float, float]) -> dict[str, Any]:
    n = config.nodes
    targets = []
    if "node-watch" in runs:
        g = runs["node-watch"]["summary"]
        rate = g["steady_requests_per_node_hour"]
        base = runs.get("baseline", {}).get("summary", {})
        targets.append({
            "id": "api-real",
            "target": f"Against a real kube-apiserver, >= 500 nodes with the Node sink and its "
                      f"watch: API server CPU and RSS per node, requests per node-hour, side by "
                      f"side with a GFD-style writer at 60 s ({n} nodes)",
            "measured": f"gfd {rate:g} req/node-hour, "
                        f"{g['steady_apiserver_millicores_per_node']:g} millicores and "
                        f"{g['rss_kib_per_node']:g} KiB of API server per node, "
                        f"{g['watches_per_node']:g} open watch per node; baseline "
                        f"{base.get('steady_requests_per_node_hour', 'n/a')} req/node-hour, "
                        f"{base.get('steady_apiserver_millicores_per_node', 'n/a')} millicores, "
                        f"{base.get('rss_kib_per_node', 'n/a')} KiB per node",
            "value": rate,
            "limit": 1.0,
            "met": n >= 500 and rate <= 1.0 and g["watches_per_node"] == 1
            and runs["node-watch"]["verified_nodes"] == n,
            "command": command(config),
        })
    return {
        "benchmark": "fleet_real",
        "config": {"nodes": n, "modes": list(config.modes), "burst_s": config.burst,
                   "steady_s": config.steady, "idle_s": config.idle, "seed": config.seed,
                   "workers": config.workers, "interval_s": INTERVAL,
                   "labels_per_node": len(node_labels())},
        "machine": {**machine_info(), "loadavg_at_start": list(load)},
        "modes": runs,
        "runtime_seconds": round(total, 1),
        "targets": targets,
    }


def _fmt(value: Any) -> str:
    return "n/a" if value is None else f"{value:g}"


def table(result: dict[str, Any]) -> str:
    runs = result["modes"]
    n = result["config"]["nodes"]
    kinds = list(runs)

    def row(title: str, cell: Callable[[dict[str, Any]], str]) -> str:
        return f"| {title} | " + " | ".join(cell(runs[k]) for k in kinds) + " |"

    def s(key: str) -> Callable[[dict[str, Any]], str]:
        return lambda r: _fmt(r["summary"][key])

    def calls(name: str) -> Callable[[dict[str, Any]], str]:
        return lambda r: ", ".join(f"{c} x{k}" for c, k in r["phases"][name]["calls"].items()
                                   ) or "none"

    lines = [
        "| | " + " | ".join(TITLES[k] for k in kinds) + " |",
        "|---|" + "---:|" * len(kinds),
        row("**steady: API server RSS per node (KiB)**",
            lambda r: f"**{_fmt(r['summary']['rss_kib_per_node'])}**"),
        row("steady: Go heap in use per node (KiB)", s("heap_kib_per_node")),
        row("steady: goroutine stacks per node (KiB)", s("stack_kib_per_node")),
        row("steady: goroutines per node", s("goroutines_per_node")),
        row("steady: open watches per node", s("watches_per_node")),
        row("steady: API server CPU per node (millicores)",
            s("steady_apiserver_millicores_per_node")),
        row("**steady: requests per node-hour**",
            lambda r: f"**{_fmt(r['summary']['steady_requests_per_node_hour'])}**"),
        row("steady: calls in the window", calls("steady")),
        row("burst: requests per node", s("burst_requests_per_node")),
        row("burst: calls", calls("burst")),
        row("burst: requests per second (mean / peak 5 s)",
            lambda r: f"{_fmt(r['summary']['burst_requests_per_s'])} / "
                      f"{_fmt(r['summary']['burst_peak_requests_per_s'])}"),
        row("**burst: API server p99 request latency (ms)**",
            lambda r: f"**{_fmt(r['summary']['burst_p99_ms'])}**"),
        row("steady: API server p99 request latency (ms)", s("steady_p99_ms")),
        row("burst: API server cores", s("burst_apiserver_cores")),
        row("**burst: seconds until every node is labelled**",
            lambda r: f"**{_fmt(r['summary']['all_labelled_s'])}**"),
        row("burst: an agent's first publish, p99 (s)", s("agent_first_publish_p99_s")),
        row("nodes holding the right labels at the end", lambda r: f"{r['verified_nodes']} / {n}"),
        row("watches that took gfd's own write for drift; client errors",
            lambda r: f"{r['drift_triggers']}; {sum(r['errors'].values())}"),
    ]
    phase_lines = ["| mode | phase | s | requests | API server cores | etcd cores | API server "
                   "RSS MiB | Go heap MiB | goroutines | open watches |",
                   "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for k in kinds:
        for name, ph in runs[k]["phases"].items():
            phase_lines.append(
                f"| {k} | {name} | {ph['seconds']:g} | {ph['requests']} | "
                f"{ph['apiserver_cores']:.3f} | {ph['etcd_cores']:.3f} | "
                f"{ph['apiserver_rss_mib']:.0f} | {ph['heap_inuse_mib']:.0f} | "
                f"{ph['goroutines']} | {ph['watches']} |")
    return "\n".join(lines) + "\n\n" + "\n".join(phase_lines)


def report(result: dict[str, Any]) -> str:
    m, c = result["machine"], result["config"]
    load = ", ".join(f"{x:.1f}" for x in m["loadavg_at_start"])
    return (
        f"Command: `{command_of(result)}` (with `{ENABLE_HINT}`) — {m['date']}, {m['cpu']} "
        f"x{m['nproc']}, Python {m['python']}, **load average at the start {load}** (other "
        f"work on the machine); ran {result['runtime_seconds']:.0f} s. **{c['nodes']} nodes**, "
        f"each mode on a fresh control plane (kube-apiserver v1.36.2 and etcd 3.5.30 with "
        f"fsync on loopback, every client as the ServiceAccount with manifests/' RBAC); "
        f"start-up burst: every agent's first publish at a uniform random time within "
        f"{c['burst_s']:g} s ({c['workers']} client threads); steady window "
        f"{c['steady_s']:g} s, real time.\n\n"
        f"{table(result)}\n\n"
        "Per node figures are the steady window's end over the idle API server holding the "
        "same Nodes and pods, divided by the node count. RSS is VmRSS (Go returns freed "
        "memory to the kernel lazily, so it keeps some of the burst's garbage); Go heap and "
        "stacks are `go_memstats_heap_inuse_bytes` and `go_memstats_stack_inuse_bytes` from "
        "the API server's `/metrics`. Latency is `histogram_quantile(0.99)` of "
        "`apiserver_request_duration_seconds` over the fleet's resources, WATCH excluded. "
        "CPU is utime+stime from /proc, so other load on the machine does not count, but a "
        "busy machine does slow the server's answers and the one client process (all "
        "agents in it), so latency and time-until-labelled are upper bounds there.")


def command_of(result: dict[str, Any]) -> str:
    c = result["config"]
    return command(Config(c["nodes"], tuple(c["modes"]), c["burst_s"], c["steady_s"],
                          c["idle_s"], c["seed"], c["workers"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--modes", default=",".join(MODES),
                        help=f"comma-separated, of: {', '.join(MODES)}")
    parser.add_argument("--burst", type=float, default=60.0,
                        help="seconds within which every agent starts")
    parser.add_argument("--steady", type=float, default=120.0,
                        help="seconds of each steady-state window")
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=32,
                        help="client threads that start the agents in the burst")
    parser.add_argument("--write", action="store_true",
                        help="update BENCHMARKS.md's fleet-real section and targets table")
    args = parser.parse_args(argv)
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        parser.error(f"--modes: unknown {', '.join(unknown) or 'none given'}; "
                     f"use some of {', '.join(MODES)}")
    assets = assets_from_env()
    if assets is None:
        print(f"fleet_real: KUBEBUILDER_ASSETS is unset: {ENABLE_HINT}", file=sys.stderr)
        return 2
    config = Config(args.nodes, modes, args.burst, args.steady, args.idle, args.seed,
                    args.workers)
    logging.getLogger("gfd").setLevel(logging.ERROR)
    # a SIGTERM (timeout, kill) unwinds like an error: every control plane is stopped
    signal.signal(signal.SIGTERM, lambda _sig, _frame: sys.exit(143))
    load = os.getloadavg()
    started = time.monotonic()
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="gfd-fleet-real-") as tmp:
        for mode in modes:
            runs[mode] = run_mode(config, mode, assets, Path(tmp))
    result = combine(config, runs, time.monotonic() - started, load)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(report(result))
    if args.write:
        write_report("fleet-real", report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
