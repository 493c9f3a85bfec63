"""`gfd selector` (label form) with the real kube-scheduler: each pod is the printed pod-spec
fragment pasted into a Pod as is (its container given an image), and it is bound only to a
node where every unit of the resource it requests meets its filters; where no node is safe it
stays Unschedulable.

The fleet, one Node per kind (mixed models, MIG single, MPS, renamed shared resource, MIG
mixed, whole GPUs), carries exactly the labels gfd computes for the machine under that
ConfigMap and the allocatable extended resources the device plugin's rules give it
(tests/helpers/placement.py). The expected nodes of each case are the truth's, computed from
the devices, never from the labels."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from helpers import placement
from helpers.controlplane import ControlPlane, Process

from gfd.cli import cli

JSON = dict[str, Any]
WAIT = 20.0
"""Seconds for the scheduler to bind a pod or mark it unschedulable (well under one; the bound
is for a loaded machine)."""
_serial = itertools.count(1)


@dataclass(frozen=True)
class Kind:
    machine: str
    strategy: str
    sharing: str


FLEET = {
    "sel-mixed-models": Kind("mixed-a100-a10", "none", "none"),
    "sel-mig-single": Kind("dgx-a100-mig-single", "single", "none"),
    "sel-mps": Kind("geforce-laptop", "none", "mps4"),
    "sel-renamed": Kind("t4-time-sliced", "none", "ts4-renamed"),
    "sel-mig-mixed": Kind("dgx-a100-mig-mixed", "mixed", "none"),
    "sel-whole-h100": Kind("hgx-h100", "none", "none"),
}


@dataclass(frozen=True)
class Node:
    name: str
    labels: dict[str, str]
    units: dict[str, list[placement.Unit]]


@pytest.fixture(scope="module")
def fleet(control_plane: ControlPlane, scheduler: Process) -> Iterator[dict[str, Node]]:
    nodes: dict[str, Node] = {}
    try:
        for name, kind in FLEET.items():
            snap = placement.machines()[kind.machine]
            cfg = placement.SHARING[kind.sharing]
            labels = placement.node_labels(snap, kind.strategy, cfg, "extended", "device-plugin")
            units = placement.units(snap, kind.strategy, cfg, "device-plugin")
            control_plane.create_node(
                name, labels={**labels, "kubernetes.io/hostname": name,
                              "kubernetes.io/os": "linux"},
                allocatable={r: str(len(us)) for r, us in units.items()})
            nodes[name] = Node(name, labels, units)
        yield nodes
    finally:
        for name in nodes:
            control_plane.delete(f"/api/v1/nodes/{name}", wait=False)


def selector(*args: str) -> JSON:
    result = CliRunner().invoke(cli, ["selector", *args])
    assert result.exit_code == 0, (args, result.output)
    (doc,) = yaml.safe_load_all(result.stdout)
    return dict(doc)


def good(node: Node, args: tuple[str, ...], spec: JSON) -> bool:
    """The truth: the node has the units the pod requests and every one meets the filters."""
    ((resource, count),) = spec["containers"][0]["resources"]["limits"].items()
    units = node.units.get(resource, [])
    options = _options(args)
    return len(units) >= count and all(_meets(u, options) for u in units)


def _options(args: tuple[str, ...]) -> dict[str, str]:
    out, i = {}, 0
    while i < len(args):
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            out[args[i].removeprefix("--")] = args[i + 1]
            i += 2
        else:
            out[args[i].removeprefix("--")] = "true"
            i += 1
    return out


def _meets(u: placement.Unit, o: dict[str, str]) -> bool:
    if "product" in o:
        value = o["product"].removesuffix("-SHARED")
        if o["product"] != value and u.replicas == 1:
            return False
        want = {w.lower() for w in value.split("-")}
        if not want <= {w.lower() for w in u.model.replace(" ", "-").split("-")}:
            return False
    if "min-memory" in o and u.memory_mib < int(o["min-memory"]):
        return False
    if ("shared" in o or "renamed" in o) and u.replicas == 1:
        return False
    return not ("dedicated" in o and u.replicas > 1)


@dataclass(frozen=True)
class Case:
    args: tuple[str, ...]
    nodes: frozenset[str]
    """Where the truth lets the pod go (empty: nowhere safe)."""

    def __str__(self) -> str:
        return " ".join(self.args)


CASES = [
    # mixed models: the A10's node also has A100s, and either may be handed out
    Case(("--product", "A10"), frozenset()),
    Case(("--product", "A100"), frozenset({"sel-mig-single", "sel-mig-mixed"})),
    # MIG single: every nvidia.com/gpu is a 1g.5gb slice of 4864 MiB
    Case(("--product", "A100-SXM4-40GB", "--min-memory", "4864"),
         frozenset({"sel-mig-single", "sel-mig-mixed"})),
    Case(("--min-memory", "5000"), frozenset({"sel-mixed-models", "sel-mig-mixed",
                                              "sel-whole-h100"})),
    # MPS: a 6 GiB GPU in 4 replicas caps each at 1536 MiB
    Case(("--product", "RTX-3060", "--min-memory", "4000"), frozenset()),
    Case(("--product", "RTX-3060", "--min-memory", "1536"), frozenset({"sel-mps"})),
    # renamed: the shared T4s are nvidia.com/gpu.shared
    Case(("--product", "T4", "--renamed"), frozenset({"sel-renamed"})),
    Case(("--product", "Tesla-T4-SHARED"), frozenset()),
    Case(("--mig-profile", "3g.20gb", "--dedicated"), frozenset({"sel-mig-mixed"})),
]


def submit(control_plane: ControlPlane, spec: JSON, pin: str = "") -> str:
    namespace = f"sel-sched-{next(_serial)}"
    control_plane.create_namespace(namespace)
    spec = {**spec, "terminationGracePeriodSeconds": 0}
    spec["containers"] = [{**c, "image": "registry.invalid/cuda:1"} for c in spec["containers"]]
    if pin:
        spec["nodeSelector"] = {**spec.get("nodeSelector", {}), "kubernetes.io/hostname": pin}
    pod = control_plane.create({"apiVersion": "v1", "kind": "Pod",
                                "metadata": {"name": "workload", "namespace": namespace},
                                "spec": spec})
    return f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}"


def settle(control_plane: ControlPlane, path: str, scheduler: Process) -> JSON:
    """The pod once the scheduler bound it or marked it unschedulable."""
    deadline = time.monotonic() + WAIT
    while True:
        pod = control_plane.get(path)
        assert pod is not None
        tried = [c for c in pod["status"].get("conditions", []) if c["type"] == "PodScheduled"]
        if pod["spec"].get("nodeName") or tried:
            return pod
        if time.monotonic() > deadline:
            pytest.fail(f"the pod was not tried within {WAIT:.0f} s\n{scheduler.tail(10)}")
        time.sleep(0.05)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_the_label_form_places_a_pod_only_where_every_unit_meets_it(
        control_plane: ControlPlane, scheduler: Process, fleet: dict[str, Node],
        case: Case) -> None:
    """Unpinned, the pod binds to a node the truth allows, or stays Unschedulable where none
    is safe; pinned to each node of the fleet by hostname, it binds exactly where the printed
    placement admits the node's labels and the node has the units it requests (the
    scheduler and tests/helpers/placement.py's matcher agree), and never where a unit breaks
    a filter."""
    spec = selector(*case.args)
    ((resource, count),) = spec["containers"][0]["resources"]["limits"].items()
    assert {n for n, node in fleet.items() if good(node, case.args, spec)} >= case.nodes
    paths: list[str] = []
    try:
        pod = settle(control_plane, path := submit(control_plane, spec), scheduler)
        paths.append(path)
        if not case.nodes:
            condition = next(c for c in pod["status"]["conditions"]
                             if c["type"] == "PodScheduled")
            assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
        else:
            assert pod["spec"]["nodeName"] in case.nodes, pod["spec"].get("nodeName")
        for name, node in sorted(fleet.items()):
            admitted = placement.admits(spec, {**node.labels, "kubernetes.io/hostname": name})
            fits = len(node.units.get(resource, [])) >= count
            pinned = settle(control_plane, path := submit(control_plane, spec, pin=name),
                            scheduler)
            paths.append(path)
            bound = pinned["spec"].get("nodeName") == name
            assert bound == (admitted and fits), (name, pinned["status"])
            assert not bound or good(node, case.args, spec), (name, "a unit breaks a filter")
            assert bound == (name in case.nodes), name
    finally:
        for p in paths:
            control_plane.request("DELETE", p, query={"gracePeriodSeconds": "0"},
                                  expect=(200, 404))
