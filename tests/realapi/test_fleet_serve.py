"""`gfd fleet --serve` over one read of a real kube-apiserver (v1.36), as the ServiceAccount
of manifests/fleet/serve: /fleet?nodes=true is `gfd fleet --check -o json` of the same
server, /readyz is ready, /metrics counts the same units. Without `list` on pods, the pods
are named refused: /readyz is 503 naming them, /fleet and /metrics say incomplete, the rest
is served.

Two GPU Nodes as gfd and the device plugin leave them, a pod bound to the first asking 2
GPUs and one pending asking 4, under a label of this module's own (``--selector``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.controlplane import ControlPlane
from helpers.fleetserve import Served
from helpers.fleetviews import H100, node
from helpers.process import ENV_PREFIXES

NAMESPACE = "fleet-serve"
TIMEOUT = 120.0


@pytest.fixture(scope="module")
def selector(control_plane: ControlPlane) -> Iterator[str]:
    run = uuid.uuid4().hex[:8]
    label = f"gfd-test/fleet-serve={run}"
    key, value = label.split("=")
    names = [f"fleet-serve-{run}-{i}" for i in range(2)]
    for name in names:
        obj = node(name, H100, 8)
        control_plane.create_node(name, {**obj["metadata"]["labels"], key: value,
                                         "kubernetes.io/hostname": name},
                                  {"nvidia.com/gpu": "8"})
    control_plane.create_namespace(NAMESPACE)
    pods = []
    for name, bound, gpus in ((f"train-{run}", names[0], 2), (f"waits-{run}", "", 4)):
        spec: dict[str, Any] = {
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                             "effect": "NoSchedule"}],
            "nodeSelector": {key: value},
            "containers": [{"name": "main", "image": "registry.example/train:1",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
        if bound:
            spec["nodeName"] = bound
        else:  # pending for good: the session's kube-scheduler, if running, never takes it
            spec["schedulerName"] = "no-such-scheduler"
        pods.append(control_plane.create({"apiVersion": "v1", "kind": "Pod",
                                          "metadata": {"name": name, "namespace": NAMESPACE},
                                          "spec": spec}))
    try:
        yield label
    finally:
        for p in pods:
            control_plane.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/"
                                  f"{p['metadata']['name']}",
                                  query={"gracePeriodSeconds": "0"}, expect=(200, 404))
        for name in names:
            control_plane.delete(f"/api/v1/nodes/{name}", wait=False)


def kubeconfig(control_plane: ControlPlane, tmp_path: Path, without: tuple[str, ...] = ()
               ) -> Path:
    account = control_plane.install_fleet_rbac(without=without, where="fleet/serve")
    return control_plane.service_account_kubeconfig(
        tmp_path / "serve.kubeconfig", namespace=account["metadata"]["namespace"],
        name=account["metadata"]["name"])


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        with err:
            return err.code, err.read()


def test_served_is_what_gfd_fleet_check_prints_of_the_same_server(
        control_plane: ControlPlane, selector: str, tmp_path: Path) -> None:
    config = kubeconfig(control_plane, tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
    printed = subprocess.run(
        [sys.executable, "-m", "gfd", "fleet", "--check", "-o", "json", "--kubeconfig",
         str(config), "--selector", selector], env=env | {"HOME": str(tmp_path)},
        capture_output=True, text=True, timeout=TIMEOUT)
    assert printed.returncode in (0, 1), printed.stderr  # 1: a finding (no gfd pod here)
    with Served(None, "--selector", selector, api=config, home=tmp_path) as served:
        served.settled(lambda doc: doc["view"]["ready"])  # every first LIST in
        status, body = get(served.url + "fleet?nodes=true")
        ready = get(served.url + "readyz")
        metrics = get(served.url + "metrics")[1].decode()
        assert served.stop() == 0, served.stderr
    assert status == 200 and ready == (200, b"ok\n")
    doc = json.loads(body)
    assert {k: v for k, v in doc.items() if k not in ("view", "notes")} == json.loads(
        printed.stdout)
    (h100,) = [k for k in doc["kinds"] if k["model"] == H100[0]]
    assert (h100["total"], h100["allocated"], h100["pending"]) == (16, 2, 4)
    assert re.search(r'gfd_fleet_units\{[^}]*model="NVIDIA-H100-80GB-HBM3"[^}]*'
                     r'state="allocated"\} 2.0', metrics)
    assert "gfd_fleet_complete 1.0" in metrics


def test_without_list_on_pods_the_pods_are_named_refused_and_the_rest_served(
        control_plane: ControlPlane, selector: str, tmp_path: Path) -> None:
    config = kubeconfig(control_plane, tmp_path, without=("pods",))
    with Served(None, "--selector", selector, api=config, home=tmp_path) as served:
        served.settled(lambda doc: any(c["refused"] for c in doc["view"]["collections"])
                       and all(c["synced"] or c["refused"] for c in doc["view"]["collections"]))
        ready = get(served.url + "readyz")
        doc = json.loads(get(served.url + "fleet")[1])
        metrics = get(served.url + "metrics")[1].decode()
        assert served.stop() == 0, served.stderr
    assert ready[0] == 503 and ready[1].startswith(b"refused: pods: list pods: forbidden")
    assert doc["complete"] is False and doc["incomplete"][0].startswith("list pods")
    (pods,) = [c for c in doc["view"]["collections"] if c["name"] == "pods"]
    assert pods["refused"].startswith("list pods: forbidden")
    (h100,) = [k for k in doc["kinds"] if k["model"] == H100[0]]
    assert h100["total"] == 16  # the Nodes are still read
    assert "gfd_fleet_complete 0.0" in metrics
    assert 'gfd_fleet_collection_refused{collection="pods"} 1.0' in metrics
