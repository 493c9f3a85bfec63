"""What only a real kube-apiserver can show about gfd's publishing (the paths both servers
run are in e2e/test_api_sinks.py, test_run_api.py and test_drift.py): RBAC refusals of the
manifests' own RBAC are one clear line; the admission guard of manifests/node-label-guard
lets gfd write its nvidia.com/ labels and refuses anything else; a real server's watch
bookmarks keep gfd's watch current without any event on its object."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.controlplane import MANIFESTS, ControlPlane, load_yaml
from helpers.process import wait_for
from helpers.realserver import RealApiServer

from gfd.errors import ApiError
from gfd.kube import Kube
from gfd.sinks.node import NodeSink
from gfd.sinks.nodefeature import NodeFeatureSink
from gfd.sinks.objectwatch import ObjectWatch
from gfd.sinks.retry import Retry

NS = "gfd"
LABELS = {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


@pytest.fixture
def kube_as(control_plane: ControlPlane, tmp_path: Path
            ) -> Iterator[Callable[[str | None], tuple[RealApiServer, Kube]]]:
    """``kube_as(mode)``: gfd's Kube as the ServiceAccount with the RBAC of that mode."""
    made: list[tuple[RealApiServer, Kube]] = []

    def make(mode: str | None) -> tuple[RealApiServer, Kube]:
        server = RealApiServer(control_plane, mode)
        kube = Kube(kubeconfig=str(server.write_kubeconfig(tmp_path / f"{mode}.kubeconfig")),
                    qps=0)
        made.append((server, kube))
        return server, kube

    yield make
    for server, kube in made:
        kube.close()
        server.close()


def no_sleep(_: float) -> None:
    pass


@pytest.mark.parametrize("mode", ["nodefeature", None])
def test_the_node_sink_without_the_node_rbac_fails_with_one_line_naming_the_fix(
        kube_as: Callable[[str | None], tuple[RealApiServer, Kube]], node_name: str,
        mode: str | None) -> None:
    _, kube = kube_as(mode)
    with pytest.raises(ApiError) as err:
        NodeSink(kube, node_name, retry=Retry(sleep=no_sleep)).publish(LABELS)
    message = str(err.value)
    assert err.value.status == 403 and "\n" not in message
    assert 'User "system:serviceaccount:gfd:gfd" cannot get resource "nodes"' in message
    assert "grant this permission to gfd's ServiceAccount: see manifests/" in message


def test_the_nodefeature_sink_with_only_the_node_rbac_fails_with_one_line(
        kube_as: Callable[[str | None], tuple[RealApiServer, Kube]], node_name: str) -> None:
    server, kube = kube_as("node")
    server.add_pod(NS, "gfd-rbac", owner_daemonset="gfd", node_name=node_name)
    with pytest.raises(ApiError) as err:
        NodeFeatureSink(kube, node_name, namespace=NS, pod_name="gfd-rbac",
                        retry=Retry(sleep=no_sleep)).publish(LABELS)
    message = str(err.value)
    assert err.value.status == 403 and "\n" not in message
    assert "cannot get resource" in message and "see manifests/" in message
    assert server.nodefeatures(NS) == []


@pytest.fixture
def guard(control_plane: ControlPlane) -> Iterator[None]:
    """manifests/node-label-guard applied as the cluster admin, removed after the test."""
    objects = load_yaml(MANIFESTS / "node-label-guard" / "policy.yaml")
    for obj in objects:
        control_plane.apply(obj)
    yield
    for obj in reversed(objects):
        control_plane.delete(obj, wait=False)


def test_the_guard_lets_gfd_publish_and_prune_its_labels_and_refuses_any_other(
        kube_as: Callable[[str | None], tuple[RealApiServer, Kube]], node_name: str,
        guard: None) -> None:
    server, kube = kube_as("node")
    # a policy takes effect once the API server has loaded it: the refusal proves it has
    refused: list[ApiError] = []

    def refuses_team() -> bool:
        try:
            kube.apply_node_labels(node_name, {"team": "ml"}, field_manager="gfd-probe")
        except ApiError as exc:
            refused.append(exc)
            return True
        server.remove_label(node_name, "team")  # not yet loaded: the admin undoes the probe
        return False

    wait_for(refuses_team, timeout=20)
    message = str(refused[-1])
    assert refused[-1].status == 422 and "\n" not in message
    assert "gfd may add or change only nvidia.com/ labels" in message
    assert "team" not in server.labels(node_name)

    sink = NodeSink(kube, node_name, retry=Retry(sleep=no_sleep))
    assert sink.publish(LABELS).written
    assert {k: v for k, v in server.labels(node_name).items() if k in LABELS} == LABELS
    assert sink.publish({**LABELS, "nvidia.com/gpu.count": "4"}).written
    assert server.labels(node_name)["nvidia.com/gpu.count"] == "4"

    server.set_label(node_name, "team", "ml")  # someone else's label: gfd may not touch it
    with pytest.raises(ApiError, match=r"gfd may add or change only nvidia\.com/ labels"):
        kube.apply_node_labels(node_name, {"team": "mine"}, field_manager="gfd")
    assert NodeSink(kube, node_name, retry=Retry(sleep=no_sleep)).prune().written
    labels = server.labels(node_name)
    assert labels["team"] == "ml" and not [k for k in labels if k.startswith("nvidia.com/")]


def test_bookmarks_keep_the_watch_current_without_events_on_its_object(
        kube_as: Callable[[str | None], tuple[RealApiServer, Kube]], node_name: str,
        control_plane: ControlPlane) -> None:
    _, kube = kube_as("node")
    seen: list[dict[str, Any] | None] = []
    reasons: list[str] = []
    watch = ObjectWatch(kube, "node", node_name, on_change=seen.append,
                        on_reconnect=reasons.append, watch_timeout=4)
    watch.start()
    try:
        wait_for(lambda: watch.healthy)
        first = int(watch.resource_version)
        # another Node changes: the server's history moves on, this watch gets no event
        other = control_plane.create_node(f"{node_name}-other")
        moved = int(other["metadata"]["resourceVersion"])
        assert moved > first
        # a real server sends a bookmark 2 s before a watch's timeout, at its current version
        wait_for(lambda: int(watch.resource_version or 0) >= moved, timeout=15)
        assert len(seen) == 1, "the bookmark is no change of the Node"
        assert "expired" not in reasons
    finally:
        watch.close()
        control_plane.delete(f"/api/v1/nodes/{node_name}-other", wait=False)
