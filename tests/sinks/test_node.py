"""The Node sink against the in-memory API: it costs no call while labels are unchanged,
one server-side apply per change, removes only keys it set, reports what the server did (not
what it sent), keeps a rejected label's published value and tries it again with backoff,
never creates a Node (every apply names its uid), heals drift when refreshed, and prunes
exactly its own labels. (The same sink with the real kubernetes client over HTTP:
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

from gfd.errors import ApiError, Refused
from gfd.kube import Kube
from gfd.sinks.node import (
    FIELD_MANAGER,
    REJECTED_RETRY_CAP,
    REJECTED_RETRY_START,
    NodeSink,
    co_owners,
    current_labels,
    offending_keys,
    owned_labels,
)
from gfd.sinks.objectwatch import WATCHED_RESYNC
from gfd.sinks.retry import Retry
from gfd.triggers import Trigger

NODE = "gpu-node-1"
LABELS = {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
          "nvidia.com/cuda.driver.rev": ""}
OTHERS = {"kubernetes.io/hostname": NODE, "team": "ml"}


@pytest.fixture
def api() -> MemoryApi:
    memory = MemoryApi()
    memory.add_node(NODE, labels=OTHERS)
    return memory


def sink(api: MemoryApi, sleeps: Sleeps | None = None, clock: Clock | None = None) -> NodeSink:
    return NodeSink(api, NODE, retry=Retry(sleep=Sleeps() if sleeps is None else sleeps),
                    clock=clock or Clock(), rand=lambda: 1.0)


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


# ----------------------------------------------------------------------------- a rejected value

COUNT = "nvidia.com/gpu.count"


def rejecting(api: MemoryApi, value: str) -> None:
    """One 422 naming ``value``, as a validating admission webhook answers."""
    cause = f'Invalid value: "{value}": refused by a webhook'
    api.fail("apply_node_labels", 422, message=f'Node "{NODE}" is invalid: metadata.labels: '
                                               f"{cause}", causes=(cause,))


def test_a_transient_422_keeps_the_published_value_in_the_same_request(
        api: MemoryApi, caplog: pytest.LogCaptureFixture) -> None:
    """Regression: the apply went out without the rejected label, which deleted its published
    value until the next resync (an hour)."""
    clock = Clock()
    node = sink(api, clock=clock)
    node.publish(LABELS)
    rejecting(api, "7")
    api.clear_log()
    result = node.publish({**LABELS, COUNT: "7"})
    assert result.written and result.rejected == (COUNT,)
    assert result.change.empty, "nothing changed on the Node: nothing is reported"
    assert api.labels(NODE)[COUNT] == "8", "never deleted, not even for a moment"
    assert methods(api) == ["apply_node_labels", "apply_node_labels"]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and COUNT in errors[0].getMessage()
    assert "keeping its published value '8'" in errors[0].getMessage()

    api.clear_log()
    clock.now += REJECTED_RETRY_START - 1
    assert not node.publish({**LABELS, COUNT: "7"}).written, "not retried every cycle"
    assert api.count() == 0
    clock.now += 1
    result = node.publish({**LABELS, COUNT: "7"})
    assert result.written and result.change.changed == (COUNT,) and not result.rejected
    assert methods(api) == ["apply_node_labels"]
    assert api.labels(NODE)[COUNT] == "7"
    api.clear_log()
    clock.now += 10 * REJECTED_RETRY_CAP
    assert not node.publish({**LABELS, COUNT: "7"}).written, "and then left alone"


def test_a_transient_422_on_an_unchanged_label_sends_it_again_and_leaves_it_on_the_node(
        api: MemoryApi, caplog: pytest.LogCaptureFixture) -> None:
    """Regression (issue 20): a rejected value equal to the published one was left out of the
    apply, and server-side apply without the key deleted it from the Node."""
    clock = Clock()
    node = sink(api, clock=clock)
    node.publish(LABELS)
    rejecting(api, "8")  # the published value of COUNT, refused once
    api.clear_log()
    result = node.publish({**LABELS, "nvidia.com/gpu.product": "NVIDIA-H100"})
    assert api.labels(NODE)[COUNT] == "8", "the unchanged label stays on the Node"
    assert result.rejected == (COUNT,) and result.change.changed == ("nvidia.com/gpu.product",)
    assert methods(api) == ["apply_node_labels", "apply_node_labels"]
    assert "sending its published value again" in caplog.text
    api.clear_log()
    clock.now += 10 * REJECTED_RETRY_CAP
    assert not node.publish({**LABELS, "nvidia.com/gpu.product": "NVIDIA-H100"}).written, \
        "the value went through: nothing is held, nothing retried"


def test_an_unchanged_label_rejected_twice_in_a_row_is_left_out(api: MemoryApi) -> None:
    node = sink(api)
    node.publish(LABELS)
    rejecting(api, "8")
    rejecting(api, "8")
    result = node.publish({**LABELS, "nvidia.com/gpu.product": "NVIDIA-H100"})
    assert result.rejected == (COUNT,) and COUNT not in api.labels(NODE)
    assert api.count("apply_node_labels") == 1 + 3


def test_a_persistent_422_costs_requests_only_at_growing_intervals(
        api: MemoryApi, caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    node = sink(api, clock=clock)
    node.publish(LABELS)
    api.deny_label(COUNT, "7")
    api.clear_log()
    for _ in range(6 * 360):  # six hours of 10-second cycles
        node.publish({**LABELS, COUNT: "7"})
        clock.now += 10
        assert api.labels(NODE)[COUNT] == "8"
    tries = api.count("apply_node_labels") // 2  # each: the value, then its fallback
    assert 6 <= tries <= 6 + 6, tries  # 1, 2, 4, 8, 16, 32 minutes, then hourly
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 1, "logged once"
    api.allow_label(COUNT)
    clock.now += REJECTED_RETRY_CAP
    assert node.publish({**LABELS, COUNT: "7"}).written
    assert api.labels(NODE)[COUNT] == "7"


def test_a_rejected_value_is_dropped_when_gfd_no_longer_wants_it(api: MemoryApi) -> None:
    clock = Clock()
    node = sink(api, clock=clock)
    node.publish(LABELS)
    api.deny_label(COUNT, "7")
    node.publish({**LABELS, COUNT: "7"})
    api.clear_log()
    result = node.publish({**LABELS, COUNT: "6"})
    assert result.written and result.change.changed == (COUNT,) and not result.rejected
    assert methods(api) == ["apply_node_labels"] and api.labels(NODE)[COUNT] == "6"


def test_a_rejected_new_label_is_left_out_and_the_others_published(api: MemoryApi) -> None:
    node = sink(api)
    node.publish(LABELS)
    api.deny_label("nvidia.com/gpu.family", "hopper")
    result = node.publish({**LABELS, "nvidia.com/gpu.family": "hopper"})
    assert result.rejected == ("nvidia.com/gpu.family",) and result.change.empty
    assert api.labels(NODE) == {**OTHERS, **LABELS}


def test_a_rejected_fallback_is_left_out_too(api: MemoryApi) -> None:
    node = sink(api)
    node.publish(LABELS)
    rejecting(api, "7")
    api.fail("apply_node_labels", 422, causes=('Invalid value: "8": refused',))
    result = node.publish({**LABELS, COUNT: "7"})
    assert result.rejected == (COUNT,) and result.change.removed == (COUNT,)
    assert COUNT not in api.labels(NODE)
    assert api.count("apply_node_labels") == 1 + 3


# ----------------------------------------------------------------------------- the server's answer


def test_a_dropped_key_another_manager_owns_too_is_kept_and_not_reported_removed(
        api: MemoryApi, caplog: pytest.LogCaptureFixture) -> None:
    """Regression: the change log said ``-key`` although the server kept it."""
    node = sink(api)
    node.publish(LABELS)
    api.apply_node_labels(NODE, {COUNT: "8"}, field_manager="gpu-operator")  # same value
    caplog.set_level(logging.INFO, logger="gfd.sinks.node")
    result = node.publish({k: v for k, v in LABELS.items() if k != COUNT})
    assert result.written and result.change.empty
    assert api.labels(NODE)[COUNT] == "8"
    assert any(f"label {COUNT} stays on Node {NODE}: another field manager owns it too "
               "(gpu-operator)" in r.getMessage() for r in caplog.records)


def test_prune_reports_only_what_the_server_removed(api: MemoryApi) -> None:
    sink(api).publish(LABELS)
    api.apply_node_labels(NODE, {COUNT: "8"}, field_manager="gpu-operator")
    result = sink(api).prune()
    assert set(result.change.removed) == set(LABELS) - {COUNT}
    assert api.labels(NODE) == {**OTHERS, COUNT: "8"}


def test_a_restarted_sink_reports_a_key_another_writer_took_over_as_changed(
        api: MemoryApi) -> None:
    sink(api).publish(LABELS)
    api.set_label(NODE, COUNT, "taken-over", manager="kubectl")
    result = sink(api).publish(LABELS)
    assert result.change.changed == (COUNT,) and not result.change.added
    assert api.labels(NODE)[COUNT] == "8" and api.owners(NODE, COUNT) == {FIELD_MANAGER}


def test_published_with_wanted_keys_shows_another_writers_value(api: MemoryApi) -> None:
    node = sink(api)
    node.publish(LABELS)
    api.set_label(NODE, COUNT, "taken-over", manager="kubectl")
    assert node.published(also=LABELS)[COUNT] == "taken-over"
    assert node.published(also=["team"])["team"] == "ml"
    assert COUNT not in node.published(), "gfd no longer owns it"


# ----------------------------------------------------------------------------- never a new Node


def test_every_apply_names_the_nodes_uid(api: MemoryApi) -> None:
    node = sink(api)
    node.publish(LABELS)
    uid = api.get_node(NODE)["metadata"]["uid"]
    api.delete_node(NODE)
    api.add_node(NODE, labels=OTHERS)  # the same name, another Node
    assert api.get_node(NODE)["metadata"]["uid"] != uid
    api.clear_log()
    result = node.publish({**LABELS, COUNT: "7"})
    assert result.written and set(result.change.added) == set(LABELS)
    assert methods(api) == ["apply_node_labels", "get_node", "apply_node_labels"]
    assert api.labels(NODE) == {**OTHERS, **LABELS, COUNT: "7"}


@pytest.mark.parametrize("refresh", [False, True], ids=["a-change", "a-resync"])
def test_a_deleted_node_is_never_created_again(api: MemoryApi, refresh: bool) -> None:
    """Regression: server-side apply creates what does not exist, so where RBAC allowed
    ``create`` the next apply brought a deleted Node back (with only gfd's labels)."""
    node = sink(api)
    node.publish(LABELS)
    api.delete_node(NODE)
    api.clear_log()
    if refresh:
        node.refresh()
    with pytest.raises(ApiError) as caught:
        node.publish({**LABELS, COUNT: "7"} if not refresh else LABELS)
    assert caught.value.status == 404 and f'nodes "{NODE}" not found' in str(caught.value)
    assert methods(api) == ["apply_node_labels", "get_node"]
    assert api.count("apply_node_labels") == 1
    with pytest.raises(ApiError):
        api.get_node(NODE)


def test_prune_of_a_deleted_node_creates_nothing(api: MemoryApi) -> None:
    node = sink(api)
    node.publish(LABELS)
    api.delete_node(NODE)
    with pytest.raises(ApiError) as caught:
        node.prune()
    assert caught.value.status == 404
    with pytest.raises(ApiError):
        api.get_node(NODE)


# ----------------------------------------------------------------------------- prune, read, close


def test_prune_removes_only_gfds_labels_and_reports_them(api: MemoryApi) -> None:
    sink(api).publish(LABELS)
    result = sink(api).prune()
    assert result.written and set(result.change.removed) == set(LABELS)
    assert api.labels(NODE) == OTHERS


def test_prune_of_a_node_gfd_never_labelled_writes_nothing(api: MemoryApi) -> None:
    result = sink(api).prune()
    assert not result.written and result.change.empty
    assert api.count("apply_node_labels") == 0 and api.labels(NODE) == OTHERS


def test_prune_refuses_nvidia_labels_another_field_manager_set(api: MemoryApi) -> None:
    """GFD's labels (through nfd-master) or a hand-set one: not gfd's, left with one line."""
    api.set_label(NODE, COUNT, "8", manager="nfd-master")
    api.set_label(NODE, "nvidia.com/gpu.product", "A100", manager="nfd-master")
    with pytest.raises(Refused) as refused:
        sink(api).prune()
    assert str(refused.value) == (
        f"Node {NODE}: labels left in place: {COUNT}, nvidia.com/gpu.product set by "
        "nfd-master, not gfd; gfd prune removes only the labels gfd applied (field manager "
        "gfd)")
    assert api.count("apply_node_labels") == 0
    assert api.labels(NODE) == {**OTHERS, COUNT: "8", "nvidia.com/gpu.product": "A100"}


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


def test_current_labels_are_gfds_own_keys_and_the_wanted_ones_whoever_owns_them() -> None:
    node = {"metadata": {
        "labels": {"mine": "1", "shared": "2", "theirs": "3", "wanted": "4"},
        "managedFields": [managed("gfd", "Apply", "mine", "shared"),
                          managed("kubelet", "Update", "shared", "theirs", "wanted")]}}
    assert current_labels(node) == {"mine": "1"}, "a shared key stays when gfd drops it"
    assert current_labels(node, also=["wanted", "absent"]) == {"mine": "1", "wanted": "4"}
    assert co_owners(node, "shared") == ["kubelet"] and co_owners(node, "mine") == []


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


# ----------------------------------------------------------------------------- the watch


class Fired(list[Trigger]):
    def __call__(self, trigger: Trigger) -> None:
        self.append(trigger)


@pytest.fixture
def watched(tmp_path: Any) -> Iterator[tuple[NodeSink, FakeApiServer, Fired]]:
    with FakeApiServer() as server:
        server.add_node(NODE, labels={"kubernetes.io/hostname": NODE})
        kube = Kube(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")), qps=0)
        node_sink = NodeSink(kube, NODE, watch_api=kube)
        fired = Fired()
        node_sink.publish({"nvidia.com/gpu.count": "8"})
        node_sink.watch(fired)
        wait_for(lambda: server.open_watches == 1)
        yield node_sink, server, fired
        node_sink.close()


class HeldList:
    """The sink's watch API, whose LIST is answered at once but handed to the watch only when
    the test says: a read taken before gfd's write and delivered after it. The first
    ``free`` reads are handed on at once."""

    def __init__(self, kube: Kube, free: int = 0) -> None:
        self.kube = kube
        self.free = free
        self.listed = threading.Event()
        self.release = threading.Event()

    def list_object(self, *args: Any, **kwargs: Any) -> Any:
        answer = self.kube.list_object(*args, **kwargs)
        if self.free > 0:
            self.free -= 1
            return answer
        self.listed.set()
        self.release.wait(5)
        return answer

    def watch(self, *args: Any, **kwargs: Any) -> Any:
        return self.kube.watch(*args, **kwargs)


def test_the_watchs_first_read_and_gfds_first_apply_are_no_drift(tmp_path: Any) -> None:
    """Regression (issue 20): the loop starts the watch, then publishes; the watch's first
    LIST, taken before gfd's first apply, was read as drift -- a phantom repair (a read and an
    apply) per node at every start."""
    with FakeApiServer() as server:
        server.add_node(NODE, labels={"kubernetes.io/hostname": NODE})
        kube = Kube(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")), qps=0)
        held = HeldList(kube)
        node_sink = NodeSink(kube, NODE, watch_api=held)
        fired = Fired()
        try:
            node_sink.watch(fired)  # as the loop does, before its first cycle
            held.listed.wait(0.5)  # a LIST sent now would be answered by now
            node_sink.publish({"nvidia.com/gpu.count": "8"})
            held.release.set()
            wait_for(lambda: server.open_watches == 1)
            time.sleep(0.3)
            assert fired == [], [t.detail for t in fired]
            server.set_label(NODE, "nvidia.com/gpu.count", "99")  # real drift is still seen
            wait_for(lambda: len(fired) == 1, timeout=5)
        finally:
            node_sink.close()


def test_a_read_after_an_expired_watch_taken_before_gfds_apply_is_no_drift(
        tmp_path: Any) -> None:
    """The watch reads the Node again after a 410; that read, taken before an apply of gfd's
    and delivered after it, shows the old labels: the apply itself repairs whatever it shows."""
    with FakeApiServer() as server:
        server.add_node(NODE, labels={"kubernetes.io/hostname": NODE})
        kube = Kube(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")), qps=0)
        held = HeldList(kube, free=1)
        node_sink = NodeSink(kube, NODE, watch_api=held)
        fired = Fired()
        try:
            node_sink.watch(fired)
            node_sink.publish({"nvidia.com/gpu.count": "8"})
            wait_for(lambda: server.open_watches == 1)
            server.set_label(NODE, "team", "ml")  # the Node's last change is not gfd's
            server.send_watch_error(410, "Expired", "too old resource version")
            assert held.listed.wait(5)
            node_sink.publish({"nvidia.com/gpu.count": "7"})
            held.release.set()
            wait_for(lambda: server.open_watches == 1)
            time.sleep(0.3)
            assert fired == [], [t.detail for t in fired]
            server.set_label(NODE, "nvidia.com/gpu.count", "99")  # real drift is still seen
            wait_for(lambda: len(fired) == 1, timeout=5)
        finally:
            node_sink.close()


def test_gfds_own_apply_seen_by_the_watch_is_no_drift(
        watched: tuple[NodeSink, FakeApiServer, Fired]) -> None:
    node_sink, server, fired = watched
    node_sink.publish({"nvidia.com/gpu.count": "7"})
    node_sink.publish({"nvidia.com/gpu.count": "6"})
    server.set_label(NODE, "team", "ml")  # someone else's label: not gfd's business
    time.sleep(0.5)
    assert fired == []


def test_an_overwritten_label_fires_a_trigger_whose_cycle_applies_it_again(
        watched: tuple[NodeSink, FakeApiServer, Fired]) -> None:
    node_sink, server, fired = watched
    server.set_label(NODE, "nvidia.com/gpu.count", "99")
    wait_for(lambda: len(fired) == 1, timeout=5)
    assert (fired[0].source, fired[0].kind) == ("api", "changed")
    assert "nvidia.com/gpu.count" in fired[0].detail
    assert fired[0].action is not None
    fired[0].action()  # the loop runs it, then a cycle publishes the same labels
    assert node_sink.publish({"nvidia.com/gpu.count": "8"}).written
    assert server.labels(NODE)["nvidia.com/gpu.count"] == "8"


def test_a_deleted_node_fires_nothing_and_a_new_one_is_replaced(
        watched: tuple[NodeSink, FakeApiServer, Fired]) -> None:
    _, server, fired = watched
    server.delete_node(NODE)
    time.sleep(0.3)
    assert fired == [], "gfd never creates a Node"
    server.add_node(NODE)
    wait_for(lambda: len(fired) == 1, timeout=5)
    assert fired[0].kind == "replaced"


def test_with_a_healthy_watch_the_resync_waits_a_day(
        watched: tuple[NodeSink, FakeApiServer, Fired]) -> None:
    node_sink, server, _ = watched
    # The server counts the watch open when it answers; the sink calls it healthy once the
    # answer has reached its thread, a moment later on a busy machine.
    wait_for(lambda: not node_sink._watched.resync_due(0.0))
    server.clear_log()
    node_sink.refresh()  # the hourly resync duty
    assert not node_sink.publish({"nvidia.com/gpu.count": "8"}).written
    assert server.count() == 0
    node_sink.clock = lambda: time.monotonic() + WATCHED_RESYNC
    node_sink.refresh()
    assert node_sink.publish({"nvidia.com/gpu.count": "8"}).written


def test_without_a_watch_the_resync_applies_again(api: MemoryApi) -> None:
    node_sink = sink(api)
    node_sink.publish({"nvidia.com/gpu.count": "8"})
    node_sink.refresh()
    assert node_sink.publish({"nvidia.com/gpu.count": "8"}).written
