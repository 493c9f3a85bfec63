"""The live fleet equals the one-shot after any changes: a small cluster in many states
(tests/helpers/fleetevents.py) is changed at random, event by event and sometimes by a
whole relist of one collection, and after each change the held fleet's rows, kinds, findings
and document are those ``count()`` gives for the same objects read as ``gfd fleet`` reads
them. Seeded: each seed is one reproducible sequence (its number is in the failure)."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
from helpers import fleetevents
from helpers.fleetevents import NODES, Cluster, node_object, pod_object

import gfd.fleet.live as live_module
from gfd.fleet.checks import check
from gfd.fleet.count import count, node_rows
from gfd.fleet.live import RESOURCES, LiveFleet
from gfd.fleet.report import document

SEEDS = range(24)
STEPS = 45


def live_of(cluster: Cluster) -> LiveFleet:
    live = LiveFleet()
    for resource in RESOURCES:
        live.replace(resource, cluster.list(resource))
    live.build()
    return live


def assert_same(live: LiveFleet, cluster: Cluster, where: str) -> None:
    fleet, counted = live.view()
    want_fleet, want = cluster.one_shot()
    assert counted.rows == want.rows, where
    assert counted.kinds == want.kinds, where
    got_doc = document(fleet, counted, findings=check(fleet, counted))
    want_doc = document(want_fleet, want, findings=check(want_fleet, want))
    assert got_doc == want_doc, where
    # and the held fleet, counted from scratch, counts the same
    again = count(fleet, tolerated=live.tolerated)
    assert (again.rows, again.kinds) == (want.rows, want.kinds), where


@pytest.mark.parametrize("seed", SEEDS)
def test_after_random_changes_the_held_count_is_the_one_shots(seed: int) -> None:
    rng = random.Random(seed)
    cluster = Cluster()
    cluster.seed(rng)
    live = live_of(cluster)
    assert_same(live, cluster, f"seed {seed}, built")
    for step in range(STEPS):
        event = cluster.step(rng)
        if rng.random() < 0.08:
            live.replace(event.resource, cluster.list(event.resource))  # type: ignore[arg-type]
            how = "relist"
        else:
            live.apply(event.resource, event.type, event.object)  # type: ignore[arg-type]
            how = event.type
        if rng.random() < 0.7:  # sometimes several changes between two reads
            assert_same(live, cluster, f"seed {seed}, step {step}: {how} {event.resource} "
                                       f"{event.object['metadata'].get('name')}")
    assert_same(live, cluster, f"seed {seed}, the end")


def test_a_change_the_count_does_not_see_changes_nothing() -> None:
    cluster = Cluster()
    cluster.seed(random.Random(1))
    live = live_of(cluster)
    pod = pod_object("p0", node="dp-a", limits={"nvidia.com/gpu": 1})
    assert live.apply("pods", "ADDED", pod) is True
    pod["status"]["podIP"] = "10.0.0.9"
    assert live.apply("pods", "MODIFIED", pod) is False
    node = node_object(NODES[0])
    node["status"]["conditions"].append({"type": "MemoryPressure", "status": "False"})
    assert live.apply("nodes", "MODIFIED", node) is False


def test_a_pod_that_asks_for_no_gpu_is_kept_as_its_node_and_requests_shared() -> None:
    live = LiveFleet()
    live.replace("nodes", [node_object(NODES[0])])
    live.replace("pods", [pod_object(f"web-{i}", node="dp-a", cpu="100m") for i in range(50)])
    live.build()
    held: list[Any] = list(live._used.values())
    assert len(held) == 50 and all(h is held[0] for h in held)
    assert held[0] == ("dp-a", (("cpu", 100), ("memory", 2**30)))
    assert live.fleet.load["dp-a"].pods == 50 and live.fleet.pods == []
    _, counted = live.view()
    assert {r.free_slots for r in counted.rows} == {110 - 50}


def test_a_relist_changes_only_what_differs() -> None:
    cluster = Cluster()
    cluster.seed(random.Random(2))
    live = live_of(cluster)
    before = live.changes
    assert live.replace("pods", cluster.list("pods")) is False
    assert live.changes == before
    cluster.put("pods", pod_object("p1", node="dp-b", limits={"nvidia.com/gpu": 2}))
    assert live.replace("pods", cluster.list("pods")) is True
    assert live.changes == before + 1
    assert_same(live, cluster, "relisted")


def test_an_event_touches_only_the_nodes_it_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bound pod's event recounts its node alone; a pending pod's none (its demand is
    worked out again when the view is read)."""
    cluster = Cluster()
    cluster.seed(random.Random(3))
    live = live_of(cluster)
    counted: list[str] = []

    def spy(ix: Any, name: str) -> Any:
        counted.append(name)
        return node_rows(ix, name)

    monkeypatch.setattr(live_module, "node_rows", spy)
    live.apply("pods", "ADDED", pod_object("p9", node="dp-b", limits={"nvidia.com/gpu": 1}))
    assert counted == ["dp-b"]
    counted.clear()
    live.apply("pods", "ADDED", pod_object("p10", limits={"nvidia.com/gpu": 1}))
    assert counted == []


def test_seeds_cover_every_collection_and_kind_of_change() -> None:
    """The random sequences do reach what they are meant to: each collection's adds,
    changes and deletes."""
    seen = set()
    for seed in SEEDS:
        rng = random.Random(seed)
        cluster = Cluster()
        cluster.seed(rng)
        for event in cluster.events(rng, STEPS):
            seen.add((event.resource, event.type))
    assert seen == {(r, t) for r in RESOURCES for t in ("ADDED", "MODIFIED", "DELETED")}
    assert fleetevents.SHARE in {n.name for n in NODES}


def test_a_view_is_a_snapshot_later_changes_leave_as_it_is() -> None:
    rng = random.Random(5)
    cluster = Cluster()
    cluster.seed(rng)
    live = live_of(cluster)
    fleet, counted = live.view()
    kept = copy.deepcopy((document(fleet, counted, findings=check(fleet, counted)),
                          fleet.load, counted.index.bound if counted.index else None))
    for event in cluster.events(rng, 40):
        live.apply(event.resource, event.type, event.object)  # type: ignore[arg-type]
        live.view()  # pending worked out again, rows replaced
    assert (document(fleet, counted, findings=check(fleet, counted)), fleet.load,
            counted.index.bound if counted.index else None) == kept
