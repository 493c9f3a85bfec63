"""The real control plane the tier runs on works as the tests assume: the API server is
ready with NFD's CRDs served, the ServiceAccount of manifests/ has exactly one mode's RBAC
(checked through the real kubernetes client), created Nodes are Ready and untainted, the
scheduler binds pods to them, and the tier skips or fails the way tests/README.md says."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import kubernetes
import pytest
from helpers.controlplane import ENABLE_HINT, ControlPlane, ControlPlaneError, Process
from helpers.paths import ROOT
from kubernetes.client.exceptions import ApiException

NFD = ("nfd.k8s-sigs.io", "v1alpha1")


def client(kubeconfig: Path) -> kubernetes.client.ApiClient:
    return kubernetes.config.new_client_from_config(config_file=str(kubeconfig))


@pytest.fixture
def sa_api(sa_kubeconfig: Callable[[str | None], Path]
           ) -> Iterator[Callable[[str | None], kubernetes.client.ApiClient]]:
    made: list[kubernetes.client.ApiClient] = []

    def make(mode: str | None) -> kubernetes.client.ApiClient:
        made.append(client(sa_kubeconfig(mode)))
        return made[-1]

    yield make
    for api in made:
        api.close()


def status_of(call: Callable[[], object]) -> int:
    try:
        call()
    except ApiException as exc:
        return int(exc.status)
    return 200


def nodefeature(name: str, namespace: str = "gfd") -> dict[str, object]:
    return {"apiVersion": "/".join(NFD), "kind": "NodeFeature",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"labels": {"nvidia.com/gpu.count": "1"}}}


def test_the_api_server_is_ready_and_serves_the_nfd_crds(control_plane: ControlPlane) -> None:
    assert control_plane.request("GET", "/readyz")[0] == 200
    version = control_plane.request("GET", "/version")[1]
    assert version["gitVersion"].startswith("v1.36."), version
    control_plane.create_namespace("smoke")
    created = control_plane.create(nodefeature("smoke-nf", "smoke"))
    assert created["spec"]["labels"] == {"nvidia.com/gpu.count": "1"}
    listed = control_plane.get("/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/smoke/nodefeatures")
    assert listed is not None
    assert [i["metadata"]["name"] for i in listed["items"]] == ["smoke-nf"]
    control_plane.delete(created)


def test_the_node_mode_account_may_read_and_patch_nodes_and_nothing_of_nodefeature(
        control_plane: ControlPlane, node_name: str,
        sa_api: Callable[[str | None], kubernetes.client.ApiClient]) -> None:
    api = sa_api("node")
    core = kubernetes.client.CoreV1Api(api)
    custom = kubernetes.client.CustomObjectsApi(api)
    assert core.read_node(node_name).metadata.name == node_name
    core.patch_node(node_name, {"metadata": {"labels": {"nvidia.com/smoke": "yes"}}})
    assert control_plane.get(f"/api/v1/nodes/{node_name}")["metadata"]["labels"][
        "nvidia.com/smoke"] == "yes"
    assert status_of(lambda: core.delete_node(node_name)) == 403
    assert status_of(lambda: custom.create_namespaced_custom_object(
        *NFD, "gfd", "nodefeatures", nodefeature("denied"))) == 403


def test_the_nodefeature_mode_account_may_write_nodefeatures_in_gfd_only(
        control_plane: ControlPlane, node_name: str,
        sa_api: Callable[[str | None], kubernetes.client.ApiClient]) -> None:
    api = sa_api("nodefeature")
    core = kubernetes.client.CoreV1Api(api)
    custom = kubernetes.client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(*NFD, "gfd", "nodefeatures", nodefeature("mine"))
    custom.delete_namespaced_custom_object(*NFD, "gfd", "nodefeatures", "mine")
    control_plane.create_namespace("elsewhere")
    assert status_of(lambda: custom.create_namespaced_custom_object(
        *NFD, "elsewhere", "nodefeatures", nodefeature("mine", "elsewhere"))) == 403
    assert status_of(lambda: core.read_node(node_name)) == 403


def test_without_rbac_the_account_may_do_nothing(
        node_name: str, sa_api: Callable[[str | None], kubernetes.client.ApiClient]) -> None:
    core = kubernetes.client.CoreV1Api(sa_api(None))
    assert status_of(lambda: core.read_node(node_name)) == 403


def test_a_created_node_is_ready_untainted_and_allocatable(
        control_plane: ControlPlane, node_name: str) -> None:
    node = control_plane.get(f"/api/v1/nodes/{node_name}")
    assert node is not None
    assert not node["spec"].get("taints")
    ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
    assert [c["status"] for c in ready] == ["True"]
    assert node["status"]["allocatable"]["pods"] == "110"


def test_the_scheduler_binds_a_pod_to_a_ready_node(
        control_plane: ControlPlane, scheduler: Process, node_name: str) -> None:
    control_plane.create_namespace("sched")
    pod = control_plane.create({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "pinned", "namespace": "sched"},
        "spec": {"nodeSelector": {"kubernetes.io/hostname": node_name},
                 "containers": [{"name": "c", "image": "registry.invalid/none:1"}]}})
    deadline = time.monotonic() + 30
    bound = ""
    while time.monotonic() < deadline and not bound:
        bound = control_plane.get(f"/api/v1/namespaces/sched/pods/{pod['metadata']['name']}"
                                  )["spec"].get("nodeName", "")
        time.sleep(0.1)
    assert bound == node_name, scheduler.tail()
    control_plane.request("DELETE", "/api/v1/namespaces/sched/pods/pinned",
                          query={"gracePeriodSeconds": "0"})


def test_assets_without_the_binaries_fail_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ControlPlaneError, match="lacks etcd, kube-apiserver: point it at"):
        ControlPlane.start(tmp_path, tmp_path / "work")


def test_without_assets_the_tier_skips_with_one_line() -> None:
    env = {k: v for k, v in os.environ.items() if k != "KUBEBUILDER_ASSETS"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
         "-k", "not without_assets", str(Path(__file__).parent)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert done.returncode == 0, done.stdout[-2000:]
    assert len(skipped) == 1, done.stdout[-2000:]
    assert ENABLE_HINT in skipped[0]
