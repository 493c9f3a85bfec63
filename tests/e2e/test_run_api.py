"""`gfd run` with the API sinks as a real process against the local fake API server:
startup cost, no request in steady state, exactly one write per change, `gfd diff`/`prune`.
Each runs on the real kube-apiserver too (tests/realapi), as the ServiceAccount with the RBAC
of manifests/overlays/<sink>."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes import profiles
from fakes.apiserver import FakeApiServer
from fakes.fakenvml import subprocess_env
from fakes.sysfs import gpu_tree
from helpers.process import ENV_PREFIXES, free_port, http, metric, wait_for
from helpers.realserver import api_server, on_both

NODE = "gpu-node-1"
NS = "gfd"


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[FakeApiServer]:
    with api_server(request) as srv:
        srv.add_node(NODE, labels={"team": "ml"})
        srv.add_pod(NS, "gfd-abcde", owner_daemonset="gfd", node_name=NODE)
        yield srv


def command(tmp: Path, server: FakeApiServer, lib: Path, *args: str) -> tuple[list[str],
                                                                               dict[str, str]]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
    env = subprocess_env(lib, tmp / "profile.txt", base) | {
        "NODE_NAME": NODE, "NAMESPACE": NS, "POD_NAME": "gfd-abcde",
        "KUBECONFIG": str(server.write_kubeconfig(tmp / "kubeconfig"))}
    argv = [sys.executable, "-m", "gfd", *args, "--sysfs-root", str(gpu_tree(tmp / "sys", [])),
            "--nvidia-smi", str(tmp / "none"), "--machine-type-file", str(tmp / "dmi")]
    return argv, env


@pytest.mark.parametrize(("server", "sink"), [
    ("fake", "node"), ("fake", "nodefeature"),
    ("real:node", "node"),
    ("real:nodefeature", "nodefeature")], indirect=["server"])
def test_steady_state_is_free_and_a_change_is_one_write(sink: str, tmp_path: Path,
                                                        server: FakeApiServer,
                                                        fake_nvml_lib: Path) -> None:
    profiles.hgx_h100().write(tmp_path / "profile.txt")
    port = free_port()
    # the publishing requests alone (Events on the Node: e2e/test_node_events.py)
    argv, env = command(tmp_path, server, fake_nvml_lib, "run", "--sink", sink,
                        "--sleep-interval", "20ms", "--metrics-port", str(port),
                        "--events=false")
    log = (tmp_path / "agent.log").open("w")
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: http(port, "/readyz")[0] == 200)
        wait_for(lambda: server.open_watches == 1)  # the watch on what gfd publishes
        requests = server.requests
        # Node: GET, apply, LIST; NodeFeature: the pod (its owner), GET, create, LIST -- and
        # no phantom repair: the watch's first read and gfd's first write are no drift
        start = 3 if sink == "node" else 4
        # --resource-manager auto: and one LIST of the node's gpu.nvidia.com ResourceSlices
        slices = [r for r in requests if r.path.endswith("/resourceslices")]
        assert [r.query["fieldSelector"] for r in slices] == [
            f"spec.nodeName={NODE},spec.driver=gpu.nvidia.com"]
        assert len([r for r in requests if not r.watch and r not in slices]) == start, [
            (r.method, r.path) for r in requests]
        assert len([r for r in requests if r.watch]) == 1
        time.sleep(0.3)
        assert len(server.requests) == start + 1 + len(slices), [(r.method, r.path)
                                                                 for r in server.requests]
        agent_log = (tmp_path / "agent.log").read_text()
        assert "again" not in agent_log, agent_log
        server.clear_log()
        wait_for(lambda: metric(http(port, "/metrics")[1],
                                'gfd_cycles_total{result="unchanged"}') >= 100, timeout=20)
        assert server.count() == 0, ("no request in steady state",
                                     [(r.method, r.path, r.query, r.status)
                                      for r in server.requests])
        profiles.one_gpu_lost().write(tmp_path / "profile.txt")
        wait_for(lambda: server.count() > 0, timeout=10)
        wait_for(lambda: metric(http(port, "/metrics")[1],
                                'gfd_cycles_total{result="unchanged"}') >= 110, timeout=10)
        writes = [(r.method, r.path) for r in server.requests]
        assert len(writes) == 1 and writes[0][0] in ("PATCH", "PUT"), writes
        text = http(port, "/metrics")[1]
        assert metric(text, 'gfd_api_requests_total{code="200",verb="patch"}') + metric(
            text, 'gfd_api_requests_total{code="200",verb="update"}') >= 1
    finally:
        proc.terminate()
        code = proc.wait(timeout=15)
        log.close()
    assert code == 0
    if sink == "node":
        labels = server.labels(NODE)
        assert labels["nvidia.com/gpu.count"] == "7" and labels["team"] == "ml"
    else:
        obj = server.nodefeature(NS, f"nvidia-features-for-{NODE}")
        assert obj is not None and obj["spec"]["labels"]["nvidia.com/gpu.count"] == "7"


@on_both("nodefeature")
def test_a_nodefeature_deleted_by_hand_is_back_with_new_labels_in_the_same_cycle(
        tmp_path: Path, server: FakeApiServer, fake_nvml_lib: Path) -> None:
    """Someone deletes the NodeFeature, then the labels change: the update of the deleted
    object fails (409 to the uid precondition of a read-modify-write PUT as a kueue log shows,
    404 from kube-apiserver 1.36), gfd re-reads and creates it again within that one cycle."""
    name = f"nvidia-features-for-{NODE}"
    profiles.hgx_h100().write(tmp_path / "profile.txt")
    port = free_port()
    argv, env = command(tmp_path, server, fake_nvml_lib, "run", "--sink", "nodefeature",
                        "--sleep-interval", "50ms", "--metrics-port", str(port))
    log = (tmp_path / "agent.log").open("w")
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: http(port, "/readyz")[0] == 200)
        server.delete_nodefeature(NS, name)
        server.clear_log()
        profiles.one_gpu_lost().write(tmp_path / "profile.txt")
        wait_for(lambda: (server.nodefeature(NS, name) or {}).get("spec", {}).get(
            "labels", {}).get("nvidia.com/gpu.count") == "7", timeout=10)
        failed = [(r.method, r.status) for r in server.requests if r.status >= 400]
        # kube-apiserver 1.36 answers the PUT 404, older ones 409 (the fake's answer)
        assert failed in ([("PUT", 409), ("GET", 404)], [("PUT", 404), ("GET", 404)]), failed
        text = http(port, "/metrics")[1]
        assert metric(text, 'gfd_cycles_total{result="error"}') == 0, "no failed cycle"
        owners = server.nodefeature(NS, name)["metadata"]["ownerReferences"]
        assert [(o["kind"], o["name"]) for o in owners] == [("DaemonSet", "gfd")]
    finally:
        proc.terminate()
        code = proc.wait(timeout=15)
        log.close()
    assert code == 0
    logs = (tmp_path / "agent.log").read_text()
    assert f"NodeFeature {NS}/{name} was deleted: creating it again" in logs
    assert "Traceback" not in logs


@on_both("node")
def test_diff_and_prune_with_the_node_sink(tmp_path: Path, server: FakeApiServer,
                                           fake_nvml_lib: Path) -> None:
    profiles.hgx_h100().write(tmp_path / "profile.txt")

    def gfd(*args: str) -> subprocess.CompletedProcess[str]:
        argv, env = command(tmp_path, server, fake_nvml_lib, *args)
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60,
                              check=False)

    assert gfd("diff", "--sink", "node").returncode == 1
    assert gfd("run", "--sink", "node", "--oneshot").returncode == 0
    in_sync = gfd("diff", "--sink", "node")
    assert in_sync.returncode == 0, in_sync.stdout + in_sync.stderr
    profiles.t4x4().write(tmp_path / "profile.txt")
    changed = gfd("diff", "--sink", "node")
    assert changed.returncode == 1 and "~ nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3 -> " \
        "Tesla-T4" in changed.stdout
    assert gfd("prune", "--sink", "node").returncode == 0
    assert server.labels(NODE) == {"team": "ml"}


def test_api_sinks_need_a_node_name(tmp_path: Path, server: FakeApiServer,
                                    fake_nvml_lib: Path) -> None:
    profiles.hgx_h100().write(tmp_path / "profile.txt")
    argv, env = command(tmp_path, server, fake_nvml_lib, "run", "--oneshot",
                        "--use-node-feature-api")
    env.pop("NODE_NAME")
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 2 and "NODE_NAME" in result.stderr
