"""The Node sink against the in-memory API: it costs no call while labels are unchanged,
one server-side apply per change, removes only keys it set, drops only the label a 422 names,
heals drift when refreshed, and prunes exactly its own labels. (The same sink with the real
kubernetes client over HTTP: tests/e2e/test_api_sinks.py.)"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from fakes.memory_api import MemoryApi
from helpers.timing import Sleeps

from gfd.errors import ApiError
from gfd.sinks.node import FIELD_MANAGER, NodeSink, offending_keys, owned_labels
from gfd.sinks.retry import Retry

NODE = "gpu-node-1"
LABELS = {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
          "nvidia.com/cuda.driver.rev": ""}
OTHERS = {"kubernetes.io/hostname": NODE, "team": "ml"}


@pytest.fixture
def api() -> MemoryApi:
    memory = MemoryApi()
    memory.add_node(NODE, labels=OTHERS)
    return memory


def sink(api: MemoryApi, sleeps: Sleeps | None = None) -> NodeSink:
    return NodeSink(api, NODE, retry=Retry(sleep=Sleeps() if sleeps is None else sleeps))


def methods(api: MemoryApi) -> list[str]:
    return [call.method for call in api.calls]


# ----------------------------------------------------------------------------- publishing


def test_the_first_publish_reads_what_gfd_owns_then_applies_once(api: MemoryApi) -> None:
    result = sink(api).publish(LABELS)
    assert result.written and set(result.change.added) == set(LABELS)
    assert methods(api) == ["get_node", "apply_node_labels"]
    assert api.labels(NODE) == {**OTHERS, **LABELS}
    assert api.owners(NODE, "nvidia.com/gpu.count") == {FIELD_MANAGER}


def test_steady_state_makes_no_call(api: MemoryApi) -> None:
    node = sink(api)
    node.publish(LABELS)
    api.clear_log()
    for _ in range(100):
        assert not node.publish(dict(LABELS)).written
    assert api.count() == 0


CHANGES = [
    ("added", {**LABELS, "nvidia.com/gpu.family": "hopper"}, ("nvidia.com/gpu.family",), (), ()),
    ("changed", {**LABELS, "nvidia.com/gpu.count": "7"}, (), ("nvidia.com/gpu.count",), ()),
    ("removed", {k: v for k, v in LABELS.items() if k != "nvidia.com/gpu.count"}, (), (),
     ("nvidia.com/gpu.count",)),
]


@pytest.mark.parametrize("labels, added, changed, removed", [c[1:] for c in CHANGES],
                         ids=[c[0] for c in CHANGES])
def test_each_change_is_one_apply_that_reports_what_changed(
        api: MemoryApi, labels: dict[str, str], added: tuple[str, ...],
        changed: tuple[str, ...], removed: tuple[str, ...]) -> None:
    node = sink(api)
    node.publish(LABELS)
    api.clear_log()
    result = node.publish(labels)
    assert result.written
    assert (result.change.added, result.change.changed, result.change.removed) == (
        added, changed, removed)
    assert methods(api) == ["apply_node_labels"]
    assert api.labels(NODE) == {**OTHERS, **labels}


def test_labels_other_writers_set_are_never_touched(api: MemoryApi) -> None:
    node = sink(api)
    node.publish(LABELS)
    api.set_label(NODE, "nvidia.com/gpu.deploy.driver", "true", manager="gpu-operator")
    node.publish({"nvidia.com/gpu.count": "8"})
    node.publish({})
    assert api.labels(NODE) == {**OTHERS, "nvidia.com/gpu.deploy.driver": "true"}


def test_a_restarted_sink_reports_no_change_and_applies_once(api: MemoryApi) -> None:
    sink(api).publish(LABELS)
    api.clear_log()
    again = sink(api).publish(LABELS)
    assert again.written and again.change.empty
    assert methods(api) == ["get_node", "apply_node_labels"]


def test_a_missing_node_is_an_api_error_and_no_node_is_created(api: MemoryApi) -> None:
    with pytest.raises(ApiError) as caught:
        NodeSink(api, "no-such-node", retry=Retry(sleep=Sleeps())).publish(LABELS)
    assert caught.value.status == 404
    assert methods(api) == ["get_node"]


# ----------------------------------------------------------------------------- refresh


@pytest.mark.parametrize("drift", ["removed", "edited"])
def test_refresh_makes_the_next_publish_apply_again_and_heal_drift(api: MemoryApi,
                                                                   drift: str) -> None:
    node = sink(api)
    node.publish(LABELS)
    if drift == "removed":
        api.remove_label(NODE, "nvidia.com/gpu.count")
    else:
        api.set_label(NODE, "nvidia.com/gpu.count", "hand-edited")
    api.clear_log()
    assert not node.publish(LABELS).written, "drift is not looked for every cycle"
    assert api.count() == 0
    node.refresh()
    assert node.publish(LABELS).written
    assert methods(api) == ["apply_node_labels"]
    assert api.labels(NODE) == {**OTHERS, **LABELS}
    api.clear_log()
    assert not node.publish(LABELS).written, "one refresh, one apply"
    assert api.count() == 0


# ----------------------------------------------------------------------------- errors


def test_a_422_drops_only_the_named_label_and_publishes_the_others(
        api: MemoryApi, caplog: pytest.LogCaptureFixture) -> None:
    bad = "nvidia.com/gpu.product.NVIDIA RTX"  # a space: not a valid key
    labels = {**LABELS, bad: "1"}
    node = sink(api)
    result = node.publish(labels)
    assert result.written
    assert bad not in result.change.added and set(result.change.added) == set(LABELS)
    assert api.labels(NODE) == {**OTHERS, **LABELS}
    assert methods(api) == ["get_node", "apply_node_labels", "apply_node_labels"]
    assert any(bad in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)
    api.clear_log()
    assert not node.publish(labels).written, "the rejected label is not retried every cycle"
    assert api.count() == 0


def test_a_422_that_names_no_label_goes_up_and_nothing_is_applied(api: MemoryApi) -> None:
    api.fail("apply_node_labels", 422, message="metadata: something else is wrong")
    with pytest.raises(ApiError) as caught:
        sink(api).publish(LABELS)
    assert caught.value.status == 422
    assert api.labels(NODE) == OTHERS


def test_a_failed_apply_goes_up_and_the_next_publish_tries_again(api: MemoryApi) -> None:
    node = sink(api)
    node.publish(LABELS)
    api.fail("apply_node_labels", 500, times=Retry().attempts)
    changed = {**LABELS, "nvidia.com/gpu.count": "7"}
    with pytest.raises(ApiError):
        node.publish(changed)
    assert api.labels(NODE)["nvidia.com/gpu.count"] == "8", "nothing lost meanwhile"
    assert node.publish(changed).written
    assert api.labels(NODE)["nvidia.com/gpu.count"] == "7"


def test_a_transient_error_is_retried_after_a_jittered_sleep(api: MemoryApi) -> None:
    sleeps = Sleeps()
    api.fail("apply_node_labels", 503)
    assert sink(api, sleeps).publish(LABELS).written
    assert len(sleeps) == 1 and 0.25 <= sleeps[0] <= 0.5
    assert api.count("apply_node_labels") == 2


def test_a_forbidden_apply_names_the_permission(api: MemoryApi) -> None:
    api.forbid("apply_node_labels")
    with pytest.raises(ApiError, match="ServiceAccount") as caught:
        sink(api).publish(LABELS)
    assert caught.value.status == 403 and api.count("apply_node_labels") == 1


# ----------------------------------------------------------------------------- prune, read, close


def test_prune_removes_only_gfds_labels_and_reports_them(api: MemoryApi) -> None:
    sink(api).publish(LABELS)
    result = sink(api).prune()
    assert result.written and set(result.change.removed) == set(LABELS)
    assert api.labels(NODE) == OTHERS


def test_after_prune_the_next_publish_applies_again(api: MemoryApi) -> None:
    node = sink(api)
    node.publish(LABELS)
    node.prune()
    result = node.publish(LABELS)
    assert result.written and set(result.change.added) == set(LABELS)
    assert api.labels(NODE) == {**OTHERS, **LABELS}


def test_published_is_what_gfd_owns_on_the_node(api: MemoryApi) -> None:
    node = sink(api)
    assert node.published() == {}
    node.publish(LABELS)
    api.set_label(NODE, "nvidia.com/gpu.count", "taken over")
    assert node.published() == {k: v for k, v in LABELS.items() if k != "nvidia.com/gpu.count"}


def test_close_closes_the_api(api: MemoryApi) -> None:
    sink(api).close()
    assert api.closed == 1


# ----------------------------------------------------------------------------- the pure parts


def managed(manager: str, operation: str, *keys: str) -> dict[str, Any]:
    return {"manager": manager, "operation": operation,
            "fieldsV1": {"f:metadata": {"f:labels": {f"f:{k}": {} for k in keys}}}}


OWNED = [
    ("apply-entry", {"a": "1", "b": "2"}, [managed("gfd", "Apply", "a")], {"a": "1"}),
    ("other-manager", {"a": "1"}, [managed("kubelet", "Apply", "a")], {}),
    ("update-entry-is-not-gfds-set", {"a": "1"}, [managed("gfd", "Update", "a")], {}),
    ("owned-but-gone", {"a": "1"}, [managed("gfd", "Apply", "a", "gone")], {"a": "1"}),
    ("no-managed-fields", {"a": "1"}, None, {}),
    ("no-labels", None, [managed("gfd", "Apply", "a")], {}),
]


@pytest.mark.parametrize("labels, fields, owned", [o[1:] for o in OWNED],
                         ids=[o[0] for o in OWNED])
def test_owned_labels_are_the_keys_gfds_apply_entry_lists(
        labels: dict[str, str] | None, fields: list[dict[str, Any]] | None,
        owned: dict[str, str]) -> None:
    node = {"metadata": {"labels": labels, "managedFields": fields}}
    assert owned_labels(node) == owned


OFFENDING = [
    ("key-in-the-message", 'Invalid value: "k1": name part must ...', (), {"k1"}),
    ("key-in-a-cause", "is invalid", ('Invalid value: "k2"',), {"k2"}),
    ("value-in-a-cause", "is invalid", ('Invalid value: "-v"',), {"k3"}),
    ("nothing-named", "is invalid", ('Invalid value: "other"',), set()),
]


@pytest.mark.parametrize("message, causes, keys", [o[1:] for o in OFFENDING],
                         ids=[o[0] for o in OFFENDING])
def test_offending_keys_are_the_labels_a_422_quotes(message: str, causes: tuple[str, ...],
                                                    keys: set[str]) -> None:
    error = ApiError(message, status=422, causes=causes)
    assert offending_keys(error, {"k1": "a", "k2": "b", "k3": "-v", "k4": ""}) == keys
