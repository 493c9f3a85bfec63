"""The live view (`gfd fleet --watch` / `--serve`) at 5,000 nodes against a real
kube-apiserver: how soon a change is in the view, what an event costs, what it holds, how soon
it is first ready, and what it costs the API server beside `gfd fleet -o json` every 30 s.

The fleet is ``benchmarks.fleet_view``'s (5,000 GPU Nodes of the simulated machines, a fifth
under the DRA driver with their ResourceSlices, realistic pods in 50 namespaces, allocated
claims), built on one control plane (etcd without fsync). At each pod count of ``--pods``:

1. ``gfd fleet -o json`` once, as a child process: wall time, peak RSS, the API server's CPU.
2. The live view as a child process (``LIVE_DRIVER``: ``gfd.fleet.livesource.LiveSource``
   over the admin's kubeconfig, findings on, as ``--serve`` runs it): from its start to
   every collection listed and counted (first ready), its RSS then.
3. A quiet window (``--quiet`` s): the API server's CPU with the live view's five watches
   open and nothing changing.
4. A churn window (``--churn`` s): pods bound (``spec.nodeName``, a kubelet's Running status
   after) and deleted at ``--rate`` a second in all, a tenth of them GPU pods; after a fill of
   ``--alive`` pods each lives until ``--alive`` later ones were created. The live view's
   reader reads the view after every change, as a page or a scrape would, and notes when each
   churned GPU pod appeared in it and left it: change-to-view latency, from the API server's
   answer to the write to the view read with it. The live process's CPU per pod event (its
   thread CPU around each event's apply: reduction, recount, kinds), its whole CPU in the
   window, its RSS, its LISTs and restarts.
5. The same churn with no live view: the API server's CPU without it (the difference is the
   live view's watches).

Beside it: ``gfd fleet -o json`` every 30 s (the one-shot's API-server CPU x 120 an hour)
and kube-state-metrics' published sizing rule for the same cluster (200 MiB + 2 MiB per node,
0.1 + 0.001 cores per node: its README, "Resource recommendation").

    export KUBEBUILDER_ASSETS="$(../shared/k8s-assets/unpack.sh)"
    python -m benchmarks.fleet_live [--nodes 5000] [--pods 10000,50000] [--write]
"""

from __future__ import annotations

import argparse
import bisect
import collections
import itertools
import json
import os
import queue
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))  # the helpers import each other as ``helpers.*``

from helpers.controlplane import ENABLE_HINT, ControlPlane, assets_from_env  # noqa: E402

from benchmarks.agent import machine_info, percentile, write_report  # noqa: E402
from benchmarks.fleet_real import cpu_seconds  # noqa: E402
from benchmarks.fleet_view import (  # noqa: E402
    APISERVER_ARGS,
    GFD,
    NAMESPACES,
    SCRIPTS,
    Commands,
    Loader,
    NodePlan,
    create_nodes,
    create_pods,
    measure,
    plan_nodes,
    plan_pods,
    pod_object,
    pod_status,
    server_sample,
)
from benchmarks.fleet_view import PodPlan as ViewPod  # noqa: E402
from gfd.dra import DEVICE_CLASSES  # noqa: E402

JSON = dict[str, Any]
RESULTS = ROOT / "benchmarks" / "results" / "fleet_live.json"
PREFIX = "churn-gpu-"
FIVE = ("nodes", "pods", "resourceslices", "resourceclaims", "deviceclasses")
LATENCY_P99_S = 1.0
CPU_PER_EVENT_MS = 1.0
RSS_LIMIT_MIB = 200.0
RSS_GROWTH = 1.10
ONESHOT_EVERY_S = 30.0
KSM_MIB = (200.0, 2.0)
KSM_CORES = (0.1, 0.001)

LIVE_DRIVER = r"""
import json, os, sys, threading, time
from pathlib import Path

def status():
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = round(int(value.split()[0]) / 1024, 1)
    return out

from gfd.fleet.livesource import LiveSource
from gfd.kube.lists import Lister

kubeconfig, prefix, every = sys.argv[1], sys.argv[2], float(sys.argv[3])
applied = []  # CPU ns of each pod event's apply
lock = threading.Lock()
original = LiveSource.event

added, deleted = {}, {}  # when each churned GPU pod's event was applied (in the view)

def timed(self, resource, kind, obj):
    began = time.thread_time_ns()
    original(self, resource, kind, obj)
    if resource == "pods":
        spent = time.thread_time_ns() - began
        name = obj["metadata"]["name"]
        with lock:
            applied.append(spent)
            if name.startswith(prefix):
                (deleted if kind == "DELETED" else added).setdefault(name, time.monotonic())

LiveSource.event = timed
lister = Lister(kubeconfig=kubeconfig)
live = LiveSource(lister, checks=True)
live.start()
live.wait_settled(3600.0)
with live.read() as view:
    kinds = len(view.counted.kinds)
print(json.dumps({"ready": time.monotonic(), "kinds": kinds, "lists": lister.requests,
                  **status()}), flush=True)
seen, gone, reads, read_s = {}, {}, [0], []
stopping = threading.Event()

def reader():  # a page or a scrape every `every` seconds (0: after every change)
    present, generation = set(), -1
    due = time.monotonic()
    while not stopping.is_set():
        if every:
            due += every
            stopping.wait(max(0.0, due - time.monotonic()))
        else:
            generation = live.wait(generation, 1.0)
        began = time.monotonic()
        with live.read() as view:
            names = {p.name for p in view.fleet.pods if p.name.startswith(prefix)}
        now = time.monotonic()
        reads[0] += 1
        read_s.append((began, now))
        for name in names - present:
            seen.setdefault(name, now)
        for name in present - names:
            gone.setdefault(name, now)
        present = names

threading.Thread(target=reader, daemon=True).start()
for line in sys.stdin:
    if line.strip() == "stats":
        with lock:
            events, applied[:] = list(applied), []
            applied_at = {"added": dict(added), "deleted": dict(deleted)}
            added.clear()
            deleted.clear()
        took, read_s[:] = list(read_s), []
        times = os.times()
        with live.read() as view:
            health = [[c.name, c.restarts, c.relists, c.refused]
                      for c in view.health.collections]
        print(json.dumps({"applied_ns": events, "seen": seen, "gone": gone, "reads": reads[0],
                          "applied_at": applied_at, "read_s": took,
                          "cpu_s": times.user + times.system, "lists": lister.requests,
                          "watches": lister.watches, "health": health, **status()}),
              flush=True)
        seen, gone = {}, {}
    elif line.strip() == "quit":
        break
stopping.set()
live.stop()
"""
"""The live view as ``--serve`` runs it, in a process of its own: prints a line once ready,
then a line of what it measured each time it reads ``stats``."""


# ----------------------------------------------------------------------------- the live view


class Live:
    """The live view's process, and the lines it prints."""

    def __init__(self, kubeconfig: Path, env: dict[str, str], read_every: float) -> None:
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [str(SCRIPTS / "python"), "-c", LIVE_DRIVER, str(kubeconfig), PREFIX,
             str(read_every)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def line(self, timeout: float = 1800.0) -> JSON:
        return dict(json.loads(self.lines.get(timeout=timeout)))

    def stats(self) -> JSON:
        assert self.proc.stdin is not None
        self.proc.stdin.write("stats\n")
        self.proc.stdin.flush()
        return self.line(600.0)

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(30)


# ----------------------------------------------------------------------------- churn


@dataclass
class Churn:
    """Pods bound and deleted at a rate: a fill of ``alive`` pods, then each create followed
    by the delete of the oldest. GPU pods (every tenth) are named ``PREFIX...``; when the API
    server answered each create and delete of one is kept."""

    loader: Loader
    nodes: list[NodePlan]
    rate: float
    alive: int
    workers: int = 16
    created: dict[str, float] = field(default_factory=dict)
    deleted: dict[str, float] = field(default_factory=dict)
    ops: collections.Counter[str] = field(default_factory=collections.Counter)
    late: int = 0
    _serial: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _fifo: collections.deque[tuple[str, str]] = field(default_factory=collections.deque)

    def _plan(self, i: int) -> ViewPod:
        rng = random.Random(i)
        namespace = f"team-{i % NAMESPACES:02d}"
        if i % 10 == 0:
            h100 = [n for n in self.nodes if n.kind == "h100" and not n.cordoned
                    and not n.tainted]
            node = rng.choice(h100).name
            return ViewPod(i, namespace, f"{PREFIX}{i:07d}", node, "h100",
                           (("nvidia.com/gpu", 1),))
        return ViewPod(i, namespace, f"churn-cpu-{i:07d}", rng.choice(self.nodes).name, "cpu")

    def _create(self, plan: ViewPod) -> None:
        base = f"/api/v1/namespaces/{plan.namespace}/pods"
        status, _ = self.loader.call("POST", base, pod_object(plan), ok=(201,))
        if status != 201:
            return
        if plan.name.startswith(PREFIX):
            self.created[plan.name] = time.monotonic()
        self.ops["create"] += 1
        self.loader.call("PATCH", f"{base}/{plan.name}/status", pod_status(plan, plan.index),
                         content_type="application/merge-patch+json")
        self.ops["status"] += 1

    def _delete(self, namespace: str, name: str) -> None:
        status, _ = self.loader.call(
            "DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}?gracePeriodSeconds=0",
            ok=(200, 202))
        if status in (200, 202):
            if name.startswith(PREFIX):
                self.deleted[name] = time.monotonic()
            self.ops["delete"] += 1

    def run(self, seconds: float, *, fill: bool) -> float:
        """Churn for ``seconds`` (a fill first when asked); returns the wall time spent."""
        work: queue.Queue[tuple[str, Any] | None] = queue.Queue(maxsize=self.workers * 4)

        def worker() -> None:
            while (item := work.get()) is not None:
                kind, arg = item
                if kind == "create":
                    self._create(arg)
                else:
                    self._delete(*arg)

        threads = [threading.Thread(target=worker, daemon=True) for _ in range(self.workers)]
        for t in threads:
            t.start()
        started = time.monotonic()
        step = 1.0 / self.rate
        due = started
        todo = ["create"] * self.alive if fill else []
        end = started + seconds + (self.alive / self.rate if fill else 0.0)
        flip = itertools.cycle(("create", "delete"))
        while True:
            now = time.monotonic()
            if now >= end:
                break
            if now < due:
                time.sleep(due - now)
            elif now - due > 1.0:
                self.late += 1
            due += step
            kind = todo.pop() if todo else next(flip)
            if kind == "delete" and self._fifo:
                work.put(("delete", self._fifo.popleft()))
            else:
                plan = self._plan(next(self._serial))
                self._fifo.append((plan.namespace, plan.name))
                work.put(("create", plan))
        for _ in threads:
            work.put(None)
        for t in threads:
            t.join()
        return time.monotonic() - started

    def drain(self) -> None:
        """Delete every churned pod still there."""
        while self._fifo:
            self._delete(*self._fifo.popleft())


def latencies(churn: Churn, seen: dict[str, float], gone: dict[str, float]) -> JSON:
    """Seconds from the API server's answer to each churned GPU pod's create and delete to
    ``seen`` / ``gone`` (when a read of the view had it, or when it was applied)."""
    values = [max(0.0, seen[n] - t) for n, t in churn.created.items() if n in seen]
    values += [max(0.0, gone[n] - t) for n, t in churn.deleted.items() if n in gone]
    missed = sum(n not in seen for n in churn.created) + sum(
        n not in gone for n in churn.deleted)
    return {"samples": len(values), "missed": missed, **spread(values)}


def to_view(churn: Churn, applied: JSON, reads: list[list[float]]) -> JSON:
    """Change-to-view seconds: from the API server's answer to a write to a reader holding
    a view with it, for a reader that reads once it is applied (the write's event applied,
    then the whole of the first read that began after that)."""
    starts = [r[0] for r in reads]
    values = []
    for done, when in ((churn.created, applied["added"]), (churn.deleted, applied["deleted"])):
        for name, acked in done.items():
            if name not in when:
                continue
            at = bisect.bisect_left(starts, when[name])
            if at < len(reads):
                began, ended = reads[at]
                values.append(max(0.0, when[name] - acked) + (ended - began))
    return {"samples": len(values), **spread(values)}


def spread(values: list[float]) -> JSON:
    if not values:
        return {}
    return {"p50": round(statistics.median(values), 3), "p99": round(percentile(values, 99), 3),
            "max": round(max(values), 3)}


def window(plane: ControlPlane, seconds: float, run: Any = None) -> JSON:
    """The API server's (and etcd's) CPU and requests over a window (``run`` fills it)."""
    before = server_sample(plane)
    began = time.monotonic()
    if run is None:
        time.sleep(seconds)
    else:
        run()
    wall = time.monotonic() - began
    after = server_sample(plane)
    requests = after.requests - before.requests
    return {"wall_s": round(wall, 1),
            "apiserver_cpu_s": round(after.apiserver_cpu - before.apiserver_cpu, 2),
            "etcd_cpu_s": round(after.etcd_cpu - before.etcd_cpu, 2),
            "lists": {k: v for k, v in requests.items()
                      if k.startswith("LIST ") and k.split()[1] in FIVE},
            "watches": {k: v for k, v in requests.items()
                        if k.startswith("WATCH ") and k.split()[1] in FIVE}}


# ----------------------------------------------------------------------------- one pod count


def stage(plane: ControlPlane, loader: Loader, commands: Commands, env: dict[str, str],
          nodes: list[NodePlan], count: int, args: argparse.Namespace) -> JSON:
    print(f"measuring at {count:,} pods: gfd fleet -o json", flush=True)
    one_shot = measure(plane, GFD, commands.argv(GFD), env, commands.work / "oneshot.out",
                       900.0)
    print(f"  one-shot: {one_shot.wall_s:.1f} s, {one_shot.rss_mib:.0f} MiB, API server "
          f"{one_shot.apiserver_cpu_s:.2f} CPU-s", flush=True)
    (commands.work / "oneshot.out").unlink(missing_ok=True)
    before = server_sample(plane)
    live = Live(plane.admin_kubeconfig, env, args.read_every)
    try:
        ready = live.line()
        first_ready = ready["ready"] - live.started
        start_lists = server_sample(plane).requests - before.requests
        print(f"  live view ready in {first_ready:.1f} s, {ready['VmRSS']:.0f} MiB "
              f"(peak {ready['VmHWM']:.0f})", flush=True)
        live.stats()  # what the start cost is not the windows'
        cpu_ready = cpu_seconds(live.proc.pid)
        quiet = window(plane, args.quiet)
        quiet_stats = live.stats()
        print(f"  quiet {args.quiet:.0f} s: API server {quiet['apiserver_cpu_s']:.2f} CPU-s, "
              f"live {quiet_stats['cpu_s'] - cpu_ready:.2f} CPU-s", flush=True)
        churn = Churn(loader, nodes, args.rate, args.alive)
        cpu_before = cpu_seconds(live.proc.pid)
        churned = window(plane, args.churn, lambda: churn.run(args.churn, fill=True))
        stats = live.stats()
        cpu_churn = cpu_seconds(live.proc.pid) - cpu_before
        events = len(stats["applied_ns"])
        applied_ms = [ns / 1e6 for ns in stats["applied_ns"]]
        seen = latencies(churn, stats["seen"], stats["gone"])
        delivery = latencies(churn, stats["applied_at"]["added"],
                             stats["applied_at"]["deleted"])
        latency = {**to_view(churn, stats["applied_at"], stats["read_s"]),
                   "missed": delivery["missed"]}
        print(f"  churn: {dict(churn.ops)} in {churned['wall_s']:.0f} s, {events} pod events; "
              f"latency {latency}; apply p50 "
              f"{statistics.median(applied_ms) if applied_ms else 0:.3f} ms; live "
              f"{cpu_churn:.1f} CPU-s; LISTs {churned['lists']}; RSS {stats['VmRSS']} MiB",
              flush=True)
    finally:
        live.stop()
    ops = dict(churn.ops)
    churn.drain()
    quiet_without = window(plane, args.quiet)
    baseline = Churn(loader, nodes, args.rate, args.alive)
    without = window(plane, args.churn, lambda: baseline.run(args.churn, fill=True))
    baseline.drain()
    print(f"  without the live view: API server {quiet_without['apiserver_cpu_s']:.2f} CPU-s "
          f"quiet, {without['apiserver_cpu_s']:.2f} CPU-s in the churn", flush=True)
    return {
        "pods": count,
        "one_shot": one_shot.__dict__,
        "first_ready_s": round(first_ready, 2), "ready": ready,
        "start_requests": {k: v for k, v in start_lists.items() if k.split()[1] in FIVE},
        "quiet": quiet, "quiet_live_cpu_s": round(quiet_stats["cpu_s"] - cpu_ready, 2),
        "churn": churned, "churn_ops": ops, "churn_late": churn.late,
        "pod_events": events,
        "apply_ms": ({"p50": round(statistics.median(applied_ms), 4),
                      "p99": round(percentile(applied_ms, 99), 4),
                      "mean": round(statistics.fmean(applied_ms), 4)} if applied_ms else {}),
        "live_cpu_s": round(cpu_churn, 2),
        "live_cpu_per_event_ms": round(1000 * cpu_churn / max(events, 1), 3),
        "reads": stats["reads"], "latency": latency, "delivery": delivery, "seen": seen,
        "read_s": spread([e - b for b, e in stats["read_s"]]),
        "rss_mib": stats["VmRSS"], "peak_rss_mib": stats["VmHWM"],
        "health": stats["health"], "live_lists_total": stats["lists"],
        "live_watches_total": stats["watches"],
        "without": without, "quiet_without": quiet_without,
    }


# ----------------------------------------------------------------------------- results


def targets(rows: list[JSON], nodes: int, command: str) -> list[JSON]:
    counts = " / ".join(f"{r['pods']:,}" for r in rows)
    first, last = rows[0], rows[-1]

    def each(fmt: Any) -> str:
        return "; ".join(f"{r['pods']:,} pods: {fmt(r)}" for r in rows)

    relists = [sum(h[2] for h in r["health"]) for r in rows]
    return [
        {"id": "fleet-live-latency",
         "target": f"Live view at {nodes:,} nodes, pods bound and deleted at 100 a second: "
                   f"change-to-view p99 <= {LATENCY_P99_S:g} s ({counts} pods)",
         "measured": each(lambda r: f"p50 {r['latency'].get('p50', '-')} s, p99 "
                                    f"{r['latency'].get('p99', '-')} s over "
                                    f"{r['latency']['samples']} changes "
                                    f"({r['latency']['missed']} not seen)"),
         "met": all(r["latency"].get("p99", 99) <= LATENCY_P99_S and not r["latency"]["missed"]
                    for r in rows), "command": command},
        {"id": "fleet-live-cpu",
         "target": f"... CPU per pod event <= {CPU_PER_EVENT_MS:g} ms median",
         "measured": each(lambda r: f"{r['apply_ms'].get('p50', '-')} ms median "
                                    f"({r['apply_ms'].get('p99', '-')} ms p99) applying "
                                    f"{r['pod_events']} events; the whole process, its reads of "
                                    f"the view included: {r['live_cpu_per_event_ms']} ms an "
                                    f"event"),
         "met": all(r["apply_ms"].get("p50", 99) <= CPU_PER_EVENT_MS for r in rows),
         "command": command},
        {"id": "fleet-live-lists",
         "target": "... after start zero LISTs unless a watch expires",
         "measured": each(lambda r: f"{sum(r['churn']['lists'].values())} LISTs in the churn, "
                                    f"{sum(r['quiet']['lists'].values())} quiet; "
                                    f"{sum(h[2] for h in r['health'])} relists, "
                                    f"{sum(h[1] for h in r['health'])} watch restarts"),
         "met": all(not sum(r["churn"]["lists"].values()) and not sum(r["quiet"]["lists"].values())
                    for r in rows) or all(relists), "command": command},
        {"id": "fleet-live-rss",
         "target": f"... RSS <= {RSS_LIMIT_MIB:g} MiB and within "
                   f"{100 * (RSS_GROWTH - 1):.0f} % between {counts} pods",
         "measured": each(lambda r: f"{r['rss_mib']} MiB after the churn (peak "
                                    f"{r['peak_rss_mib']} MiB, at the first LISTs)"),
         "met": all(r["rss_mib"] <= RSS_LIMIT_MIB for r in rows)
         and last["rss_mib"] <= first["rss_mib"] * RSS_GROWTH, "command": command},
        {"id": "fleet-live-ready",
         "target": "... first ready no slower than the one-shot (`gfd fleet -o json`)",
         "measured": each(lambda r: f"{r['first_ready_s']} s vs {r['one_shot']['wall_s']} s"),
         "met": all(r["first_ready_s"] <= r["one_shot"]["wall_s"] for r in rows),
         "command": command},
        {"id": "fleet-live-apiserver",
         "target": "... the API server's CPU an hour: the live view against `gfd fleet -o "
                   "json` every 30 s",
         "measured": each(lambda r: f"live {apiserver_per_hour(r)['churn']:.0f} CPU-s/h at "
                                    f"the churn, {apiserver_per_hour(r)['quiet']:.0f} quiet; "
                                    f"every 30 s {apiserver_per_hour(r)['polling']:.0f} CPU-s/h"),
         "met": all(apiserver_per_hour(r)["churn"] < apiserver_per_hour(r)["polling"]
                    for r in rows), "command": command},
    ]


def apiserver_per_hour(row: JSON) -> dict[str, float]:
    """The API server's CPU seconds an hour: what the live view's watches add, at the churn
    and quiet (the same window with and without them; 0 where the difference is below the
    noise), and the one-shot every 30 s."""

    def added(with_: JSON, without: JSON) -> float:
        extra = with_["apiserver_cpu_s"] / max(with_["wall_s"], 1) - (
            without["apiserver_cpu_s"] / max(without["wall_s"], 1))
        return max(0.0, extra) * 3600

    return {"churn": added(row["churn"], row["without"]),
            "quiet": added(row["quiet"], row["quiet_without"]),
            "polling": row["one_shot"]["apiserver_cpu_s"] * 3600 / ONESHOT_EVERY_S}


def report(result: JSON) -> str:
    m, c, rows = result["machine"], result["config"], result["rows"]
    load = ", ".join(f"{x:.1f}" for x in m["loadavg_at_start"])
    lines = ["| | " + " | ".join(f"{r['pods']:,} pods" for r in rows) + " |",
             "|---|" + "---:|" * len(rows)]

    def row(title: str, cell: Any) -> None:
        lines.append(f"| {title} | " + " | ".join(cell(r) for r in rows) + " |")

    row("**change-to-view latency, p50 / p99 / max (s)**",
        lambda r: f"**{r['latency'].get('p50', '-')} / {r['latency'].get('p99', '-')} / "
                  f"{r['latency'].get('max', '-')}** ({r['latency']['samples']} changes, "
                  f"{r['latency']['missed']} not applied when the window closed)")
    row("... of which: from the API server's answer to the event applied, p50 / p99 / max (s)",
        lambda r: f"{r['delivery'].get('p50', '-')} / {r['delivery'].get('p99', '-')} / "
                  f"{r['delivery'].get('max', '-')}")
    row("a reader's own wait included (the write to the end of the reader's next read that "
        "had it), p50 / p99 / max (s)",
        lambda r: f"{r['seen'].get('p50', '-')} / {r['seen'].get('p99', '-')} / "
                  f"{r['seen'].get('max', '-')}")
    row("... and a read of the view (a snapshot and the findings), p50 / p99 / max (s)",
        lambda r: f"{r['read_s'].get('p50', '-')} / {r['read_s'].get('p99', '-')} / "
                  f"{r['read_s'].get('max', '-')} ({r['reads']:,} reads)")
    row("**CPU to apply one pod event, p50 / p99 (ms)**",
        lambda r: f"**{r['apply_ms'].get('p50', '-')} / {r['apply_ms'].get('p99', '-')}**")
    row("pod events applied in the churn", lambda r: f"{r['pod_events']:,}")
    row("churn: creates, kubelet statuses, deletes (late ticks)",
        lambda r: f"{r['churn_ops'].get('create', 0):,}, {r['churn_ops'].get('status', 0):,}, "
                  f"{r['churn_ops'].get('delete', 0):,} in {r['churn']['wall_s']:.0f} s "
                  f"({r['churn_late']})")
    row("the live process's CPU in the churn (s; an event, its reads of the view included)",
        lambda r: f"{r['live_cpu_s']} ({r['live_cpu_per_event_ms']} ms; {r['reads']:,} reads)")
    row("the live process's CPU while quiet (s)", lambda r: f"{r['quiet_live_cpu_s']}")
    row("**RSS after the churn / peak (MiB)**",
        lambda r: f"**{r['rss_mib']}** / {r['peak_rss_mib']}")
    row("**first ready (s) / `gfd fleet -o json` wall (s)**",
        lambda r: f"**{r['first_ready_s']}** / {r['one_shot']['wall_s']}")
    row("`gfd fleet -o json`: peak RSS (MiB)", lambda r: f"{r['one_shot']['rss_mib']}")
    row("LISTs after start: quiet / churn", lambda r: f"{sum(r['quiet']['lists'].values())} / "
                                                      f"{sum(r['churn']['lists'].values())}")
    row("watch restarts / relists (the five collections)",
        lambda r: f"{sum(h[1] for h in r['health'])} / {sum(h[2] for h in r['health'])}")
    row("requests at start (LIST pages, WATCH)",
        lambda r: ", ".join(f"{k} x{v}" for k, v in sorted(r["start_requests"].items())))
    row("API server CPU-s: one `gfd fleet -o json`",
        lambda r: f"{r['one_shot']['apiserver_cpu_s']}")
    row("API server CPU-s: churn with the live view / without",
        lambda r: f"{r['churn']['apiserver_cpu_s']} / {r['without']['apiserver_cpu_s']}")
    row("API server CPU-s: quiet with the live view / without",
        lambda r: f"{r['quiet']['apiserver_cpu_s']} / {r['quiet_without']['apiserver_cpu_s']} "
                  f"in {r['quiet']['wall_s']:.0f} s")
    row("**API server CPU-s an hour: the live view at the churn / quiet; `gfd fleet -o json` "
        "every 30 s**",
        lambda r: "**{churn:.0f} / {quiet:.0f}; {polling:.0f}**".format(**apiserver_per_hour(r)))
    nodes = c["nodes"]
    ksm = (f"kube-state-metrics' sizing rule at {nodes:,} nodes: "
           f"{KSM_MIB[0] + KSM_MIB[1] * nodes:,.0f} MiB and "
           f"{KSM_CORES[0] + KSM_CORES[1] * nodes:.1f} cores (200 MiB + 2 MiB and 0.1 + "
           f"0.001 cores per node).")
    targets_lines = "\n".join(
        f"- {t['target']}: {t['measured']} — **{'met' if t['met'] else 'missed'}**"
        for t in result["targets"])
    return (
        f"Command: `{result['command']}` (with `{ENABLE_HINT}`) — {m['date']}, {m['cpu']} "
        f"x{m['nproc']}, Python {m['python']}, **load average at the start {load}**; ran "
        f"{result['runtime_seconds']:.0f} s. The fleet of `benchmarks.fleet_view` "
        f"({nodes:,} Nodes, {result['setup']['resourceslices']:,} ResourceSlices, the pods of "
        f"each column); at each count `gfd fleet -o json` once, then the live view "
        f"(`LiveSource`, findings on, as `--serve` runs it) in a process of its own: "
        f"{c['quiet']:.0f} s quiet, then {c['churn']:.0f} s of pods bound and deleted at "
        f"{c['rate']:g} a second (after a fill of {c['alive']}; a tenth GPU pods; each created "
        f"pod given a kubelet's Running status), a reader reading the view "
        + (f"every {c['read_every']:g} s (a page polling it)" if c.get("read_every")
           else "after every change") + "; then the same quiet and churn without it. "
        "Change-to-view: from the API server's answer to a write to a reader holding a view "
        "with it, for a reader that reads as soon as the write's event is applied.\n\n"
        + "\n".join(lines) + "\n\n" + ksm + "\n\n" + targets_lines + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fleet_live",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", default="10000,50000")
    parser.add_argument("--dra-fraction", type=float, default=0.2)
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--rate", type=float, default=100.0,
                        help="pods bound and deleted a second, in all")
    parser.add_argument("--alive", type=int, default=500,
                        help="churned pods alive at once (each lives as long as this many "
                             "creates take)")
    parser.add_argument("--churn", type=float, default=120.0, help="seconds of churn")
    parser.add_argument("--quiet", type=float, default=60.0, help="seconds of quiet")
    parser.add_argument("--read-every", type=float, default=1.0,
                        help="seconds between the live view's reads, as a page polling it (0: "
                             "after every change)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args(argv)
    counts = [int(x) for x in args.pods.split(",") if x.strip()]
    assets = assets_from_env()
    if assets is None:
        print(f"fleet_live: KUBEBUILDER_ASSETS is unset: {ENABLE_HINT}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda _sig, _frame: sys.exit(143))
    load = os.getloadavg()
    started = time.monotonic()
    nodes = plan_nodes(args.nodes, args.dra_fraction)
    pods = plan_pods(nodes, counts[-1], args.seed)
    stages = []
    with tempfile.TemporaryDirectory(prefix="gfd-fleet-live-") as tmp:
        work = Path(tmp)
        with ControlPlane.start(assets, work / "plane", audit=False,
                                apiserver_args=APISERVER_ARGS) as plane:
            loader = Loader(plane, args.workers)
            for name, expression in DEVICE_CLASSES.items():
                loader.create("/apis/resource.k8s.io/v1/deviceclasses", {
                    "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                    "metadata": {"name": name},
                    "spec": {"selectors": [{"cel": {"expression": expression}}]}})
            for n in range(NAMESPACES):
                plane.create_namespace(f"team-{n:02d}")
            create_nodes(loader, nodes)
            home = work / "home"
            home.mkdir()
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith(("KUBECONFIG", "GFD_"))}
            env |= {"HOME": str(home),
                    "PATH": os.pathsep.join([str(SCRIPTS), env.get("PATH", os.defpath)])}
            commands = Commands(plane.admin_kubeconfig, env, work)
            measure(plane, GFD, commands.argv(GFD), env, work / "warm.out", 300.0)
            made = 0
            for count in counts:
                print(f"creating pods {made:,} to {count:,}", flush=True)
                create_pods(loader, pods[made:count])
                made = count
                stages.append(stage(plane, loader, commands, env, nodes, count, args))
            slices = len(list(plane.request("GET", "/apis/resource.k8s.io/v1/resourceslices",
                                            query={"limit": "5000"})[1]["items"]))
    command = (f"python -m benchmarks.fleet_live --nodes {args.nodes} --pods {args.pods} "
               f"--write")
    result = {"benchmark": "fleet_live",
              "config": {"nodes": args.nodes, "pods": counts, "rate": args.rate,
                         "read_every": args.read_every,
                         "alive": args.alive, "churn": args.churn, "quiet": args.quiet,
                         "dra_fraction": args.dra_fraction, "seed": args.seed},
              "machine": {**machine_info(), "loadavg_at_start": list(load)},
              "command": command, "setup": {"resourceslices": slices},
              "rows": stages, "runtime_seconds": round(time.monotonic() - started, 1)}
    result["targets"] = targets(stages, args.nodes, command)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(report(result))
    if args.write:
        write_report("fleet-live", report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
