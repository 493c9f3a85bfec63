"""`gfd why` as the ServiceAccount of manifests/fleet/why against a real kube-apiserver
(v1.36): its ClusterRole is exactly what `gfd why POD` needs. With it the answer is complete
(the five LISTs of `gfd fleet`, the GET of the pod and of the claim template it names);
without the GET of claim templates the answer is still judged from the LISTs; without the
rule on pods the server refuses the pod's GET, and gfd why says so in one line naming it.

The pod asks for more GPUs than any node has, and names a ResourceClaimTemplate no claim was
made from yet (no resourceclaim-controller runs here): the scheduler would turn it away
before filtering any node (PreEnqueue), which gfd why says (``preFilter``) after reading every
collection and the template. It is never scheduled (no kube-scheduler binds it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.controlplane import ControlPlane
from helpers.process import ENV_PREFIXES

NAMESPACE = "why-rbac"
TIMEOUT = 120.0
"""Seconds for one `gfd why` (a second or two; the bound is for a loaded machine)."""


@dataclass(frozen=True)
class Pending:
    pod: str
    node: str


@pytest.fixture(scope="module")
def pending(control_plane: ControlPlane) -> Iterator[Pending]:
    run = uuid.uuid4().hex[:8]
    node = f"why-rbac-{run}"
    control_plane.create_node(node, {"kubernetes.io/hostname": node,
                                     "nvidia.com/gpu.present": "true",
                                     "nvidia.com/gpu.count": "8",
                                     "nvidia.com/gpu.replicas": "1"},
                              {"nvidia.com/gpu": "8"})
    control_plane.create_namespace(NAMESPACE)
    template = control_plane.create({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": f"one-gpu-{run}", "namespace": NAMESPACE},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.nvidia.com", "count": 1}}]}}}})
    pod = control_plane.create({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"too-big-{run}", "namespace": NAMESPACE},
        "spec": {"schedulerName": "no-such-scheduler",  # never bound by the session's
                 "resourceClaims": [{"name": "extra", "resourceClaimTemplateName":
                                     template["metadata"]["name"]}],
                 "containers": [{"name": "train", "image": "registry.example/train:1",
                                 "resources": {"limits": {"nvidia.com/gpu": "99"},
                                               "claims": [{"name": "extra"}]}}]}})
    try:
        yield Pending(pod["metadata"]["name"], node)
    finally:
        control_plane.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/"
                              f"{pod['metadata']['name']}", query={"gracePeriodSeconds": "0"},
                              expect=(200, 404))
        control_plane.delete(f"/api/v1/nodes/{node}", wait=False)


@dataclass(frozen=True)
class Answer:
    returncode: int
    stdout: str
    stderr: str

    def document(self) -> dict[str, object]:
        try:
            return dict(json.loads(self.stdout))
        except ValueError:
            pytest.fail(f"gfd why printed no JSON (exit {self.returncode}):\n"
                        f"{self.stdout[-2000:]}\n{self.stderr[-2000:]}")


def gfd_why(control_plane: ControlPlane, pending: Pending, tmp_path: Path,
            without: tuple[str, ...] = ()) -> Answer:
    """`gfd why POD -o json` as manifests/fleet/why's ServiceAccount, its ClusterRole less
    the rules of ``without``."""
    account = control_plane.install_fleet_rbac(without=without, where="fleet/why")
    kubeconfig = control_plane.service_account_kubeconfig(
        tmp_path / "why.kubeconfig", namespace=account["metadata"]["namespace"],
        name=account["metadata"]["name"])
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
    done = subprocess.run(
        [sys.executable, "-m", "gfd", "why", pending.pod, "-n", NAMESPACE, "-o", "json",
         "--kubeconfig", str(kubeconfig)],
        env=env | {"HOME": str(tmp_path)}, capture_output=True, text=True, timeout=TIMEOUT)
    return Answer(done.returncode, done.stdout, done.stderr)


def test_the_why_role_of_the_manifests_judges_the_pod_completely(
        control_plane: ControlPlane, pending: Pending, tmp_path: Path) -> None:
    answer = gfd_why(control_plane, pending, tmp_path)
    doc = answer.document()
    assert answer.returncode == 1, answer.stderr  # judged: it would not bind
    assert doc["kind"] == "Why" and doc["complete"] is True, doc
    assert doc["fits"] is False and doc["preFilter"], doc
    assert "forbidden" not in answer.stderr.lower(), answer.stderr


def test_without_the_templates_get_the_pod_is_still_judged_from_the_lists(
        control_plane: ControlPlane, pending: Pending, tmp_path: Path) -> None:
    answer = gfd_why(control_plane, pending, tmp_path, without=("resourceclaimtemplates",))
    doc = answer.document()
    assert answer.returncode in (1, 3), answer.stderr
    assert doc["kind"] == "Why" and doc["fits"] is False and doc["preFilter"], doc


def test_without_the_pods_rule_the_pods_get_is_one_line_naming_it(
        control_plane: ControlPlane, pending: Pending, tmp_path: Path) -> None:
    answer = gfd_why(control_plane, pending, tmp_path, without=("pods",))
    assert answer.returncode != 0
    lines = [line for line in answer.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "pods" in lines[0] and "forbidden" in lines[0].lower(), \
        answer.stderr
