"""The NodeFeature and Node sinks with the real kubernetes client against the local fake API
server: startup cost, zero requests in steady state, one write per change, conflicts, faults,
other owners' labels untouched, drift healed on resync, prune. Every test that does not
inject a fault runs on the real kube-apiserver too (tests/realapi), as the ServiceAccount
with the RBAC of manifests/overlays/node or nodefeature, its requests read from the audit
log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.apiserver import FakeApiServer
from helpers.realserver import gfd_node_server, kube_for, on_both
from helpers.timing import Clock, Sleeps

from gfd.errors import ApiError, PublishError, Refused
from gfd.kube import Kube
from gfd.sinks.node import NodeSink
from gfd.sinks.nodefeature import NodeFeatureSink, object_name
from gfd.sinks.retry import Retry

NODE = "gpu-node-1"
NS = "gfd"
LABELS = {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
          "nvidia.com/cuda.driver.rev": ""}


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[FakeApiServer]:
    with gfd_node_server(request, NODE, NS, {"kubernetes.io/hostname": NODE}) as srv:
        yield srv


@pytest.fixture
def kube(server: FakeApiServer, tmp_path: Path) -> Iterator[Kube]:
    with kube_for(server, tmp_path) as api:
        yield api


def node_sink(kube: Kube, clock: Clock, sleeps: Sleeps | None = None) -> NodeSink:
    return NodeSink(kube, NODE,
                    retry=Retry(sleep=Sleeps() if sleeps is None else sleeps))


def nf_sink(kube: Kube, clock: Clock, sleeps: Sleeps | None = None, pod: str = "gfd-abcde",
            ) -> NodeFeatureSink:
    return NodeFeatureSink(kube, NODE, namespace=NS, pod_name=pod,
                           retry=Retry(sleep=Sleeps() if sleeps is None else sleeps))


def nf_labels(server: FakeApiServer) -> dict[str, str]:
    obj = server.nodefeature(NS, object_name(NODE))
    assert obj is not None
    return dict(obj["spec"]["labels"])


# ----------------------------------------------------------------------------- Node sink


@on_both("node")
def test_node_sink_steady_state_makes_no_request(server: FakeApiServer, kube: Kube) -> None:
    clock = Clock()
    sink = node_sink(kube, clock)
    first = sink.publish(LABELS)
    assert first.written and set(first.change.added) == set(LABELS)
    assert server.labels(NODE)["nvidia.com/gpu.count"] == "8"
    server.clear_log()
    for _ in range(100):
        clock.now += 10
        assert not sink.publish(dict(LABELS)).written
    assert server.requests == [] or server.count() == 0


@on_both("node")
def test_node_sink_one_write_per_change(server: FakeApiServer, kube: Kube) -> None:
    clock = Clock()
    sink = node_sink(kube, clock)
    sink.publish(LABELS)
    server.clear_log()
    result = sink.publish({**LABELS, "nvidia.com/gpu.count": "7"})
    assert result.change.changed == ("nvidia.com/gpu.count",)
    assert server.count() == 1 and server.count("PATCH") == 1
    assert server.labels(NODE)["nvidia.com/gpu.count"] == "7"


@on_both("node")
def test_node_sink_removes_only_its_own_dropped_labels(server: FakeApiServer,
                                                       kube: Kube) -> None:
    clock = Clock()
    sink = node_sink(kube, clock)
    sink.publish(LABELS)
    server.set_label(NODE, "nvidia.com/gpu.deploy.driver", "true")  # the GPU Operator's
    server.set_label(NODE, "team", "ml")
    result = sink.publish({k: v for k, v in LABELS.items() if k != "nvidia.com/gpu.count"})
    assert result.change.removed == ("nvidia.com/gpu.count",)
    labels = server.labels(NODE)
    assert "nvidia.com/gpu.count" not in labels
    assert labels["nvidia.com/gpu.deploy.driver"] == "true"
    assert labels["team"] == "ml" and labels["kubernetes.io/hostname"] == NODE


@on_both("node")
def test_node_sink_heals_drift_at_resync(server: FakeApiServer, kube: Kube) -> None:
    clock = Clock()
    sink = NodeSink(kube, NODE, retry=Retry(sleep=Sleeps()))
    sink.publish(LABELS)
    server.remove_label(NODE, "nvidia.com/gpu.count")
    server.set_label(NODE, "nvidia.com/gpu.product", "hand-edited")
    clock.now += 3599
    assert not sink.publish(LABELS).written
    clock.now += 2
    sink.refresh()  # the loop's resync duty, every --resync-interval
    server.clear_log()
    assert sink.publish(LABELS).written
    assert server.count() == 1
    assert server.labels(NODE)["nvidia.com/gpu.count"] == "8"
    assert server.labels(NODE)["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"


def test_node_sink_retries_5xx_and_honours_retry_after(server: FakeApiServer,
                                                       kube: Kube) -> None:
    sleeps = Sleeps()
    # two faults in one publish: three attempts (gfd's own policy makes two per cycle)
    sink = NodeSink(kube, NODE, retry=Retry(attempts=3, sleep=sleeps))
    server.inject(500, 1, method="PATCH")
    server.inject(429, 1, method="PATCH", retry_after=3)
    assert sink.publish(LABELS).written
    assert server.labels(NODE)["nvidia.com/gpu.count"] == "8"
    assert len(sleeps) == 2 and sleeps[1] == 3.0 and 0.25 <= sleeps[0] <= 0.5


def test_node_sink_api_down_loses_nothing_and_converges(server: FakeApiServer,
                                                        kube: Kube) -> None:
    clock = Clock()
    sink = node_sink(kube, clock)
    sink.publish(LABELS)
    server.set_down(True)
    changed = {**LABELS, "nvidia.com/gpu.count": "7"}
    for _ in range(5):
        with pytest.raises(PublishError, match="cannot reach the API server"):
            sink.publish(changed)
    server.set_down(False)
    assert server.labels(NODE)["nvidia.com/gpu.count"] == "8", "nothing removed meanwhile"
    assert sink.publish(changed).written
    assert server.labels(NODE)["nvidia.com/gpu.count"] == "7"


def test_node_sink_403_names_the_permission(server: FakeApiServer, kube: Kube) -> None:
    server.forbid("patch", "nodes")
    with pytest.raises(ApiError) as err:
        node_sink(kube, Clock()).publish(LABELS)
    assert err.value.status == 403
    message = str(err.value)
    assert 'cannot patch resource "nodes"' in message and "ServiceAccount" in message


def test_node_sink_422_drops_only_the_named_label(server: FakeApiServer, kube: Kube) -> None:
    bad = "nvidia.com/gpu.product"
    server.inject(422, 1, method="PATCH", body={
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Invalid",
        "code": 422, "message": f'Node "{NODE}" is invalid: metadata.labels: Invalid value: '
                                f'"{bad}": name part must be no more than 63 characters',
        "details": {"causes": [{"reason": "FieldValueInvalid", "field": "metadata.labels",
                                "message": f'Invalid value: "{bad}"'}]}})
    assert node_sink(kube, Clock()).publish(LABELS).written
    labels = server.labels(NODE)
    assert labels["nvidia.com/gpu.count"] == "8" and bad not in labels


def test_node_sink_a_transient_422_on_an_unchanged_label_leaves_it_on_the_node(
        server: FakeApiServer, kube: Kube) -> None:
    """Regression (issue 20): the apply after the 422 went out without the label, and
    server-side apply deleted it from the Node."""
    sink = node_sink(kube, Clock())
    sink.publish(LABELS)
    count = "nvidia.com/gpu.count"
    server.inject(422, 1, method="PATCH", body={
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Invalid",
        "code": 422, "message": f'Node "{NODE}" is invalid: metadata.labels: Invalid value: '
                                '"8": refused by a webhook',
        "details": {"causes": [{"reason": "FieldValueInvalid", "field": "metadata.labels",
                                "message": 'Invalid value: "8": refused by a webhook'}]}})
    server.clear_log()
    result = sink.publish({**LABELS, "nvidia.com/gpu.product": "NVIDIA-H100"})
    assert result.rejected == (count,)
    assert [r.status for r in server.requests] == [422, 200]
    assert server.requests[1].json()["metadata"]["labels"][count] == "8", "sent again"
    assert server.labels(NODE)[count] == "8"


@on_both("node")
def test_node_prune_removes_gfds_labels_only(server: FakeApiServer, kube: Kube) -> None:
    sink = node_sink(kube, Clock())
    sink.publish(LABELS)
    server.set_label(NODE, "team", "ml")
    result = node_sink(kube, Clock()).prune()
    assert set(result.change.removed) == set(LABELS)
    assert server.labels(NODE) == {"kubernetes.io/hostname": NODE, "team": "ml"}


@on_both("node")
def test_node_sink_restart_reports_no_change_and_writes_once(server: FakeApiServer,
                                                             kube: Kube) -> None:
    node_sink(kube, Clock()).publish(LABELS)
    server.clear_log()
    again = node_sink(kube, Clock()).publish(LABELS)
    assert again.change.empty
    assert server.count() == 2  # startup: read own labels, apply once


@on_both("node")
def test_node_sink_never_creates_a_deleted_node(server: FakeApiServer, kube: Kube) -> None:
    """Regression: where RBAC allowed ``create``, the apply after a Node was deleted created it
    again. Every apply now names the Node's uid, a precondition the API server checks."""
    sink = node_sink(kube, Clock())
    sink.publish(LABELS)
    server.delete_node(NODE)
    server.clear_log()
    with pytest.raises(ApiError) as err:
        sink.publish({**LABELS, "nvidia.com/gpu.count": "7"})
    assert err.value.status == 404 and "\n" not in str(err.value)
    assert [(r.method, r.status) for r in server.requests] == [("PATCH", 409), ("GET", 404)]
    assert server.nodes() == []
    [apply] = [r for r in server.requests if r.method == "PATCH"]
    assert apply.json()["metadata"]["uid"], "the apply named the uid"


@on_both("node")
def test_node_sink_labels_a_node_created_again_under_the_same_name(server: FakeApiServer,
                                                                   kube: Kube) -> None:
    sink = node_sink(kube, Clock())
    sink.publish(LABELS)
    server.delete_node(NODE)
    server.add_node(NODE, labels={"kubernetes.io/hostname": NODE})
    server.clear_log()
    sink.refresh()  # the resync (or the next change) finds the new Node
    assert sink.publish(LABELS).written
    assert [(r.method, r.status) for r in server.requests] == [
        ("PATCH", 422), ("GET", 200), ("PATCH", 200)]
    assert server.labels(NODE) == {"kubernetes.io/hostname": NODE, **LABELS}


@on_both("node")
def test_node_sink_reports_a_key_it_drops_but_another_manager_keeps_as_kept(
        server: FakeApiServer, kube: Kube) -> None:
    sink = node_sink(kube, Clock())
    sink.publish(LABELS)
    kube.apply_node_labels(NODE, {"nvidia.com/gpu.count": "8"}, field_manager="gpu-operator")
    result = sink.publish({k: v for k, v in LABELS.items() if k != "nvidia.com/gpu.count"})
    assert result.written and result.change.empty, "the server kept it: nothing was removed"
    assert server.labels(NODE)["nvidia.com/gpu.count"] == "8"


def test_node_sink_keeps_a_rejected_labels_value_and_tries_it_later(server: FakeApiServer,
                                                                    kube: Kube) -> None:
    clock = Clock()
    sink = NodeSink(kube, NODE, retry=Retry(sleep=Sleeps()), clock=clock, rand=lambda: 1.0)
    sink.publish(LABELS)
    server.deny_label("nvidia.com/gpu.count", "7")
    server.clear_log()
    changed = {**LABELS, "nvidia.com/gpu.count": "7"}
    result = sink.publish(changed)
    assert result.rejected == ("nvidia.com/gpu.count",)
    assert [r.status for r in server.requests] == [422, 200]
    assert server.requests[1].json()["metadata"]["labels"]["nvidia.com/gpu.count"] == "8"
    assert server.labels(NODE)["nvidia.com/gpu.count"] == "8"
    server.allow_label("nvidia.com/gpu.count")
    server.clear_log()
    clock.now += 30
    assert not sink.publish(changed).written and server.count() == 0
    clock.now += 30
    assert sink.publish(changed).written
    assert server.labels(NODE)["nvidia.com/gpu.count"] == "7" and server.count() == 1


# ----------------------------------------------------------------------------- NodeFeature


@on_both("nodefeature")
def test_nodefeature_created_owned_by_the_daemonset(server: FakeApiServer, kube: Kube) -> None:
    nf_sink(kube, Clock()).publish(LABELS)
    obj = server.nodefeature(NS, object_name(NODE))
    assert obj is not None
    assert obj["metadata"]["labels"] == {"nfd.node.kubernetes.io/node-name": NODE,
                                         "app.kubernetes.io/managed-by": "gfd"}
    assert obj["spec"]["labels"] == LABELS
    owners = obj["metadata"]["ownerReferences"]
    assert [o["kind"] for o in owners] == ["DaemonSet"] and owners[0]["name"] == "gfd"
    assert owners[0]["controller"] is True and owners[0]["blockOwnerDeletion"] is False


@on_both("nodefeature")
def test_nodefeature_steady_state_is_free_and_a_change_is_one_put(server: FakeApiServer,
                                                                  kube: Kube) -> None:
    clock = Clock()
    sink = nf_sink(kube, clock)
    sink.publish(LABELS)
    server.clear_log()
    for _ in range(100):
        clock.now += 10
        sink.publish(dict(LABELS))
    assert server.count() == 0
    sink.publish({**LABELS, "nvidia.com/gpu.count": "4"})
    assert server.count() == 1 and server.count("PUT") == 1
    assert nf_labels(server)["nvidia.com/gpu.count"] == "4"


@on_both("nodefeature")
def test_nodefeature_restart_keeps_owner_references_byte_identical(server: FakeApiServer,
                                                                   kube: Kube) -> None:
    nf_sink(kube, Clock()).publish(LABELS)
    before = server.nodefeature(NS, object_name(NODE))
    server.add_pod(NS, "gfd-fghij", owner_daemonset="gfd", node_name=NODE)
    server.clear_log()
    result = nf_sink(kube, Clock(), pod="gfd-fghij").publish(LABELS)
    assert not result.written
    assert server.count("PUT") == 0
    assert server.nodefeature(NS, object_name(NODE)) == before


def test_nodefeature_conflict_is_reread_and_retried(server: FakeApiServer, kube: Kube) -> None:
    clock = Clock()
    sink = nf_sink(kube, clock)
    sink.publish(LABELS)
    server.inject(409, 2, method="PUT")
    assert sink.publish({**LABELS, "nvidia.com/gpu.count": "4"}).written
    assert nf_labels(server)["nvidia.com/gpu.count"] == "4"


@on_both("nodefeature")
def test_nodefeature_concurrent_edit_is_overwritten_safely(server: FakeApiServer,
                                                           kube: Kube) -> None:
    clock = Clock()
    sink = nf_sink(kube, clock)
    sink.publish(LABELS)
    obj = kube.get_nodefeature(NS, object_name(NODE))
    assert obj is not None
    obj["spec"]["labels"]["someone"] = "else"
    kube.replace_nodefeature(NS, obj)  # another writer: gfd's cached resourceVersion is stale
    assert sink.publish({**LABELS, "nvidia.com/gpu.count": "4"}).written
    assert server.nodefeature(NS, object_name(NODE))["spec"]["labels"] == {
        **LABELS, "nvidia.com/gpu.count": "4"}


def test_nodefeature_a_transient_422_on_an_unchanged_label_keeps_it(server: FakeApiServer,
                                                                    kube: Kube) -> None:
    sink = nf_sink(kube, Clock())
    sink.publish(LABELS)
    server.inject(422, 1, method="PUT", body={
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Invalid",
        "code": 422, "message": f'NodeFeature.nfd.k8s-sigs.io "{object_name(NODE)}" is '
                                'invalid: spec.labels: Invalid value: "8": refused by a webhook',
        "details": {"causes": [{"reason": "FieldValueInvalid", "field": "spec.labels",
                                "message": 'Invalid value: "8": refused by a webhook'}]}})
    server.clear_log()
    wanted = {**LABELS, "nvidia.com/gpu.product": "NVIDIA-H100"}
    result = sink.publish(wanted)
    assert result.rejected == ("nvidia.com/gpu.count",)
    assert [r.status for r in server.requests] == [422, 200]
    assert nf_labels(server) == wanted


def test_nodefeature_crd_missing_is_one_clear_error(server: FakeApiServer, kube: Kube) -> None:
    server.set_crd_installed(False)
    with pytest.raises(ApiError) as err:
        nf_sink(kube, Clock()).publish(LABELS)
    assert "Node Feature Discovery" in str(err.value) and "\n" not in str(err.value)


@on_both("nodefeature")
def test_nodefeature_without_pod_name_has_no_owner(server: FakeApiServer, kube: Kube) -> None:
    nf_sink(kube, Clock(), pod="").publish(LABELS)
    assert "ownerReferences" not in server.nodefeature(NS, object_name(NODE))["metadata"]


@on_both("nodefeature")
def test_nodefeature_prune_deletes_the_object(server: FakeApiServer, kube: Kube) -> None:
    nf_sink(kube, Clock()).publish(LABELS)
    result = nf_sink(kube, Clock()).prune()
    assert result.written and set(result.change.removed) == set(LABELS)
    assert server.nodefeature(NS, object_name(NODE)) is None


@on_both("nodefeature")
def test_nodefeature_deleted_under_a_running_sink_is_created_again(server: FakeApiServer,
                                                                    kube: Kube) -> None:
    sink = nf_sink(kube, Clock())
    sink.publish(LABELS)
    assert kube.delete_nodefeature(NS, object_name(NODE))
    assert sink.publish({**LABELS, "nvidia.com/gpu.count": "4"}).written
    assert nf_labels(server)["nvidia.com/gpu.count"] == "4"
    owners = server.nodefeature(NS, object_name(NODE))["metadata"]["ownerReferences"]
    assert [o["kind"] for o in owners] == ["DaemonSet"]


@on_both("nodefeature")
def test_nodefeature_write_keeps_what_others_put_on_the_object(server: FakeApiServer,
                                                              kube: Kube) -> None:
    sink = nf_sink(kube, Clock())
    sink.publish(LABELS)
    obj = kube.get_nodefeature(NS, object_name(NODE))
    assert obj is not None
    obj["metadata"]["labels"]["team"] = "ml"
    obj["metadata"]["annotations"] = {"example.com/note": "keep me"}
    obj["spec"]["features"] = {"flags": {"example.feature": {"elements": {"x": {}}}}}
    kube.replace_nodefeature(NS, obj)
    server.clear_log()
    assert sink.publish({**LABELS, "nvidia.com/gpu.count": "4"}).written
    assert [(r.method, r.status) for r in server.requests] == [
        ("PUT", 409), ("GET", 200), ("PUT", 200)]
    stored = server.nodefeature(NS, object_name(NODE))
    assert stored is not None
    assert stored["metadata"]["labels"]["team"] == "ml"
    assert stored["metadata"]["annotations"] == {"example.com/note": "keep me"}
    assert stored["spec"]["features"] == {"flags": {"example.feature": {"elements": {"x": {}}}}}
    assert stored["spec"]["labels"]["nvidia.com/gpu.count"] == "4"
    body = server.requests[-1].json()
    assert body["metadata"]["resourceVersion"] and body["metadata"]["uid"], (
        "a read-modify-write: the last object read, with its preconditions")


@on_both("nodefeature")
def test_nodefeature_of_nvidias_gfd_is_left_alone_by_publish_and_prune(
        server: FakeApiServer, kube: Kube) -> None:
    ds = server.daemonset(NS, "gfd")
    assert ds is not None
    server.add_pod(NS, "gpu-feature-discovery-x1", owner_daemonset="gpu-feature-discovery")
    gfd_ds = server.daemonset(NS, "gpu-feature-discovery")
    assert gfd_ds is not None
    theirs = {"apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeature",
              "metadata": {"name": object_name(NODE),
                           "labels": {"nfd.node.kubernetes.io/node-name": NODE},
                           "ownerReferences": [{
                               "apiVersion": "apps/v1", "kind": "DaemonSet",
                               "name": "gpu-feature-discovery",
                               "uid": gfd_ds["metadata"]["uid"], "controller": True}]},
              "spec": {"labels": {"nvidia.com/gpu.count": "8"}}}
    server.add_nodefeature(NS, theirs, manager="gpu-feature-discovery")
    before = server.nodefeature(NS, object_name(NODE))
    with pytest.raises(PublishError, match="belongs to DaemonSet/gpu-feature-discovery"):
        nf_sink(kube, Clock()).publish(LABELS)
    with pytest.raises(Refused, match=f"^NodeFeature {NS}/{object_name(NODE)} left in place: "
                                      "belongs to DaemonSet/gpu-feature-discovery"):
        nf_sink(kube, Clock()).prune()
    assert server.nodefeature(NS, object_name(NODE)) == before
    assert server.count("PUT") == server.count("DELETE") == 0


@on_both("nodefeature")
def test_nodefeature_prune_deletes_exactly_the_object_it_read(server: FakeApiServer,
                                                              kube: Kube) -> None:
    nf_sink(kube, Clock()).publish(LABELS)
    uid = server.nodefeature(NS, object_name(NODE))["metadata"]["uid"]
    server.clear_log()
    assert nf_sink(kube, Clock()).prune().written
    [delete] = [r for r in server.requests if r.method == "DELETE"]
    assert delete.json()["preconditions"] == {"uid": uid}
