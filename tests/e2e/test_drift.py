"""Drift at the API server under `gfd run` (a real process, the real client, the fake API
server with watches): with an hour between cycles and resyncs, only the watch on gfd's own
object can make gfd repair it within seconds.

Promises: a gfd label overwritten or removed on the Node is applied again; a Node deleted is
never re-created, its successor of the same name is labelled when it appears; a NodeFeature
deleted by hand is created again; a dropped watch reconnects and still sees drift; a watch
the RBAC forbids costs one request an hour and falls back to the resync; ``--watch=false``
opens none.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes import profiles
from fakes.apiserver import FakeApiServer
from helpers.process import Agent, free_port, http, metric, wait_for
from helpers.realserver import api_server, on_both

NODE = "gpu-node-1"
NS = "gfd"
POD = "gfd-abcde"
COUNT = "nvidia.com/gpu.count"
FEATURE = f"nvidia-features-for-{NODE}"


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[FakeApiServer]:
    with api_server(request) as srv:
        srv.add_node(NODE, labels={"kubernetes.io/hostname": NODE})
        srv.add_pod(NS, POD, owner_daemonset="gfd", node_name=NODE)
        yield srv


def start(tmp_path: Path, lib: Path, agents: list[Agent], server: FakeApiServer, sink: str,
          *args: str) -> tuple[Agent, int]:
    port = free_port()
    agent = Agent(tmp_path, lib, profiles.hgx_h100(), "--sink", sink, "--sleep-interval", "1h",
                  "--resync-interval", "1h", "--metrics-port", str(port), *args,
                  output_flag=False,
                  env={"NODE_NAME": NODE, "NAMESPACE": NS, "POD_NAME": POD,
                       "KUBECONFIG": str(server.write_kubeconfig(tmp_path / "kubeconfig"))})
    agents.append(agent)
    wait_for(lambda: http(port, "/readyz")[0] == 200)
    return agent, port


def metrics(port: int) -> str:
    return http(port, "/metrics")[1]


def published(server: FakeApiServer, sink: str) -> dict[str, str]:
    if sink == "node":
        return server.labels(NODE)
    obj = server.nodefeature(NS, FEATURE)
    return {} if obj is None else dict(obj["spec"]["labels"])


@pytest.mark.parametrize(("server", "sink"), [
    ("fake", "node"), ("fake", "nodefeature"), ("real:node", "node"),
    ("real:nodefeature", "nodefeature")], indirect=["server"])
def test_a_watched_object_is_repaired_at_once_after_each_kind_of_drift(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent], server: FakeApiServer,
        sink: str) -> None:
    agent, port = start(tmp_path, fake_nvml_lib, agents, server, sink)
    wait_for(lambda: published(server, sink).get(COUNT) == "8")
    wait_for(lambda: server.open_watches == 1)
    if sink == "node":
        server.set_label(NODE, COUNT, "99")  # kubectl label --overwrite
        wait_for(lambda: server.labels(NODE).get(COUNT) == "8", timeout=5)
        server.remove_label(NODE, COUNT)  # kubectl label nvidia.com/gpu.count-
        wait_for(lambda: server.labels(NODE).get(COUNT) == "8", timeout=5)
    else:
        server.delete_nodefeature(NS, FEATURE)  # kubectl delete nodefeature
        wait_for(lambda: published(server, sink).get(COUNT) == "8", timeout=5)
        server.delete_nodefeature(NS, FEATURE)
        wait_for(lambda: published(server, sink).get(COUNT) == "8", timeout=5)
    wait_for(lambda: metric(metrics(port), 'gfd_drift_repairs_total{target="api"}') == 2)
    assert metric(metrics(port), 'gfd_event_to_publish_seconds_count{source="api"}') >= 2
    assert agent.stop() == 0


@on_both("node")
def test_a_deleted_node_is_not_recreated_and_its_successor_is_labelled(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent],
        server: FakeApiServer) -> None:
    agent, _ = start(tmp_path, fake_nvml_lib, agents, server, "node")
    wait_for(lambda: server.labels(NODE).get(COUNT) == "8")
    wait_for(lambda: server.open_watches == 1)
    server.delete_node(NODE)
    time.sleep(0.5)  # time enough for a (wrong) apply that would create it again
    assert not [n for n in server.nodes() if n["metadata"]["name"] == NODE]
    server.add_node(NODE, labels={"kubernetes.io/hostname": NODE})  # the node re-registers
    wait_for(lambda: server.labels(NODE).get(COUNT) == "8", timeout=5)
    assert agent.proc.poll() is None
    assert agent.stop() == 0


@on_both("node")
def test_a_dropped_watch_reconnects_and_still_sees_drift(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent],
        server: FakeApiServer) -> None:
    agent, port = start(tmp_path, fake_nvml_lib, agents, server, "node")
    wait_for(lambda: server.open_watches == 1)
    wait_for(lambda: server.labels(NODE).get(COUNT) == "8")
    assert server.drop_watches() == 1
    wait_for(lambda: metric(metrics(port), 'gfd_watch_reconnects_total{reason="dropped"}') == 1)
    # the real server is back in seconds, and its first watches may end at once: backoff
    wait_for(lambda: server.open_watches == 1, timeout=30)
    server.set_label(NODE, COUNT, "1")
    wait_for(lambda: server.labels(NODE).get(COUNT) == "8", timeout=15)
    assert agent.stop() == 0


def test_a_forbidden_watch_falls_back_to_the_resync_at_one_request_an_hour(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent],
        server: FakeApiServer) -> None:
    server.forbid("watch", "nodes")
    agent, _ = start(tmp_path, fake_nvml_lib, agents, server, "node")
    wait_for(lambda: server.labels(NODE).get(COUNT) == "8")
    wait_for(lambda: "cannot watch node gpu-node-1" in agent.logs())
    time.sleep(1.5)  # a retry a minute (the old backoff cap) would be here by now
    assert server.watch_requests == 1
    assert len([line for line in agent.logs().splitlines() if "cannot watch" in line]) == 1
    assert agent.stop() == 0


@on_both("node")
def test_no_watch_is_opened_with_watch_false(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent],
        server: FakeApiServer) -> None:
    agent, _ = start(tmp_path, fake_nvml_lib, agents, server, "node", "--watch=false")
    wait_for(lambda: server.labels(NODE).get(COUNT) == "8")
    assert server.watch_requests == 0
    assert agent.stop() == 0


@on_both("node")
def test_a_watch_whose_version_expired_reads_the_node_again_and_goes_on(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent],
        server: FakeApiServer) -> None:
    agent, port = start(tmp_path, fake_nvml_lib, agents, server, "node")
    wait_for(lambda: server.open_watches == 1)
    wait_for(lambda: server.labels(NODE).get(COUNT) == "8")
    server.set_label(NODE, "team", "ml")  # history moves on ...
    # ... past anything the watch can have seen, whenever it reads that change: another
    # object's write (the real server's compact() makes one of its own) ...
    server.add_pod(NS, "history-moves-on")
    compacted = int(server.compact())  # ... and is forgotten: the watch's version is too old
    server.drop_watches()  # (the real server restarts: its watch cache forgets it too)
    wait_for(lambda: metric(metrics(port), 'gfd_watch_reconnects_total{reason="expired"}') >= 1,
             timeout=30)

    # The watch opened after the Node is read again, told by the version it starts from (the
    # read's, past the compaction): not the expired one, which may still count as open while
    # its last event is on the way. (A count of watch requests taken now could already hold
    # the new one on a busy machine, and then wait for one more that never comes.)
    def watching_from_the_new_read() -> bool:
        fresh = any(r.watch and int(r.query.get("resourceVersion") or 0) >= compacted
                    for r in server.requests)
        return fresh and server.open_watches == 1
    wait_for(watching_from_the_new_read, timeout=30)
    server.set_label(NODE, COUNT, "3")
    wait_for(lambda: server.labels(NODE).get(COUNT) == "8", timeout=15)
    assert agent.stop() == 0
