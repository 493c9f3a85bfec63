"""The fake API server with a node and gfd's pod, and a ``Kube`` client on it that records
each request's verb and code, for the tests of ``gfd.kube``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.apiserver import FakeApiServer

from gfd.kube.client import Kube

NODE = "gpu-node-1"
NS = "gfd"


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as srv:
        srv.add_node(NODE, labels={"kubernetes.io/hostname": NODE})
        srv.add_pod(NS, "gfd-abcde", owner_daemonset="gfd", node_name=NODE)
        yield srv


@pytest.fixture
def requests() -> list[tuple[str, str]]:
    return []


@pytest.fixture
def kube(server: FakeApiServer, tmp_path: Path,
         requests: list[tuple[str, str]]) -> Iterator[Kube]:
    api = Kube(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")), qps=0,
               on_request=lambda verb, code: requests.append((verb, code)))
    yield api
    api.close()
