"""The fake API server behaves like the real one, as seen through the real client."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from .apiserver import (
    APPLY_PATCH,
    JSON_PATCH,
    MERGE_PATCH,
    NFD_API_VERSION,
    STRATEGIC_MERGE_PATCH,
    FakeApiServer,
    json_patch,
    label_value_errors,
    qualified_name_errors,
)

GROUP, VERSION, PLURAL, NS = "nfd.k8s-sigs.io", "v1alpha1", "nodefeatures", "gfd"

ClientFactory = Callable[..., client.ApiClient]
# The generated API classes and models are typed Optional everywhere; the tests
# assert shapes at run time, so the API objects are handled as Any here.
Api = Any


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        server.add_node("n1", labels={"kubernetes.io/hostname": "n1"})
        yield server
        assert server.errors == []


@pytest.fixture
def kubeconfig(api: FakeApiServer, tmp_path: Path) -> Path:
    return api.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def make_client(kubeconfig: Path) -> Iterator[ClientFactory]:
    """ApiClients built from the kubeconfig, never the global default configuration."""
    made: list[client.ApiClient] = []

    def make(*, retries: Any = 0, token: str | None = None) -> client.ApiClient:
        cfg = client.Configuration()
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig), client_configuration=cfg
        )
        cfg.retries = retries  # 0: no urllib3 retries, so faults surface at once
        if token is not None:
            cfg.refresh_api_key_hook = None  # the kubeconfig loader re-sets the token
            cfg.api_key["BearerToken"] = f"Bearer {token}"
        api_client = client.ApiClient(cfg)
        made.append(api_client)
        return api_client

    yield make
    for api_client in made:
        api_client.close()  # type: ignore[no-untyped-call]


@pytest.fixture
def core(make_client: ClientFactory) -> Api:
    return client.CoreV1Api(make_client())


@pytest.fixture
def custom(make_client: ClientFactory) -> Api:
    return client.CustomObjectsApi(make_client())


def status_of(err: ApiException) -> dict[str, Any]:
    body = json.loads(err.body or "")
    assert body["kind"] == "Status" and body["apiVersion"] == "v1"
    assert body["status"] == "Failure" and body["code"] == err.status
    assert body["metadata"] == {}
    return body  # type: ignore[no-any-return]


def labels(api: FakeApiServer, node: str = "n1") -> dict[str, str]:
    return api.labels(node)


def api_get(api: FakeApiServer, path: str) -> Any:
    """A GET as any client sends it (the fake's default token)."""
    request = urllib.request.Request(api.url + path,
                                     headers={"Authorization": f"Bearer {api.token}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


def rv(api: FakeApiServer, node: str = "n1") -> str:
    return str(api.node(node)["metadata"]["resourceVersion"])


# ----------------------------------------------------------------------------- basics


def test_get_node_through_kubeconfig(api: FakeApiServer, core: Api) -> None:
    node = core.read_node("n1")
    assert node.metadata.name == "n1"
    assert node.metadata.labels == {"kubernetes.io/hostname": "n1"}
    assert node.metadata.uid and node.metadata.creation_timestamp is not None
    assert node.metadata.resource_version == rv(api)
    assert [(m.manager, m.operation) for m in node.metadata.managed_fields] == [
        ("kubelet", "Update")
    ]
    [record] = api.requests
    assert (record.method, record.path, record.status) == ("GET", "/api/v1/nodes/n1", 200)


def test_wrong_token_is_unauthorized(make_client: ClientFactory) -> None:
    core = client.CoreV1Api(make_client(token="wrong"))
    with pytest.raises(ApiException) as exc:
        core.read_node("n1")
    assert exc.value.status == 401
    assert status_of(exc.value)["reason"] == "Unauthorized"


def test_missing_node_is_404(core: Api) -> None:
    with pytest.raises(ApiException) as exc:
        core.read_node("nope")
    body = status_of(exc.value)
    assert exc.value.status == 404
    assert body["reason"] == "NotFound"
    assert body["message"] == 'nodes "nope" not found'
    assert body["details"] == {"name": "nope", "kind": "nodes"}
    with pytest.raises(ApiException) as exc:
        core.patch_node("nope", {"metadata": {"labels": {"a": "b"}}})
    assert exc.value.status == 404


def test_list_nodes_with_label_selector(api: FakeApiServer, core: Api) -> None:
    api.add_node("n2", labels={"gpu": "true", "zone": "a"})
    api.add_node("n3", labels={"gpu": "false"})

    def names(selector: str) -> list[str]:
        return [n.metadata.name for n in core.list_node(label_selector=selector).items]

    assert names("gpu=true") == ["n2"]
    assert names("gpu!=true") == ["n1", "n3"]
    assert names("gpu in (true,false),!zone") == ["n3"]
    assert names("kubernetes.io/hostname") == ["n1"]
    assert core.list_node().metadata.resource_version == api.resource_version


def test_resourceslices_are_field_selected_by_node_and_driver(
        api: FakeApiServer, make_client: ClientFactory) -> None:
    """What the real server (v1.36) answers, checked there by the probe in
    realapi/test_resourceslices.py: spec.nodeName and spec.driver select, any other spec
    field is a 400, and a limit below the match count sets a continue token."""
    for node, driver in (("n1", "gpu.nvidia.com"), ("n1", "other.example.com"),
                         ("n2", "gpu.nvidia.com"), ("n1", "gpu.nvidia.com")):
        api.add_resourceslice(node, driver)
    resource = client.ResourceV1Api(make_client())

    def names(selector: str, **kw: Any) -> list[tuple[str, str]]:
        got = resource.list_resource_slice(field_selector=selector, **kw)
        return [(i.spec.node_name, i.spec.driver) for i in got.items]

    assert names("spec.nodeName=n1,spec.driver=gpu.nvidia.com") == [("n1", "gpu.nvidia.com")] * 2
    assert sorted(names("spec.driver=gpu.nvidia.com")) == [
        ("n1", "gpu.nvidia.com"), ("n1", "gpu.nvidia.com"), ("n2", "gpu.nvidia.com")]
    assert names("spec.nodeName=n3") == []
    limited = resource.list_resource_slice(field_selector="spec.nodeName=n1", limit=1)
    assert len(limited.items) == 1 and limited.metadata._continue
    assert limited.metadata.remaining_item_count is None  # unknown under a selector
    with pytest.raises(ApiException) as err:
        resource.list_resource_slice(field_selector="spec.pool.name=n1")
    assert err.value.status == 400
    assert status_of(err.value)["message"] == (
        "field label not supported for resource.k8s.io/v1, Kind=ResourceSlice: spec.pool.name")
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(make_client()).list_node(field_selector="spec.driver=x")
    assert err.value.status == 400


# ----------------------------------------------------------------------------- patches


def test_merge_patch_merges_and_null_deletes(api: FakeApiServer, core: Api) -> None:
    api.set_label("n1", "old", "x")
    before = rv(api)
    api.clear_log()
    body = {"metadata": {"labels": {"new": "1", "old": None, "never-there": None}}}
    node = core.patch_node("n1", body, _content_type=MERGE_PATCH)
    assert node.metadata.labels == {"kubernetes.io/hostname": "n1", "new": "1"}
    assert labels(api) == node.metadata.labels
    assert int(rv(api)) > int(before)
    [record] = api.requests
    assert (record.method, record.content_type, record.status) == ("PATCH", MERGE_PATCH, 200)
    assert record.json() == body


def test_dict_patch_defaults_to_strategic_merge(api: FakeApiServer, core: Api) -> None:
    core.patch_node("n1", {"metadata": {"labels": {"a": "1"}, "annotations": {"x/y": "z"}}})
    core.patch_node("n1", {"metadata": {"labels": {"a": None, "b": "2"}}})
    assert labels(api) == {"kubernetes.io/hostname": "n1", "b": "2"}
    assert api.node("n1")["metadata"]["annotations"] == {"x/y": "z"}
    assert {r.content_type for r in api.requests} == {STRATEGIC_MERGE_PATCH}


def test_noop_write_does_not_bump_resource_version(api: FakeApiServer, core: Api) -> None:
    core.patch_node("n1", {"metadata": {"labels": {"a": "1"}}}, _content_type=MERGE_PATCH)
    before = rv(api)
    core.patch_node("n1", {"metadata": {"labels": {"a": "1"}}}, _content_type=MERGE_PATCH)
    assert rv(api) == before
    assert api.count("PATCH") == 2


def test_json_patch_unescapes_pointer_tokens(api: FakeApiServer, core: Api) -> None:
    ops = [
        {"op": "add", "path": "/metadata/labels/nvidia.com~1gpu.product", "value": "A100"},
        {"op": "add", "path": "/metadata/annotations", "value": {}},
        {"op": "add", "path": "/metadata/annotations/example.com~1a", "value": "v"},
        {"op": "test", "path": "/metadata/labels/kubernetes.io~1hostname", "value": "n1"},
        {"op": "replace", "path": "/metadata/labels/kubernetes.io~1hostname", "value": "h"},
    ]
    core.patch_node("n1", ops)  # a list body: the client picks json-patch
    assert labels(api) == {"kubernetes.io/hostname": "h", "nvidia.com/gpu.product": "A100"}
    assert api.node("n1")["metadata"]["annotations"] == {"example.com/a": "v"}
    assert api.requests[-1].content_type == JSON_PATCH
    core.patch_node(
        "n1",
        [{"op": "remove", "path": "/metadata/labels/nvidia.com~1gpu.product"}],
        _content_type=JSON_PATCH,
    )
    assert labels(api) == {"kubernetes.io/hostname": "h"}


@pytest.mark.parametrize(
    "bad_op",
    [
        {"op": "remove", "path": "/metadata/labels/missing"},
        {"op": "replace", "path": "/metadata/labels/missing", "value": "x"},
        {"op": "test", "path": "/metadata/labels/kubernetes.io~1hostname", "value": "other"},
        {"op": "add", "path": "/metadata/annotations/a", "value": "x"},  # no annotations map
    ],
    ids=["remove-missing", "replace-missing", "test-mismatch", "add-without-parent"],
)
def test_json_patch_failure_is_atomic(
    api: FakeApiServer, core: Api, bad_op: dict[str, Any]
) -> None:
    before, before_labels = rv(api), labels(api)
    ops = [{"op": "add", "path": "/metadata/labels/first", "value": "1"}, bad_op]
    with pytest.raises(ApiException) as exc:
        core.patch_node("n1", ops, _content_type=JSON_PATCH)
    body = status_of(exc.value)
    assert exc.value.status == 422
    assert body["reason"] == "Invalid"
    assert body["message"] == "the server rejected our request due to an error in our request"
    assert (rv(api), labels(api)) == (before, before_labels)


def test_dry_run_validates_but_does_not_persist(api: FakeApiServer, core: Api) -> None:
    before = rv(api)
    node = core.patch_node(
        "n1", {"metadata": {"labels": {"a": "1"}}}, dry_run="All", _content_type=MERGE_PATCH
    )
    assert node.metadata.labels["a"] == "1"
    assert (rv(api), "a" in labels(api)) == (before, False)


# ----------------------------------------------------------------------------- apply


def apply(core: Api, manager: str, node_labels: dict[str, str], force: bool | None = None) -> Any:
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": node_labels}}
    return core.patch_node(
        "n1", body, field_manager=manager, force=force, _content_type=APPLY_PATCH
    )


def managers(api: FakeApiServer) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for entry in api.node("n1")["metadata"].get("managedFields", []):
        owned = entry["fieldsV1"]["f:metadata"].get("f:labels", {})
        out[f"{entry['manager']}/{entry['operation']}"] = sorted(k[2:] for k in owned)
    return out


def test_apply_tracks_ownership_per_manager(api: FakeApiServer, core: Api) -> None:
    apply(core, "gfd", {"a": "1", "shared": "s"})
    apply(core, "other", {"b": "2", "shared": "s"})  # same value: co-owned, no conflict
    assert managers(api) == {
        "kubelet/Update": ["kubernetes.io/hostname"],
        "gfd/Apply": ["a", "shared"],
        "other/Apply": ["b", "shared"],
    }
    apply(core, "gfd", {"shared": "s"})  # omitting "a" deletes it: nobody else owns it
    assert labels(api) == {"kubernetes.io/hostname": "n1", "b": "2", "shared": "s"}
    apply(core, "gfd", {})  # "shared" survives: "other" still owns it
    assert labels(api) == {"kubernetes.io/hostname": "n1", "b": "2", "shared": "s"}
    assert "gfd/Apply" not in managers(api)
    apply(core, "other", {})
    assert labels(api) == {"kubernetes.io/hostname": "n1"}
    assert [r.query["fieldManager"] for r in api.requests] == [
        "gfd",
        "other",
        "gfd",
        "gfd",
        "other",
    ]
    assert {r.content_type for r in api.requests} == {APPLY_PATCH}


def test_apply_conflict_and_force(api: FakeApiServer, core: Api) -> None:
    apply(core, "other", {"b": "2"})
    before = rv(api)
    with pytest.raises(ApiException) as exc:
        apply(core, "gfd", {"b": "3", "kubernetes.io/hostname": "x"})
    body = status_of(exc.value)
    assert exc.value.status == 409
    assert body["reason"] == "Conflict"
    assert body["message"].startswith("Apply failed with 2 conflicts")
    causes = {(c["field"], c["message"]) for c in body["details"]["causes"]}
    assert causes == {
        (".metadata.labels.b", 'conflict with "other"'),
        (".metadata.labels.kubernetes.io/hostname", 'conflict with "kubelet" using v1'),
    }
    assert rv(api) == before and labels(api)["b"] == "2"

    apply(core, "gfd", {"b": "3"}, force=True)
    assert labels(api)["b"] == "3"
    assert managers(api)["gfd/Apply"] == ["b"] and "other/Apply" not in managers(api)
    apply(core, "other", {})  # "other" lost "b": its later applies cannot remove it
    assert labels(api)["b"] == "3"
    assert api.requests[-2].query == {"fieldManager": "gfd", "force": "true"}


def test_apply_requires_field_manager(core: Api) -> None:
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {}}}
    with pytest.raises(ApiException) as exc:
        core.patch_node("n1", body, _content_type=APPLY_PATCH)
    assert exc.value.status == 400
    assert status_of(exc.value)["reason"] == "BadRequest"


def test_apply_accepts_yaml_text(api: FakeApiServer) -> None:
    """The generated client only sends dicts (as JSON); kubectl-style YAML works too."""
    body = b"apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n  labels:\n    y: 'yes'\n"
    request = urllib.request.Request(
        f"{api.url}/api/v1/nodes/n1?fieldManager=kubectl",
        data=body,
        method="PATCH",
        headers={"Authorization": "Bearer fake-token", "Content-Type": APPLY_PATCH},
    )
    with urllib.request.urlopen(request) as response:
        assert response.status == 200
        assert json.load(response)["metadata"]["labels"]["y"] == "yes"
    assert managers(api)["kubectl/Apply"] == ["y"]


def test_json_patch_pointer_unescaping_order() -> None:
    """``~01`` is a literal ``~1`` (RFC 6901: ``~1`` is replaced before ``~0``)."""
    doc: dict[str, Any] = {"m": {}}
    ops = [
        {"op": "add", "path": "/m/a~01b", "value": 1},
        {"op": "add", "path": "/m/c~1d", "value": 2},
        {"op": "add", "path": "/m/e~0f", "value": 3},
    ]
    assert json_patch(doc, ops) == {"m": {"a~1b": 1, "c/d": 2, "e~f": 3}}
    assert doc == {"m": {}}


def test_update_takes_ownership_from_appliers(api: FakeApiServer, core: Api) -> None:
    apply(core, "gfd", {"a": "1"})
    api.set_label("n1", "a", "changed", manager="someone")  # a non-apply write never conflicts
    assert managers(api)["someone/Update"] == ["a"] and "gfd/Apply" not in managers(api)
    apply(core, "gfd", {})  # gfd no longer owns "a": it stays
    assert labels(api)["a"] == "changed"


def test_an_overwrite_by_another_manager_moves_the_key_to_it(api: FakeApiServer,
                                                            core: Api) -> None:
    """What `kubectl label --overwrite` does to a key gfd applied: the Update takes the
    key's ownership (managedFields), so gfd's next apply no longer lists or removes it."""
    apply(core, "gfd", {"a": "1", "b": "2"})
    core.patch_node("n1", {"metadata": {"labels": {"a": "hand"}}}, field_manager="kubectl",
                    _content_type=MERGE_PATCH)
    assert managers(api)["gfd/Apply"] == ["b"]
    assert managers(api)["kubectl/Update"] == ["a"]


def test_an_update_that_changes_nothing_takes_no_ownership(api: FakeApiServer,
                                                           core: Api) -> None:
    apply(core, "gfd", {"a": "1"})
    core.patch_node("n1", {"metadata": {"labels": {"a": "1"}}}, field_manager="kubectl",
                    _content_type=MERGE_PATCH)
    assert "kubectl/Update" not in managers(api)
    apply(core, "gfd", {})
    assert "a" not in labels(api), "gfd alone owned it: dropping it removes it"


def test_a_forced_apply_by_another_manager_takes_the_key(api: FakeApiServer,
                                                         core: Api) -> None:
    apply(core, "gfd", {"a": "1"})
    apply(core, "operator", {"a": "2"}, force=True)
    assert managers(api)["operator/Apply"] == ["a"] and "gfd/Apply" not in managers(api)


def test_a_key_dropped_by_one_applier_stays_while_an_updater_owns_it_too(
        api: FakeApiServer, core: Api) -> None:
    core.patch_node("n1", {"metadata": {"labels": {"a": "1"}}}, field_manager="kubectl",
                    _content_type=MERGE_PATCH)
    apply(core, "gfd", {"a": "1"})  # same value: shared
    assert managers(api)["gfd/Apply"] == ["a"] and managers(api)["kubectl/Update"] == ["a"]
    answer = apply(core, "gfd", {})
    assert answer.metadata.labels["a"] == "1", "the answer shows it kept"
    assert labels(api)["a"] == "1"


def apply_with_uid(core: Api, name: str, uid: str, node_labels: dict[str, str]) -> Any:
    body = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": uid, "labels": node_labels}}
    return core.patch_node(name, body, field_manager="gfd", force=True,
                           _content_type=APPLY_PATCH)


def test_an_apply_naming_the_uid_of_a_deleted_node_never_creates_it(api: FakeApiServer,
                                                                    core: Api) -> None:
    """kube-apiserver, endpoints/handlers/patch.go (applyPatch): a uid in the patched object
    with no current object is a Conflict, where an apply would otherwise create it."""
    uid = api.node("n1")["metadata"]["uid"]
    api.delete_node("n1")
    with pytest.raises(ApiException) as exc:
        apply_with_uid(core, "n1", uid, {"a": "1"})
    body = status_of(exc.value)
    assert (exc.value.status, body["reason"]) == (409, "Conflict")
    assert body["message"] == (f'Operation cannot be fulfilled on nodes "n1": uid mismatch: '
                               f"the provided object specified uid {uid}, and no existing "
                               "object was found")
    assert body["details"] == {"name": "n1", "kind": "nodes"}
    assert api.nodes() == []
    apply(core, "gfd", {"a": "1"})  # without a uid, apply creates: why gfd sends one
    assert labels(api) == {"a": "1"}


def test_an_apply_naming_another_uid_is_refused_as_an_immutable_field(api: FakeApiServer,
                                                                      core: Api) -> None:
    """The node was deleted and created again under the same name: the apply sets the old uid
    on the new object, and the update's metadata validation refuses the change (422)."""
    before = rv(api)
    with pytest.raises(ApiException) as exc:
        apply_with_uid(core, "n1", "0a0a0a0a-0000-0000-0000-000000000000", {"a": "1"})
    body = status_of(exc.value)
    assert (exc.value.status, body["reason"]) == (422, "Invalid")
    assert body["message"] == ('Node "n1" is invalid: metadata.uid: Invalid value: '
                               '"0a0a0a0a-0000-0000-0000-000000000000": field is immutable')
    assert body["details"]["causes"] == [{
        "reason": "FieldValueInvalid", "field": "metadata.uid",
        "message": 'Invalid value: "0a0a0a0a-0000-0000-0000-000000000000": field is immutable'}]
    assert rv(api) == before and "a" not in labels(api)


def test_an_apply_naming_the_nodes_own_uid_goes_through(api: FakeApiServer, core: Api) -> None:
    uid = api.node("n1")["metadata"]["uid"]
    answer = apply_with_uid(core, "n1", uid, {"a": "1"})
    assert answer.metadata.uid == uid and labels(api)["a"] == "1"
    assert managers(api)["gfd/Apply"] == ["a"], "the uid is a precondition, not a field owned"


# ----------------------------------------------------------------------------- concurrency


def test_stale_resource_version_conflicts(api: FakeApiServer, core: Api) -> None:
    node = core.read_node("n1")
    stale = node.metadata.resource_version
    api.set_label("n1", "other", "actor")  # another writer bumps resourceVersion
    assert rv(api) != stale
    patch = {"metadata": {"resourceVersion": stale, "labels": {"a": "1"}}}
    with pytest.raises(ApiException) as exc:
        core.patch_node("n1", patch, _content_type=MERGE_PATCH)
    body = status_of(exc.value)
    assert exc.value.status == 409
    assert body["reason"] == "Conflict"
    assert body["message"] == (
        'Operation cannot be fulfilled on nodes "n1": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    assert body["details"] == {"name": "n1", "kind": "nodes"}
    with pytest.raises(ApiException) as exc:
        core.replace_node("n1", node)  # PUT with the stale object
    assert exc.value.status == 409
    assert "a" not in labels(api)

    fresh = core.read_node("n1")
    fresh.metadata.labels["a"] = "1"
    del fresh.metadata.labels["other"]
    core.replace_node("n1", fresh)
    assert labels(api) == {"kubernetes.io/hostname": "n1", "a": "1"}
    patch["metadata"]["resourceVersion"] = rv(api)
    core.patch_node("n1", patch, _content_type=MERGE_PATCH)


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("NVIDIA-A100-SXM4-40GB", True),
        ("1g.5gb", True),
        ("", True),
        ("x" * 63, True),
        ("NVIDIA-TITAN-X-(Pascal)", False),
        ("A100-", False),
        ("-A100", False),
        ("x" * 64, False),
        ("abc\n", False),
        ("caf\u00e9", False),
    ],
)
def test_label_value_rules(value: str, valid: bool) -> None:
    assert (label_value_errors(value) == []) is valid


@pytest.mark.parametrize(
    ("key", "valid"),
    [
        ("nvidia.com/gpu.product", True),
        ("Plain_Name.1", True),
        ("a" * 63, True),
        ("a" * 64, False),
        ("example.com/" + "a" * 64, False),
        ("a/b/c", False),
        ("/x", False),
        ("x/", False),
        ("Example.com/x", False),
        ("under_score.com/x", False),
        ("-x", False),
        ("x\n", False),
        ("a" * 254 + "/x", False),
    ],
)
def test_label_key_rules(key: str, valid: bool) -> None:
    assert (qualified_name_errors(key) == []) is valid


def test_invalid_label_is_422_and_nothing_changes(api: FakeApiServer, core: Api) -> None:
    before, before_labels = rv(api), labels(api)
    patch = {"metadata": {"labels": {"ok": "1", "bad/key/x": "v", "k": "NVIDIA-TITAN-X-(Pascal)"}}}
    with pytest.raises(ApiException) as exc:
        core.patch_node("n1", patch, _content_type=MERGE_PATCH)
    body = status_of(exc.value)
    assert exc.value.status == 422
    assert body["reason"] == "Invalid"
    assert body["message"].startswith('Node "n1" is invalid: [metadata.labels: Invalid value: ')
    assert '"bad/key/x"' in body["message"] and '"NVIDIA-TITAN-X-(Pascal)"' in body["message"]
    causes = body["details"]["causes"]
    assert len(causes) == 2
    assert {c["field"] for c in causes} == {"metadata.labels"}
    assert {c["reason"] for c in causes} == {"FieldValueInvalid"}
    assert (body["details"]["name"], body["details"]["kind"]) == ("n1", "Node")
    assert (rv(api), labels(api)) == (before, before_labels)
    with pytest.raises(ApiException) as exc:  # apply and JSON patch are validated too
        apply(core, "gfd", {"bad/key/x": "v"})
    assert exc.value.status == 422
    with pytest.raises(ApiException) as exc:
        core.patch_node("n1", [{"op": "add", "path": "/metadata/labels/a", "value": "-"}])
    assert exc.value.status == 422
    assert (rv(api), labels(api)) == (before, before_labels)


def test_helpers_validate_too(api: FakeApiServer) -> None:
    with pytest.raises(ValueError, match="is invalid"):
        api.set_label("n1", "k", "bad value")


# ----------------------------------------------------------------------------- authorisation


def test_forbid_rule(api: FakeApiServer, core: Api) -> None:
    api.forbid("patch", "nodes")
    with pytest.raises(ApiException) as exc:
        core.patch_node("n1", {"metadata": {"labels": {"a": "1"}}})
    body = status_of(exc.value)
    assert exc.value.status == 403
    assert body["reason"] == "Forbidden"
    assert body["message"] == (
        'nodes "n1" is forbidden: User "system:serviceaccount:gfd:gfd" cannot patch '
        'resource "nodes" in API group "" at the cluster scope'
    )
    core.read_node("n1")  # other verbs are still allowed
    api.allow_all()
    core.patch_node("n1", {"metadata": {"labels": {"a": "1"}}})

    api.forbid("get", "nodefeatures", "only-this")
    custom = client.CustomObjectsApi(core.api_client)
    with pytest.raises(ApiException) as exc:
        custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "only-this")
    assert status_of(exc.value)["message"] == (
        'nodefeatures.nfd.k8s-sigs.io "only-this" is forbidden: User '
        '"system:serviceaccount:gfd:gfd" cannot get resource "nodefeatures" in API group '
        '"nfd.k8s-sigs.io" in the namespace "gfd"'
    )
    with pytest.raises(ApiException) as exc:  # another name: allowed, and absent
        custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "other")
    assert exc.value.status == 404


def test_pod_to_owning_daemonset(api: FakeApiServer, make_client: ClientFactory) -> None:
    pod = api.add_pod(NS, "gfd-x7k2p", owner_daemonset="gfd", node_name="n1")
    api_client = make_client()
    read: Any = client.CoreV1Api(api_client).read_namespaced_pod("gfd-x7k2p", NS)
    assert read.metadata.uid == pod["metadata"]["uid"]
    [owner] = read.metadata.owner_references
    assert (owner.kind, owner.name, owner.controller) == ("DaemonSet", "gfd", True)
    ds: Any = client.AppsV1Api(api_client).read_namespaced_daemon_set(owner.name, NS)
    assert ds.metadata.uid == owner.uid
    api.forbid("get", "daemonsets")
    with pytest.raises(ApiException) as exc:
        client.AppsV1Api(api_client).read_namespaced_daemon_set("gfd", NS)
    assert exc.value.status == 403
    assert 'cannot get resource "daemonsets" in API group "apps"' in status_of(exc.value)["message"]


# ----------------------------------------------------------------------------- NodeFeature


def nodefeature(name: str = "nvidia-features-for-n1", **spec_labels: str) -> dict[str, Any]:
    return {
        "apiVersion": NFD_API_VERSION,
        "kind": "NodeFeature",
        "metadata": {"name": name, "labels": {"nfd.node.kubernetes.io/node-name": "n1"}},
        "spec": {"labels": dict(spec_labels)},
    }


def test_nodefeature_lifecycle(api: FakeApiServer, custom: Api) -> None:
    name = "nvidia-features-for-n1"
    created = custom.create_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, nodefeature(**{"nvidia.com/gpu.count": "8"})
    )
    assert created["metadata"]["uid"] and created["metadata"]["namespace"] == NS
    assert api.requests[-1].status == 201
    got = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)
    assert got["spec"]["labels"] == {"nvidia.com/gpu.count": "8"}
    assert api.nodefeature(NS, name) == got

    with pytest.raises(ApiException) as exc:
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, nodefeature())
    body = status_of(exc.value)
    assert (exc.value.status, body["reason"]) == (409, "AlreadyExists")
    assert body["message"] == f'nodefeatures.nfd.k8s-sigs.io "{name}" already exists'

    got["spec"]["labels"]["nvidia.com/gpu.count"] = "4"
    replaced = custom.replace_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name, got)
    assert int(replaced["metadata"]["resourceVersion"]) > int(got["metadata"]["resourceVersion"])
    assert replaced["metadata"]["generation"] == 2
    with pytest.raises(ApiException) as exc:  # the same (now stale) object again
        custom.replace_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name, got)
    assert (exc.value.status, status_of(exc.value)["reason"]) == (409, "Conflict")
    del got["metadata"]["resourceVersion"]
    with pytest.raises(ApiException) as exc:  # CRs refuse unconditional updates
        custom.replace_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name, got)
    assert (exc.value.status, status_of(exc.value)["reason"]) == (422, "Invalid")

    patched = custom.patch_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, name, {"spec": {"labels": {"extra": "1"}}}
    )
    assert patched["spec"]["labels"] == {"nvidia.com/gpu.count": "4", "extra": "1"}
    assert api.requests[-1].content_type == MERGE_PATCH

    listed = custom.list_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, label_selector="nfd.node.kubernetes.io/node-name=n1"
    )
    assert [i["metadata"]["name"] for i in listed["items"]] == [name]

    deleted = custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)
    assert deleted["status"] == "Success"
    assert api.nodefeature(NS, name) is None
    for call in (custom.get_namespaced_custom_object, custom.delete_namespaced_custom_object):
        with pytest.raises(ApiException) as exc:
            call(GROUP, VERSION, NS, PLURAL, name)
        assert exc.value.status == 404
        assert status_of(exc.value)["details"] == {
            "name": name,
            "group": GROUP,
            "kind": PLURAL,
        }
    with pytest.raises(ApiException) as exc:
        custom.replace_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name, nodefeature())
    assert exc.value.status == 404


def test_an_update_of_a_deleted_nodefeature_is_404_not_found(api: FakeApiServer,
                                                             custom: Api) -> None:
    """A custom resource is never created by a PUT (its strategy does not allow create on
    update): the real server answers NotFound for the qualified resource."""
    name = "nvidia-features-for-n1"
    created = custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, nodefeature())
    custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)
    stale = nodefeature(**{"a": "1"})
    stale["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
    with pytest.raises(ApiException) as exc:
        custom.replace_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name, stale)
    assert exc.value.status == 404
    assert status_of(exc.value) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f'nodefeatures.nfd.k8s-sigs.io "{name}" not found', "reason": "NotFound",
        "details": {"name": name, "group": GROUP, "kind": PLURAL}, "code": 404}
    assert api.nodefeature(NS, name) is None


def test_an_update_naming_the_uid_of_a_deleted_nodefeature_fails_its_precondition(
        api: FakeApiServer, custom: Api) -> None:
    """The uid of an update body is a storage precondition, checked before the object's
    absence: a read-modify-write PUT of a deleted object is a 409 (as a real kueue log shows:
    'StorageError: invalid object, Code: 4, Key: /registry/..., ResourceVersion: 0,
    AdditionalErrorMsg: Precondition failed: UID in precondition: ..., UID in object meta: ')."""
    name = "nvidia-features-for-n1"
    created = custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, nodefeature())
    custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)
    uid = created["metadata"]["uid"]
    with pytest.raises(ApiException) as exc:
        custom.replace_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name, created)
    body = status_of(exc.value)
    assert (exc.value.status, body["reason"]) == (409, "Conflict")
    assert body["message"] == (
        f'Operation cannot be fulfilled on nodefeatures.nfd.k8s-sigs.io "{name}": '
        f"StorageError: invalid object, Code: 4, Key: /registry/nfd.k8s-sigs.io/nodefeatures/"
        f"{NS}/{name}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in "
        f"precondition: {uid}, UID in object meta: ")
    assert body["details"] == {"name": name, "group": GROUP, "kind": PLURAL}
    again = custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, nodefeature())
    created["metadata"]["resourceVersion"] = again["metadata"]["resourceVersion"]
    with pytest.raises(ApiException) as exc:  # another object of the same name
        custom.replace_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name, created)
    assert status_of(exc.value)["message"].endswith(
        f"UID in precondition: {uid}, UID in object meta: {again['metadata']['uid']}")


def test_nodefeature_404_without_crd(api: FakeApiServer, custom: Api) -> None:
    api.set_crd_installed(False)
    calls: list[Callable[[], Any]] = [
        lambda: custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, nodefeature()),
        lambda: custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "x"),
        lambda: custom.list_cluster_custom_object(GROUP, VERSION, PLURAL),
    ]
    for call in calls:
        with pytest.raises(ApiException) as exc:
            call()
        body = status_of(exc.value)
        assert exc.value.status == 404
        assert body["reason"] == "NotFound"
        assert body["message"] == "the server could not find the requested resource"
    api.set_crd_installed(True)
    custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, nodefeature())


def test_nodefeature_rejects_strategic_merge(api: FakeApiServer, custom: Api) -> None:
    api.add_nodefeature(NS, nodefeature())
    with pytest.raises(ApiException) as exc:
        custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            NS,
            PLURAL,
            "nvidia-features-for-n1",
            {"spec": {"labels": {"a": "b"}}},
            _content_type=STRATEGIC_MERGE_PATCH,
        )
    assert exc.value.status == 415
    assert status_of(exc.value)["reason"] == "UnsupportedMediaType"


def test_another_actors_nodefeature_edit_is_a_new_version_with_the_others_labels_kept(
    api: FakeApiServer, custom: Api
) -> None:
    name = "nvidia-features-for-n1"
    created = api.add_nodefeature(NS, nodefeature(a="1", b="2"))
    api.set_nodefeature_label(NS, name, "a", "edited", manager="kubectl")
    api.set_nodefeature_label(NS, name, "b", None)
    stored = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)
    assert stored["spec"]["labels"] == {"a": "edited"}
    assert stored["metadata"]["labels"] == created["metadata"]["labels"]
    assert int(stored["metadata"]["resourceVersion"]) > int(
        created["metadata"]["resourceVersion"])
    with pytest.raises(KeyError):
        api.set_nodefeature_label(NS, "absent", "a", "1")


def test_nodefeature_validates_metadata_labels_not_spec_labels(
    api: FakeApiServer, custom: Api
) -> None:
    odd = nodefeature(**{"Bad Key!": "bad value?"})  # spec.labels: only strings required
    custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, odd)
    bad = nodefeature("other")
    bad["metadata"]["labels"]["nfd.node.kubernetes.io/node-name"] = "not valid!"
    with pytest.raises(ApiException) as exc:
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, bad)
    body = status_of(exc.value)
    assert exc.value.status == 422
    assert body["message"].startswith('NodeFeature.nfd.k8s-sigs.io "other" is invalid: ')
    assert api.nodefeature(NS, "other") is None


# ----------------------------------------------------------------------------- faults


def test_injected_500(api: FakeApiServer, core: Api) -> None:
    api.inject(500, method="PATCH")
    with pytest.raises(ApiException) as exc:
        core.patch_node("n1", {"metadata": {"labels": {"a": "1"}}})
    assert (exc.value.status, status_of(exc.value)["reason"]) == (500, "InternalError")
    assert "a" not in labels(api)
    core.patch_node("n1", {"metadata": {"labels": {"a": "1"}}})  # count=1: the next one works
    assert [r.status for r in api.requests] == [500, 200]


def test_a_fault_for_one_exact_path_leaves_the_paths_it_is_part_of_alone(
        api: FakeApiServer, core: Api) -> None:
    """``path_is``: a fault for the collection (a list or a watch) leaves the object's path
    alone, and the faults still waiting are counted."""
    api.inject(500, 2, method="GET", path_is="/api/v1/nodes")
    assert api.faults_left() == 1
    core.read_node("n1")  # /api/v1/nodes/n1: served
    with pytest.raises(ApiException) as exc:
        core.list_node()
    assert exc.value.status == 500
    assert api.faults_left() == 1, "one of its two answers left"
    with pytest.raises(ApiException):
        core.list_node()
    assert api.faults_left() == 0
    core.list_node()
    assert [r.status for r in api.requests] == [200, 500, 500, 200]


def test_injected_429_with_retry_after(api: FakeApiServer, core: Api) -> None:
    api.inject(429, retry_after=7, path_contains="/nodes/n1")
    with pytest.raises(ApiException) as exc:
        core.read_node("n1")
    assert exc.value.status == 429
    assert exc.value.headers is not None and exc.value.headers["Retry-After"] == "7"
    body = status_of(exc.value)
    assert body["reason"] == "TooManyRequests"
    assert body["details"] == {"retryAfterSeconds": 7}


def test_default_client_retries_429_on_get_but_not_on_patch(
    api: FakeApiServer, make_client: ClientFactory
) -> None:
    """urllib3's default Retry(3) honours Retry-After for GET/PUT/DELETE, silently."""
    core: Api = client.CoreV1Api(make_client(retries=None))
    api.inject(429, count=2, retry_after=0)
    assert core.read_node("n1").metadata.name == "n1"
    assert [r.status for r in api.requests] == [429, 429, 200]
    api.clear_log()
    api.inject(429, retry_after=0)
    with pytest.raises(ApiException) as exc:
        core.patch_node("n1", {"metadata": {"labels": {"a": "1"}}})
    assert exc.value.status == 429
    assert api.count() == 1


def test_set_down_gives_connection_errors(api: FakeApiServer, core: Api) -> None:
    core.read_node("n1")  # leave a keep-alive connection in the pool
    api.set_down(True)
    with pytest.raises(urllib3.exceptions.MaxRetryError) as exc:
        core.read_node("n1")
    assert isinstance(exc.value.reason, urllib3.exceptions.ProtocolError)
    with pytest.raises(urllib3.exceptions.ProtocolError):  # PATCH is never retried
        core.patch_node("n1", {"metadata": {"labels": {"a": "1"}}})
    assert [(r.method, r.status) for r in api.requests[1:]] == [("GET", 0), ("PATCH", 0)]
    assert "a" not in labels(api)
    api.set_down(False)
    core.patch_node("n1", {"metadata": {"labels": {"a": "1"}}})
    assert labels(api)["a"] == "1"


def test_latency(api: FakeApiServer, core: Api) -> None:
    api.set_latency(0.15)
    start = time.monotonic()
    core.read_node("n1")
    assert time.monotonic() - start >= 0.15


def raw_get(api: FakeApiServer, path: str = "/api/v1/nodes/n1") -> urllib3.BaseHTTPResponse:
    """A GET that leaves the body unread (urllib3, no retries)."""
    pool = urllib3.PoolManager(retries=False)
    return pool.request("GET", api.url + path, headers={"Authorization": "Bearer fake-token"},
                        preload_content=False, timeout=10)


def test_a_proxy_answer_keeps_its_status_and_content_type(api: FakeApiServer, core: Api) -> None:
    """What an auth proxy in front of the API server answers: 200 and a login page."""
    page = "<html><head><title>Sign in</title></head><body>...</body></html>"
    api.inject(200, body=page, content_type="text/html; charset=utf-8")
    response = raw_get(api)
    assert response.status == 200 and response.headers["Content-Type"].startswith("text/html")
    assert response.read().decode() == page
    assert core.read_node("n1").metadata.name == "n1", "one answer only"


def test_a_padded_answer_is_streamed_as_a_valid_object(api: FakeApiServer) -> None:
    api.inject(200, body={"kind": "Node", "apiVersion": "v1", "metadata": {"name": "n1"}},
               size=3 * 1024 * 1024 + 7)
    response = raw_get(api)
    assert int(response.headers["Content-Length"]) == 3 * 1024 * 1024 + 7
    body = response.read()
    assert len(body) == 3 * 1024 * 1024 + 7
    parsed = json.loads(body)
    assert parsed["kind"] == "Node" and set(parsed["pad"]) == {"x"}
    assert api.requests[-1].response_bytes == len(body)


def test_a_huge_answer_costs_the_fake_no_memory_and_ends_when_the_client_leaves(
        api: FakeApiServer) -> None:
    api.inject(200, body={"kind": "Node", "apiVersion": "v1"}, size=300 * 1024 * 1024)
    response = raw_get(api)
    assert int(response.headers["Content-Length"]) == 300 * 1024 * 1024
    assert response.read(1024).startswith(b'{"kind": "Node"')
    response.close()  # the client gives up: the fake stops writing
    assert raw_get(api).status == 200, "the server still answers"


def test_a_chunked_answer_has_no_content_length(api: FakeApiServer) -> None:
    api.inject(200, body={"kind": "Node", "apiVersion": "v1"}, size=200_000, chunked=True)
    response = raw_get(api)
    assert "Content-Length" not in response.headers
    assert response.headers["Transfer-Encoding"] == "chunked"
    assert len(response.read()) == 200_000


@pytest.mark.parametrize("headers", [True, False], ids=["from-the-status-line", "body-only"])
def test_a_trickling_answer_sends_one_byte_at_a_time(api: FakeApiServer, headers: bool) -> None:
    api.inject(200, body={"kind": "Node", "apiVersion": "v1"}, trickle=0.01,
               trickle_headers=headers)
    start = time.monotonic()
    response = raw_get(api)
    head = time.monotonic() - start
    assert (head > 0.5) is headers, head  # ~100 header bytes at 10 ms each
    start = time.monotonic()
    assert json.loads(response.read())["kind"] == "Node"
    assert time.monotonic() - start > 0.25  # ~34 body bytes


# ----------------------------------------------------------------------------- request log


def test_request_log_is_exact(api: FakeApiServer, core: Api) -> None:
    assert api.requests == []  # helpers (add_node in the fixture) are not requests
    core.read_node("n1")
    core.patch_node("n1", {"metadata": {"labels": {"a": "1"}}}, field_manager="gfd")
    core.list_node(label_selector="a=1")
    get, patch, lst = api.requests
    assert (get.method, get.path, get.query, get.content_type) == (
        "GET",
        "/api/v1/nodes/n1",
        {},
        None,
    )
    assert get.request_bytes == 0 and get.response_bytes > 0
    assert (patch.method, patch.query, patch.status) == ("PATCH", {"fieldManager": "gfd"}, 200)
    assert patch.request_bytes == len(b'{"metadata": {"labels": {"a": "1"}}}')
    assert lst.path == "/api/v1/nodes" and lst.query == {"labelSelector": "a=1"}
    assert get.timestamp <= patch.timestamp <= lst.timestamp
    assert api.count() == 3
    assert api.count("PATCH") == 1
    assert api.count("get", "/nodes/n1") == 1
    assert api.count(path_contains="/api/v1/nodes") == 3
    api.clear_log()
    assert api.count() == 0 and api.requests == []


def test_usable_from_another_process(api: FakeApiServer, kubeconfig: Path) -> None:
    script = (
        "import json, sys, urllib.request, yaml\n"
        "cfg = yaml.safe_load(open(sys.argv[1]))\n"
        "url = cfg['clusters'][0]['cluster']['server'] + '/api/v1/nodes/n1'\n"
        "token = cfg['users'][0]['user']['token']\n"
        "req = urllib.request.Request(url, headers={'Authorization': 'Bearer ' + token})\n"
        "print(json.load(urllib.request.urlopen(req))['metadata']['name'])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(kubeconfig)],
        capture_output=True,
        text=True,
        check=True,
        timeout=20,
    )
    assert out.stdout.strip() == "n1"
    assert api.count("GET", "/api/v1/nodes/n1") == 1


def test_concurrent_writers_are_serialised(api: FakeApiServer, make_client: ClientFactory) -> None:
    before = int(rv(api))

    def writer(index: int) -> None:
        core: Api = client.CoreV1Api(make_client())
        for j in range(5):
            core.patch_node("n1", {"metadata": {"labels": {f"w{index}-{j}": "1"}}})

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(labels(api)) == 1 + 6 * 5
    assert int(rv(api)) == before + 6 * 5
    assert api.count("PATCH") == 30


# ----------------------------------------------------------------------------- watches


class RawWatch:
    """A watch request over plain http.client, to see the stream exactly as sent."""

    def __init__(self, api: FakeApiServer, path: str = "/api/v1/nodes", **query: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=10)
        self.conn.request("GET", f"{path}?{urllib.parse.urlencode({'watch': '1', **query})}",
                          headers={"Authorization": f"Bearer {api.token}"})
        self.resp = self.conn.getresponse()
        self.started = time.monotonic()

    def next(self) -> dict[str, Any]:
        """The next event, as soon as it is sent (one JSON object per line)."""
        line = self.resp.readline()
        assert line.endswith(b"\n"), f"no complete event line: {line!r}"
        event: dict[str, Any] = json.loads(line)
        return event

    def rest(self) -> list[dict[str, Any]]:
        """The remaining events, up to the stream's clean end (the last chunk)."""
        return [json.loads(line) for line in self.resp.read().splitlines()]

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def watches() -> Iterator[Callable[..., RawWatch]]:
    opened: list[RawWatch] = []

    def open_watch(api: FakeApiServer, path: str = "/api/v1/nodes", **query: str) -> RawWatch:
        opened.append(RawWatch(api, path, **query))
        return opened[-1]

    yield open_watch
    for w in opened:
        w.close()


def wait_until(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def summary(event: dict[str, Any]) -> tuple[str, str, str]:
    meta = event["object"]["metadata"]
    return event["type"], meta.get("name", ""), meta["resourceVersion"]


NODE_N1 = {"fieldSelector": "metadata.name=n1"}


def test_a_watch_streams_the_current_object_then_each_change_as_it_happens(
        api: FakeApiServer, watches: Callable[..., RawWatch]) -> None:
    w = watches(api, **NODE_N1)
    assert w.resp.status == 200
    assert w.resp.getheader("Content-Type") == "application/json"
    assert w.resp.getheader("Transfer-Encoding") == "chunked"
    assert w.resp.getheader("Content-Length") is None
    added = w.next()
    assert summary(added) == ("ADDED", "n1", rv(api))
    assert added["object"] == api.node("n1")  # the object as a GET returns it
    api.set_label("n1", "a", "1")
    modified = w.next()
    assert summary(modified) == ("MODIFIED", "n1", rv(api))
    assert modified["object"]["metadata"]["labels"]["a"] == "1"
    last = api.node("n1")
    api.delete_node("n1")
    deleted = w.next()
    assert summary(deleted) == ("DELETED", "n1", api.resource_version)  # the deletion's rv
    assert int(deleted["object"]["metadata"]["resourceVersion"]) > int(
        last["metadata"]["resourceVersion"])
    assert deleted["object"]["metadata"]["labels"] == last["metadata"]["labels"]
    api.add_node("n1")
    recreated = w.next()
    assert summary(recreated) == ("ADDED", "n1", rv(api))
    assert recreated["object"]["metadata"]["uid"] != last["metadata"]["uid"]


def test_a_watch_from_a_resource_version_replays_only_later_changes_of_what_it_selects(
        api: FakeApiServer, watches: Callable[..., RawWatch]) -> None:
    api.add_node("n2")
    api.set_label("n1", "before", "1")
    start = api.resource_version
    api.set_label("n2", "other", "1")
    api.set_label("n1", "after", "1")
    api.set_label("n1", "after", "1")  # no change: no new resourceVersion, no event
    w = watches(api, resourceVersion=start, timeoutSeconds="1", **NODE_N1)
    assert [summary(e) for e in w.rest()] == [("MODIFIED", "n1", rv(api))]
    assert 0.9 <= time.monotonic() - w.started < 10  # then a clean end at the timeout
    everything = watches(api, resourceVersion=start, timeoutSeconds="1")
    assert [summary(e)[:2] for e in everything.rest()] == [("MODIFIED", "n2"), ("MODIFIED", "n1")]


@pytest.mark.parametrize("version", ["", "0"], ids=["unset", "zero"])
def test_a_watch_from_no_resource_version_starts_with_the_current_state(
        api: FakeApiServer, watches: Callable[..., RawWatch], version: str) -> None:
    api.add_node("n2")
    api.set_label("n1", "a", "1")
    w = watches(api, resourceVersion=version, timeoutSeconds="1")
    assert [summary(e) for e in w.rest()] == [
        ("ADDED", "n1", rv(api, "n1")), ("ADDED", "n2", rv(api, "n2"))]


def test_an_object_entering_or_leaving_a_label_selection_is_added_or_deleted(
        api: FakeApiServer, watches: Callable[..., RawWatch]) -> None:
    w = watches(api, labelSelector="gpu=yes", resourceVersion=api.resource_version)
    api.set_label("n1", "gpu", "yes")
    assert summary(w.next()) == ("ADDED", "n1", rv(api))
    api.set_label("n1", "other", "1")
    assert summary(w.next())[0] == "MODIFIED"
    api.set_label("n1", "gpu", "no")
    left = w.next()
    assert summary(left) == ("DELETED", "n1", rv(api))
    assert left["object"]["metadata"]["labels"]["gpu"] == "no"  # the state that left


def test_pods_claims_and_classes_are_listed_and_watched_as_any_object_is_written(
        api: FakeApiServer, watches: Callable[..., RawWatch]) -> None:
    """``put_object`` writes any resource (status included) as someone else would; a pod that
    ends leaves a watch selecting unfinished pods as DELETED, as the watch cache sends it."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"},
           "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}
    start = api.resource_version
    api.put_object("pods", pod)
    api.put_object("resourceclaims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ml"}, "spec": {}})
    api.put_object("deviceclasses", {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                                     "metadata": {"name": "gpu"}, "spec": {}})
    unfinished = {"fieldSelector": "status.phase!=Succeeded,status.phase!=Failed"}
    w = watches(api, "/api/v1/pods", resourceVersion=start, **unfinished)
    assert summary(w.next())[:2] == ("ADDED", "p")
    api.put_object("pods", {**pod, "status": {"phase": "Succeeded"}})
    assert summary(w.next())[:2] == ("DELETED", "p")
    for path, name in (("/apis/resource.k8s.io/v1/resourceclaims", "c"),
                       ("/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims", "c"),
                       ("/apis/resource.k8s.io/v1/deviceclasses", "gpu")):
        listed = api_get(api, path)
        assert [i["metadata"]["name"] for i in listed["items"]] == [name], path
        assert summary(watches(api, path, resourceVersion=start).next())[:2] == ("ADDED", name)
    api.delete_object("deviceclasses", "", "gpu")
    assert api_get(api, "/apis/resource.k8s.io/v1/deviceclasses")["items"] == []


def test_a_nodefeature_watch_sees_its_namespace_only(
        api: FakeApiServer, custom: Api, watches: Callable[..., RawWatch]) -> None:
    path = f"/apis/{NFD_API_VERSION}/namespaces/{NS}/nodefeatures"
    w = watches(api, path, resourceVersion=api.resource_version,
                fieldSelector="metadata.name=nvidia-features-for-n1")
    custom.create_namespaced_custom_object(GROUP, VERSION, "elsewhere", PLURAL, nodefeature())
    created = custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, nodefeature())
    event = w.next()
    assert summary(event) == ("ADDED", "nvidia-features-for-n1",
                              created["metadata"]["resourceVersion"])
    assert event["object"]["metadata"]["namespace"] == NS
    assert (event["object"]["kind"], event["object"]["apiVersion"]) == (
        "NodeFeature", NFD_API_VERSION)
    created["spec"]["labels"] = {"nvidia.com/gpu.count": "4"}
    custom.replace_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, created["metadata"][
        "name"], created)
    assert w.next()["object"]["spec"]["labels"] == {"nvidia.com/gpu.count": "4"}
    custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "nvidia-features-for-n1")
    assert summary(w.next()) == ("DELETED", "nvidia-features-for-n1", api.resource_version)


def test_a_watch_from_a_compacted_resource_version_is_an_expired_error_event(
        api: FakeApiServer, watches: Callable[..., RawWatch]) -> None:
    old = rv(api)
    api.set_label("n1", "a", "1")
    assert api.compact() == api.resource_version
    w = watches(api, resourceVersion=old, **NODE_N1)
    assert w.resp.status == 200  # the error comes as an event on the stream
    [error] = w.rest()  # then the stream ends cleanly
    assert error == {"type": "ERROR", "object": {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f"too old resource version: {old} ({api.resource_version})",
        "reason": "Expired", "code": 410}}
    at_compaction = watches(api, resourceVersion=api.resource_version, timeoutSeconds="1",
                            **NODE_N1)
    assert at_compaction.rest() == []  # from the compacted version on is still served
    api.expired_as_http = True
    refused = watches(api, resourceVersion=old, **NODE_N1)
    assert refused.resp.status == 410
    assert json.loads(refused.resp.read())["reason"] == "Expired"


def test_a_watch_from_a_future_or_invalid_resource_version_is_refused(
        api: FakeApiServer, watches: Callable[..., RawWatch]) -> None:
    future = watches(api, resourceVersion=str(int(api.resource_version) + 10))
    assert future.resp.status == 504
    assert future.resp.getheader("Retry-After") == "1"
    body = json.loads(future.resp.read())
    assert body["reason"] == "Timeout"
    assert body["message"].startswith("Timeout: Too large resource version: ")
    assert body["details"]["causes"] == [
        {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]
    invalid = watches(api, resourceVersion="abc")
    assert invalid.resp.status == 422
    assert json.loads(invalid.resp.read())["reason"] == "Invalid"


def test_bookmarks_carry_only_the_current_resource_version_and_only_when_allowed(
        api: FakeApiServer, watches: Callable[..., RawWatch]) -> None:
    api.bookmark_interval = 0.2
    api.add_node("n2")
    w = watches(api, resourceVersion=api.resource_version, allowWatchBookmarks="true",
                **NODE_N1)
    api.set_label("n2", "a", "1")  # not selected: only the bookmark's version moves
    bookmark = w.next()
    assert bookmark == {"type": "BOOKMARK", "object": {
        "kind": "Node", "apiVersion": "v1",
        "metadata": {"resourceVersion": api.resource_version, "creationTimestamp": None}}}
    assert 0.15 <= time.monotonic() - w.started < 5  # its interval, not the watch's end
    assert w.next()["type"] == "BOOKMARK"  # and again every interval
    plain = watches(api, resourceVersion=api.resource_version, timeoutSeconds="1", **NODE_N1)
    assert plain.rest() == []


def test_a_bookmark_comes_just_before_the_timeout(
        api: FakeApiServer, watches: Callable[..., RawWatch]) -> None:
    api.bookmark_before_timeout = 1.5  # the API server: 2 s before
    path = f"/apis/{NFD_API_VERSION}/namespaces/{NS}/nodefeatures"
    w = watches(api, path, resourceVersion=api.resource_version, allowWatchBookmarks="1",
                timeoutSeconds="2")
    [bookmark] = w.rest()
    assert bookmark["object"] == {"kind": "NodeFeature", "apiVersion": NFD_API_VERSION,
                                  "metadata": {"resourceVersion": api.resource_version}}
    assert 1.9 <= time.monotonic() - w.started < 10  # the timeout's clean end


def test_dropped_watches_end_without_the_last_chunk(
        api: FakeApiServer, watches: Callable[..., RawWatch]) -> None:
    w = watches(api, **NODE_N1)
    assert w.next()["type"] == "ADDED"
    wait_until(lambda: api.open_watches == 1)
    assert api.drop_watches() == 1
    with pytest.raises(http.client.IncompleteRead):
        w.resp.read()
    wait_until(lambda: api.open_watches == 0)


def test_ended_watches_end_cleanly_and_error_events_end_them(
        api: FakeApiServer, watches: Callable[..., RawWatch]) -> None:
    first = watches(api, resourceVersion=api.resource_version)
    wait_until(lambda: api.open_watches == 1)
    assert api.end_watches() == 1
    assert first.rest() == []
    second = watches(api, resourceVersion=api.resource_version)
    wait_until(lambda: api.open_watches == 1)
    assert api.send_watch_error(500, "InternalError", "etcd is sad") == 1
    [error] = second.rest()
    assert error["type"] == "ERROR"
    assert (error["object"]["code"], error["object"]["message"]) == (500, "etcd is sad")


def test_watch_requests_are_logged_and_counted(
        api: FakeApiServer, core: Api, watches: Callable[..., RawWatch]) -> None:
    core.list_node()
    w = watches(api, resourceVersion=api.resource_version, timeoutSeconds="1", **NODE_N1)
    wait_until(lambda: api.open_watches == 1)
    listed, watched = api.requests
    assert not listed.watch
    assert watched.watch and watched.status == 200
    assert watched.query == {"watch": "1", "resourceVersion": api.resource_version,
                             "timeoutSeconds": "1", **NODE_N1}
    assert api.watch_requests == 1
    w.rest()
    wait_until(lambda: api.open_watches == 0)


def test_faults_apply_to_watches(api: FakeApiServer, core: Api,
                                 watches: Callable[..., RawWatch]) -> None:
    api.inject(500, path_contains="/api/v1/nodes")
    assert watches(api, **NODE_N1).resp.status == 500
    api.inject_watch(503, retry_after=2)
    core.read_node("n1")  # not a watch: served
    refused = watches(api, **NODE_N1)
    assert (refused.resp.status, refused.resp.getheader("Retry-After")) == (503, "2")
    assert json.loads(refused.resp.read())["reason"] == "ServiceUnavailable"
    api.forbid("watch", "nodes", "n1")  # RBAC resourceNames apply to the selected name
    forbidden = watches(api, **NODE_N1)
    assert forbidden.resp.status == 403
    assert json.loads(forbidden.resp.read())["message"] == (
        'nodes "n1" is forbidden: User "system:serviceaccount:gfd:gfd" cannot watch '
        'resource "nodes" in API group "" at the cluster scope')
    assert watches(api, fieldSelector="metadata.name=n2").resp.status == 200
    assert [r.status for r in api.requests if r.watch] == [500, 503, 403, 200]
    api.inject_watch(500, count=None)
    api.clear_faults()  # watch faults too
    assert watches(api, fieldSelector="metadata.name=n2").resp.status == 200
    api.set_down(True)
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        watches(api, **NODE_N1)
    assert api.requests[-1].watch and api.requests[-1].status == 0


def test_stop_ends_open_watches_at_once_and_leaves_no_thread() -> None:
    before = set(threading.enumerate())
    api = FakeApiServer().start()
    api.add_node("n1")
    w = RawWatch(api, **NODE_N1)
    assert w.next()["type"] == "ADDED"
    wait_until(lambda: api.open_watches == 1)
    start = time.monotonic()
    api.stop()
    assert time.monotonic() - start < 10  # at once, not at the watch's own end
    with pytest.raises(http.client.IncompleteRead):
        w.resp.read()
    w.close()
    assert set(threading.enumerate()) <= before


def test_events_may_be_cut_across_chunks(api: FakeApiServer,
                                         watches: Callable[..., RawWatch]) -> None:
    api.watch_chunk_bytes = 7
    api.add_node("n2")
    w = watches(api, timeoutSeconds="1")
    assert [summary(e)[:2] for e in w.rest()] == [("ADDED", "n1"), ("ADDED", "n2")]


def test_the_upstream_watch_helper_reads_the_stream(api: FakeApiServer, core: Api) -> None:
    """kubernetes.watch.Watch, the client's own decoder: objects, bookmarks, the 410."""
    api.bookmark_interval = 0.2
    api.bookmark_before_timeout = 0
    start = api.resource_version
    api.set_label("n1", "a", "1")
    threading.Timer(0.1, api.set_label, ("n1", "b", "2")).start()
    watcher = watch.Watch()
    seen = []
    for event in watcher.stream(core.list_node, field_selector="metadata.name=n1",
                                resource_version=start, timeout_seconds=1,
                                allow_watch_bookmarks=True):
        seen.append(event["type"])
        if event["type"] != "BOOKMARK":
            assert event["object"].metadata.name == "n1"
    assert seen[:2] == ["MODIFIED", "MODIFIED"] and "BOOKMARK" in seen[2:]
    assert watcher.resource_version == api.resource_version
    api.compact()
    with pytest.raises(ApiException) as exc:
        list(watch.Watch().stream(core.list_node, resource_version=start, timeout_seconds=1))
    assert exc.value.status == 410
    assert "Expired: too old resource version" in str(exc.value.reason)


def test_a_watch_whose_client_left_is_closed_by_the_server(
        api: FakeApiServer, watches: Callable[..., RawWatch]) -> None:
    w = watches(api, resourceVersion=api.resource_version)
    wait_until(lambda: api.open_watches == 1)
    w.close()
    wait_until(lambda: api.open_watches == 0, timeout=2.0)


def test_a_watch_client_on_a_descriptor_past_1024_is_not_taken_for_gone() -> None:
    import os
    import socket

    from .apiserver.watch import _client_gone

    filler = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        server_side, client_side = socket.socketpair()
        assert server_side.fileno() > 1024
        assert not _client_gone(server_side)
        client_side.close()
        assert _client_gone(server_side)
        server_side.close()
    finally:
        for fd in filler:
            os.close(fd)


# ---------------------------------------------------------------------------- events


def _node_event(name: str, node: str, reason: str, uid: str) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "involvedObject": {"kind": "Node", "name": node, "uid": uid, "apiVersion": "v1"},
            "reason": reason, "message": f"{reason} on {node}", "type": "Warning",
            "source": {"component": "gfd", "host": node}, "count": 1}


def test_events_are_created_patched_and_selected_by_involved_object(core: Api) -> None:
    core.create_namespaced_event("default", _node_event("n1.1", "n1", "GpuLost", "u1"))
    core.create_namespaced_event("default", _node_event("n2.1", "n2", "GpuLost", "u2"))
    core.patch_namespaced_event("n1.1", "default", {"count": 3},
                                _content_type=MERGE_PATCH)
    # what kubectl describe node asks for: every namespace, by the involved object
    found = core.list_event_for_all_namespaces(
        field_selector="involvedObject.kind=Node,involvedObject.name=n1,"
                       "involvedObject.uid=u1").items
    assert [(e.metadata.name, e.count, e.source.component) for e in found] == [
        ("n1.1", 3, "gfd")]
    assert [e.metadata.name for e in core.list_namespaced_event(
        "default", field_selector="reason=GpuLost,source=gfd").items] == ["n1.1", "n2.1"]
    with pytest.raises(ApiException) as err:
        core.list_namespaced_event("default", field_selector="spec.nodeName=n1")
    assert err.value.status == 400


def test_an_event_about_a_node_must_be_in_the_default_namespace(core: Api) -> None:
    with pytest.raises(ApiException) as err:
        core.create_namespaced_event("gfd", _node_event("n1.1", "n1", "GpuLost", "u1"))
    assert err.value.status == 422
    assert "involvedObject.namespace" in json.loads(err.value.body)["message"]


def test_a_watch_counted_open_is_already_in_the_request_log(api: FakeApiServer) -> None:
    """A test waits for open_watches and then reads the log: the watch must be there (it
    was registered before it was logged, and a loaded machine showed the gap)."""
    for _ in range(20):
        api.clear_log()
        w = RawWatch(api, **NODE_N1)
        wait_until(lambda: api.open_watches == 1)
        assert [r.watch for r in api.requests] == [True]
        w.close()
        wait_until(lambda: api.open_watches == 0)
