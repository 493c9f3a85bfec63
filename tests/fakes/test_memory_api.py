"""The in-memory API answers like the real boundary: each scenario runs twice, against
``MemoryApi`` and against ``gfd.kube.Kube`` over the HTTP fake API server, and must give the
same statuses, reasons, causes, flags and stored state both times."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fakes.apiserver import FakeApiServer
from fakes.memory_api import MemoryApi
from gfd.errors import ApiError
from gfd.kube import Kube
from gfd.sinks.node import offending_keys, owned_labels
from gfd.sinks.nodefeature import build, object_name

NODE = "gpu-node-1"
NS = "gfd"
NF = object_name(NODE)

# method -> (RBAC verb, resource) and (HTTP method, path part) on the HTTP fake.
RBAC = {"get_node": ("get", "nodes"), "apply_node_labels": ("patch", "nodes"),
        "get_nodefeature": ("get", "nodefeatures"),
        "create_nodefeature": ("create", "nodefeatures"),
        "replace_nodefeature": ("update", "nodefeatures"),
        "delete_nodefeature": ("delete", "nodefeatures"), "get_pod": ("get", "pods")}
HTTP = {"get_node": ("GET", "/nodes/"), "apply_node_labels": ("PATCH", "/nodes/"),
        "get_nodefeature": ("GET", "/nodefeatures/"),
        "create_nodefeature": ("POST", "/nodefeatures"),
        "replace_nodefeature": ("PUT", "/nodefeatures/"),
        "delete_nodefeature": ("DELETE", "/nodefeatures/"), "get_pod": ("GET", "/pods/")}


@dataclass
class World:
    """One API and the server state behind it, set up the same way for both kinds."""

    api: Any
    """Kube or MemoryApi: what the sinks call."""
    state: Any
    """FakeApiServer or MemoryApi: what the test arranges and inspects."""

    def forbid(self, method: str) -> None:
        if isinstance(self.state, MemoryApi):
            self.state.forbid(method)
        else:
            self.state.forbid(*RBAC[method])

    def deny_label(self, key: str, value: str) -> None:
        self.state.deny_label(key, value)

    def fail(self, method: str, status: int, *, retry_after: int | None = None) -> None:
        if isinstance(self.state, MemoryApi):
            self.state.fail(method, status, retry_after=retry_after)
        else:
            verb, path = HTTP[method]
            self.state.inject(status, 1, method=verb, path_contains=path,
                              retry_after=retry_after)


@pytest.fixture(params=["memory", "http"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    if request.param == "memory":
        memory = MemoryApi()
        memory.add_node(NODE, labels={"kubernetes.io/hostname": NODE})
        yield World(memory, memory)
        return
    with FakeApiServer() as server:
        server.add_node(NODE, labels={"kubernetes.io/hostname": NODE})
        kube = Kube(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")), qps=0)
        try:
            yield World(kube, server)
        finally:
            kube.close()


def api_error(call: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        call()
    return caught.value


# ----------------------------------------------------------------------------- Nodes


def test_get_of_a_missing_node_is_a_404_for_that_object(world: World) -> None:
    error = api_error(lambda: world.api.get_node("no-such-node"))
    assert (error.status, error.reason, error.resource_missing) == (404, "NotFound", False)
    assert not error.retriable


def test_apply_sets_the_labels_and_the_manager_owns_exactly_those(world: World) -> None:
    node = world.api.apply_node_labels(NODE, {"a": "1", "b": "2"}, field_manager="gfd")
    assert owned_labels(node, "gfd") == {"a": "1", "b": "2"}
    assert owned_labels(world.api.get_node(NODE), "gfd") == {"a": "1", "b": "2"}
    assert world.state.labels(NODE) == {"kubernetes.io/hostname": NODE, "a": "1", "b": "2"}


def test_applying_fewer_labels_removes_only_the_managers_dropped_keys(world: World) -> None:
    world.state.set_label(NODE, "team", "ml")
    world.api.apply_node_labels(NODE, {"a": "1", "b": "2"}, field_manager="gfd")
    world.api.apply_node_labels(NODE, {"a": "1"}, field_manager="gfd")
    assert world.state.labels(NODE) == {"kubernetes.io/hostname": NODE, "team": "ml", "a": "1"}


def test_a_key_another_writer_set_to_the_same_value_survives_being_dropped(world: World) -> None:
    world.state.set_label(NODE, "shared", "x")
    world.api.apply_node_labels(NODE, {"shared": "x"}, field_manager="gfd")
    world.api.apply_node_labels(NODE, {}, field_manager="gfd")
    assert world.state.labels(NODE)["shared"] == "x"


def test_a_forced_apply_takes_over_a_key_another_writer_set_differently(world: World) -> None:
    world.state.set_label(NODE, "k", "theirs")
    world.api.apply_node_labels(NODE, {"k": "ours"}, field_manager="gfd")
    assert world.state.labels(NODE)["k"] == "ours"
    world.api.apply_node_labels(NODE, {}, field_manager="gfd")
    assert "k" not in world.state.labels(NODE), "the other writer lost the key to gfd"


def test_an_overwrite_by_another_writer_moves_the_key_and_a_same_value_write_does_not(
        world: World) -> None:
    world.api.apply_node_labels(NODE, {"a": "1", "b": "2"}, field_manager="gfd")
    world.state.set_label(NODE, "a", "hand", manager="kubectl")
    world.state.set_label(NODE, "b", "2", manager="kubectl")
    assert owned_labels(world.api.get_node(NODE), "gfd") == {"b": "2"}
    answer = world.api.apply_node_labels(NODE, {}, field_manager="gfd")
    assert answer["metadata"]["labels"] == {"kubernetes.io/hostname": NODE, "a": "hand"}


def test_an_apply_naming_the_uid_of_a_deleted_node_is_a_409_and_creates_nothing(
        world: World) -> None:
    uid = world.api.get_node(NODE)["metadata"]["uid"]
    world.state.delete_node(NODE)
    error = api_error(lambda: world.api.apply_node_labels(NODE, {"a": "1"},
                                                          field_manager="gfd", uid=uid))
    assert (error.status, error.reason) == (409, "Conflict")
    assert f"uid mismatch: the provided object specified uid {uid}, and no existing object " \
           "was found" in str(error)
    assert api_error(lambda: world.api.get_node(NODE)).status == 404


def test_an_apply_naming_another_uid_is_a_422_on_the_uid(world: World) -> None:
    other = "0a0a0a0a-0000-0000-0000-000000000000"
    error = api_error(lambda: world.api.apply_node_labels(NODE, {"a": "1"},
                                                          field_manager="gfd", uid=other))
    assert (error.status, error.reason) == (422, "Invalid")
    assert "metadata.uid: Invalid value" in str(error) and "field is immutable" in str(error)
    assert error.causes == (f'Invalid value: "{other}": field is immutable',)
    assert "a" not in world.state.labels(NODE)


def test_an_apply_naming_the_nodes_uid_goes_through(world: World) -> None:
    uid = world.api.get_node(NODE)["metadata"]["uid"]
    answer = world.api.apply_node_labels(NODE, {"a": "1"}, field_manager="gfd", uid=uid)
    assert answer["metadata"]["uid"] == uid and world.state.labels(NODE)["a"] == "1"


@pytest.mark.parametrize("labels, named", [
    ({"good": "1", "bad key": "1"}, {"bad key"}),
    ({"good": "1", "k": "-starts-with-a-dash"}, {"k"}),
    ({"x/y/z": "1", "good": "1"}, {"x/y/z"}),
], ids=["key-with-a-space", "value-with-a-leading-dash", "two-slashes"])
def test_an_invalid_label_is_a_422_whose_causes_name_it_and_nothing_changes(
        world: World, labels: dict[str, str], named: set[str]) -> None:
    before = world.state.labels(NODE)
    error = api_error(lambda: world.api.apply_node_labels(NODE, labels, field_manager="gfd"))
    assert (error.status, error.reason) == (422, "Invalid")
    assert error.causes and not error.retriable
    assert offending_keys(error, labels) == named
    assert world.state.labels(NODE) == before


def test_a_denied_label_value_is_a_422_naming_it_and_only_that_value_is_refused(
        world: World) -> None:
    world.api.apply_node_labels(NODE, {"a": "1"}, field_manager="gfd")
    world.deny_label("a", "2")
    wanted = {"a": "2", "b": "1"}
    error = api_error(lambda: world.api.apply_node_labels(NODE, wanted, field_manager="gfd"))
    assert (error.status, error.reason) == (422, "Invalid")
    assert str(error).endswith('is invalid: metadata.labels: Invalid value: "2": refused by '
                               "policy")
    assert error.causes == ('Invalid value: "2": refused by policy',)
    assert offending_keys(error, wanted) == {"a"}
    assert world.state.labels(NODE) == {"kubernetes.io/hostname": NODE, "a": "1"}
    world.api.apply_node_labels(NODE, {"a": "1", "b": "1"}, field_manager="gfd")
    world.state.allow_label("a")
    world.api.apply_node_labels(NODE, wanted, field_manager="gfd")
    assert world.state.labels(NODE)["a"] == "2"


def test_resource_version_moves_on_a_change_and_not_on_a_repeat(world: World) -> None:
    first = world.api.apply_node_labels(NODE, {"a": "1"}, field_manager="gfd")
    again = world.api.apply_node_labels(NODE, {"a": "1"}, field_manager="gfd")
    changed = world.api.apply_node_labels(NODE, {"a": "2"}, field_manager="gfd")
    version = [n["metadata"]["resourceVersion"] for n in (first, again, changed)]
    assert version[0] == version[1] != version[2]


# ----------------------------------------------------------------------------- NodeFeatures


def test_a_missing_nodefeature_reads_as_none(world: World) -> None:
    assert world.api.get_nodefeature(NS, NF) is None


def test_nodefeature_create_read_replace_delete(world: World) -> None:
    created = world.api.create_nodefeature(NS, build(NODE, NS, {"a": "1"}, []))
    assert created["metadata"]["resourceVersion"]
    assert world.api.get_nodefeature(NS, NF)["spec"]["labels"] == {"a": "1"}
    current = world.api.get_nodefeature(NS, NF)
    current["spec"]["labels"] = {"a": "2"}
    replaced = world.api.replace_nodefeature(NS, current)
    assert replaced["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]
    assert world.state.nodefeature(NS, NF)["spec"]["labels"] == {"a": "2"}
    assert world.api.delete_nodefeature(NS, NF) is True
    assert world.state.nodefeature(NS, NF) is None
    assert world.api.delete_nodefeature(NS, NF) is False


def test_creating_an_existing_nodefeature_is_a_409_already_exists(world: World) -> None:
    world.api.create_nodefeature(NS, build(NODE, NS, {"a": "1"}, []))
    error = api_error(lambda: world.api.create_nodefeature(NS, build(NODE, NS, {}, [])))
    assert (error.status, error.reason) == (409, "AlreadyExists")


def test_replacing_with_a_stale_resource_version_is_a_409_conflict(world: World) -> None:
    stale = world.api.create_nodefeature(NS, build(NODE, NS, {"a": "1"}, []))
    fresh = world.api.get_nodefeature(NS, NF)
    fresh["spec"]["labels"] = {"a": "2"}
    world.api.replace_nodefeature(NS, fresh)
    stale["spec"]["labels"] = {"a": "3"}
    error = api_error(lambda: world.api.replace_nodefeature(NS, stale))
    assert (error.status, error.reason) == (409, "Conflict")
    assert world.state.nodefeature(NS, NF)["spec"]["labels"] == {"a": "2"}


def test_replacing_without_a_resource_version_is_a_422(world: World) -> None:
    world.api.create_nodefeature(NS, build(NODE, NS, {"a": "1"}, []))
    error = api_error(lambda: world.api.replace_nodefeature(NS, build(NODE, NS, {}, [])))
    assert (error.status, error.reason) == (422, "Invalid")


def test_replacing_a_missing_nodefeature_is_a_404(world: World) -> None:
    body = build(NODE, NS, {}, [])
    body["metadata"]["resourceVersion"] = "1"
    error = api_error(lambda: world.api.replace_nodefeature(NS, body))
    assert (error.status, error.resource_missing) == (404, False)


def test_replacing_a_deleted_nodefeature_read_before_is_a_409_on_its_uid(world: World) -> None:
    created = world.api.create_nodefeature(NS, build(NODE, NS, {"a": "1"}, []))
    assert world.api.delete_nodefeature(NS, NF)
    error = api_error(lambda: world.api.replace_nodefeature(NS, created))
    assert (error.status, error.reason) == (409, "Conflict")
    assert str(error).endswith(f"Precondition failed: UID in precondition: "
                               f"{created['metadata']['uid']}, UID in object meta:")


def test_without_the_crd_every_nodefeature_call_is_a_missing_resource(world: World) -> None:
    world.state.set_crd_installed(False)
    for call in (lambda: world.api.get_nodefeature(NS, NF),
                 lambda: world.api.create_nodefeature(NS, build(NODE, NS, {}, []))):
        error = api_error(call)
        assert (error.status, error.resource_missing) == (404, True)
        assert "Node Feature Discovery" in str(error) and "\n" not in str(error)
    assert world.api.delete_nodefeature(NS, NF) is False


# ----------------------------------------------------------------------------- Pods


def test_a_daemonset_pod_names_its_owner_and_a_missing_pod_is_a_404(world: World) -> None:
    world.state.add_pod(NS, "gfd-abcde", "gfd")
    [owner] = world.api.get_pod(NS, "gfd-abcde")["metadata"]["ownerReferences"]
    assert (owner["apiVersion"], owner["kind"], owner["name"]) == ("apps/v1", "DaemonSet", "gfd")
    assert owner["uid"]
    assert api_error(lambda: world.api.get_pod(NS, "gone")).status == 404


# ----------------------------------------------------------------------------- failures


def test_a_forbidden_call_is_a_403_naming_the_fix(world: World) -> None:
    world.forbid("apply_node_labels")
    error = api_error(lambda: world.api.apply_node_labels(NODE, {"a": "1"},
                                                          field_manager="gfd"))
    assert (error.status, error.reason) == (403, "Forbidden")
    assert "ServiceAccount" in str(error) and not error.retriable
    assert world.api.get_node(NODE)["metadata"]["name"] == NODE, "only that verb is denied"


@pytest.mark.parametrize("method, call", [
    ("get_node", lambda api: api.get_node(NODE)),
    ("apply_node_labels", lambda api: api.apply_node_labels(NODE, {}, field_manager="gfd")),
    ("get_nodefeature", lambda api: api.get_nodefeature(NS, NF)),
    ("create_nodefeature", lambda api: api.create_nodefeature(NS, build(NODE, NS, {}, []))),
], ids=["get_node", "apply_node_labels", "get_nodefeature", "create_nodefeature"])
def test_an_injected_429_carries_retry_after_and_fails_one_call(
        world: World, method: str, call: Any) -> None:
    world.fail(method, 429, retry_after=3)
    error = api_error(lambda: call(world.api))
    assert (error.status, error.reason, error.retry_after) == (429, "TooManyRequests", 3.0)
    assert error.retriable
    call(world.api)  # the next one goes through


def test_an_injected_500_is_retriable(world: World) -> None:
    world.fail("get_node", 500)
    error = api_error(lambda: world.api.get_node(NODE))
    assert (error.status, error.reason, error.retry_after) == (500, "InternalError", None)
    assert error.retriable


def test_a_server_that_does_not_answer_is_an_error_without_a_status(world: World) -> None:
    world.state.set_down(True)
    error = api_error(lambda: world.api.get_node(NODE))
    assert error.status is None and error.retriable
    assert "cannot reach the API server" in str(error)
    world.state.set_down(False)
    assert world.api.get_node(NODE)["metadata"]["name"] == NODE


# ----------------------------------------------------------------------------- memory only


def test_the_memory_api_logs_every_call_and_counts_closes() -> None:
    api = MemoryApi()
    api.add_node(NODE)
    api.get_node(NODE)
    api.get_nodefeature(NS, NF)
    api.close()
    assert [(c.method, c.target) for c in api.calls] == [
        ("get_node", NODE), ("get_nodefeature", f"{NS}/{NF}")]
    assert api.count("get_node") == 1 and api.closed == 1
    api.clear_log()
    assert api.count() == 0


def test_a_failure_for_good_lasts_until_cleared() -> None:
    api = MemoryApi()
    api.add_node(NODE)
    api.fail("get_node", 503, times=None)
    for _ in range(3):
        assert api_error(lambda: api.get_node(NODE)).status == 503
    api.clear_failures()
    assert api.get_node(NODE)["metadata"]["name"] == NODE


def test_the_memory_api_refuses_a_method_it_does_not_have() -> None:
    with pytest.raises(ValueError, match="unknown method"):
        MemoryApi().fail("patch_node")
