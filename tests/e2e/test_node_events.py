"""Events on the Node from `gfd run` as a real process, through the real client, against the
local fake API server: what `kubectl describe node` lists (Events in every namespace
selected by the involved Node's kind, name and uid) after a label change, a lost GPU and a
publishing outage."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import profiles
from fakes.apiserver import FakeApiServer
from helpers.process import free_port, gfd_command, http, metric, wait_for

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
    argv, env = agent_command(tmp_path, server, "--sleep-interval", "50ms",
                              "--metrics-port", str(port), lib=fake_nvml_lib)
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


def agent_command(tmp_path: Path, server: FakeApiServer, *args: str, lib: Path,
                  env: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """``gfd run --sink node ARGS`` for the Node on ``server`` (``env`` added)."""
    kubeconfig = str(server.write_kubeconfig(tmp_path / "kubeconfig"))
    return gfd_command(tmp_path, lib, "run", "--sink", "node", *args,
                       env={"NODE_NAME": NODE, "KUBECONFIG": kubeconfig, **(env or {})})


def test_a_one_shot_sends_its_events_before_it_exits_and_the_first_shows_old_values(
        tmp_path: Path, server: FakeApiServer, fake_nvml_lib: Path) -> None:
    """A one-shot Job records what it changed; a Node gfd labelled before (another run)
    gets a first GpuLabelsChanged whose old values are the ones published there, not ''."""
    profiles.hgx_h100().write(tmp_path / "profile.txt")
    argv, env = agent_command(tmp_path, server, "--oneshot", lib=fake_nvml_lib)
    first = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    [created] = described(server)
    assert created["reason"] == "GpuLabelsChanged" and created["message"].startswith(
        f"{len(server.labels(NODE))} added, 0 changed, 0 removed:")
    profiles.one_gpu_lost().write(tmp_path / "profile.txt")
    second = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert second.returncode == 0, second.stderr
    changed = [e["message"] for e in described(server) if e["reason"] == "GpuLabelsChanged"]
    assert len(changed) == 2 and "~nvidia.com/gpu.count=8->7" in changed[1], changed


def test_the_first_event_of_an_agent_carries_the_published_old_values(
        tmp_path: Path, server: FakeApiServer, fake_nvml_lib: Path) -> None:
    profiles.hgx_h100().write(tmp_path / "profile.txt")
    argv, env = agent_command(tmp_path, server, "--oneshot", "--events=false",
                              lib=fake_nvml_lib)
    assert subprocess.run(argv, env=env, capture_output=True, timeout=60).returncode == 0
    assert server.labels(NODE)["nvidia.com/gpu.count"] == "8" and described(server) == []
    profiles.one_gpu_lost().write(tmp_path / "profile.txt")
    port = free_port()
    argv, env = agent_command(tmp_path, server, "--sleep-interval", "50ms", "--metrics-port",
                              str(port), lib=fake_nvml_lib)
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: ("Normal", "GpuLabelsChanged") in reasons(server))
        [event] = [e for e in described(server) if e["reason"] == "GpuLabelsChanged"]
        assert "~nvidia.com/gpu.count=8->7" in event["message"], event["message"]
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def test_an_api_outage_costs_at_most_one_event_request_events_follow_the_sinks_backoff(
        tmp_path: Path, server: FakeApiServer, fake_nvml_lib: Path) -> None:
    """Every request answered 503 for many of the agent's backoff steps: the Event sender
    does not retry on a clock of its own (it used to, one POST every few seconds); it waits
    for the sink's next answered request, then records LabelPublishFailing and Recovered."""
    profiles.hgx_h100().write(tmp_path / "profile.txt")
    port = free_port()
    argv, env = agent_command(tmp_path, server, "--sleep-interval", "50ms", "--metrics-port",
                              str(port), lib=fake_nvml_lib)
    log = (tmp_path / "agent.log").open("w")
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)

    def failed_cycles() -> float:
        return metric(http(port, "/metrics")[1], 'gfd_cycles_total{result="error"}')

    try:
        wait_for(lambda: ("Normal", "GpuLabelsChanged") in reasons(server))
        server.clear_log()
        server.inject(503, None)  # every request, watches included
        profiles.one_gpu_lost().write(tmp_path / "profile.txt")  # a change to publish
        wait_for(lambda: failed_cycles() >= 8, timeout=60)
        posts = server.count("POST", path_contains="/events")
        patches = server.count("PATCH", path_contains="/events")
        assert posts + patches <= 1, [(r.method, r.path, r.status) for r in server.requests]
        server.clear_faults()
        wait_for(lambda: ("Normal", "LabelPublishRecovered") in reasons(server), timeout=30)
        assert ("Warning", "LabelPublishFailing") in reasons(server)
    finally:
        proc.terminate()
        code = proc.wait(timeout=15)
        log.close()
    assert code == 0, (tmp_path / "agent.log").read_text()[-2000:]


def test_events_false_records_none(tmp_path: Path, server: FakeApiServer,
                                   fake_nvml_lib: Path) -> None:
    profiles.hgx_h100().write(tmp_path / "profile.txt")
    argv, env = agent_command(tmp_path, server, "--oneshot", lib=fake_nvml_lib,
                              env={"GFD_EVENTS": "false"})
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert server.labels(NODE)["nvidia.com/gpu.count"] == "8"
    assert server.events() == [] and server.count(path_contains="/events") == 0
