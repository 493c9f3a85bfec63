"""The live view over the fake API server: once every collection is listed it is what
``gfd fleet -o json`` reads of the same server, and it stays so while objects change (each
quiescent point: every change made is in the view, which the watches' resourceVersions tell);
after every watch is cut and the history compacted it lists again and converges; while the
API server is away it says it is incomplete and keeps the last known numbers; a collection it
may list but not watch is one line and the rest is served; a collection it may not list is
what the one-shot says of it. Tests wait for the view's generation or the watches'
resourceVersions, never for time."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.apiserver import FakeApiServer
from helpers.fleetevents import NODES, Cluster, Event, node_object, pod_object

from gfd.fleet import report, source
from gfd.fleet.livesource import LiveSource
from gfd.fleet.view import View
from gfd.kube.lists import Lister

WAIT = 60.0
"""Seconds before a test gives up on what it waits for (it takes well under one)."""


class Server:
    """The fake API server holding a ``Cluster``'s objects, changed as the cluster is."""

    def __init__(self, fake: FakeApiServer) -> None:
        self.fake = fake
        self.cluster = Cluster()

    def send(self, event: Event) -> None:
        if event.type == "DELETED":
            meta = event.object["metadata"]
            self.fake.delete_object(event.resource, meta.get("namespace", ""), meta["name"])
        else:
            self.fake.put_object(event.resource, event.object)

    def seed(self, rng: random.Random) -> None:
        self.cluster.seed(rng)
        for resource, objects in self.cluster.objects.items():
            for obj in objects.values():
                self.fake.put_object(resource, obj)


@pytest.fixture
def server() -> Iterator[Server]:
    with FakeApiServer() as fake:
        yield Server(fake)


@pytest.fixture
def kubeconfig(server: Server, tmp_path: Path) -> Path:
    return server.fake.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def live(kubeconfig: Path) -> Iterator[LiveSource]:
    lister = Lister(kubeconfig=str(kubeconfig), qps=0)
    found = LiveSource(lister, backoff_start=0.01, backoff_cap=0.2)
    yield found
    found.stop()
    lister.close()


def one_shot(kubeconfig: Path) -> dict[str, Any]:
    """What ``gfd fleet -o json --check`` reads of the server now."""
    lister = Lister(kubeconfig=str(kubeconfig), qps=0)
    try:
        fleet = source.live(lister)
    finally:
        lister.close()
    from gfd.fleet.checks import check
    from gfd.fleet.count import count

    counted = count(fleet)
    return report.document(fleet, counted, findings=check(fleet, counted))


def document(view: View) -> dict[str, Any]:
    return report.document(view.fleet, view.counted, findings=list(view.findings))


def until(live: LiveSource, what: Callable[[View], bool]) -> View:
    """The view once ``what`` holds for it, waking on each new generation (and looking again
    every few milliseconds, for what the server alone knows)."""
    deadline = time.monotonic() + WAIT
    generation = -1
    while True:
        with live.read() as view:
            if what(view):
                return view
            generation = view.generation
        assert time.monotonic() < deadline, document(view)
        live.wait(generation, 0.05)


def quiescent(live: LiveSource, server: Server) -> View:
    """The view once every change made so far is in it: a marker written last to each
    collection (a write the count does not see) has reached its watch."""
    marks = {
        "nodes": {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "zz-marker",
                                                                    "labels": {"n": "0"}}},
        "pods": pod_object("zz-marker", "zz"),
        "resourceclaims": {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                           "metadata": {"name": "zz-marker", "namespace": "zz"}, "spec": {}},
        "resourceslices": {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                           "metadata": {"name": "zz-marker"},
                           "spec": {"driver": "marker.example", "nodeName": "zz-marker",
                                    "pool": {"name": "zz", "generation": 1,
                                             "resourceSliceCount": 1}}},
        "deviceclasses": {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                          "metadata": {"name": "zz-marker"},
                          "spec": {"selectors": [{"cel": {
                              "expression": "device.driver == 'marker.example'"}}]}},
    }
    wanted = {}
    for resource, obj in marks.items():
        obj = {**obj, "metadata": {**obj["metadata"],
                                   "annotations": {"mark": str(time.monotonic_ns())}}}
        server.cluster.put(resource, obj)
        wanted[resource] = int(server.fake.put_object(resource, obj)["metadata"][
            "resourceVersion"])

    def caught_up(view: View) -> bool:
        seen = live.resource_versions()
        return all(int(seen[r] or 0) >= v for r, v in wanted.items())

    return until(live, caught_up)


def test_the_live_view_is_the_one_shot_and_stays_so_as_objects_change(
        server: Server, live: LiveSource, kubeconfig: Path) -> None:
    rng = random.Random(7)
    server.seed(rng)
    live.start()
    assert live.wait_settled(WAIT)
    view = quiescent(live, server)
    assert view.health.ready and view.health.complete
    assert document(view) == one_shot(kubeconfig)
    for burst in range(6):
        for event in server.cluster.events(rng, rng.randrange(1, 12)):
            server.send(event)
        view = quiescent(live, server)
        assert document(view) == one_shot(kubeconfig), f"burst {burst}"
    assert all(c.restarts == 0 and c.relists == 0 for c in view.health.collections)


def test_after_every_watch_is_cut_and_the_history_compacted_it_lists_again_and_converges(
        server: Server, live: LiveSource, kubeconfig: Path) -> None:
    rng = random.Random(8)
    server.seed(rng)
    live.start()
    quiescent(live, server)
    server.fake.set_down(True)
    server.fake.drop_watches()
    for event in server.cluster.events(rng, 10):
        server.send(event)
    server.fake.compact()
    with live.read() as view:
        served = document(view)
    view = until(live, lambda v: not v.health.complete)
    assert "incomplete" in document(view) and not document(view)["complete"]
    assert document(view)["kinds"] == served["kinds"]  # the last known state, never a guess
    server.fake.set_down(False)
    view = until(live, lambda v: v.health.complete and all(
        c.relists == 1 for c in v.health.collections))
    view = quiescent(live, server)
    assert document(view) == one_shot(kubeconfig)
    assert all(c.restarts >= 1 for c in view.health.collections)


def test_while_the_api_server_is_away_the_view_is_incomplete_and_keeps_its_numbers(
        server: Server, live: LiveSource, kubeconfig: Path) -> None:
    server.seed(random.Random(9))
    live.start()
    before = document(quiescent(live, server))
    server.fake.set_down(True)
    server.fake.drop_watches()
    view = until(live, lambda v: all(c.refused for c in v.health.collections))
    doc = document(view)
    assert view.health.ready and not view.health.complete and not doc["complete"]
    assert (doc["kinds"], doc["nodes"]) == (before["kinds"], before["nodes"])
    assert all(line.startswith("watch ") for line in doc["incomplete"])
    server.fake.set_down(False)
    view = until(live, lambda v: v.health.complete)
    assert document(quiescent(live, server)) == one_shot(kubeconfig)


def test_a_collection_that_may_be_listed_but_not_watched_is_one_line_and_the_rest_is_served(
        server: Server, live: LiveSource) -> None:
    server.seed(random.Random(10))
    server.fake.forbid("watch", "resourceclaims")
    live.start()
    view = until(live, lambda v: any(c.refused for c in v.health.collections))
    doc = document(view)
    assert doc["incomplete"] == ["watch resourceclaims: forbidden (grant `watch` on "
                                 "resourceclaims cluster-wide: the ClusterRole in manifests/fleet)"]
    assert doc["complete"] is False and view.health.ready
    cordoned = node_object(NODES[0], "cordoned")
    server.fake.put_object("nodes", cordoned)
    view = until(live, lambda v: any(r.node == NODES[0].name and r.state == "cordoned"
                                     for r in v.counted.rows))
    assert document(view)["incomplete"] == doc["incomplete"]


def test_a_collection_that_may_not_be_listed_is_what_the_one_shot_says_of_it(
        server: Server, live: LiveSource, kubeconfig: Path) -> None:
    server.seed(random.Random(11))
    server.fake.forbid("list", "deviceclasses")
    live.start()
    assert live.wait_settled(WAIT)
    with live.read() as view:
        assert not view.health.ready
        assert document(view) == one_shot(kubeconfig)
    server.fake.allow_all()
    view = until(live, lambda v: v.health.ready)
    assert document(quiescent(live, server)) == one_shot(kubeconfig)


def test_before_the_first_listing_the_view_is_empty_and_says_so(live: LiveSource) -> None:
    with live.read() as view:
        doc = document(view)
    assert doc["kinds"] == [] and doc["complete"] is False
    assert doc["incomplete"] == [f"list {r}: not read yet" for r in
                                 ("nodes", "pods", "resourceslices", "resourceclaims",
                                  "deviceclasses")]
    assert not view.health.ready


def test_a_waiter_wakes_on_a_change(server: Server, live: LiveSource) -> None:
    server.seed(random.Random(12))
    live.start()
    view = quiescent(live, server)
    server.fake.put_object("pods", pod_object("p1", node=NODES[0].name,
                                              limits={"nvidia.com/gpu": 1}))
    assert live.wait(view.generation, WAIT) > view.generation
    live.stop()
    assert live.wait(live.generation, WAIT) == live.generation  # stop wakes every waiter
