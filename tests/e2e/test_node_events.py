"""Events on the Node from `gfd run` as a real process, through the real client, against the
local fake API server: what `kubectl describe node` lists (Events in every namespace
selected by the involved Node's kind, name and uid) after a label change, a lost GPU and a
publishing outage."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import profiles
from fakes.apiserver import FakeApiServer
from fakes.fakenvml import subprocess_env
from fakes.sysfs import gpu_tree
from helpers.process import ENV_PREFIXES, free_port, http, wait_for

NODE = "gpu-node-1"


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as srv:
        srv.add_node(NODE)
        yield srv


def described(server: FakeApiServer) -> list[dict[str, Any]]:
    """The Events `kubectl describe node` shows: every namespace, by the Node's identity."""
    uid = server.node(NODE)["metadata"]["uid"]
    wanted = {"kind": "Node", "name": NODE, "uid": uid}
    return [e for e in server.events()
            if {k: e["involvedObject"].get(k) for k in wanted} == wanted]


def reasons(server: FakeApiServer) -> list[tuple[str, str]]:
    return [(e["type"], e["reason"]) for e in described(server)]


def test_label_changes_a_lost_gpu_and_an_outage_are_events_on_the_node(
        tmp_path: Path, server: FakeApiServer, fake_nvml_lib: Path) -> None:
    profiles.hgx_h100().write(tmp_path / "profile.txt")
    port = free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
    env = subprocess_env(fake_nvml_lib, tmp_path / "profile.txt", base) | {
        "NODE_NAME": NODE, "KUBECONFIG": str(server.write_kubeconfig(tmp_path / "kubeconfig"))}
    argv = [sys.executable, "-m", "gfd", "run", "--sink", "node", "--sleep-interval", "50ms",
            "--metrics-port", str(port), "--sysfs-root", str(gpu_tree(tmp_path / "sys", [])),
            "--nvidia-smi", str(tmp_path / "none"), "--machine-type-file", str(tmp_path / "dmi")]
    log = (tmp_path / "agent.log").open("w")
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: http(port, "/readyz")[0] == 200)
        wait_for(lambda: ("Normal", "GpuLabelsChanged") in reasons(server))
        [first] = described(server)
        assert first["metadata"]["namespace"] == "default"
        assert first["source"] == {"component": "gfd", "host": NODE}
        assert first["message"].startswith(f"{len(server.labels(NODE))} added, 0 changed")

        profiles.one_gpu_lost().write(tmp_path / "profile.txt")
        wait_for(lambda: ("Warning", "GpuLost") in reasons(server), timeout=10)
        wait_for(lambda: len(described(server)) >= 3, timeout=10)
        lost = [e for e in described(server) if e["reason"] == "GpuLost"]
        assert len(lost) == 1 and "GPU" in lost[0]["message"], [e["message"] for e in lost]
        changed = [e["message"] for e in described(server) if e["reason"] == "GpuLabelsChanged"]
        assert any("~nvidia.com/gpu.count=8->7" in m for m in changed), changed

        server.inject(503, None, method="PATCH", path_contains=f"/nodes/{NODE}")
        profiles.hgx_h100().write(tmp_path / "profile.txt")  # a change gfd cannot publish
        wait_for(lambda: ("Warning", "LabelPublishFailing") in reasons(server), timeout=10)
        failing = [e for e in described(server) if e["reason"] == "LabelPublishFailing"]
        assert len(failing) == 1 and "HTTP 503" in failing[0]["message"]
        server.clear_faults()
        wait_for(lambda: ("Normal", "LabelPublishRecovered") in reasons(server), timeout=15)
        wait_for(lambda: ("Normal", "GpuRecovered") in reasons(server), timeout=10)
        metrics = http(port, "/metrics")[1]
        assert 'gfd_kube_events_total{reason="GpuLost",result="created"} 1.0' in metrics
    finally:
        proc.terminate()
        code = proc.wait(timeout=15)
        log.close()
    assert code == 0, (tmp_path / "agent.log").read_text()[-2000:]


def test_events_false_records_none(tmp_path: Path, server: FakeApiServer,
                                   fake_nvml_lib: Path) -> None:
    profiles.hgx_h100().write(tmp_path / "profile.txt")
    base = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
    env = subprocess_env(fake_nvml_lib, tmp_path / "profile.txt", base) | {
        "NODE_NAME": NODE, "GFD_EVENTS": "false",
        "KUBECONFIG": str(server.write_kubeconfig(tmp_path / "kubeconfig"))}
    argv = [sys.executable, "-m", "gfd", "run", "--sink", "node", "--oneshot",
            "--sysfs-root", str(gpu_tree(tmp_path / "sys", [])),
            "--nvidia-smi", str(tmp_path / "none"), "--machine-type-file", str(tmp_path / "dmi")]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert server.labels(NODE)["nvidia.com/gpu.count"] == "8"
    assert server.events() == [] and server.count(path_contains="/events") == 0
