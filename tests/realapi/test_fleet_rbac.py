"""`gfd fleet` as the ServiceAccount of manifests/fleet against a real kube-apiserver (v1.36):
the ClusterRole there is exactly what the server requires. With all five rules the answer is
complete; without any one of them the server refuses that LIST, and gfd fleet says so on
one stderr line naming `list` and the resource, marks its answer incomplete and still shows
what the other four LISTs read.

The fleet is two GPU Nodes as gfd and the device plugin leave them (gfd's labels,
``nvidia.com/gpu`` allocatable) and one pod bound to the first, asking for two GPUs. A label
of this module's own selects the two Nodes (``--selector``), so Nodes other tests leave in
the session's control plane do not enter the counts."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers.controlplane import ControlPlane
from helpers.process import ENV_PREFIXES

JSON = dict[str, Any]
RESOURCES = ("nodes", "pods", "resourceslices", "resourceclaims", "deviceclasses")
"""The five LISTs of `gfd fleet`, one rule each in manifests/fleet."""
GPUS_PER_NODE = 8
ASKED = 2
NAMESPACE = "fleet-rbac"
INCOMPLETE = 3
"""`gfd fleet`'s exit status when it printed, but a LIST was refused or failed."""
TIMEOUT = 120.0
"""Seconds for one `gfd fleet` (a second or two; the bound is for a loaded machine)."""


@dataclass(frozen=True)
class SmallFleet:
    nodes: tuple[str, ...]
    selector: str


def gpu_node_labels(name: str, selector_label: str) -> dict[str, str]:
    """What gfd publishes on an 8 x H100 node under the device plugin, and our selector."""
    key, value = selector_label.split("=")
    return {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", key: value,
            "nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": str(GPUS_PER_NODE),
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "nvidia.com/gpu.memory": "81559", "nvidia.com/gpu.replicas": "1",
            "nvidia.com/gpu.sharing-strategy": "none", "nvidia.com/gpu.family": "hopper",
            "nvidia.com/gpu.compute.major": "9", "nvidia.com/gpu.compute.minor": "0",
            "nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "none"}


@pytest.fixture(scope="module")
def small_fleet(control_plane: ControlPlane) -> Iterator[SmallFleet]:
    run = uuid.uuid4().hex[:8]
    selector = f"gfd-test/fleet-rbac={run}"
    nodes = tuple(f"fleet-rbac-{run}-{i}" for i in range(2))
    for name in nodes:
        control_plane.create_node(name, gpu_node_labels(name, selector),
                                  {"nvidia.com/gpu": str(GPUS_PER_NODE)})
    control_plane.create_namespace(NAMESPACE)
    pod = control_plane.create({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"train-{run}", "namespace": NAMESPACE},
        "spec": {"nodeName": nodes[0], "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "train", "image": "registry.example/train:1",
                            "resources": {"limits": {"nvidia.com/gpu": str(ASKED)}}}]}})
    try:
        yield SmallFleet(nodes, selector)
    finally:
        control_plane.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/"
                              f"{pod['metadata']['name']}", query={"gracePeriodSeconds": "0"},
                              expect=(200, 404))
        for name in nodes:
            control_plane.delete(f"/api/v1/nodes/{name}", wait=False)


@dataclass(frozen=True)
class Answer:
    returncode: int
    fleet: JSON
    stderr: str

    def lines_naming_list(self, resource: str) -> list[str]:
        return [line for line in self.stderr.splitlines()
                if re.search(rf"\blist\b.*\b{resource}\b", line)]

    def gpus(self) -> tuple[int, int]:
        """(total, allocated) nvidia.com/gpu units of the device plugin, over every kind."""
        kinds = [k for k in self.fleet.get("kinds") or ()
                 if k["resource"] == "nvidia.com/gpu" and k["manager"] == "device-plugin"]
        return (sum(k["total"] for k in kinds),
                sum(k["allocated"] or 0 for k in kinds))


def gfd_fleet(control_plane: ControlPlane, small_fleet: SmallFleet, tmp_path: Path,
              without: tuple[str, ...] = ()) -> Answer:
    """`gfd fleet -o json` as manifests/fleet's ServiceAccount, its ClusterRole less the rules
    of ``without``, over the small fleet's Nodes."""
    account = control_plane.install_fleet_rbac(without=without)
    kubeconfig = control_plane.service_account_kubeconfig(
        tmp_path / "fleet.kubeconfig", namespace=account["metadata"]["namespace"],
        name=account["metadata"]["name"])
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
    done = subprocess.run(
        [sys.executable, "-m", "gfd", "fleet", "-o", "json", "--kubeconfig", str(kubeconfig),
         "--selector", small_fleet.selector],
        env=env | {"HOME": str(tmp_path)}, capture_output=True, text=True, timeout=TIMEOUT)
    try:
        fleet = json.loads(done.stdout)
    except ValueError:
        pytest.fail(f"gfd fleet printed no JSON (exit {done.returncode}):\n"
                    f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    assert fleet["kind"] == "Fleet", fleet
    return Answer(done.returncode, fleet, done.stderr)


def test_the_fleet_role_of_the_manifests_reads_the_whole_fleet(
        control_plane: ControlPlane, small_fleet: SmallFleet, tmp_path: Path) -> None:
    answer = gfd_fleet(control_plane, small_fleet, tmp_path)
    assert answer.returncode == 0, answer.stderr
    assert answer.fleet["complete"] is True, answer.fleet
    assert answer.fleet["incomplete"] == []
    assert "forbidden" not in answer.stderr.lower(), answer.stderr
    assert answer.gpus() == (2 * GPUS_PER_NODE, ASKED), answer.fleet["kinds"]
    assert sorted(row["node"] for row in answer.fleet["nodes"]) == list(small_fleet.nodes)


@pytest.mark.parametrize("resource", RESOURCES)
def test_without_one_rule_that_list_is_named_once_and_the_rest_still_shown(
        control_plane: ControlPlane, small_fleet: SmallFleet, tmp_path: Path,
        resource: str) -> None:
    answer = gfd_fleet(control_plane, small_fleet, tmp_path, without=(resource,))
    assert answer.returncode == INCOMPLETE, answer.stderr
    assert answer.fleet["complete"] is False, answer.fleet
    (refused,) = answer.fleet["incomplete"]
    assert refused.startswith(f"list {resource}"), refused
    assert len(answer.lines_naming_list(resource)) == 1, answer.stderr
    for other in RESOURCES:
        if other != resource:
            assert answer.lines_naming_list(other) == [], answer.stderr
    total, allocated = answer.gpus()
    if resource == "nodes":  # no Node read: no GPUs to count, the rest is empty
        assert total == 0
    elif resource == "pods":  # the Nodes' GPUs are still there
        assert total == 2 * GPUS_PER_NODE, answer.fleet
    else:  # DRA's objects refused: the device plugin's GPUs are counted in full
        assert (total, allocated) == (2 * GPUS_PER_NODE, ASKED), answer.fleet
