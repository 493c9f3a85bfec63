"""Error answers as one-line ApiErrors: the HTTP status, the API's reason, the Status causes,
Retry-After, and a hint for a 403 or a missing NodeFeature CRD (not for a missing object);
odd Status bodies read without failing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fakes.apiserver import FakeApiServer
from helpers.kube import api_error
from kubernetes.client.exceptions import ApiException

from gfd.kube.client import Kube
from gfd.kube.status import status_error
from gfd.sinks.nodefeature import build, object_name

NODE = "gpu-node-1"
NS = "gfd"
NF = object_name(NODE)
CRD_HINT = "the NodeFeature CRD is not installed"
RBAC_HINT = "grant this permission to gfd's ServiceAccount"


FAULTS = [
    ("conflict", 409, None, "Conflict", None),
    ("throttled", 429, 5, "TooManyRequests", 5.0),
    ("unavailable-with-retry-after", 503, 2, "ServiceUnavailable", 2.0),
    ("internal-error", 500, None, "InternalError", None),
    ("forbidden", 403, None, "Forbidden", None),
]


@pytest.mark.parametrize("status, retry_after, reason, seconds", [f[1:] for f in FAULTS],
                         ids=[f[0] for f in FAULTS])
def test_an_error_answer_keeps_status_reason_and_retry_after(
        server: FakeApiServer, kube: Kube, status: int, retry_after: int | None, reason: str,
        seconds: float | None) -> None:
    server.inject(status, 1, method="GET", retry_after=retry_after)
    error = api_error(lambda: kube.get_node(NODE))
    assert (error.status, error.reason, error.retry_after) == (status, reason, seconds)
    assert str(error).startswith(f"get node {NODE}: HTTP {status} {reason}: ")
    assert error.retriable is (status == 429 or status >= 500)


def test_a_422_keeps_the_status_causes(server: FakeApiServer, kube: Kube) -> None:
    error = api_error(lambda: kube.apply_node_labels(
        NODE, {"nvidia.com/bad key": "1", "ok": "-x"}, field_manager="gfd"))
    assert (error.status, error.reason) == (422, "Invalid")
    assert len(error.causes) >= 2
    assert any('"nvidia.com/bad key"' in c for c in error.causes)
    assert any('"-x"' in c for c in error.causes)


def test_a_403_names_the_fix(server: FakeApiServer, kube: Kube) -> None:
    server.forbid("patch", "nodes")
    error = api_error(lambda: kube.apply_node_labels(NODE, {}, field_manager="gfd"))
    assert error.status == 403 and RBAC_HINT in str(error)
    assert 'cannot patch resource "nodes"' in str(error)


def test_a_missing_crd_is_a_missing_resource_with_the_install_hint(server: FakeApiServer,
                                                                   kube: Kube) -> None:
    server.set_crd_installed(False)
    for call in (lambda: kube.get_nodefeature(NS, NF),
                 lambda: kube.create_nodefeature(NS, build(NODE, NS, {}, []))):
        error = api_error(call)
        assert (error.status, error.resource_missing) == (404, True)
        assert CRD_HINT in str(error)


def test_a_missing_object_is_not_a_missing_resource_and_gets_no_hint(server: FakeApiServer,
                                                                     kube: Kube) -> None:
    body = build(NODE, NS, {}, [])
    body["metadata"]["resourceVersion"] = "1"
    for call in (lambda: kube.replace_nodefeature(NS, body), lambda: kube.get_node("gone")):
        error = api_error(call)
        assert (error.status, error.resource_missing) == (404, False)
        assert CRD_HINT not in str(error)


def test_a_missing_node_type_is_not_given_the_crd_hint(server: FakeApiServer,
                                                       kube: Kube) -> None:
    server.inject(404, 1, method="GET", body={"kind": "Status", "code": 404,
                                              "reason": "NotFound", "message": "no"})
    error = api_error(lambda: kube.get_node(NODE))
    assert error.resource_missing and CRD_HINT not in str(error)


def test_an_answer_that_is_not_json_keeps_the_http_reason(server: FakeApiServer,
                                                          kube: Kube) -> None:
    server.inject(502, 1, method="GET", body="upstream connect error or disconnect")
    error = api_error(lambda: kube.get_node(NODE))
    assert error.status == 502 and error.reason == "" and error.retriable
    assert "Bad Gateway" in str(error)


def test_a_multi_line_message_is_one_line(server: FakeApiServer, kube: Kube) -> None:
    server.inject(500, 1, method="GET", body={"kind": "Status", "code": 500,
                                              "reason": "InternalError",
                                              "message": "first line\nsecond line"})
    assert "first line second line" in str(api_error(lambda: kube.get_node(NODE)))


def test_no_answer_is_an_error_without_a_status(server: FakeApiServer, kube: Kube) -> None:
    server.set_down(True)
    error = api_error(lambda: kube.get_node(NODE))
    assert error.status is None and error.retriable
    assert "cannot reach the API server" in str(error)


STATUS_BODIES = [
    ("retry-after-as-http-date", 429, {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, "{}",
     {"retry_after": None}),
    ("retry-after-in-seconds", 429, {"Retry-After": "1.5"}, "{}", {"retry_after": 1.5}),
    ("body-a-json-list", 500, {}, "[1, 2]", {"reason": "", "causes": ()}),
    ("causes-not-objects", 422, {}, json.dumps({"reason": "Invalid", "details": {
        "causes": ["x", {"message": "m"}]}}), {"causes": ("m",)}),
    ("details-not-an-object", 404, {}, json.dumps({"details": "x"}),
     {"resource_missing": True}),
    ("named-404", 404, {}, json.dumps({"details": {"name": "n"}}),
     {"resource_missing": False}),
]


@pytest.mark.parametrize("status, headers, body, expected", [s[1:] for s in STATUS_BODIES],
                         ids=[s[0] for s in STATUS_BODIES])
def test_odd_status_answers_are_read_without_failing(status: int, headers: dict[str, str],
                                                     body: str,
                                                     expected: dict[str, Any]) -> None:
    exc = ApiException(status=status, reason="Reason")
    exc.headers, exc.body = headers, body
    error = status_error("get", "node n", exc)
    for attribute, value in expected.items():
        assert getattr(error, attribute) == value, attribute
