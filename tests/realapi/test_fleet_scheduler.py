"""`gfd fleet` against the real kube-apiserver and kube-scheduler: what it says is free is
what the scheduler binds.

The fleet (tests/helpers/fleetbuild.py, whose docstring names the truth's sources): device
plugin Nodes of several simulated machines under each MIG strategy and sharing config
(allocatable as NVIDIA's device plugin advertises it, labels as `gfd run` publishes them),
a ready, a tolerably tainted (``nvidia.com/gpu``), a cordoned and a tainted H100 node; DRA
Nodes with the ResourceSlices `gfd devices` prints (DynamicMIG on an H100 pair) and the
driver chart's DeviceClasses; partly filled by pods (init containers and a sidecar among
them) and claims (an admin's access, and a pod asking the DRA class's extended resource)
kube-scheduler placed, and a pod pending for want of 9 GPUs.

Then, from one `gfd fleet -o json` of that fleet:

- every kind's NODES, TOTAL, ALLOCATED, PENDING and UNSCHEDULABLE, and every node's state,
  are the truth's, which is written from the device plugin's and the driver's rules and
  the placements, never from gfd's fleet code;
- every kind's FREE is what kube-scheduler proves: FREE + 1 one-unit pods of that kind at
  once, pinned by hostname to the kind's ready nodes (DRA: each with its own claim for one
  device of the kind's class, its CEL pinning the devices' productName, MIG profile and
  memory), bind FREE times and leave one Unschedulable; freed again before the next kind
  (a DynamicMIG GPU's profiles share its counters);
- for each filter set, `fits.pods` pods made from `fits.selector` (the label form's pod
  fragment, or the DRA template and pod) bind, spread as `fits.nodes` says, and one more
  stays Unschedulable.

Pods tolerate ``nvidia.com/gpu`` and nothing else. `gfd fleet` reads the fleet's Nodes alone
(``-l``), whatever else the session's control plane holds.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import fleetbuild
from helpers.controlplane import ControlPlane, Process
from helpers.fleetbuild import GPU_TOLERATION, NAMESPACE, Batch, Fleet, Kind

from gfd.cli import cli

JSON = dict[str, Any]
KINDS = fleetbuild.truth_kinds()
_serial = itertools.count(1)


@pytest.fixture(scope="module")
def fleet(control_plane: ControlPlane, scheduler: Process) -> Iterator[Fleet]:
    built = fleetbuild.build(control_plane, scheduler)
    try:
        yield built
    finally:
        fleetbuild.teardown(built)


def gfd_fleet(kubeconfig: Path, *filters: str) -> JSON:
    """What `gfd fleet <filters> -o json` prints for the fleet's Nodes."""
    args = ["fleet", *filters, "-o", "json", "--kubeconfig", str(kubeconfig),
            "-l", fleetbuild.SELECTOR]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, (args, result.output, result.exception)
    return dict(json.loads(result.stdout))


@pytest.fixture(scope="module")
def report(fleet: Fleet, admin_kubeconfig: Path) -> JSON:
    """`gfd fleet -o json` of the prefilled fleet, before any probe; no other module's pod
    is on the fleet (the truth would not know it)."""
    foreign = [f"{p['metadata']['namespace']}/{p['metadata']['name']}"
               for p in fleet.list("/api/v1/pods")
               if p["spec"].get("nodeName") in fleet.nodes
               and p["metadata"]["namespace"] not in (NAMESPACE, fleetbuild.ADMIN_NAMESPACE)]
    assert not foreign, f"pods of other tests on the fleet: {foreign}"
    return gfd_fleet(admin_kubeconfig)


def row_of(report: JSON, kind: Kind) -> JSON:
    rows = [r for r in report["kinds"] if fleetbuild.row_key(r) == kind.key()]
    assert len(rows) == 1, f"gfd fleet has {len(rows)} rows of kind {kind}: {report['kinds']}"
    return rows[0]


# --------------------------------------------------------------------------- the counts


def test_gfd_fleet_reads_the_whole_fleet(report: JSON) -> None:
    assert (report["apiVersion"], report["kind"]) == ("gfd/v1", "Fleet")
    assert report["complete"] is True and report["incomplete"] == []
    assert report["tolerated"] == ["nvidia.com/gpu"]


def test_a_dump_of_the_cluster_answers_as_the_live_api_server(
        report: JSON, admin_kubeconfig: Path, tmp_path: Path) -> None:
    """`gfd fleet --from` on what `kubectl get nodes,pods,resourceslices,resourceclaims,
    deviceclasses -A -o json` prints (a support bundle) says what the live reads say, filters
    and --check included; nothing changes the cluster between the two."""
    kubectl = Path(sys.executable).parent / "kubectl"
    dump = subprocess.run(
        [str(kubectl), "--kubeconfig", str(admin_kubeconfig), "get",
         "nodes,pods,resourceslices,resourceclaims,deviceclasses", "-A", "-o", "json"],
        capture_output=True, text=True, timeout=120, check=True).stdout
    (tmp_path / "dump.json").write_text(dump)
    for filters in ((), ("--product", "A100"), ("--mig-profile", "1g.10gb", "--dra",
                                                 "--feature-gates", "DynamicMIG=true")):
        for extra in ((), ("--check",)):
            args = ["fleet", *filters, *extra, "-o", "json"]
            live = CliRunner().invoke(cli, [*args, "--kubeconfig", str(admin_kubeconfig)])
            offline = CliRunner().invoke(cli, [*args, "--from", str(tmp_path / "dump.json")])
            assert live.exit_code == offline.exit_code, (args, live.stderr, offline.stderr)
            answers = [json.loads(r.stdout) for r in (live, offline)]
            for doc in answers:
                doc.pop("source")
            assert answers[0] == answers[1], args


def test_gfd_fleet_names_exactly_the_fleets_kinds(report: JSON) -> None:
    assert sorted(map(fleetbuild.row_key, report["kinds"])) == sorted(k.key() for k in KINDS)


@pytest.mark.parametrize("kind", KINDS, ids=str)
def test_each_kind_is_counted_as_the_fleet_holds_it(
        fleet: Fleet, report: JSON, kind: Kind) -> None:
    """NODES, TOTAL and ALLOCATED over the usable nodes, the same over the cordoned and
    tainted ones, PENDING, and the memory of one unit."""
    row = row_of(report, kind)
    want = fleet.kinds()[kind]
    got = {k: row[k] for k in ("nodes", "total", "allocated", "pending", "unschedulable")}
    assert (got, row["memory"]) == (want, kind.memory)


def test_each_nodes_row_has_its_state_total_and_allocated(fleet: Fleet, report: JSON) -> None:
    """A node a GPU pod cannot use says why; a usable one (``nvidia.com/gpu`` tolerated)
    gives no reason."""
    want = fleet.node_rows()
    by_key = {(r["node"], fleetbuild.row_key(r)): r for r in report["nodes"]}
    assert sorted(by_key) == sorted((n, k.key()) for n, k in want)
    wrong = {}
    for (node, kind), truth in want.items():
        row = by_key[node, kind.key()]
        got = {k: row[k] for k in truth}
        if got != truth or bool(row["reasons"]) != (truth["state"] != "ready"):
            wrong[f"{node} {kind}"] = {"gfd": {**got, "reasons": row["reasons"]},
                                       "truth": truth}
    assert not wrong, json.dumps(wrong, indent=1)


# --------------------------------------------------------------------------- FREE, proven


def ready_nodes(report: JSON, kind: Kind) -> list[str]:
    return sorted(r["node"] for r in report["nodes"]
                  if fleetbuild.row_key(r) == kind.key() and r["state"] == "ready")


def one_unit_pods(fleet: Fleet, kind: Kind, nodes: list[str], count: int) -> Batch:
    """``count`` one-unit pods of the kind, pinned to its nodes: the device plugin's
    resource 1, or a claim for one device of its class that its devices' attributes
    select."""
    label = f"free-{next(_serial)}"
    names = [f"{label}-{i}" for i in range(count)]
    if kind.manager == "device-plugin":
        return Batch(label, [fleetbuild.pod(n, label, nodes=nodes, limits=[{kind.resource: 1}])
                             for n in names])
    devices = fleet.devices_of(kind.key(), nodes)
    assert devices, f"no device of kind {kind} on {nodes}"
    cel = fleetbuild.device_cel(devices)
    return Batch(label, [fleetbuild.pod(n, label, nodes=nodes, claims=[n]) for n in names],
                 [fleetbuild.claim(n, label, kind.resource, count=1, cel=cel) for n in names])


@pytest.mark.parametrize("kind", KINDS, ids=str)
def test_free_is_how_many_one_unit_pods_the_scheduler_binds(
        fleet: Fleet, report: JSON, kind: Kind) -> None:
    row = row_of(report, kind)
    nodes = ready_nodes(report, kind)
    truth = fleet.kinds()[kind]
    assert nodes and row["free"] <= truth["total"], (row, nodes)
    batch = one_unit_pods(fleet, kind, nodes, row["free"] + 1)
    try:
        outcome = fleet.run(batch)
        per_node = {r["node"]: r["free"] for r in report["nodes"]
                    if r["node"] in nodes and fleetbuild.row_key(r) == kind.key()}
        assert (len(outcome.bound), len(outcome.refused)) == (row["free"], 1), (
            f"gfd: FREE {row['free']} ({per_node}); kube-scheduler bound "
            f"{dict(outcome.per_node())}, refused {list(outcome.refused.values())[:2]}")
    finally:
        fleet.release(batch.label)


# --------------------------------------------------------------------------- where a pod fits


FITS = [
    # the label form: nvidia.com/gpu on A100 nodes (MIG single's slices are A100s too), and
    # the DRA node's whole A100s, which the chart's DeviceClass maps nvidia.com/gpu to
    ("--product", "A100"),
    # mixed strategy's mig-1g.5gb, replicated twice on one node, dedicated on the other
    ("--mig-profile", "1g.5gb"),
    ("--mig-profile", "1g.5gb", "--dedicated"),
    # time-slicing and MPS replicas; the renamed node has no nvidia.com/gpu
    ("--shared",),
    ("--renamed",),
    # the heterogeneous node's A10 has less; MIG single's units are 1g.5gb slices
    ("--min-memory", "40000"),
    # two units a pod: per node, its free units halved, rounded down
    ("--count", "2", "--dedicated"),
    # DRA: claims for whole H100s (a DynamicMIG GPU holding a partition is not whole)
    ("--product", "H100", "--dra"),
    ("--product", "H100", "--count", "2", "--dra"),
    ("--min-memory", "40000", "--dra"),
    ("--mig-profile", "1g.5gb", "--dra"),
    # DynamicMIG: what the counters leave beside the prefilled 3g.40gb
    ("--mig-profile", "1g.10gb", "--dra", "--feature-gates", "DynamicMIG=true"),
    ("--mig-profile", "2g.20gb", "--count", "2", "--dra", "--feature-gates",
     "DynamicMIG=true"),
]


def pods_from_stanza(fits: JSON, count: int) -> Batch:
    """``count`` pods made from `fits.selector` as a user pastes it, each tolerating
    ``nvidia.com/gpu`` and kept to the fleet's Nodes: the label form's pod fragment with an
    image, or the DRA form's ResourceClaimTemplate and Pod (one claim per pod made from
    the template)."""
    label = f"fits-{next(_serial)}"
    stanza = fits["selector"]
    template: JSON | None = None
    if isinstance(stanza, list):
        template = next(d for d in stanza if d["kind"] == "ResourceClaimTemplate")
        spec = json.loads(json.dumps(next(d for d in stanza if d["kind"] == "Pod")["spec"]))
        name = f"{template['metadata']['name']}-{label}"
        template = {**template, "metadata": {"name": name, "namespace": NAMESPACE,
                                             "labels": {fleetbuild.BATCH_LABEL: label}}}
        for claim in spec["resourceClaims"]:
            claim["resourceClaimTemplateName"] = name
    else:
        spec = json.loads(json.dumps(stanza))
        spec["containers"] = [{**c, "image": fleetbuild.IMAGE} for c in spec["containers"]]
    spec["tolerations"] = [dict(GPU_TOLERATION)]
    spec["terminationGracePeriodSeconds"] = 0
    spec["nodeSelector"] = {**spec.get("nodeSelector", {}),
                            fleetbuild.FLEET_LABEL: fleetbuild.FLEET}
    pods = [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"{label}-{i}", "namespace": NAMESPACE,
                          "labels": {fleetbuild.BATCH_LABEL: label}},
             "spec": spec} for i in range(count)]
    return Batch(label, pods, template=template)


@pytest.mark.parametrize("filters", FITS, ids=" ".join)
def test_the_pods_gfd_says_fit_bind_and_one_more_does_not(
        fleet: Fleet, report: JSON, admin_kubeconfig: Path, filters: tuple[str, ...]) -> None:
    fits = gfd_fleet(admin_kubeconfig, *filters)["fits"]
    assert fits["pods"] <= sum(k["total"] for k in report["kinds"]), fits
    batch = pods_from_stanza(fits, fits["pods"] + 1)
    try:
        outcome = fleet.run(batch)
        said = {n["node"]: n["pods"] for n in fits["nodes"] if n["pods"]}
        assert (len(outcome.bound), len(outcome.refused)) == (fits["pods"], 1), (
            f"gfd: {fits['pods']} pods fit ({said}); kube-scheduler bound "
            f"{dict(outcome.per_node())}, refused {list(outcome.refused.values())[:2]}")
        assert dict(outcome.per_node()) == said
    finally:
        fleet.release(batch.label)
