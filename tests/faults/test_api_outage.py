"""The API server away for many cycles, conflict storms, throttling, and retry jitter.

Everything runs the real Agent over the real NodeSink / NodeFeatureSink and the real
kubernetes client (gfd.kube.Kube) against the local FakeApiServer; only the retry sleep is
injected (recorded, never slept).

Promises: a failed write never removes labels (the last published labels stay); 409
conflicts are retried, 429 and 5xx back off with jitter (Retry-After honoured); the
NodeFeature is conflict-safe and owned by the DaemonSet; errors are retried with backoff and
the process does not crash-loop on a transient error; an outage costs a handful of requests
per node in its first minute, then about one retry per backoff cap (5 minutes), whatever
--sleep-interval is.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.apiserver import FakeApiServer
from helpers.agent_parts import make_agent
from helpers.timing import BusyTime, LoopTime
from helpers.timing import Clock as LoopClock

from gfd.backoff import backoff
from gfd.configwatch import ConfigWatch
from gfd.daemon import BACKOFF_CAP, Signals
from gfd.errors import ApiError, PublishError
from gfd.kube import Kube
from gfd.labelers.options import LabelOptions
from gfd.labelers.pipeline import compute_labels
from gfd.readers.simulate import simulate
from gfd.sinks.node import NodeSink
from gfd.sinks.nodefeature import CONFLICT_RETRIES, NodeFeatureSink, object_name
from gfd.sinks.retry import Retry
from gfd.snapshot import Snapshot

NODE = "gpu-node-1"
NS = "gfd"
POD = "gfd-abcde"
OTHERS = {"kubernetes.io/hostname": NODE, "team": "ml"}
OPTIONS = LabelOptions(timestamp=1_700_000_000)
H100 = simulate("hgx-h100").snapshot
MIXED = simulate("mixed-a100-a10").snapshot
OUTAGE_CYCLES = 25


class Sleeps(list[float]):
    """The retry sleep: records each delay instead of sleeping."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Source:
    fail_on_init_error = True

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.reads = 0

    def read(self) -> Snapshot:
        self.reads += 1
        return self.snapshot

    def refresh(self, *, gpus: bool = False) -> None:
        pass

    def watch(self, fire: object) -> None:
        pass

    def close(self) -> None:
        pass


def labels_for(snapshot: Snapshot) -> dict[str, str]:
    return compute_labels(snapshot, OPTIONS).labels


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as srv:
        srv.add_node(NODE, labels={"kubernetes.io/hostname": NODE})
        srv.set_label(NODE, "team", "ml")
        srv.add_pod(NS, POD, owner_daemonset="gfd", node_name=NODE)
        yield srv


@pytest.fixture
def kube(server: FakeApiServer, tmp_path: Path) -> Iterator[Kube]:
    api = Kube(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")), qps=0)
    yield api
    api.close()


def make_sink(kind: str, kube: Kube, sleeps: Sleeps, clock: Clock) -> NodeSink | NodeFeatureSink:
    retry = Retry(sleep=sleeps, rand=random.Random(7).random)
    if kind == "node":
        return NodeSink(kube, NODE, retry=retry)
    return NodeFeatureSink(kube, NODE, namespace=NS, pod_name=POD, retry=retry)


def published_on_server(kind: str, server: FakeApiServer) -> dict[str, str]:
    """What the cluster sees: the Node's labels, or the NodeFeature's spec.labels."""
    if kind == "node":
        return server.labels(NODE)
    obj = server.nodefeature(NS, object_name(NODE))
    return dict(obj["spec"]["labels"]) if obj else {}


def expected_on_server(kind: str, labels: dict[str, str]) -> dict[str, str]:
    return {**OTHERS, **labels} if kind == "node" else dict(labels)


@pytest.mark.parametrize("kind", ["node", "nodefeature"])
def test_api_server_down_for_many_cycles_loses_no_label_and_converges_in_one_cycle(
        kind: str, server: FakeApiServer, kube: Kube) -> None:
    """With the API server unreachable for 25 cycles (while the GPUs changed),
    every cycle fails cleanly (False, no exception), the published labels stay exactly the last
    published ones, other writers' labels stay; the first cycle after it is back converges."""
    sleeps, clock = Sleeps(), Clock()
    source = Source(H100)
    agent = make_agent(source, make_sink(kind, kube, sleeps, clock), OPTIONS)
    assert agent.cycle()
    before = published_on_server(kind, server)
    assert before == expected_on_server(kind, labels_for(H100))

    source.snapshot = MIXED  # something to publish while the server is away
    server.set_down(True)
    for n in range(OUTAGE_CYCLES):
        clock.now += 10
        assert agent.cycle() is False, f"cycle {n} during the outage"
        assert published_on_server(kind, server) == before
    assert agent.failures == OUTAGE_CYCLES
    assert source.reads == OUTAGE_CYCLES + 1, "the agent kept cycling"
    assert sleeps, "connection errors were retried with backoff"
    assert all(0 < s <= Retry().cap for s in sleeps)

    server.set_down(False)
    server.clear_log()
    clock.now += 10
    assert agent.cycle(), "converges in one cycle once the server is back"
    assert published_on_server(kind, server) == expected_on_server(kind, labels_for(MIXED))
    assert agent.failures == 0
    writes = server.count("PATCH") + server.count("PUT") + server.count("POST")
    assert writes == 1, "one write brings it up to date"
    server.clear_log()
    clock.now += 10
    assert agent.cycle()
    assert server.count() == 0, "steady state again: no request"


@pytest.mark.parametrize("kind", ["node", "nodefeature"])
def test_api_server_5xx_storm_loses_no_label(kind: str, server: FakeApiServer,
                                             kube: Kube) -> None:
    """Every request answered 503 for many cycles -- cycles fail, nothing
    published is removed or changed, and the labels converge once the storm ends."""
    sleeps, clock = Sleeps(), Clock()
    source = Source(H100)
    agent = make_agent(source, make_sink(kind, kube, sleeps, clock), OPTIONS)
    assert agent.cycle()
    before = published_on_server(kind, server)
    source.snapshot = MIXED
    server.inject(503, None)
    for _ in range(10):
        clock.now += 10
        assert agent.cycle() is False
    assert published_on_server(kind, server) == before
    server.clear_faults()
    assert agent.cycle()
    assert published_on_server(kind, server) == expected_on_server(kind, labels_for(MIXED))


def test_nodefeature_409_storm_ends_in_convergence(server: FakeApiServer, kube: Kube) -> None:
    """The NodeFeature is conflict-safe (409 retried): a burst of conflicts on PUT that the
    sink's bounded re-read-and-retry absorbs ends with the new labels, in one cycle."""
    sleeps, clock = Sleeps(), Clock()
    source = Source(H100)
    agent = make_agent(source, make_sink("nodefeature", kube, sleeps, clock), OPTIONS)
    assert agent.cycle()
    source.snapshot = MIXED
    server.inject(409, 2, method="PUT")
    assert agent.cycle()
    assert published_on_server("nodefeature", server) == labels_for(MIXED)


def test_nodefeature_endless_409_is_a_clear_error_never_label_loss(server: FakeApiServer,
                                                                  kube: Kube) -> None:
    """A 409 storm that outlasts the bounded retries ends in one clear
    PublishError (no endless loop, a bounded number of requests), the NodeFeature keeps the
    last published labels, the agent keeps cycling, and converges when the storm ends."""
    sleeps, clock = Sleeps(), Clock()
    sink = make_sink("nodefeature", kube, sleeps, clock)
    sink.publish(labels_for(H100))
    before = published_on_server("nodefeature", server)
    server.inject(409, None, method="PUT")
    server.clear_log()
    with pytest.raises(PublishError) as err:
        sink.publish(labels_for(MIXED))
    assert "conflict" in str(err.value) and "\n" not in str(err.value)
    assert server.count() <= 2 * CONFLICT_RETRIES, "bounded retries"
    assert published_on_server("nodefeature", server) == before

    source = Source(MIXED)
    agent = make_agent(source, sink, OPTIONS)
    assert [agent.cycle() for _ in range(5)] == [False] * 5
    assert published_on_server("nodefeature", server) == before
    server.clear_faults()
    assert agent.cycle()
    assert published_on_server("nodefeature", server) == labels_for(MIXED)


@pytest.mark.parametrize(("kind", "method"), [("node", "PATCH"), ("nodefeature", "PUT")])
def test_429_retry_after_is_honoured_exactly(kind: str, method: str, server: FakeApiServer,
                                             kube: Kube) -> None:
    """429 backs off as told: a 429 with Retry-After: 7 makes the retry sleep exactly 7 s
    (not the jittered backoff), then the write goes through in the same cycle."""
    sleeps, clock = Sleeps(), Clock()
    source = Source(H100)
    agent = make_agent(source, make_sink(kind, kube, sleeps, clock), OPTIONS)
    assert agent.cycle()
    sleeps.clear()
    source.snapshot = MIXED
    server.inject(429, 1, method=method, retry_after=7)
    assert agent.cycle()
    assert sleeps == [7.0]
    assert published_on_server(kind, server) == expected_on_server(kind, labels_for(MIXED))


def test_first_retry_delays_of_a_fleet_are_spread_no_thundering_herd() -> None:
    """5xx back off *with jitter*: 200 agents (independent random streams) that see
    the same 5xx at the same moment pick first-retry delays spread over [50 %, 100 %] of the
    step -- not all equal, coefficient of variation well above 0.1."""
    delays = [backoff(1, 30.0, random.Random(seed).random, start=0.5) for seed in range(200)]
    assert all(0.25 <= d <= 0.5 for d in delays)
    assert len(set(delays)) > 190
    cv = statistics.pstdev(delays) / statistics.mean(delays)
    assert cv > 0.1, cv
    assert max(delays) - min(delays) > 0.2, "spread across most of the jitter window"


def test_retry_of_a_fleet_uses_its_jitter_on_5xx() -> None:
    """The same through gfd.sinks.retry.Retry -- 200 agents' first sleep after a 503
    is jittered per agent (Retry-After absent), so their retries do not arrive together."""
    firsts: list[float] = []
    for seed in range(200):
        sleeps = Sleeps()
        retry = Retry(sleep=sleeps, rand=random.Random(seed).random)
        calls: list[int] = []

        def operation(calls: list[int] = calls) -> dict[str, Any]:
            calls.append(1)
            if len(calls) == 1:
                raise ApiError("patch node n: HTTP 503 ServiceUnavailable", status=503)
            return {}

        assert retry.run(operation) == {}
        assert len(sleeps) == 1
        firsts.append(sleeps[0])
    assert len(set(firsts)) > 190
    assert statistics.pstdev(firsts) / statistics.mean(firsts) > 0.1


def test_nodefeature_gets_its_daemonset_owner_even_if_the_api_was_down_at_startup(
        server: FakeApiServer, kube: Kube) -> None:
    """The NodeFeature's owner is the DaemonSet, and transient errors are retried: an
    API server that is unreachable when gfd starts must not leave the NodeFeature ownerless
    (it would then outlive an uninstall)."""
    sleeps, clock = Sleeps(), Clock()
    agent = make_agent(Source(H100), make_sink("nodefeature", kube, sleeps, clock), OPTIONS)
    server.set_down(True)
    assert agent.cycle() is False
    server.set_down(False)
    assert agent.cycle()
    obj = server.nodefeature(NS, object_name(NODE))
    assert obj is not None and obj["spec"]["labels"] == labels_for(H100)
    owners = obj["metadata"].get("ownerReferences") or []
    assert [(o["kind"], o["name"]) for o in owners] == [("DaemonSet", "gfd")]


def outage_requests(kind: str, server: FakeApiServer, tmp_path: Path, *, seed: int,
                    interval: float, minutes: int = 10) -> list[int]:
    """Requests per minute from one node's agent (the real loop, Agent.run) while the API
    server is down for ``minutes`` simulated minutes with a change to publish."""
    clock = LoopClock(0.0)
    made: list[float] = []
    kube = Kube(kubeconfig=str(server.write_kubeconfig(tmp_path / f"kubeconfig-{seed}")),
                qps=0, on_request=lambda verb, code: made.append(clock.now))
    signals = Signals()
    loop = LoopTime(clock, signals, until=minutes * 60.0)
    retry = Retry(sleep=loop.sleep, rand=random.Random(seed).random)
    sink = (NodeSink(kube, NODE, retry=retry) if kind == "node"
            else NodeFeatureSink(kube, NODE, namespace=NS, pod_name=POD, retry=retry))
    source = Source(H100)
    agent = make_agent(source, sink, OPTIONS, interval=interval, clock=clock,
                       rand=random.Random(seed + 100).random)
    assert agent.cycle()
    server.set_down(True)
    source.snapshot = MIXED
    made.clear()
    assert agent.run(signals) == 0
    server.set_down(False)
    return [sum(1 for t in made if m * 60 <= t < (m + 1) * 60) for m in range(minutes)]


@pytest.mark.parametrize("kind", ["node", "nodefeature"])
def test_an_outage_costs_a_handful_of_requests_then_about_one_retry_per_backoff_cap(
        kind: str, server: FakeApiServer, tmp_path: Path) -> None:
    """Regression: the agent's backoff never grew past --sleep-interval and each request was
    tried 4 times, so a down API server got 32 requests per node in the first minute and
    20-28 every minute after (240 in 10 minutes), from every node at once. Now: at most 8 in
    the first minute, then one retry (2 requests) per backoff cap."""
    for seed in range(3):
        per_minute = outage_requests(kind, server, tmp_path, seed=seed, interval=10.0)
        assert per_minute[0] <= 8, per_minute
        assert max(per_minute[1:]) <= 4, per_minute
        cap_minutes = int(BACKOFF_CAP // 60)
        assert sum(per_minute[-cap_minutes:]) <= 2 * 2, per_minute  # <= 2 retries per cap
        assert sum(per_minute) <= 20, per_minute


class BusyOutage(BusyTime):
    """Busy time around an outage: at every step a line is appended to a real log file beside
    the config file (watched by the real ConfigWatch)."""

    def __init__(self, clock: LoopClock, signals: Signals, until: float, busy: Path) -> None:
        super().__init__(clock, signals, until)
        self.busy = busy

    def neighbour(self, now: float) -> None:
        with self.busy.open("a") as log_file:
            log_file.write(f"line {self.ticks}\n")
        time.sleep(0.003)  # the config watch's thread sees the write


class UnchangedConfig:
    def poll(self, current: Any, *, force: bool) -> None:
        return None


def test_a_busy_file_beside_the_config_watch_events_and_sighups_wait_for_the_backoff(
        server: FakeApiServer, tmp_path: Path) -> None:
    """Regression (issue 20): gfd's log beside its config woke a cycle at every line, and each
    cycle skipped the backoff: 135-179 PATCH requests in 30 s of outage while gfd said
    "retrying in 292 s". A 60 s outage costs what the backoff says: cycles at 0, 10 and 30 s
    (one interval, doubling), two requests each."""
    config = tmp_path / "config" / "config.yaml"
    config.parent.mkdir()
    config.write_text("version: v1\n")
    clock = LoopClock(0.0)
    made: list[float] = []
    kube = Kube(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")), qps=0,
                on_request=lambda verb, code: made.append(clock.now))
    signals = Signals()
    loop = BusyOutage(clock, signals, until=60.0, busy=config.parent / "gfd.log")
    sink = NodeSink(kube, NODE, retry=Retry(sleep=loop.sleep, rand=lambda: 1.0))
    source = Source(H100)
    agent = make_agent(source, sink, OPTIONS, interval=10.0, clock=clock, rand=lambda: 1.0,
                       reloader=UnchangedConfig(), config_watched=True)
    assert agent.cycle()
    server.set_down(True)
    source.snapshot = MIXED
    made.clear()
    watch = ConfigWatch(str(config), signals.fire, clock=clock)
    assert watch.start()
    try:
        assert agent.run(signals) == 0
    finally:
        watch.close()
        server.set_down(False)
    # each cycle: a request and its one retry (a 0.5 s sleep in the sink)
    assert len(made) == 3 * 2, made
    assert all(t < 1 or 10 <= t < 12 or 30 <= t < 33 for t in made), made


def test_an_interval_longer_than_the_backoff_cap_is_kept(server: FakeApiServer,
                                                         tmp_path: Path) -> None:
    per_minute = outage_requests("node", server, tmp_path, seed=1, interval=600.0, minutes=30)
    assert per_minute[0] == 2, "one attempt and its retry"
    assert 3 * 2 <= sum(per_minute) <= 6 * 2, per_minute  # one retry every 5-10 minutes
