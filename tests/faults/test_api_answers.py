"""Answers gfd must not trust, under a running agent: a proxy's HTML page or a JSON list
answered 200, a 300 MB answer, and an answer that trickles a byte at a time.

The real Agent over the real sinks and the real kubernetes client (gfd.kube.Kube) against the
local FakeApiServer. Promises: each is one failed cycle with one log line (no traceback), the
labels already published stay, nothing is mistaken for a success, memory stays flat, /healthz
never fails over an API problem, and the agent converges once the answers are sane again.
"""

from __future__ import annotations

import logging
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import profiles
from fakes.apiserver import FakeApiServer
from helpers.agent_parts import FixedSource, make_agent
from helpers.paths import ROOT
from helpers.process import Agent, free_port, http, metric, wait_for
from helpers.realserver import kube_for
from helpers.timing import Sleeps

from gfd.kube import Kube
from gfd.labelers.options import LabelOptions
from gfd.labelers.pipeline import compute_labels
from gfd.readers.simulate import simulate
from gfd.sinks.node import NodeSink
from gfd.sinks.nodefeature import NodeFeatureSink, object_name
from gfd.sinks.retry import Retry

NODE = "gpu-node-1"
NS = "gfd"
POD = "gfd-abcde"
OPTIONS = LabelOptions(timestamp=1_700_000_000)
H100 = simulate("hgx-h100").snapshot
MIXED = simulate("mixed-a100-a10").snapshot
NODE_OBJECT = {"kind": "Node", "apiVersion": "v1", "metadata": {"name": NODE}}


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as srv:
        srv.add_node(NODE, labels={"kubernetes.io/hostname": NODE})
        srv.add_pod(NS, POD, owner_daemonset="gfd", node_name=NODE)
        yield srv


@pytest.fixture
def kube(server: FakeApiServer, tmp_path: Path) -> Iterator[Kube]:
    # Each request's deadline: 2 s, not less, so a sane answer on a loaded machine is in time;
    # a trickled Node (about 70 bytes at 50 ms each) takes 3.5 s or more.
    with kube_for(server, tmp_path, timeout=2.0) as api:
        yield api


def published(kind: str, server: FakeApiServer) -> dict[str, str]:
    if kind == "node":
        return {k: v for k, v in server.labels(NODE).items() if k.startswith("nvidia.com/")}
    obj = server.nodefeature(NS, object_name(NODE))
    return dict(obj["spec"]["labels"]) if obj else {}


ANSWERS: list[tuple[str, dict[str, Any], str]] = [
    ("an-html-page-answered-200",
     {"body": "<html><title>Sign in</title></html>", "content_type": "text/html"},
     "is not a Kubernetes object: HTTP 200, text/html, "),
    ("a-json-list-answered-200", {"body": "[]", "content_type": "application/json"},
     "is not a Kubernetes object: HTTP 200, application/json, '[]' (a proxy in the way?)"),
    ("a-300-mb-answer", {"body": NODE_OBJECT, "size": 300 * 1024 * 1024},
     "answer is larger than 4096 KiB"),
    ("a-trickling-answer", {"body": NODE_OBJECT, "trickle": 0.05},
     "no complete answer from the API server within 2 s"),
]


@pytest.mark.parametrize("kind, method", [("node", "PATCH"), ("nodefeature", "PUT")])
@pytest.mark.parametrize("fault, message", [(a[1], a[2]) for a in ANSWERS],
                         ids=[a[0] for a in ANSWERS])
def test_an_answer_gfd_cannot_trust_fails_the_cycle_in_one_line_and_loses_nothing(
        server: FakeApiServer, kube: Kube, caplog: pytest.LogCaptureFixture, kind: str,
        method: str, fault: dict[str, Any], message: str) -> None:
    retry = Retry(sleep=Sleeps(), rand=random.Random(3).random)
    sink = (NodeSink(kube, NODE, retry=retry) if kind == "node"
            else NodeFeatureSink(kube, NODE, namespace=NS, pod_name=POD, retry=retry))
    source = FixedSource(H100)
    agent = make_agent(source, sink, OPTIONS)
    assert agent.cycle()
    before = published(kind, server)
    source.snapshot = MIXED
    server.inject(200, None, method=method, **fault)
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="gfd.daemon"):
        assert agent.cycle() is False, "not taken for a success"
    [record] = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert message in record.getMessage() and "\n" not in record.getMessage()
    assert record.exc_info is None
    assert published(kind, server) == before, "the published labels stay"
    server.clear_faults()
    assert agent.cycle(), "retried, and it converges once the answers are sane"
    assert published(kind, server) == compute_labels(MIXED, OPTIONS).labels


PROBE = """
import resource, sys
from gfd.errors import ApiError
from gfd.kube import Kube
try:
    Kube(kubeconfig=sys.argv[1], qps=0).get_node(sys.argv[2])
    print("read it")
except ApiError as exc:
    print(exc)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
"""


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_300_mb_answer_leaves_memory_flat(server: FakeApiServer, tmp_path: Path,
                                           chunked: bool) -> None:
    """Regression: a 300 MB answer took gfd's RSS to 946 MiB (and was read as a success);
    now the answer is refused after 4 MiB and the peak stays that of an ordinary request."""
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")

    def peak(inject: bool) -> tuple[str, int]:
        if inject:
            server.inject(200, 1, method="GET", body=NODE_OBJECT, size=300 * 1024 * 1024,
                          chunked=chunked)
        out = subprocess.run([sys.executable, "-c", PROBE, str(kubeconfig), NODE],
                             capture_output=True, text=True, timeout=60, check=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
        said, mib = out.stdout.strip().splitlines()
        return said, int(mib)

    ordinary_said, ordinary = peak(inject=False)
    huge_said, huge = peak(inject=True)
    assert ordinary_said == "read it"
    assert "larger than 4096 KiB" in huge_said
    assert huge < ordinary + 32, (ordinary, huge)


def test_a_trickling_api_server_never_fails_healthz(
        tmp_path: Path, server: FakeApiServer, fake_nvml_lib: Path,
        agents: list[Agent]) -> None:
    """Regression: a request's socket timeout restarted with every byte, so a trickling
    answer kept a cycle running until /healthz failed and the kubelet restarted gfd over an
    API problem. Each request now has a deadline (a quarter of --stuck-after here) and all
    the requests of a cycle share one (half of it: the ResourceSlice LIST and the GET with
    its retry used to add up to 2.75 s of the 3, which a loaded machine pushed past), so
    every cycle fails in time, is logged once, and /healthz stays 200."""
    server.inject(200, None, trickle=0.05, body=NODE_OBJECT)
    port = free_port()
    agent = Agent(tmp_path, fake_nvml_lib, profiles.hgx_h100(), "--sink", "node",
                  "--sleep-interval", "50ms", "--stuck-after", "3s", "--metrics-port", str(port),
                  output_flag=False,
                  env={"NODE_NAME": NODE,
                       "KUBECONFIG": str(server.write_kubeconfig(tmp_path / "kubeconfig"))})
    agents.append(agent)
    wait_for(lambda: http(port, "/healthz")[0] == 200)
    codes = []
    while metric(http(port, "/metrics")[1], 'gfd_cycles_total{result="error"}') < 2:
        codes.append(http(port, "/healthz")[0])
        time.sleep(0.05)
        assert len(codes) < 400, "two failed cycles within ~20 s"
    assert set(codes) == {200}, codes
    logs = agent.logs()
    assert "no complete answer from the API server within 0.75 s" in logs
    assert "Traceback" not in logs
    server.clear_faults()
    wait_for(lambda: server.labels(NODE).get("nvidia.com/gpu.count") == "8", timeout=30)
    assert agent.stop() == 0


NF_PATH = f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{NS}/nodefeatures"
TRICKLED: dict[str, list[tuple[str, str, int]]] = {
    # (method, exact path, how many answers trickle): each request kind the cycle makes
    # trickles its first answer; the write, its retry too; the watch's LIST twice.
    "node": [("GET", "/apis/resource.k8s.io/v1/resourceslices", 1),
             ("GET", f"/api/v1/nodes/{NODE}", 1),
             ("PATCH", f"/api/v1/nodes/{NODE}", 2),
             ("GET", "/api/v1/nodes", 2)],
    "nodefeature-created": [("GET", "/apis/resource.k8s.io/v1/resourceslices", 1),
                            ("GET", f"/api/v1/namespaces/{NS}/pods/{POD}", 1),
                            ("GET", f"{NF_PATH}/{object_name(NODE)}", 1),
                            ("POST", NF_PATH, 2),
                            ("GET", NF_PATH, 2)],
    "nodefeature-updated": [("GET", "/apis/resource.k8s.io/v1/resourceslices", 1),
                            ("GET", f"/api/v1/namespaces/{NS}/pods/{POD}", 1),
                            ("GET", f"{NF_PATH}/{object_name(NODE)}", 1),
                            ("PUT", f"{NF_PATH}/{object_name(NODE)}", 2),
                            ("GET", NF_PATH, 2)],
}


@pytest.mark.parametrize("case", sorted(TRICKLED))
def test_healthz_holds_while_every_request_kind_trickles_to_its_deadline(
        tmp_path: Path, server: FakeApiServer, fake_nvml_lib: Path, agents: list[Agent],
        case: str) -> None:
    """Each request may take a quarter of --stuck-after, but a cycle makes several: the
    ResourceSlice LIST, the reads (the Pod, the Node or NodeFeature), the write and the
    retries. With each trickling to its own deadline, a cycle used to run past
    --stuck-after (3 s + the retry waits here) and /healthz answered 503 over an API
    problem. The cycle's requests now share one deadline, half of --stuck-after: every
    cycle ends in time, /healthz stays 200 all along (the watch's LIST and the Events,
    which trickle too, run on threads of their own), and gfd converges once the server
    answers again."""
    for method, path, count in TRICKLED[case]:
        server.inject(200, count, method=method, path_is=path, trickle=0.05, body=NODE_OBJECT)
    server.inject(200, None, path_contains="/events", trickle=0.05, body=NODE_OBJECT)
    if case == "nodefeature-updated":
        server.add_nodefeature(NS, {"apiVersion": "nfd.k8s-sigs.io/v1alpha1",
                                    "kind": "NodeFeature",
                                    "metadata": {"name": object_name(NODE), "namespace": NS},
                                    "spec": {"labels": {"nvidia.com/gpu.count": "1"}}})
    sink = case.split("-")[0]
    port = free_port()
    agent = Agent(tmp_path, fake_nvml_lib, profiles.hgx_h100(), "--sink", sink,
                  "--sleep-interval", "50ms", "--stuck-after", "3s", "--metrics-port", str(port),
                  output_flag=False,
                  env={"NODE_NAME": NODE, "NAMESPACE": NS, "POD_NAME": POD,
                       "KUBECONFIG": str(server.write_kubeconfig(tmp_path / "kubeconfig"))})
    agents.append(agent)
    codes: list[int] = []

    def healthz() -> bool:
        code = http(port, "/healthz")[0]
        if code or codes:  # 0: not listening yet
            codes.append(code)
        return True

    def converged() -> bool:
        return (published(sink, server).get("nvidia.com/gpu.count") == "8"
                and server.faults_left() == 1)  # all but the Events' trickle: answered

    wait_for(lambda: healthz() and converged(), timeout=90)
    assert codes and set(codes) == {200}, codes
    logs = agent.logs()
    assert "this cycle's 1.5 s for API requests" in logs, "a cycle ended at its deadline"
    assert "Traceback" not in logs
    assert agent.stop() == 0
