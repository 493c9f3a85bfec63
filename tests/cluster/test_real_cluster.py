"""Opt-in tier: the same publishing promises against a real cluster.

Run with ``KUBECONFIG=... GFD_TEST_NODE=<a node you may label> pytest -m cluster``.
It labels that node with keys under ``gfd-test.example.com/`` only, writes one NodeFeature
in ``GFD_TEST_NAMESPACE`` (default ``default``; needs the NFD CRDs), and cleans up.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from gfd.kube import Kube
from gfd.sinks.node import NodeSink
from gfd.sinks.nodefeature import NodeFeatureSink, object_name

pytestmark = pytest.mark.cluster

KUBECONFIG = os.environ.get("KUBECONFIG", "")
NODE = os.environ.get("GFD_TEST_NODE", "")
NAMESPACE = os.environ.get("GFD_TEST_NAMESPACE", "default")
PREFIX = "gfd-test.example.com/"
LABELS = {f"{PREFIX}gpu.count": "8", f"{PREFIX}gpu.product": "NVIDIA-H100-80GB-HBM3"}


@pytest.fixture
def kube() -> Iterator[Kube]:
    if not KUBECONFIG or not NODE:
        pytest.skip("set KUBECONFIG and GFD_TEST_NODE to run the cluster tier")
    api = Kube(kubeconfig=KUBECONFIG)
    yield api
    api.close()


def test_node_sink_labels_the_node_removes_only_its_own_and_prunes(kube: Kube) -> None:
    sink = NodeSink(kube, NODE, field_manager="gfd-test")
    before = kube.get_node(NODE)["metadata"].get("labels", {})
    try:
        assert sink.publish(LABELS).written
        labels = kube.get_node(NODE)["metadata"]["labels"]
        assert all(labels[k] == v for k, v in LABELS.items())
        assert not sink.publish(dict(LABELS)).written, "steady state makes no request"
        smaller = {k: v for k, v in LABELS.items() if not k.endswith("count")}
        assert sink.publish(smaller).change.removed == (f"{PREFIX}gpu.count",)
        labels = kube.get_node(NODE)["metadata"]["labels"]
        assert f"{PREFIX}gpu.count" not in labels
        assert {k: v for k, v in labels.items() if not k.startswith(PREFIX)} == {
            k: v for k, v in before.items() if not k.startswith(PREFIX)}
    finally:
        NodeSink(kube, NODE, field_manager="gfd-test").prune()
    assert not any(k.startswith(PREFIX) for k in kube.get_node(NODE)["metadata"]["labels"])


def test_nodefeature_sink_creates_updates_and_prunes(kube: Kube) -> None:
    sink = NodeFeatureSink(kube, NODE, namespace=NAMESPACE)
    try:
        assert sink.publish(LABELS).written
        assert not sink.publish(dict(LABELS)).written
        assert sink.publish({**LABELS, f"{PREFIX}gpu.count": "7"}).written
        obj = kube.get_nodefeature(NAMESPACE, object_name(NODE))
        assert obj is not None and obj["spec"]["labels"][f"{PREFIX}gpu.count"] == "7"
    finally:
        sink.prune()
    assert kube.get_nodefeature(NAMESPACE, object_name(NODE)) is None
