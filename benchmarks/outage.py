"""An API outage across a fleet: what gfd's agents send while the API server refuses all work.

N real ``gfd run --sink node`` agents, one per Node, with the deployed defaults (60 s
interval, the drift watch and Events on; ``--simulate hgx-h100`` for their GPUs), against the
local fake API server (tests/fakes/apiserver/: real HTTP, the real ``kubernetes`` client).
Two phases, each an outage of ``--outage`` seconds that starts as a crashed or restarted API
server does (every open watch dropped) and then answers every request 503 (an overloaded
server refusing work):

1. ``running``: the agents have labelled their Nodes and hold their watches. Their watches
   break and reconnect under the watch's backoff; a sink with nothing new to write sends
   nothing else.
2. ``starting``: N new agents start on N Nodes that have no labels yet, as the outage starts
   (a fresh install or a ``maxUnavailable: 100%`` rollout into an overloaded server): each
   has its first publish to make, and an Event to record when it fails.

Counted per phase, per node and minute of outage: the Node's requests (GET, PATCH, LIST and
WATCH: the label writes, the watch, and the Event sender's one read of the Node's uid, which
the server cannot tell from the sink's), the Event requests (POST or PATCH of an Event), and
what they come to at 5,000 nodes; then, once the outage ends, how long until every Node has
its labels and its watch again, and the Events recorded on the Nodes.

    python -m benchmarks.outage [--nodes 10] [--outage 60] [--write]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))  # the fakes import each other as ``fakes.*``

from fakes.apiserver import FakeApiServer, RequestRecord  # noqa: E402

from benchmarks.agent import (  # noqa: E402
    ENV_PREFIXES,
    finish,
    gfd_command,
    machine_info,
    stop,
    wait_until,
)

RESULTS = ROOT / "benchmarks" / "results" / "outage.json"
FLEET = 5000
"""Kubernetes' supported maximum of nodes: what the per-node figures are scaled to."""
EVENTS_PATH = "/api/v1/namespaces/default/events"
LABEL_KEY = "nvidia.com/gpu.count"
SETTLE_LIMIT = 900.0
"""Seconds the agents may take to label their Nodes (start) or recover (after the outage)
before the run gives up: the retries after an outage follow the agent's backoff, which
starts at one interval (60 s) and doubles, jittered."""


def _since(start: float, check: Callable[[], bool], what: str) -> float:
    """Seconds from ``start`` (``time.monotonic()``) until ``check()`` holds."""
    wait_until(check, SETTLE_LIMIT, None, what)
    return time.monotonic() - start


def _node_of(record: RequestRecord) -> str:
    """The Node a request is about: the path's name, or the field selector of a list or
    watch, or an Event's involved object."""
    parts = record.path.strip("/").split("/")
    if parts[:3] == ["api", "v1", "nodes"]:
        if len(parts) > 3:
            return parts[3]
        return str(record.query.get("fieldSelector", "")).removeprefix("metadata.name=")
    body = record.json() if record.body else None
    if isinstance(body, dict):
        return str(body.get("involvedObject", {}).get("name", ""))
    return ""


def _kind(record: RequestRecord) -> str:
    if record.path.startswith(EVENTS_PATH):
        return "events"
    if record.path.startswith("/api/v1/nodes"):
        return "node"
    return "other"


def _watches(server: FakeApiServer, names: list[str], since: float = 0.0) -> set[str]:
    """The Nodes whose agent opened a watch (answered 200) at or after ``since``."""
    return {_node_of(r) for r in server.requests
            if r.watch and r.status == 200 and r.timestamp >= since} & set(names)


def _labelled(server: FakeApiServer, names: list[str]) -> bool:
    return all(LABEL_KEY in server.labels(name) for name in names)


def _events_by_reason(server: FakeApiServer, names: list[str]) -> dict[str, int]:
    wanted = set(names)
    return dict(sorted(Counter(
        e["reason"] for e in server.events()
        if e.get("involvedObject", {}).get("name") in wanted).items()))


@contextmanager
def agents(server: FakeApiServer, names: list[str], workdir: Path
           ) -> Iterator[list[subprocess.Popen[str]]]:
    """One ``gfd run --sink node`` per Node, stopped at the end (each must exit 0)."""
    kubeconfig = str(server.write_kubeconfig(workdir / "kubeconfig"))
    base = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
    procs: list[subprocess.Popen[str]] = []
    logs = []
    try:
        for name in names:
            log = (workdir / f"{name}.log").open("w")
            logs.append(log)
            procs.append(subprocess.Popen(
                [*gfd_command(), "run", "--sink", "node", "--simulate", "hgx-h100"],
                env=base | {"NODE_NAME": name, "KUBECONFIG": kubeconfig},
                stdout=log, stderr=subprocess.STDOUT, text=True))
        yield procs
    finally:
        for proc in procs:
            stop(proc)
        for log in logs:
            log.close()
    failed = [(n, p.returncode) for n, p in zip(names, procs, strict=True) if p.returncode]
    if failed:
        raise RuntimeError(f"agents exited non-zero: {failed} (logs in {workdir})")


def _count(records: list[RequestRecord], names: list[str], minutes: float) -> dict[str, Any]:
    """Requests of the outage window by kind: totals, per node-minute, at FLEET nodes."""
    wanted = set(names)
    mine = [r for r in records if _node_of(r) in wanted]
    by_kind = Counter(_kind(r) for r in mine)
    calls = Counter(f"{_kind(r)} {r.method}{' watch' if r.watch else ''} {r.status}"
                    for r in mine)
    per_node_minute = {k: round(by_kind.get(k, 0) / len(names) / minutes, 3)
                       for k in ("node", "events")}
    return {
        "requests": {k: by_kind.get(k, 0) for k in ("node", "events")},
        "per_node_minute": per_node_minute,
        "at_fleet_per_minute": {k: round(v * FLEET) for k, v in per_node_minute.items()},
        "max_on_one_node": max(Counter(_node_of(r) for r in mine).values(), default=0),
        "calls": dict(sorted(calls.items())),
    }


@contextmanager
def outage(server: FakeApiServer) -> Iterator[list[RequestRecord]]:
    """Drop every watch and answer every request 503 until the block ends; the list gets
    the requests made meanwhile."""
    records: list[RequestRecord] = []
    server.clear_log()
    server.drop_watches()
    server.inject(503, None)  # every request, watches included
    try:
        yield records
    finally:
        records.extend(server.requests)
        server.clear_faults()


def run_phases(nodes: int, seconds: float) -> dict[str, Any]:
    minutes = seconds / 60
    running_names = [f"gpu-node-{i:03d}" for i in range(nodes)]
    starting_names = [f"gpu-node-new-{i:03d}" for i in range(nodes)]
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="gfd-outage-bench-") as tmp, \
            FakeApiServer() as server, ExitStack() as stack:
        for name in (*running_names, *starting_names):
            server.add_node(name, labels={"kubernetes.io/hostname": name})
        first = Path(tmp) / "running"
        first.mkdir()
        stack.enter_context(agents(server, running_names, first))
        started = time.monotonic()
        settle = _since(started, lambda: _labelled(server, running_names)
                        and _watches(server, running_names) == set(running_names)
                        and _events_by_reason(server, running_names).get("GpuLabelsChanged", 0)
                        >= nodes, "the running agents to label their Nodes, watch them and "
                        "record the first Event")
        events_before = _events_by_reason(server, running_names)
        with outage(server) as records:
            time.sleep(seconds)  # the outage's length is the benchmark's setting, not a wait
        ended, ended_at = time.monotonic(), time.time()
        watched_again = _since(
            ended, lambda: _watches(server, running_names, since=ended_at) == set(running_names),
            "every running agent's watch to be back")
        results["running"] = {
            "settle_s": round(settle, 1),
            **_count(records, running_names, minutes),
            "until_every_watch_is_back_s": round(watched_again, 1),
            "events_recorded": {k: v - events_before.get(k, 0) for k, v in
                                _events_by_reason(server, running_names).items()
                                if v - events_before.get(k, 0)},
        }
        second = Path(tmp) / "starting"
        second.mkdir()
        with outage(server) as records:
            stack.enter_context(agents(server, starting_names, second))
            time.sleep(seconds)  # the outage, with the agents starting into it
        ended = time.monotonic()
        labelled = _since(ended, lambda: _labelled(server, starting_names),
                          "the agents that started in the outage to label their Nodes")
        recovered = _since(
            ended, lambda: _events_by_reason(server, starting_names).get(
                "LabelPublishRecovered", 0) >= nodes,
            "every starting agent to record LabelPublishRecovered")
        results["starting"] = {
            **_count(records, starting_names, minutes),
            "until_every_node_is_labelled_s": round(labelled, 1),
            "until_every_recovered_event_s": round(recovered, 1),
            "events_recorded": _events_by_reason(server, starting_names),
        }
    return results


def targets(r: dict[str, Any], nodes: int, seconds: float) -> list[dict[str, Any]]:
    running, start = r["running"], r["starting"]
    per_agent = max(running["requests"]["events"], start["requests"]["events"]) / nodes
    events = max(running["per_node_minute"]["events"], start["per_node_minute"]["events"])
    return [{
        "id": "outage-events", "target": "Events under the sink's backoff: in an API outage "
        "(every request 503) an agent sends at most one Event request",
        "value": per_agent, "limit": 1.0, "met": per_agent <= 1.0,
        "measured": f"{seconds:.0f} s outage, {nodes} agents: agents starting into it "
                    f"{start['requests']['events']} Event requests ({start['requests']['node']} "
                    f"Node requests); running agents {running['requests']['events']} "
                    f"({running['requests']['node']}); at {FLEET} nodes {events * FLEET:.0f} "
                    "Event requests a minute",
        "command": "python -m benchmarks.outage --write",
    }]


def tables(result: dict[str, Any]) -> str:
    r, c = result["results"], result["config"]
    m = result["machine"]
    lines = [
        f"Command: `python -m benchmarks.outage --write` — {m['date']}, {m['cpu']} x{m['nproc']}, "
        f"Python {m['python']}; ran {result['runtime_seconds']:.0f} s. {c['nodes']} real "
        f"`gfd run --sink node` agents per phase (defaults: 60 s interval, watch and Events "
        f"on), an outage of {c['outage_s']:.0f} s: every watch dropped, every request "
        "answered 503.",
        "",
        "| phase | Node requests | Event requests (POST, PATCH) | per node-minute (Node / Event) | "
        f"at {FLEET} nodes, a minute (Node / Event) | most on one node | after the outage |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for phase, title, after in (
            ("running", "agents running (labelled, watching)",
             lambda p: f"every watch back in {p['until_every_watch_is_back_s']:.1f} s"),
            ("starting", "agents starting into the outage (new Nodes)",
             lambda p: f"every Node labelled in {p['until_every_node_is_labelled_s']:.1f} s")):
        p = r[phase]
        lines.append(
            f"| {title} | {p['requests']['node']} | {p['requests']['events']} | "
            f"{p['per_node_minute']['node']:.2f} / {p['per_node_minute']['events']:.2f} | "
            f"{p['at_fleet_per_minute']['node']} / {p['at_fleet_per_minute']['events']} | "
            f"{p['max_on_one_node']} | {after(p)} |")
    lines += ["", "Requests in the outage, by kind, method and answer:", ""]
    for phase in ("running", "starting"):
        calls = ", ".join(f"{k}: {v}" for k, v in r[phase]["calls"].items()) or "none"
        lines.append(f"- {phase}: {calls}")
    lines += ["", "Events on the Nodes after the outage (by reason): " + "; ".join(
        f"{phase}: " + (", ".join(f"{k} {v}" for k, v in r[phase]["events_recorded"].items())
                        or "none") for phase in ("running", "starting"))]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.outage", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10, help="agents per phase")
    parser.add_argument("--outage", type=float, default=60.0, help="seconds of 503s")
    parser.add_argument("--write", action="store_true",
                        help="update BENCHMARKS.md (section between the outage markers)")
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.outage <= 0:
        parser.error("--nodes must be >= 1 and --outage > 0")
    started = time.monotonic()
    results = run_phases(args.nodes, args.outage)
    result: dict[str, Any] = {
        "machine": machine_info(),
        "config": {"nodes": args.nodes, "outage_s": args.outage},
        "runtime_seconds": round(time.monotonic() - started, 1),
        "results": results,
    }
    result["targets"] = targets(results, args.nodes, args.outage)
    return finish(result, tables(result), results=RESULTS, section="outage", write=args.write)


if __name__ == "__main__":
    sys.exit(main())
