"""The NodeFeature sink against the in-memory API: the object it builds (node label, gfd's
mark, DaemonSet owner, sorted labels), no call in steady state, one replace per change that
keeps everything else the object holds, conflicts re-read and retried within a bound, drift
healed when refreshed, an object someone else controls never written, and prune only of an
object gfd wrote. (The same sink with the real kubernetes client over HTTP:
tests/e2e/test_api_sinks.py.)"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fakes.apiserver import FakeApiServer
from fakes.memory_api import MemoryApi
from helpers.process import wait_for
from helpers.timing import Clock, Sleeps

from gfd.errors import ApiError, ApiSinkError, PublishError, Refused
from gfd.features import DriverFeature, Features, GpuFeature
from gfd.kube import Kube
from gfd.sinks.node import REJECTED_RETRY_CAP
from gfd.sinks.nodefeature import (
    API_VERSION,
    CONFLICT_RETRIES,
    MANAGED_BY_LABEL,
    NODE_NAME_LABEL,
    NodeFeatureSink,
    build,
    foreign_owner,
    object_name,
    owner_references,
    updated,
)
from gfd.sinks.retry import Retry
from gfd.triggers import Trigger

NODE = "gpu-node-1"
NS = "gfd"
POD = "gfd-abcde"
NF = object_name(NODE)
LABELS = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"}
CHANGED = {**LABELS, "nvidia.com/gpu.count": "4"}
OWNER = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "gfd", "uid": "ds-gfd",
         "controller": True, "blockOwnerDeletion": False}


@pytest.fixture
def api() -> MemoryApi:
    memory = MemoryApi()
    memory.add_pod(NS, POD, "gfd")
    return memory


def sink(api: MemoryApi, *, pod: str = POD) -> NodeFeatureSink:
    return NodeFeatureSink(api, NODE, namespace=NS, pod_name=pod, retry=Retry(sleep=Sleeps()))


def methods(api: MemoryApi) -> list[str]:
    return [call.method for call in api.calls]


def stored_labels(api: MemoryApi) -> dict[str, str]:
    obj = api.nodefeature(NS, NF)
    assert obj is not None
    return dict(obj["spec"]["labels"])


# ----------------------------------------------------------------------------- the object


def test_the_object_is_named_for_the_node() -> None:
    assert object_name("n1") == "nvidia-features-for-n1"


def test_build_gives_the_node_label_the_owner_and_sorted_labels() -> None:
    obj = build(NODE, NS, {"b": "2", "a": "1"}, [OWNER])
    assert obj == {
        "apiVersion": API_VERSION, "kind": "NodeFeature",
        "metadata": {"name": NF, "namespace": NS,
                     "labels": {NODE_NAME_LABEL: NODE, MANAGED_BY_LABEL: "gfd"},
                     "ownerReferences": [OWNER]},
        "spec": {"features": {}, "labels": {"a": "1", "b": "2"}}}
    assert list(obj["spec"]["labels"]) == ["a", "b"]


def test_build_without_owners_has_no_owner_references() -> None:
    assert "ownerReferences" not in build(NODE, NS, {}, [])["metadata"]


OWNERS = [
    ("daemonset", [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "gfd", "uid": "u1",
                    "controller": True, "blockOwnerDeletion": True}],
     [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "gfd", "uid": "u1",
       "controller": True, "blockOwnerDeletion": False}]),
    ("replicaset", [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "u"}], []),
    ("daemonset-of-another-group", [{"apiVersion": "example.com/v1", "kind": "DaemonSet",
                                     "name": "d", "uid": "u"}], []),
    ("no-owner", None, []),
]


@pytest.mark.parametrize("refs, owners", [o[1:] for o in OWNERS], ids=[o[0] for o in OWNERS])
def test_the_owner_is_the_pods_daemonset_never_the_pod(refs: list[dict[str, Any]] | None,
                                                       owners: list[dict[str, Any]]) -> None:
    assert owner_references({"metadata": {"ownerReferences": refs}}) == owners


# ----------------------------------------------------------------------------- publishing


def test_the_first_publish_creates_the_object_owned_by_the_daemonset(api: MemoryApi) -> None:
    result = sink(api).publish(LABELS)
    assert result.written and set(result.change.added) == set(LABELS)
    assert methods(api) == ["get_pod", "get_nodefeature", "create_nodefeature"]
    obj = api.nodefeature(NS, NF)
    assert obj is not None
    assert obj["metadata"]["ownerReferences"] == [OWNER]
    assert obj["metadata"]["labels"] == {NODE_NAME_LABEL: NODE, MANAGED_BY_LABEL: "gfd"}
    assert stored_labels(api) == LABELS


def test_steady_state_makes_no_call(api: MemoryApi) -> None:
    nodefeature = sink(api)
    nodefeature.publish(LABELS)
    api.clear_log()
    for _ in range(100):
        assert not nodefeature.publish(dict(LABELS)).written
    assert api.count() == 0


def test_a_change_is_one_replace_reporting_what_changed(api: MemoryApi) -> None:
    nodefeature = sink(api)
    nodefeature.publish(LABELS)
    api.clear_log()
    result = nodefeature.publish(CHANGED)
    assert result.written and result.change.changed == ("nvidia.com/gpu.count",)
    assert methods(api) == ["replace_nodefeature"]
    assert stored_labels(api) == CHANGED


def test_the_owner_is_looked_up_once(api: MemoryApi) -> None:
    nodefeature = sink(api)
    nodefeature.publish(LABELS)
    nodefeature.refresh()
    nodefeature.publish(CHANGED)
    assert api.count("get_pod") == 1


def test_a_restarted_sink_finding_the_object_in_sync_writes_nothing(api: MemoryApi) -> None:
    sink(api).publish(LABELS)
    api.clear_log()
    result = sink(api).publish(LABELS)
    assert not result.written and result.change.empty
    assert methods(api) == ["get_pod", "get_nodefeature"]
    api.clear_log()
    assert api.count() == 0


def test_a_restarted_sink_finding_other_labels_replaces_them(api: MemoryApi) -> None:
    sink(api).publish(LABELS)
    api.clear_log()
    result = sink(api).publish(CHANGED)
    assert result.written and result.change.changed == ("nvidia.com/gpu.count",)
    assert methods(api) == ["get_pod", "get_nodefeature", "replace_nodefeature"]
    assert stored_labels(api) == CHANGED


def test_a_restarted_sink_fixes_an_object_without_its_owner(api: MemoryApi) -> None:
    sink(api, pod="").publish(LABELS)
    result = sink(api).publish(LABELS)
    assert result.written
    obj = api.nodefeature(NS, NF)
    assert obj is not None and obj["metadata"]["ownerReferences"] == [OWNER]


# ----------------------------------------------------------------------------- conflicts


def test_a_conflict_is_reread_and_retried(api: MemoryApi) -> None:
    nodefeature = sink(api)
    nodefeature.publish(LABELS)
    api.edit_nodefeature(NS, NF, {"someone": "else"})  # gfd's resourceVersion is stale now
    api.clear_log()
    assert nodefeature.publish(CHANGED).written
    assert methods(api) == ["replace_nodefeature", "get_nodefeature", "replace_nodefeature"]
    assert stored_labels(api) == CHANGED


def test_endless_conflicts_are_one_publish_error_after_a_bounded_number_of_calls(
        api: MemoryApi) -> None:
    nodefeature = sink(api)
    nodefeature.publish(LABELS)
    api.clear_log()
    api.fail("replace_nodefeature", 409, times=None)
    with pytest.raises(PublishError, match=f"still conflicting after {CONFLICT_RETRIES}"):
        nodefeature.publish(CHANGED)
    assert api.count() == CONFLICT_RETRIES, "one request per attempt"
    assert stored_labels(api) == LABELS, "the last published labels stay"
    api.clear_failures()
    assert nodefeature.publish(CHANGED).written
    assert stored_labels(api) == CHANGED


def test_a_create_that_loses_a_race_reads_the_winner_and_replaces_it(api: MemoryApi) -> None:
    api.create_nodefeature(NS, build(NODE, NS, {"someone": "else"}, []))
    api.fail("get_nodefeature", 404)  # read as absent: the other writer creates it meanwhile
    api.clear_log()
    assert sink(api, pod="").publish(LABELS).written
    assert methods(api) == ["get_nodefeature", "create_nodefeature", "get_nodefeature",
                            "replace_nodefeature"]
    assert stored_labels(api) == LABELS


# ----------------------------------------------------------------------------- refresh


def test_refresh_rereads_and_heals_drift(api: MemoryApi) -> None:
    nodefeature = sink(api)
    nodefeature.publish(LABELS)
    api.edit_nodefeature(NS, NF, {"nvidia.com/gpu.count": "hand-edited"})
    api.clear_log()
    assert not nodefeature.publish(LABELS).written, "drift is not looked for every cycle"
    assert api.count() == 0
    nodefeature.refresh()
    assert nodefeature.publish(LABELS).written
    assert methods(api) == ["get_nodefeature", "replace_nodefeature"]
    assert stored_labels(api) == LABELS


def test_refresh_of_an_object_in_sync_reads_and_writes_nothing(api: MemoryApi) -> None:
    nodefeature = sink(api)
    nodefeature.publish(LABELS)
    api.clear_log()
    nodefeature.refresh()
    assert not nodefeature.publish(LABELS).written
    assert methods(api) == ["get_nodefeature"]


def test_refresh_recreates_an_object_someone_deleted(api: MemoryApi) -> None:
    nodefeature = sink(api)
    nodefeature.publish(LABELS)
    api.delete_nodefeature(NS, NF)
    nodefeature.refresh()
    assert nodefeature.publish(LABELS).written
    assert stored_labels(api) == LABELS


def test_a_change_after_someone_deleted_the_object_creates_it_again(api: MemoryApi) -> None:
    # Regression: the replace answered 404 and every later change failed the same way until
    # the next resync (an hour by default); now the sink re-reads and creates the object.
    nodefeature = sink(api)
    nodefeature.publish(LABELS)
    api.delete_nodefeature(NS, NF)
    api.clear_log()
    result = nodefeature.publish(CHANGED)
    assert result.written and set(result.change.added) == set(CHANGED)
    assert methods(api) == ["replace_nodefeature", "get_nodefeature", "create_nodefeature"]
    assert stored_labels(api) == CHANGED
    api.clear_log()
    assert nodefeature.publish({**CHANGED, "nvidia.com/gpu.count": "2"}).written
    assert methods(api) == ["replace_nodefeature"], "back to one write per change"


def test_a_missing_crd_during_a_replace_is_not_taken_for_a_deleted_object(
        api: MemoryApi) -> None:
    nodefeature = sink(api)
    nodefeature.publish(LABELS)
    api.set_crd_installed(False)
    with pytest.raises(ApiError, match="Node Feature Discovery"):
        nodefeature.publish(CHANGED)
    assert api.count("create_nodefeature") == 1, "only the first publish created it"


# ----------------------------------------------------------------------------- only gfd's parts

GFD_DS = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "gpu-feature-discovery",
          "uid": "ds-nvidia", "controller": True}
GFD_POD = {"apiVersion": "v1", "kind": "Pod", "name": "gpu-feature-discovery-x1", "uid": "p1"}


# ----------------------------------------------------------------------------- a rejected value

COUNT = "nvidia.com/gpu.count"


def rejecting(api: MemoryApi, value: str, method: str = "replace_nodefeature") -> None:
    """One 422 naming ``value``, as a validating admission webhook answers."""
    cause = f'Invalid value: "{value}": refused by a webhook'
    api.fail(method, 422, message=f'NodeFeature.nfd.k8s-sigs.io "{NF}" is invalid: '
                                  f"spec.labels: {cause}", causes=(cause,))


def test_a_transient_422_on_an_unchanged_label_sends_it_again_and_publishes_the_rest(
        api: MemoryApi) -> None:
    """Regression (issue 20): one rejected value failed the whole write, every cycle, so no
    other label could change either."""
    clock = Clock()
    nf_sink = NodeFeatureSink(api, NODE, namespace=NS, pod_name=POD, retry=Retry(sleep=Sleeps()),
                              clock=clock)
    nf_sink.publish(LABELS)
    rejecting(api, "8")
    api.clear_log()
    wanted = {**LABELS, "nvidia.com/gpu.product": "NVIDIA-H100"}
    result = nf_sink.publish(wanted)
    assert result.written and result.rejected == (COUNT,)
    assert stored_labels(api) == wanted, "the unchanged value sent again, the change through"
    assert methods(api) == ["replace_nodefeature", "replace_nodefeature"]
    api.clear_log()
    clock.now += 10 * REJECTED_RETRY_CAP
    assert not nf_sink.publish(wanted).written and api.count() == 0, "nothing held"


def test_a_rejected_new_value_keeps_the_published_one_and_is_tried_again_later(
        api: MemoryApi, caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    nf_sink = NodeFeatureSink(api, NODE, namespace=NS, pod_name=POD, retry=Retry(sleep=Sleeps()),
                              clock=clock)
    nf_sink.publish(LABELS)
    rejecting(api, "4")
    result = nf_sink.publish(CHANGED)
    assert result.rejected == (COUNT,) and stored_labels(api) == LABELS
    assert "keeping its published value '8'" in caplog.text
    api.clear_log()
    assert not nf_sink.publish(CHANGED).written and api.count() == 0, "not every cycle"
    clock.now += REJECTED_RETRY_CAP
    result = nf_sink.publish(CHANGED)
    assert result.written and result.change.changed == (COUNT,)
    assert stored_labels(api) == CHANGED


def test_a_rejected_fallback_is_left_out_and_the_others_stay(api: MemoryApi) -> None:
    nf_sink = sink(api)
    nf_sink.publish(LABELS)
    rejecting(api, "4")
    rejecting(api, "8")
    result = nf_sink.publish(CHANGED)
    assert result.rejected == (COUNT,) and stored_labels(api) == {
        k: v for k, v in LABELS.items() if k != COUNT}
    assert api.count("replace_nodefeature") == 3


def others_edit(api: MemoryApi) -> None:
    """Another writer adds its own label, annotation, owner and features to the object."""
    obj = api.nodefeature(NS, NF)
    assert obj is not None
    obj["metadata"]["labels"]["team"] = "ml"
    obj["metadata"].setdefault("annotations", {})["example.com/note"] = "keep me"
    obj["metadata"]["ownerReferences"].append(
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "cm-1"})
    obj["spec"]["features"] = {"flags": {"example.feature": {"elements": {"x": {}}}}}
    api.replace_nodefeature(NS, obj)
    api.clear_log()


def assert_others_kept(api: MemoryApi) -> None:
    obj = api.nodefeature(NS, NF)
    assert obj is not None
    assert obj["metadata"]["labels"]["team"] == "ml"
    assert obj["metadata"]["annotations"] == {"example.com/note": "keep me"}
    assert {r["kind"] for r in obj["metadata"]["ownerReferences"]} == {"DaemonSet", "ConfigMap"}
    assert obj["spec"]["features"] == {"flags": {"example.feature": {"elements": {"x": {}}}}}


def test_a_change_keeps_everything_else_the_object_holds(api: MemoryApi) -> None:
    """Regression: the PUT replaced the whole object, wiping what others had put on it."""
    nodefeature = sink(api)
    nodefeature.publish(LABELS)
    others_edit(api)  # gfd's copy is stale now: its PUT conflicts, it re-reads
    assert nodefeature.publish(CHANGED).written
    assert methods(api) == ["replace_nodefeature", "get_nodefeature", "replace_nodefeature"]
    assert stored_labels(api) == CHANGED
    assert_others_kept(api)
    api.clear_log()
    nodefeature.publish(LABELS)
    assert methods(api) == ["replace_nodefeature"], "one write per change, from what it read"
    assert_others_kept(api)


def test_a_resync_finding_others_additions_writes_nothing(api: MemoryApi) -> None:
    nodefeature = sink(api)
    nodefeature.publish(LABELS)
    others_edit(api)
    nodefeature.refresh()
    assert not nodefeature.publish(LABELS).written
    assert methods(api) == ["get_nodefeature"]


def test_a_restarted_sink_keeps_others_parts_when_it_writes(api: MemoryApi) -> None:
    sink(api).publish(LABELS)
    others_edit(api)
    assert sink(api).publish(CHANGED).written
    assert_others_kept(api)


def test_updated_sets_only_gfds_parts() -> None:
    current = {"apiVersion": API_VERSION, "kind": "NodeFeature",
               "metadata": {"name": NF, "namespace": NS, "uid": "u", "resourceVersion": "7",
                            "labels": {"team": "ml"}, "annotations": {"a": "b"},
                            "managedFields": [{"manager": "x"}],
                            "ownerReferences": [dict(OWNER, uid="old-uid"), GFD_POD]},
               "spec": {"labels": {"old": "1"}, "features": {"flags": {}}}}
    body = updated(current, NODE, {"b": "2", "a": "1"}, [OWNER])
    assert body["metadata"] == {
        "name": NF, "namespace": NS, "uid": "u", "resourceVersion": "7",
        "labels": {"team": "ml", NODE_NAME_LABEL: NODE, MANAGED_BY_LABEL: "gfd"},
        "annotations": {"a": "b"}, "ownerReferences": [GFD_POD, OWNER]}
    assert body["spec"] == {"labels": {"a": "1", "b": "2"}, "features": {"flags": {}}}
    assert current["metadata"]["labels"] == {"team": "ml"}, "pure"
    kept = dict(OWNER, blockOwnerDeletion=True)  # gfd's own DaemonSet, written differently
    same = updated({**current, "metadata": {**current["metadata"], "ownerReferences": [kept]}},
                   NODE, {}, [OWNER])
    assert same["metadata"]["ownerReferences"] == [kept], "an owner gfd has is left alone"


# ----------------------------------------------------------------------------- someone else's


def foreign(api: MemoryApi, *refs: dict[str, Any], mark: bool = False) -> dict[str, Any]:
    """An object of gfd's name written by another agent (NVIDIA's GFD uses this name)."""
    obj = build(NODE, NS, {"nvidia.com/gpu.count": "8", "nvidia.com/gfd.timestamp": "1"},
                list(refs))
    if not mark:
        del obj["metadata"]["labels"][MANAGED_BY_LABEL]
    created = api.create_nodefeature(NS, obj)
    api.clear_log()
    return created


def test_an_object_another_daemonset_controls_is_never_written(api: MemoryApi) -> None:
    """Regression: NVIDIA GFD's object of the same name was taken over (and pruned)."""
    before = foreign(api, GFD_DS, GFD_POD)
    with pytest.raises(ApiSinkError) as caught:
        sink(api).publish(LABELS)
    assert str(caught.value) == (
        f"NodeFeature {NS}/{NF} belongs to DaemonSet/gpu-feature-discovery (its controller), "
        "not to gfd's DaemonSet gfd: another agent publishes it (NVIDIA's GFD uses this name); "
        "uninstall it, or run gfd in another namespace (--namespace / NAMESPACE)")
    assert api.nodefeature(NS, NF) == before
    assert api.count("replace_nodefeature") == 0


def test_without_its_own_daemonset_gfd_refuses_an_unmarked_object_with_a_controller(
        api: MemoryApi) -> None:
    foreign(api, GFD_DS)
    with pytest.raises(ApiSinkError, match=r"not to gfd \(whose DaemonSet is unknown: set "
                                           r"POD_NAME\)"):
        sink(api, pod="").publish(LABELS)


def test_without_its_own_daemonset_gfd_writes_its_marked_object(api: MemoryApi) -> None:
    foreign(api, OWNER, mark=True)
    assert sink(api, pod="").publish(LABELS).written
    assert stored_labels(api) == LABELS


def test_its_own_daemonset_created_again_is_still_its_owner(api: MemoryApi) -> None:
    foreign(api, dict(OWNER, uid="uid-of-a-deleted-daemonset"), mark=True)
    assert sink(api).publish(LABELS).written
    obj = api.nodefeature(NS, NF)
    assert obj is not None and obj["metadata"]["ownerReferences"] == [OWNER]


def test_an_object_without_owner_or_mark_is_adopted(api: MemoryApi) -> None:
    """Nobody controls it, so writing it fights no one; gfd's own objects from before the
    mark existed (written without POD_NAME) look like this."""
    foreign(api)
    assert sink(api).publish(LABELS).written
    obj = api.nodefeature(NS, NF)
    assert obj is not None and obj["metadata"]["ownerReferences"] == [OWNER]
    assert obj["metadata"]["labels"][MANAGED_BY_LABEL] == "gfd"


def test_diff_refuses_an_object_someone_else_controls(api: MemoryApi) -> None:
    foreign(api, GFD_DS)
    with pytest.raises(ApiSinkError, match="belongs to DaemonSet/gpu-feature-discovery"):
        sink(api).published(also=LABELS)


FOREIGN = [
    ("no-controller", [], False, ""),
    ("gfds-daemonset", [OWNER], False, ""),
    ("another-daemonset", [GFD_DS, GFD_POD], False, "DaemonSet/gpu-feature-discovery"),
    ("another-daemonset-even-marked", [GFD_DS], True, "DaemonSet/gpu-feature-discovery"),
    ("a-non-controller-owner", [GFD_POD], False, ""),
]


@pytest.mark.parametrize("refs, mark, owner", [f[1:] for f in FOREIGN],
                         ids=[f[0] for f in FOREIGN])
def test_foreign_owner_names_the_controller_when_it_is_not_gfds_daemonset(
        refs: list[dict[str, Any]], mark: bool, owner: str) -> None:
    obj = build(NODE, NS, {}, refs)
    if not mark:
        del obj["metadata"]["labels"][MANAGED_BY_LABEL]
    assert foreign_owner(obj, [OWNER]) == owner


# ----------------------------------------------------------------------------- the owner lookup


def test_without_a_pod_name_the_object_has_no_owner_and_a_warning_says_why(
        api: MemoryApi, caplog: pytest.LogCaptureFixture) -> None:
    sink(api, pod="").publish(LABELS)
    obj = api.nodefeature(NS, NF)
    assert obj is not None and "ownerReferences" not in obj["metadata"]
    assert api.count("get_pod") == 0
    assert any("POD_NAME" in r.getMessage() for r in caplog.records
               if r.levelno == logging.WARNING)


def test_diff_and_prune_without_a_pod_name_say_nothing_about_pod_name(
        api: MemoryApi, caplog: pytest.LogCaptureFixture) -> None:
    """The owner matters to what is written: reading (diff) and pruning need none."""
    sink(api).publish(LABELS)
    caplog.clear()
    reader = sink(api, pod="")
    assert reader.published() == LABELS
    assert reader.prune().written
    assert not [r for r in caplog.records if "POD_NAME" in r.getMessage()]
    assert api.count("get_pod") == 1, "only the first sink, which had a pod, asked"


@pytest.mark.parametrize("status", [403, 404])
def test_a_pod_that_cannot_be_read_leaves_the_object_ownerless_but_published(
        api: MemoryApi, status: int) -> None:
    api.fail("get_pod", status, times=None)
    nodefeature = sink(api)
    assert nodefeature.publish(LABELS).written
    obj = api.nodefeature(NS, NF)
    assert obj is not None and "ownerReferences" not in obj["metadata"]
    nodefeature.publish(CHANGED)
    assert api.count("get_pod") == 1, "a definite answer is not asked again"


def test_a_pod_lookup_that_fails_transiently_publishes_nothing_and_is_retried(
        api: MemoryApi) -> None:
    api.fail("get_pod", 503, times=Retry().attempts)
    nodefeature = sink(api)
    with pytest.raises(ApiError):
        nodefeature.publish(LABELS)
    assert api.nodefeature(NS, NF) is None
    assert nodefeature.publish(LABELS).written
    obj = api.nodefeature(NS, NF)
    assert obj is not None and obj["metadata"]["ownerReferences"] == [OWNER]


def test_a_pod_without_a_daemonset_owner_leaves_the_object_ownerless(api: MemoryApi) -> None:
    api.add_pod(NS, "bare-pod")
    sink(api, pod="bare-pod").publish(LABELS)
    obj = api.nodefeature(NS, NF)
    assert obj is not None and "ownerReferences" not in obj["metadata"]


# ----------------------------------------------------------------------------- errors


def test_a_missing_crd_is_one_clear_error_and_nothing_is_written(api: MemoryApi) -> None:
    api.set_crd_installed(False)
    with pytest.raises(ApiError, match="Node Feature Discovery") as caught:
        sink(api).publish(LABELS)
    assert caught.value.resource_missing
    assert api.count("create_nodefeature") == 0


def test_a_failed_replace_keeps_the_old_labels_and_the_next_publish_tries_again(
        api: MemoryApi) -> None:
    nodefeature = sink(api)
    nodefeature.publish(LABELS)
    api.fail("replace_nodefeature", 500, times=Retry().attempts)
    with pytest.raises(ApiError):
        nodefeature.publish(CHANGED)
    assert stored_labels(api) == LABELS
    assert nodefeature.publish(CHANGED).written
    assert stored_labels(api) == CHANGED


# ----------------------------------------------------------------------------- prune, read, close


def test_prune_deletes_the_object_and_reports_its_labels(api: MemoryApi) -> None:
    sink(api).publish(LABELS)
    result = sink(api).prune()
    assert result.written and set(result.change.removed) == set(LABELS)
    assert api.nodefeature(NS, NF) is None


@pytest.mark.parametrize("refs, mark", [([GFD_DS, GFD_POD], False), ([GFD_DS], True), ([], False)],
                         ids=["another-daemonsets", "marked-but-another-daemonsets",
                              "no-owner-no-mark"])
def test_prune_refuses_an_object_gfd_may_not_have_written(
        api: MemoryApi, refs: list[dict[str, Any]], mark: bool) -> None:
    before = foreign(api, *refs, mark=mark)
    with pytest.raises(Refused, match=f"^NodeFeature {NS}/{NF} left in place: ") as refused:
        sink(api).prune()
    assert "\n" not in str(refused.value)
    assert api.nodefeature(NS, NF) == before and api.count("delete_nodefeature") == 0


@pytest.mark.parametrize("refs, mark, pod", [([OWNER], False, POD), ([], True, ""),
                                             ([OWNER], True, "")],
                         ids=["gfds-daemonset", "marked-without-owner", "marked-pod-unknown"])
def test_prune_deletes_an_object_gfd_wrote(api: MemoryApi, refs: list[dict[str, Any]],
                                           mark: bool, pod: str) -> None:
    foreign(api, *refs, mark=mark)
    result = sink(api, pod=pod).prune()
    assert result.written and api.nodefeature(NS, NF) is None


def test_prune_with_nothing_published_writes_nothing(api: MemoryApi) -> None:
    result = sink(api).prune()
    assert not result.written and result.change.empty


def test_after_prune_the_next_publish_creates_the_object_again(api: MemoryApi) -> None:
    nodefeature = sink(api)
    nodefeature.publish(LABELS)
    nodefeature.prune()
    assert nodefeature.publish(LABELS).written
    assert stored_labels(api) == LABELS


def test_published_reads_the_objects_labels(api: MemoryApi) -> None:
    nodefeature = sink(api)
    assert nodefeature.published() == {}
    nodefeature.publish(LABELS)
    api.edit_nodefeature(NS, NF, {"x": "y"})
    assert nodefeature.published() == {"x": "y"}


def test_close_closes_the_api(api: MemoryApi) -> None:
    sink(api).close()
    assert api.closed == 1


# ----------------------------------------------------------------------------- the watch


class Fired(list[Trigger]):
    def __call__(self, trigger: Trigger) -> None:
        self.append(trigger)


@pytest.fixture
def watched(tmp_path: Any) -> Iterator[tuple[NodeFeatureSink, FakeApiServer, Fired]]:
    with FakeApiServer() as server:
        server.add_node(NODE)
        server.add_pod(NS, POD, owner_daemonset="gfd", node_name=NODE)
        kube = Kube(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")), qps=0)
        nf_sink = NodeFeatureSink(kube, NODE, namespace=NS, pod_name=POD, watch_api=kube)
        fired = Fired()
        nf_sink.publish(LABELS)
        nf_sink.watch(fired)
        wait_for(lambda: server.open_watches == 1)
        yield nf_sink, server, fired
        nf_sink.close()


class HeldList:
    """The sink's watch API, whose LIST is answered at once but handed to the watch only when
    the test says: a read taken before gfd's write and delivered after it. The first
    ``free`` reads are handed on at once. ``watches`` counts the watch requests: the watch
    opens one only after it has reported the state its read found."""

    def __init__(self, kube: Kube, free: int = 0) -> None:
        self.kube = kube
        self.free = free
        self.listed = threading.Event()
        self.release = threading.Event()
        self.watches = 0

    def list_object(self, *args: Any, **kwargs: Any) -> Any:
        answer = self.kube.list_object(*args, **kwargs)
        if self.free > 0:
            self.free -= 1
            return answer
        self.listed.set()
        self.release.wait(5)
        return answer

    def watch(self, *args: Any, **kwargs: Any) -> Any:
        self.watches += 1
        return self.kube.watch(*args, **kwargs)


def test_the_watchs_first_read_and_gfds_first_write_are_no_drift(tmp_path: Any) -> None:
    """Regression (issue 20): the watch's first LIST, taken before gfd created the object,
    found none and reported it deleted once gfd had written it: a phantom re-read and write
    per node at every start."""
    with FakeApiServer() as server:
        server.add_node(NODE)
        server.add_pod(NS, POD, owner_daemonset="gfd", node_name=NODE)
        kube = Kube(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")), qps=0)
        held = HeldList(kube)
        nf_sink = NodeFeatureSink(kube, NODE, namespace=NS, pod_name=POD, watch_api=held)
        fired = Fired()
        try:
            nf_sink.watch(fired)
            held.listed.wait(0.5)
            nf_sink.publish(LABELS)
            held.release.set()
            wait_for(lambda: server.open_watches == 1)
            time.sleep(0.3)
            assert fired == [], [t.detail for t in fired]
        finally:
            nf_sink.close()


def test_a_read_after_an_expired_watch_taken_before_gfds_write_is_no_drift(
        tmp_path: Any) -> None:
    """The watch reads the object again after a 410; that read, taken before a write of gfd's
    and delivered after it, shows the old labels: the write itself repairs whatever it
    shows (the same guard as the Node sink's, ``OwnWrites``)."""
    with FakeApiServer() as server:
        server.add_node(NODE)
        server.add_pod(NS, POD, owner_daemonset="gfd", node_name=NODE)
        kube = Kube(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")), qps=0)
        held = HeldList(kube, free=1)
        nf_sink = NodeFeatureSink(kube, NODE, namespace=NS, pod_name=POD, watch_api=held)
        fired = Fired()
        try:
            nf_sink.watch(fired)
            nf_sink.publish(LABELS)
            wait_for(lambda: held.watches == 1 and server.open_watches == 1)
            # the object's last change is not gfd's: a feature of another name
            server.set_nodefeature_attribute(NS, NF, "other.feature", "zone", "a")
            server.send_watch_error(410, "Expired", "too old resource version")
            assert held.listed.wait(5)
            assert nf_sink.publish(CHANGED).written
            held.release.set()
            wait_for(lambda: held.watches == 2)  # the read's state has been reported
            assert fired == [], [t.detail for t in fired]
            server.set_nodefeature_label(NS, NF, "nvidia.com/gpu.count", "99")
            wait_for(lambda: len(fired) == 1, timeout=5)  # real drift is still seen
        finally:
            nf_sink.close()


def test_gfds_own_writes_seen_by_the_watch_are_no_drift(
        watched: tuple[NodeFeatureSink, FakeApiServer, Fired]) -> None:
    nf_sink, _, fired = watched
    nf_sink.publish(CHANGED)
    nf_sink.publish(LABELS)
    time.sleep(0.5)
    assert fired == []


def test_a_deleted_object_fires_a_trigger_whose_cycle_creates_it_again(
        watched: tuple[NodeFeatureSink, FakeApiServer, Fired]) -> None:
    nf_sink, server, fired = watched
    server.delete_nodefeature(NS, NF)
    wait_for(lambda: len(fired) == 1, timeout=5)
    assert (fired[0].source, fired[0].kind) == ("api", "deleted")
    assert fired[0].action is not None
    fired[0].action()
    assert nf_sink.publish(LABELS).written
    stored = server.nodefeature(NS, NF)
    assert stored is not None and stored["spec"]["labels"] == LABELS


def test_a_pruned_object_is_no_drift(
        watched: tuple[NodeFeatureSink, FakeApiServer, Fired]) -> None:
    nf_sink, server, fired = watched
    assert nf_sink.prune().written
    time.sleep(0.5)
    assert fired == [] and server.nodefeature(NS, NF) is None


# ----------------------------------------------------------------------------- features

GPU_FEATURES = Features(
    gpus=(GpuFeature(index=0, uuid="GPU-0", product="", name="", memory=81559),),
    driver=DriverFeature(version="550.54.15", cuda="12.4"))
FEWER_GPUS = Features(driver=GPU_FEATURES.driver)


def stored_features(api: MemoryApi) -> dict[str, Any]:
    obj = api.nodefeature(NS, NF)
    assert obj is not None
    return dict(obj["spec"]["features"])


def test_features_are_written_with_the_labels_and_only_on_change(api: MemoryApi) -> None:
    nodefeature = sink(api)
    assert nodefeature.publish(LABELS, features=GPU_FEATURES).written
    assert stored_features(api) == GPU_FEATURES.to_api() and stored_labels(api) == LABELS
    api.clear_log()
    assert not nodefeature.publish(LABELS, features=GPU_FEATURES).written
    assert api.count() == 0
    result = nodefeature.publish(LABELS, features=FEWER_GPUS)
    assert result.written and result.change.empty, "the labels it requests are unchanged"
    assert result.features.removed == ("nvidia.gpu[0].index", "nvidia.gpu[0].memory",
                                       "nvidia.gpu[0].uuid")
    assert not result.features.added and not result.features.changed
    assert methods(api) == ["replace_nodefeature"]
    assert stored_features(api) == FEWER_GPUS.to_api()


def test_the_first_write_reports_every_feature_element_added(api: MemoryApi) -> None:
    result = sink(api).publish(LABELS, features=GPU_FEATURES)
    assert result.features.added == tuple(sorted(GPU_FEATURES.flat()))
    other = MemoryApi()
    other.add_pod(NS, POD, "gfd")
    assert sink(other).publish(LABELS).features.empty, "no features given: none reported"


def test_features_of_other_names_in_the_object_are_kept(api: MemoryApi) -> None:
    nodefeature = sink(api)
    nodefeature.publish(LABELS, features=GPU_FEATURES)
    others_edit(api)  # adds flags example.feature
    assert nodefeature.publish(CHANGED, features=FEWER_GPUS).written
    features = stored_features(api)
    assert features["flags"] == {"example.feature": {"elements": {"x": {}}}}
    assert features["instances"] == FEWER_GPUS.to_api()["instances"] == {}
    assert features["attributes"] == GPU_FEATURES.to_api()["attributes"]


def test_published_features_are_gfds_part_of_the_object_flat(api: MemoryApi) -> None:
    nodefeature = sink(api)
    assert nodefeature.published_features() == {}, "no object yet: no features"
    nodefeature.publish(LABELS, features=GPU_FEATURES)
    obj = api.nodefeature(NS, NF)
    assert obj is not None
    obj["spec"]["features"]["flags"] = {"example.feature": {"elements": {"x": {}}}}
    api.replace_nodefeature(NS, obj)  # another writer's feature: not gfd's, not shown
    assert nodefeature.published_features() == GPU_FEATURES.flat() == {
        "nvidia.driver.cuda": "12.4", "nvidia.driver.version": "550.54.15",
        "nvidia.gpu[0].index": "0", "nvidia.gpu[0].memory": "81559",
        "nvidia.gpu[0].uuid": "GPU-0"}
    obj = api.nodefeature(NS, NF)
    assert obj is not None
    obj["spec"]["features"]["attributes"]["nvidia.driver"]["elements"]["cuda"] = "11.0"
    api.replace_nodefeature(NS, obj)
    assert nodefeature.published_features()["nvidia.driver.cuda"] == "11.0"


def test_a_resync_heals_features_someone_changed(api: MemoryApi) -> None:
    nodefeature = sink(api)
    nodefeature.publish(LABELS, features=GPU_FEATURES)
    obj = api.nodefeature(NS, NF)
    assert obj is not None
    obj["spec"]["features"]["instances"] = {}
    api.replace_nodefeature(NS, obj)
    api.clear_log()
    nodefeature.refresh()
    assert nodefeature.publish(LABELS, features=GPU_FEATURES).written
    assert methods(api) == ["get_nodefeature", "replace_nodefeature"]
    assert stored_features(api) == GPU_FEATURES.to_api()


def test_the_watch_reports_changed_features_as_drift(
        watched: tuple[NodeFeatureSink, FakeApiServer, Fired], tmp_path: Any) -> None:
    nf_sink, server, fired = watched
    someone = Kube(kubeconfig=str(server.write_kubeconfig(tmp_path / "other")), qps=0)
    nf_sink.publish(LABELS, features=GPU_FEATURES)
    time.sleep(0.3)
    assert fired == [], "gfd's own write is no drift"
    obj = server.nodefeature(NS, NF)
    assert obj is not None
    obj["spec"]["features"]["instances"] = {}
    someone.replace_nodefeature(NS, obj)
    someone.close()
    wait_for(lambda: len(fired) == 1, timeout=5)
    assert fired[0].kind == "changed"
