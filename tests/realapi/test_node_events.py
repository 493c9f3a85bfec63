"""Events on the Node on the real kube-apiserver, sent as the ServiceAccount of manifests/
with exactly its overlay's RBAC (components/events included): a label change, a lost GPU
and a publishing outage under `gfd run` each leave the Event described where
`kubectl describe node` looks (every namespace, by the Node's kind, name and uid, and by
the node name as uid, as it merges the kubelet's); 100 flaps of one GPU in a minute
(the recorder's clock driven, not waited for) leave a bounded number of Events."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fakes import profiles
from helpers.controlplane import ControlPlane, rbac_objects
from helpers.process import free_port, gfd_command, http, wait_for
from helpers.timing import Clock

from gfd.events import BURST, NodeEvents, Recorder, Sender
from gfd.kube import Kube
from gfd.sinks.base import Change
from tests.helpers.builders import gpu, snapshot


def described(plane: ControlPlane, node: str) -> list[dict[str, Any]]:
    """What `kubectl describe node` lists: Events in all namespaces whose involved object
    is the Node by uid, merged with those naming the node as uid (the kubelet's)."""
    uid = plane.get(f"/api/v1/nodes/{node}")["metadata"]["uid"]  # type: ignore[index]
    found: dict[str, dict[str, Any]] = {}
    for by in (uid, node):
        query = {"fieldSelector": f"involvedObject.kind=Node,involvedObject.name={node},"
                                  f"involvedObject.uid={by}"}
        for event in plane.request("GET", "/api/v1/events", query=query)[1]["items"]:
            found[event["metadata"]["uid"]] = event
    return sorted(found.values(), key=lambda e: e["metadata"]["creationTimestamp"])


def reasons(plane: ControlPlane, node: str) -> list[tuple[str, str]]:
    return [(e["type"], e["reason"]) for e in described(plane, node)]


def test_a_label_change_a_lost_gpu_and_an_outage_are_events_as_the_service_account(
        control_plane: ControlPlane, sa_kubeconfig: Callable[[str | None], Path],
        node_name: str, tmp_path: Path, fake_nvml_lib: Path) -> None:
    kubeconfig = sa_kubeconfig("node")
    profiles.hgx_h100().write(tmp_path / "profile.txt")
    port = free_port()
    argv, env = gfd_command(
        tmp_path, fake_nvml_lib, "run", "--sink", "node", "--sleep-interval", "100ms",
        "--metrics-port", str(port), env={"NODE_NAME": node_name, "KUBECONFIG": str(kubeconfig)})
    log = (tmp_path / "agent.log").open("w")
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: http(port, "/readyz")[0] == 200, timeout=30)
        wait_for(lambda: ("Normal", "GpuLabelsChanged") in reasons(control_plane, node_name),
                 timeout=20)
        [first] = described(control_plane, node_name)
        node = control_plane.get(f"/api/v1/nodes/{node_name}")
        assert node is not None
        assert first["metadata"]["namespace"] == "default"
        assert first["involvedObject"] == {"kind": "Node", "name": node_name, "apiVersion": "v1",
                                           "uid": node["metadata"]["uid"]}
        assert first["source"] == {"component": "gfd", "host": node_name}
        assert first["reportingComponent"] == "gfd" and first["count"] == 1
        gfd_labels = [k for k in node["metadata"]["labels"] if k.startswith("nvidia.com/")]
        assert first["message"].startswith(f"{len(gfd_labels)} added, 0 changed, 0 removed:")

        profiles.one_gpu_lost().write(tmp_path / "profile.txt")
        wait_for(lambda: ("Warning", "GpuLost") in reasons(control_plane, node_name),
                 timeout=20)
        wait_for(lambda: any("~nvidia.com/gpu.count=8->7" in e["message"]
                             for e in described(control_plane, node_name)), timeout=20)

        # An outage: the ServiceAccount loses `patch nodes` (its events Role stays), and a
        # change comes that gfd cannot publish.
        [binding] = [o for o in rbac_objects("node") if o["kind"] == "ClusterRoleBinding"]
        control_plane.delete(binding)
        profiles.hgx_h100().write(tmp_path / "profile.txt")
        wait_for(lambda: ("Warning", "LabelPublishFailing")
                 in reasons(control_plane, node_name), timeout=30)
        [failing] = [e for e in described(control_plane, node_name)
                     if e["reason"] == "LabelPublishFailing"]
        assert "HTTP 403" in failing["message"] and "forbidden" in failing["message"]
        control_plane.apply(binding)
        wait_for(lambda: ("Normal", "LabelPublishRecovered")
                 in reasons(control_plane, node_name), timeout=60)
        wait_for(lambda: ("Normal", "GpuRecovered") in reasons(control_plane, node_name),
                 timeout=20)
    finally:
        proc.terminate()
        code = proc.wait(timeout=15)
        log.close()
    assert code == 0, (tmp_path / "agent.log").read_text()[-2000:]


def test_a_hundred_flaps_in_a_minute_leave_a_bounded_number_of_events(
        control_plane: ControlPlane, sa_kubeconfig: Callable[[str | None], Path],
        node_name: str) -> None:
    """As the nodefeature ServiceAccount, which may not read Nodes: the Events name the
    node as uid, where `kubectl describe node` looks too."""
    kube = Kube(kubeconfig=str(sa_kubeconfig("nodefeature")), qps=0)
    counted: list[tuple[str, str]] = []
    clock = Clock(0.0)
    sender = Sender(kube, node_name, report=lambda r, result: counted.append((r, result)))
    events = NodeEvents(Recorder(node_name, clock=clock), sender,
                        report=lambda r, result: counted.append((r, result)))
    good = snapshot(gpu(0), gpu(1))
    bad = snapshot(gpu(0), gpu(1, error="GPU is lost"))
    events.published(good, {}, Change())
    for _ in range(100):  # 100 flaps in 60 seconds of the recorder's clock
        clock.now += 0.3
        events.published(bad, {}, Change())
        clock.now += 0.3
        events.published(good, {}, Change())
    assert sender.flush(timeout=60)
    sender.close()
    kube.close()
    found = described(control_plane, node_name)
    assert sorted((e["type"], e["reason"]) for e in found) == [
        ("Normal", "GpuRecovered"), ("Warning", "GpuLost")]
    assert all(e["involvedObject"]["uid"] == node_name for e in found)
    sent = [c for c in counted if c[1] in ("created", "patched")]
    assert len(sent) == 2 * BURST, "a burst per reason, then nothing within the minute"
    assert counted.count(("GpuLost", "throttled")) == 100 - BURST
    lost = next(e for e in found if e["reason"] == "GpuLost")
    assert lost["count"] == BURST
