"""``Kube``, the typed facade, with the real client against the local fake API server: each
request gfd makes (Nodes, NodeFeatures, the pod, ResourceSlices, Events) and its answer as a
dict; every request reported with its verb and code."""

from __future__ import annotations

import pytest
from fakes.apiserver import FakeApiServer
from helpers.kube import api_error

from gfd.errors import ApiError
from gfd.kube.client import APPLY, RESOURCESLICE_LIMIT, Kube
from gfd.sinks.nodefeature import build, object_name

NODE = "gpu-node-1"
NS = "gfd"
NF = object_name(NODE)
RBAC_HINT = "grant this permission to gfd's ServiceAccount"


def test_get_node_returns_the_node_as_a_dict(kube: Kube) -> None:
    node = kube.get_node(NODE)
    assert node["metadata"]["name"] == NODE
    assert node["metadata"]["labels"] == {"kubernetes.io/hostname": NODE}


def test_node_labels_are_a_forced_server_side_apply_by_the_field_manager(
        server: FakeApiServer, kube: Kube) -> None:
    server.clear_log()
    kube.apply_node_labels(NODE, {"nvidia.com/gpu.count": "8"}, field_manager="gfd")
    [request] = server.requests
    assert (request.method, request.content_type) == ("PATCH", APPLY)
    assert request.query == {"fieldManager": "gfd", "force": "true"}
    assert request.json()["metadata"] == {"name": NODE, "labels": {"nvidia.com/gpu.count": "8"}}
    assert server.labels(NODE)["nvidia.com/gpu.count"] == "8"


def test_nodefeatures_are_created_read_replaced_and_deleted(server: FakeApiServer,
                                                            kube: Kube) -> None:
    assert kube.get_nodefeature(NS, NF) is None
    kube.create_nodefeature(NS, build(NODE, NS, {"a": "1"}, []))
    current = kube.get_nodefeature(NS, NF)
    assert current is not None
    current["spec"]["labels"] = {"a": "2"}
    kube.replace_nodefeature(NS, current)
    assert server.nodefeature(NS, NF)["spec"]["labels"] == {"a": "2"}
    assert kube.delete_nodefeature(NS, NF) is True
    assert kube.delete_nodefeature(NS, NF) is False


def test_get_pod_returns_the_pod_with_its_owner(kube: Kube) -> None:
    [owner] = kube.get_pod(NS, "gfd-abcde")["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("DaemonSet", "gfd")


def test_every_request_is_reported_with_its_verb_and_code(
        server: FakeApiServer, kube: Kube, requests: list[tuple[str, str]]) -> None:
    kube.get_node(NODE)
    kube.get_nodefeature(NS, NF)
    kube.create_nodefeature(NS, build(NODE, NS, {}, []))
    with pytest.raises(ApiError):
        kube.get_node("gone")
    server.set_down(True)
    with pytest.raises(ApiError):
        kube.get_node(NODE)
    assert requests == [("get", "200"), ("get", "404"), ("create", "201"), ("get", "404"),
                        ("get", "error")]


def test_resourceslices_are_counted_with_one_field_selected_list(
        server: FakeApiServer, kube: Kube, requests: list[tuple[str, str]]) -> None:
    assert kube.count_resourceslices(NODE, "gpu.nvidia.com") == 0
    server.add_resourceslice(NODE, "gpu.nvidia.com")
    server.add_resourceslice(NODE, "gpu.nvidia.com")
    server.add_resourceslice(NODE, "compute-domain.nvidia.com")
    server.add_resourceslice("other-node", "gpu.nvidia.com")
    server.clear_log()
    assert kube.count_resourceslices(NODE, "gpu.nvidia.com") == 2
    [listed] = server.requests
    assert (listed.method, listed.path, listed.query) == (
        "GET", "/apis/resource.k8s.io/v1/resourceslices",
        {"fieldSelector": f"spec.nodeName={NODE},spec.driver=gpu.nvidia.com",
         "limit": str(RESOURCESLICE_LIMIT)})
    assert requests[-1] == ("list", "200")


def test_resourceslices_beyond_the_limit_still_count(server: FakeApiServer,
                                                     kube: Kube) -> None:
    for _ in range(RESOURCESLICE_LIMIT + 2):
        server.add_resourceslice(NODE, "gpu.nvidia.com")
    assert kube.count_resourceslices(NODE, "gpu.nvidia.com") == RESOURCESLICE_LIMIT


def test_resourceslices_forbidden_is_an_api_error_naming_the_fix(
        server: FakeApiServer, kube: Kube) -> None:
    server.forbid("list", "resourceslices")
    error = api_error(lambda: kube.count_resourceslices(NODE, "gpu.nvidia.com"))
    assert error.status == 403 and RBAC_HINT in str(error)
    assert str(error).startswith(f"list resourceslices of driver gpu.nvidia.com on node {NODE}")


def test_an_event_is_created_and_merge_patched_on_its_own_connection(
        server: FakeApiServer, kube: Kube, requests: list[tuple[str, str]]) -> None:
    body = {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{NODE}.1", "namespace": "default"},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": NODE},
            "reason": "GpuLost", "message": "GPU 1 is gone", "type": "Warning", "count": 1,
            "source": {"component": "gfd", "host": NODE}}
    created = kube.create_event("default", body)
    assert created["metadata"]["name"] == f"{NODE}.1"
    patched = kube.patch_event("default", f"{NODE}.1", {"count": 2, "message": "again"})
    assert (patched["count"], patched["message"], patched["reason"]) == (2, "again", "GpuLost")
    assert requests == [("create", "201"), ("patch", "200")]
    assert [(r.method, r.content_type) for r in server.requests][-1] == (
        "PATCH", "application/merge-patch+json")


def test_a_missing_event_is_a_404_and_a_forbidden_one_names_the_fix(
        server: FakeApiServer, kube: Kube) -> None:
    assert api_error(lambda: kube.patch_event("default", "gone", {"count": 2})).status == 404
    server.forbid("create", "events")
    error = api_error(lambda: kube.create_event("default", {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": "x"},
        "involvedObject": {"kind": "Node", "name": NODE}}))
    assert error.status == 403 and RBAC_HINT in str(error)
