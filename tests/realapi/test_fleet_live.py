"""The live view (what `gfd fleet --watch` prints and `--serve` serves) against the real
kube-apiserver, kube-scheduler and kube-controller-manager: at every quiescent point it is
`gfd fleet --check -o json` of the same API server, while kube-scheduler binds pods of every
kind of the scheduler fleet (tests/helpers/fleetbuild.py: the device plugin under none,
single and mixed MIG strategies, time-slicing, MPS, renamed resources; the DRA driver with
DynamicMIG), pods and claims are deleted, a node is cordoned, uncordoned and deleted, a
pool's generation is raised and a DeviceClass added. After the API server restarts with its
history compacted (every watch broken, every resourceVersion too old) it lists again and
converges without being restarted, and meanwhile never shows other numbers than the last
known ones, marked incomplete; with the API server gone it says so and keeps its numbers;
without `watch` on one collection it is one line naming it, incomplete, the rest served.

A quiescent point: a write the count does not see (an annotation) made last to each
collection has reached the view (its watch's resourceVersion), and nothing else changed
meanwhile (the one-shot is read again until two reads agree, for the scheduler's late
status writes)."""

from __future__ import annotations

import gc
import itertools
import json
import logging
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import fleetbuild
from helpers.controlplane import ControlPlane, Process
from helpers.fleetbuild import NAMESPACE, Batch, Fleet, Kind

from gfd.cli import cli
from gfd.fleet import report
from gfd.fleet.livesource import LiveSource
from gfd.fleet.view import View
from gfd.kube.lists import Lister

JSON = dict[str, Any]
WAIT = 180.0
"""Seconds for the view to catch up with the API server (well under one on a quiet machine;
the bound is for a loaded 2-core one, and an API server coming back)."""
_serial = itertools.count(1)
DRA_CLASS = "gfd-live-h100"
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def controller_manager(control_plane: ControlPlane) -> Iterator[Process]:
    proc = control_plane.start_controller_manager()
    try:
        yield proc
    finally:
        proc.stop()
        control_plane.extra.remove(proc)


@pytest.fixture(scope="module")
def fleet(control_plane: ControlPlane, scheduler: Process,
          controller_manager: Process) -> Iterator[Fleet]:
    built = fleetbuild.build(control_plane, scheduler)
    try:
        yield built
    finally:
        control_plane.delete(f"/apis/resource.k8s.io/v1/deviceclasses/{DRA_CLASS}", wait=False)
        fleetbuild.teardown(built)


def live_source(kubeconfig: Path) -> tuple[LiveSource, Lister]:
    lister = Lister(kubeconfig=str(kubeconfig), qps=0)
    live = LiveSource(lister, node_selector=fleetbuild.SELECTOR, backoff_cap=2.0,
                      backoff_start=0.2)
    live.start()
    assert live.wait_settled(WAIT)
    return live, lister


@pytest.fixture(scope="module")
def live(fleet: Fleet, admin_kubeconfig: Path) -> Iterator[LiveSource]:
    found, lister = live_source(admin_kubeconfig)
    try:
        yield found
    finally:
        found.stop()
        lister.close()


def one_shot(kubeconfig: Path) -> JSON:
    """`gfd fleet --check -o json` of the fleet's Nodes."""
    result = CliRunner().invoke(cli, ["fleet", "--check", "-o", "json", "--kubeconfig",
                                      str(kubeconfig), "-l", fleetbuild.SELECTOR])
    assert result.exit_code in (0, 1), (result.output, result.exception)
    return dict(json.loads(result.stdout))


def document(view: View) -> JSON:
    return report.document(view.fleet, view.counted, findings=list(view.findings))


def until(live: LiveSource, what: Callable[[View], bool], timeout: float = WAIT) -> View:
    """The view once ``what`` holds, woken by each new generation (and looking again every
    tenth of a second, for what the API server alone knows)."""
    deadline = time.monotonic() + timeout
    while True:
        with live.read() as view:
            if what(view):
                return view
            generation = view.generation
        assert time.monotonic() < deadline, (view.health, document(view)["incomplete"])
        live.wait(generation, 0.1)


DROPPED = "ignore:unclosed <ssl.SSLSocket:ResourceWarning"
"""A reconnect racing the API server's death: CPython's ``SSLSocket._create`` raises out of
its pre-handshake ``recv`` (the peer reset the connection) without closing the socket it
made, which the garbage collector then closes (and warns of). Expected where the API server
is killed, and only there."""


def collect_dropped_sockets() -> None:
    """Let the garbage collector close such sockets now, where they are expected."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "unclosed <ssl.SSLSocket", ResourceWarning)
        gc.collect()


def mark(cp: ControlPlane, fleet: Fleet) -> dict[str, int]:
    """An annotation on one object of each collection the view reads (the count sees no
    annotation): the resourceVersion of each write."""
    value = {"metadata": {"annotations": {"gfd-test.example/mark": str(next(_serial))}}}
    node = next(iter(fleet.nodes))
    pod = fleet.prefill[0]["metadata"]
    dra = next(n for n in fleet.nodes.values() if n.slices)
    claims = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"
    claim = next(c["metadata"]["name"] for c in fleet.list(claims))
    paths = {
        "nodes": f"/api/v1/nodes/{node}",
        "pods": f"/api/v1/namespaces/{pod['namespace']}/pods/{pod['name']}",
        "resourceslices": "/apis/resource.k8s.io/v1/resourceslices/"
                          f"{dra.slices[0]['metadata']['name']}",
        "resourceclaims": f"{claims}/{claim}",
        "deviceclasses": "/apis/resource.k8s.io/v1/deviceclasses/gpu.nvidia.com",
    }
    return {r: int(cp.patch(p, value)["metadata"]["resourceVersion"]) for r, p in paths.items()}


def quiescent(live: LiveSource, fleet: Fleet, kubeconfig: Path) -> tuple[JSON, JSON]:
    """The live view's document and the one-shot's at a quiescent point."""
    cp = fleet.control_plane
    previous: JSON | None = None
    for _ in range(6):
        wanted = mark(cp, fleet)

        def caught_up(view: View, wanted: dict[str, int] = wanted) -> bool:
            seen = live.resource_versions()
            return view.health.complete and all(int(seen[r] or 0) >= n
                                                for r, n in wanted.items())

        view = until(live, caught_up)
        want = one_shot(kubeconfig)
        if want == previous or document(view) == want:
            return document(view), want
        previous = want
    return document(view), want


def assert_same(live: LiveSource, fleet: Fleet, kubeconfig: Path, where: str) -> None:
    got, want = quiescent(live, fleet, kubeconfig)
    for part in ("kinds", "nodes", "findings", "incomplete", "skipped", "complete"):
        assert got[part] == want[part], f"{where}: {part}"
    assert got == want, where


# --------------------------------------------------------------------------- batches


def ready_nodes(doc: JSON, kind: Kind) -> list[str]:
    return sorted(r["node"] for r in doc["nodes"]
                  if fleetbuild.row_key(r) == kind.key() and r["state"] == "ready")


def mixed_batch(fleet: Fleet, doc: JSON, per_kind: int = 2) -> Batch:
    """One-unit pods of every kind with a ready node, pinned to its ready nodes: the device
    plugin's resource, or a claim for one device of the kind's class its attributes pick."""
    label = f"live-{next(_serial)}"
    batch = Batch(label, [])
    for k, kind in enumerate(fleetbuild.truth_kinds()):
        nodes = ready_nodes(doc, kind)
        if not nodes:
            continue
        for i in range(per_kind):
            name = f"{label}-{k}-{i}"
            if kind.manager == "device-plugin":
                batch.pods.append(fleetbuild.pod(name, label, nodes=nodes,
                                                 limits=[{kind.resource: 1}]))
                continue
            cel = fleetbuild.device_cel(fleet.devices_of(kind.key(), nodes))
            batch.claims.append(fleetbuild.claim(name, label, kind.resource, count=1, cel=cel))
            batch.pods.append(fleetbuild.pod(name, label, nodes=nodes, claims=[name]))
    return batch


# --------------------------------------------------------------------------- the truth


def test_once_listed_the_live_view_is_the_one_shot(
        live: LiveSource, fleet: Fleet, admin_kubeconfig: Path) -> None:
    with live.read() as view:
        assert view.health.ready
    assert_same(live, fleet, admin_kubeconfig, "listed")


def test_while_the_scheduler_binds_and_pods_and_claims_are_deleted_it_is_the_one_shot(
        live: LiveSource, fleet: Fleet, admin_kubeconfig: Path) -> None:
    first = mixed_batch(fleet, one_shot(admin_kubeconfig))
    second = mixed_batch(fleet, one_shot(admin_kubeconfig), per_kind=1)
    try:
        outcome = fleet.run(first)
        assert outcome.bound, outcome
        assert_same(live, fleet, admin_kubeconfig, f"bound {len(outcome.bound)}")
        fleet.run(second)
        assert_same(live, fleet, admin_kubeconfig, "a second batch bound")
        fleet.release(first.label)
        assert_same(live, fleet, admin_kubeconfig, "the first batch deleted")
    finally:
        fleet.release(first.label)
        fleet.release(second.label)
    assert_same(live, fleet, admin_kubeconfig, "every batch deleted")
    with live.read() as view:
        assert all(c.restarts == 0 and c.relists == 0 for c in view.health.collections)


def test_a_node_cordoned_uncordoned_and_deleted_is_counted_as_the_one_shot_counts_it(
        live: LiveSource, fleet: Fleet, admin_kubeconfig: Path) -> None:
    cp = fleet.control_plane
    node = "fl-h100-a"
    cp.patch(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": True}})
    assert_same(live, fleet, admin_kubeconfig, "cordoned")
    cp.patch(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": None}})
    assert_same(live, fleet, admin_kubeconfig, "uncordoned")
    gone = "fl-t4-ts2"
    cp.delete(f"/api/v1/nodes/{gone}")
    fleet.nodes.pop(gone)
    assert_same(live, fleet, admin_kubeconfig, "a node deleted")


def test_a_pools_generation_raised_and_a_device_class_added_are_counted_as_the_one_shot(
        live: LiveSource, fleet: Fleet, admin_kubeconfig: Path) -> None:
    cp = fleet.control_plane
    for rs in fleet.nodes["fl-dra-h100"].slices:
        path = f"/apis/resource.k8s.io/v1/resourceslices/{rs['metadata']['name']}"
        current = cp.get(path)
        assert current is not None
        current["spec"]["pool"]["generation"] += 1
        current["spec"]["devices"] = current["spec"]["devices"][:6]  # republished with 6
        cp.request("PUT", path, current)
    assert_same(live, fleet, admin_kubeconfig, "a pool's generation raised")
    cp.create({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
               "metadata": {"name": DRA_CLASS},
               "spec": {"selectors": [{"cel": {"expression": (
                   "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com']"
                   ".productName == 'NVIDIA H100 80GB HBM3'")}}]}})
    assert_same(live, fleet, admin_kubeconfig, "a DeviceClass added")


# --------------------------------------------------------------------------- restarts, faults


@pytest.mark.filterwarnings(DROPPED)
def test_after_the_api_server_restarts_with_its_history_compacted_it_converges(
        live: LiveSource, fleet: Fleet, admin_kubeconfig: Path) -> None:
    before, _ = quiescent(live, fleet, admin_kubeconfig)
    seen: list[tuple[bool, Any]] = []
    stop = threading.Event()

    def sample() -> None:  # every view served meanwhile
        generation = -1
        while not stop.is_set():
            with live.read() as view:
                if view.generation != generation:
                    generation = view.generation
                    doc = document(view)
                    seen.append((view.health.complete, (doc["kinds"], doc["nodes"])))
            live.wait(generation, 0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    cp = fleet.control_plane
    try:  # a write none of the watches sees: every resourceVersion they hold is too old then
        cp.patch("/api/v1/namespaces/default", {"metadata": {"annotations": {
            "gfd-test.example/mark": str(next(_serial))}}})
        cp.compact()
        cp.restart_apiserver()
        view = until(live, lambda v: v.health.complete and all(
            c.relists >= 1 for c in v.health.collections))
    finally:
        stop.set()
        sampler.join(WAIT)
        collect_dropped_sockets()
    assert any(not complete for complete, _ in seen), "the restart was never seen"
    assert {json.dumps(numbers) for _, numbers in seen} == {
        json.dumps((before["kinds"], before["nodes"]))}, "other numbers were shown meanwhile"
    assert all(c.restarts >= 1 for c in view.health.collections)
    assert_same(live, fleet, admin_kubeconfig, "after the restart")
    batch = mixed_batch(fleet, one_shot(admin_kubeconfig), per_kind=1)
    try:
        fleet.run(batch)
        assert_same(live, fleet, admin_kubeconfig, "bound after the restart")
    finally:
        fleet.release(batch.label)


@pytest.mark.filterwarnings(DROPPED)
def test_with_the_api_server_gone_it_says_incomplete_and_keeps_its_last_numbers(
        live: LiveSource, fleet: Fleet, admin_kubeconfig: Path) -> None:
    before, _ = quiescent(live, fleet, admin_kubeconfig)
    with live.read() as view:
        restarts = {c.name: c.restarts for c in view.health.collections}
    cp = fleet.control_plane
    cp.apiserver.popen.kill()
    cp.apiserver.popen.wait(30)
    try:
        # gone until every watch has tried again three times, within gfd's backoff
        view = until(live, lambda v: all(c.refused and c.restarts >= restarts[c.name] + 3
                                         for c in v.health.collections))
        doc = document(view)
        assert view.health.ready and not view.health.complete and doc["complete"] is False
        assert len(doc["incomplete"]) == 5 and all(
            line.startswith("watch ") for line in doc["incomplete"])
        assert (doc["kinds"], doc["nodes"]) == (before["kinds"], before["nodes"])
    finally:
        bring_back(cp)
    until(live, lambda v: v.health.complete)
    assert_same(live, fleet, admin_kubeconfig, "the API server back")
    collect_dropped_sockets()


def bring_back(cp: ControlPlane) -> None:
    """Start the killed API server again and wait until it is ready."""
    cp.apiserver.restart()
    cp.http.clear()
    deadline = time.monotonic() + WAIT
    while True:
        try:
            if cp.request("GET", "/readyz", expect=None)[0] == 200:
                return
        except Exception:  # not listening yet
            pass
        assert time.monotonic() < deadline, cp.apiserver.tail()
        time.sleep(0.1)


def test_without_watch_on_one_collection_it_is_one_line_incomplete_and_the_rest_served(
        fleet: Fleet, admin_kubeconfig: Path, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    cp = fleet.control_plane
    name = "gfd-fleet-live-test"
    cp.create_namespace("gfd")
    cp.apply({"apiVersion": "v1", "kind": "ServiceAccount",
              "metadata": {"name": name, "namespace": "gfd"}})
    rules = [{"apiGroups": [group], "resources": [resource],
              "verbs": ["list"] if resource == "pods" else ["list", "watch"]}
             for group, resource in (("", "nodes"), ("", "pods"),
                                     ("resource.k8s.io", "resourceslices"),
                                     ("resource.k8s.io", "resourceclaims"),
                                     ("resource.k8s.io", "deviceclasses"))]
    cp.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
              "metadata": {"name": name}, "rules": rules})
    cp.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
              "metadata": {"name": name},
              "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                          "name": name},
              "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "gfd"}]})
    user = f"system:serviceaccount:gfd:{name}"
    until_allowed = [(rule, verb) for rule in rules for verb in rule["verbs"]]
    deadline = time.monotonic() + WAIT
    while not all(cp.allowed(user, rule, verb) for rule, verb in until_allowed):
        assert time.monotonic() < deadline, "RBAC not in effect"
        time.sleep(0.1)
    kubeconfig = cp.service_account_kubeconfig(tmp_path / "sa.kubeconfig", "gfd", name)
    caplog.set_level(logging.WARNING, "gfd.kube.reflector")
    live, lister = live_source(kubeconfig)
    try:
        line = ("watch pods: forbidden (grant `watch` on pods cluster-wide: the ClusterRole in "
                "manifests/fleet)")
        view = until(live, lambda v: document(v)["incomplete"] == [line])
        doc = document(view)
        assert doc["complete"] is False and view.health.ready
        want = one_shot(admin_kubeconfig)
        assert (doc["kinds"], doc["nodes"]) == (want["kinds"], want["nodes"])
        cp.patch("/api/v1/nodes/fl-h100-a", {"spec": {"unschedulable": True}})
        until(live, lambda v: any(r.node == "fl-h100-a" and r.state == "cordoned"
                                  for r in v.counted.rows))
        assert [r.message for r in caplog.records
                if r.name == "gfd.kube.reflector"] == [line]
    finally:
        cp.patch("/api/v1/nodes/fl-h100-a", {"spec": {"unschedulable": None}})
        live.stop()
        lister.close()
        for path in ("clusterrolebindings", "clusterroles"):
            cp.delete(f"/apis/rbac.authorization.k8s.io/v1/{path}/{name}", wait=False)
