"""The Kubernetes API boundary, with the real client against the local fake API server:
every failure becomes an ApiError with the HTTP status, the API's reason, the Status causes,
Retry-After, and a hint for a 403 or a missing NodeFeature CRD (not for a missing object);
answers gfd cannot trust (not a Kubernetes object, too large, trickling past the deadline)
are one-line ApiErrors; the client-side rate limit; credentials that cannot load (a FIFO
for a kubeconfig included) are a ConfigError."""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.apiserver import FakeApiServer, self_signed
from helpers.process import wait_for
from helpers.timing import Clock, Sleeps
from kubernetes.client.exceptions import ApiException

from gfd.budget import Budget
from gfd.errors import ApiError, ConfigError, WatchExpired
from gfd.hostfile import what_is
from gfd.kube import (
    APPLY,
    MAX_ANSWER_BYTES,
    RESOURCESLICE_LIMIT,
    Kube,
    RateLimiter,
    WatchEvent,
    WatchStream,
    _status_error,
)
from gfd.sinks.nodefeature import build, object_name

NODE = "gpu-node-1"
NS = "gfd"
NF = object_name(NODE)
CRD_HINT = "the NodeFeature CRD is not installed"
RBAC_HINT = "grant this permission to gfd's ServiceAccount"


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as srv:
        srv.add_node(NODE, labels={"kubernetes.io/hostname": NODE})
        srv.add_pod(NS, "gfd-abcde", owner_daemonset="gfd", node_name=NODE)
        yield srv


@pytest.fixture
def requests() -> list[tuple[str, str]]:
    return []


@pytest.fixture
def kube(server: FakeApiServer, tmp_path: Path,
         requests: list[tuple[str, str]]) -> Iterator[Kube]:
    api = Kube(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")), qps=0,
               on_request=lambda verb, code: requests.append((verb, code)))
    yield api
    api.close()


def api_error(call: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        call()
    error = caught.value
    assert "\n" not in str(error), "one line"
    return error


# ----------------------------------------------------------------------------- requests


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


# ----------------------------------------------------------------------------- errors

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
    error = _status_error("get", "node n", exc)
    for attribute, value in expected.items():
        assert getattr(error, attribute) == value, attribute


# ----------------------------------------------------------------------------- answers

NOT_OBJECTS = [
    ("an-html-login-page", "<html><head><title>Sign in</title></head><body>SSO</body></html>",
     "text/html; charset=utf-8", "text/html"),
    ("a-json-list", "[]", "application/json", "application/json"),
    ("an-object-without-kind", '{"metadata": {"name": "n"}}', "application/json",
     "application/json"),
    ("an-empty-body", "", "application/json", "application/json"),
]


@pytest.mark.parametrize("body, content_type, shown", [n[1:] for n in NOT_OBJECTS],
                         ids=[n[0] for n in NOT_OBJECTS])
def test_a_success_that_is_not_a_kubernetes_object_is_one_line_naming_a_proxy(
        server: FakeApiServer, kube: Kube, requests: list[tuple[str, str]], body: str,
        content_type: str, shown: str) -> None:
    server.inject(200, 1, method="GET", body=body, content_type=content_type)
    error = api_error(lambda: kube.get_node(NODE))
    message = str(error)
    assert message.startswith(f"get node {NODE}: the API server's answer is not a Kubernetes "
                              f"object: HTTP 200, {shown}, ")
    assert message.endswith("(a proxy in the way?)")
    assert error.status == 200 and not error.retriable, "the agent retries it, with backoff"
    assert requests == [("get", "200")]
    assert kube.get_node(NODE)["metadata"]["name"] == NODE, "the next answer is read again"


def test_a_delete_answered_with_a_status_object_is_a_success(server: FakeApiServer,
                                                             kube: Kube) -> None:
    kube.create_nodefeature(NS, build(NODE, NS, {}, []))
    assert kube.delete_nodefeature(NS, NF) is True


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_an_answer_over_the_cap_fails_without_being_read_whole(
        server: FakeApiServer, kube: Kube, chunked: bool) -> None:
    server.inject(200, 1, method="GET", body={"kind": "Node", "apiVersion": "v1"},
                  size=300 * 1024 * 1024, chunked=chunked)
    started = time.monotonic()
    error = api_error(lambda: kube.get_node(NODE))
    assert time.monotonic() - started < 5, "300 MB were not read"
    assert str(error) == (f"get node {NODE}: the API server's answer is larger than "
                          f"{MAX_ANSWER_BYTES // 1024} KiB, more than a Node or NodeFeature "
                          "can be (HTTP 200; a proxy in the way?)")
    assert kube.get_node(NODE)["metadata"]["name"] == NODE, "the next request works"


def test_an_error_answer_over_the_cap_fails_the_same_way(server: FakeApiServer,
                                                        kube: Kube) -> None:
    server.inject(502, 1, method="GET", body="x", size=50 * 1024 * 1024, chunked=True)
    assert "larger than" in str(api_error(lambda: kube.get_node(NODE)))


def test_an_answer_just_under_the_cap_is_read(server: FakeApiServer, kube: Kube) -> None:
    server.inject(200, 1, method="GET",
                  body={"kind": "Node", "apiVersion": "v1", "metadata": {"name": NODE}},
                  size=MAX_ANSWER_BYTES, chunked=True)
    assert len(kube.get_node(NODE)["pad"]) > MAX_ANSWER_BYTES - 100


@pytest.mark.parametrize("headers", [True, False], ids=["trickling-headers", "trickling-body"])
def test_a_trickling_answer_fails_at_the_deadline_and_the_next_request_works(
        server: FakeApiServer, tmp_path: Path, headers: bool) -> None:
    """A socket timeout restarts with each byte: only an overall deadline ends a trickle."""
    requests: list[tuple[str, str]] = []
    api = Kube(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")), qps=0,
               timeout=0.5, on_request=lambda verb, code: requests.append((verb, code)))
    try:
        server.inject(200, 1, method="GET", body={"kind": "Node", "apiVersion": "v1"},
                      size=10_000, trickle=0.1, trickle_headers=headers)
        started = time.monotonic()
        error = api_error(lambda: api.get_node(NODE))
        took = time.monotonic() - started
        assert 0.4 < took < 10, took  # the deadline, not the 1000 s the trickle would take
        assert str(error) == (f"get node {NODE}: no complete answer from the API server "
                              "within 0.5 s (a slow or stuck connection)")
        assert error.status is None and error.retriable
        assert requests == [("get", "error")]
        assert api.get_node(NODE)["metadata"]["name"] == NODE
    finally:
        api.close()


class _Conn:
    """A urllib3 connection as the watchdog sees it: something with a socket."""

    def __init__(self) -> None:
        self.sock = object()


def test_a_deadline_that_passes_late_never_ends_the_next_request(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from gfd import kube as kube_module

    shut: list[Any] = []
    monkeypatch.setattr(kube_module.socket.socket, "shutdown",
                        lambda sock, how: shut.append(sock))
    clock = Clock()
    watchdog = kube_module._Watchdog(clock=clock)
    try:
        first = watchdog.arm(1.0)
        watchdog.attach(_Conn())
        watchdog.disarm(first)  # the first request ended just as its deadline came
        second = watchdog.arm(30.0)
        conn = _Conn()
        watchdog.attach(conn)
        clock.now += 5  # the first deadline is long past: its fire comes late
        assert watchdog.expire() == pytest.approx(25.0)
        assert not first.fired and not second.fired and shut == []
        clock.now += 26  # the second request's own deadline does end it
        assert watchdog.expire() is None
        assert second.fired and shut == [conn.sock]
    finally:
        watchdog.close()


def test_requests_start_no_thread_each(server: FakeApiServer, kube: Kube,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    kube.get_node(NODE)  # the channel's one deadline thread, once
    started: list[str] = []
    start = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start",
                        lambda self: (started.append(self.name), start(self))[1])
    for _ in range(20):
        kube.get_node(NODE)
    assert started == []


def test_the_deadline_ends_a_trickle_over_tls_too(tmp_path: Path) -> None:
    with FakeApiServer(tls=self_signed(tmp_path)) as server:
        server.add_node(NODE)
        api = Kube(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")), qps=0,
                   timeout=0.5)
        try:
            server.inject(200, 1, method="GET", body={"kind": "Node", "apiVersion": "v1"},
                          size=10_000, trickle=0.1, trickle_headers=False)
            started = time.monotonic()
            error = api_error(lambda: api.get_node(NODE))
            assert time.monotonic() - started < 10  # not the 1000 s of the whole trickle
            assert "no complete answer from the API server within 0.5 s" in str(error)
            assert api.get_node(NODE)["metadata"]["name"] == NODE
        finally:
            api.close()


def test_a_slow_but_complete_answer_within_the_deadline_is_read(server: FakeApiServer,
                                                                tmp_path: Path) -> None:
    api = Kube(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")), qps=0,
               timeout=5)
    try:
        server.inject(200, 1, method="GET", trickle=0.002, trickle_headers=False,
                      body={"kind": "Node", "apiVersion": "v1", "metadata": {"name": NODE}})
        assert api.get_node(NODE)["metadata"]["name"] == NODE
    finally:
        api.close()


# ----------------------------------------------------------------------------- credentials


def _bind_socket(path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))  # the socket file stays


@pytest.mark.parametrize("make, kind", [
    (lambda path: os.mkfifo(path), "a FIFO (named pipe)"),
    (lambda path: path.mkdir(), "a directory"),
    (lambda path: _bind_socket(path), "a socket"),
], ids=["fifo", "directory", "socket"])
def test_a_kubeconfig_that_is_not_a_regular_file_is_one_line_and_never_blocks(
        tmp_path: Path, make: Any, kind: str) -> None:
    # Regression: the client opened a FIFO for reading and waited forever for a writer.
    path = tmp_path / "kubeconfig"
    make(path)
    with pytest.raises(ConfigError) as caught:
        Kube(kubeconfig=str(path))
    assert str(caught.value) == (f"kubeconfig {path} is {kind}, not a regular file (point "
                                 "--kubeconfig / KUBECONFIG at the kubeconfig file itself)")
    # the same words as every other file gfd refuses (gfd.hostfile names the kinds)
    assert kind == what_is(os.stat(path).st_mode)


def test_a_kubeconfig_list_is_checked_file_by_file(server: FakeApiServer,
                                                   tmp_path: Path) -> None:
    good = server.write_kubeconfig(tmp_path / "good")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="is a FIFO"):
        Kube(kubeconfig=f"{good}{os.pathsep}{fifo}")


def test_a_symlink_to_a_kubeconfig_is_followed(server: FakeApiServer, tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(server.write_kubeconfig(tmp_path / "kubeconfig"))
    api = Kube(kubeconfig=str(link), qps=0)
    try:
        assert api.get_node(NODE)["metadata"]["name"] == NODE
    finally:
        api.close()



def test_a_missing_kubeconfig_is_a_config_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "nowhere"
    with pytest.raises(ConfigError, match="cannot load Kubernetes credentials from") as caught:
        Kube(kubeconfig=str(path))
    assert str(path) in str(caught.value) and "--kubeconfig" in str(caught.value)


@pytest.mark.parametrize("text", ["just text", "apiVersion: v1\nkind: Config\n"],
                         ids=["not-a-mapping", "no-context"])
def test_a_kubeconfig_that_cannot_load_is_a_config_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    with pytest.raises(ConfigError, match="cannot load Kubernetes credentials"):
        Kube(kubeconfig=str(path))


def test_a_kubeconfig_that_is_not_yaml_is_one_line_config_error(tmp_path: Path) -> None:
    # Regression: the YAML parser's error escaped as a traceback instead of exit 2.
    path = tmp_path / "kubeconfig"
    path.write_text("clusters: [1, 2\n")
    with pytest.raises(ConfigError, match="cannot load Kubernetes credentials") as caught:
        Kube(kubeconfig=str(path))
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)


def test_outside_a_pod_without_a_kubeconfig_is_a_config_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    with pytest.raises(ConfigError, match="in-cluster service account"):
        Kube(kubeconfig="")


# ----------------------------------------------------------------------------- rate limit


def test_a_burst_passes_then_requests_are_spaced_at_the_rate() -> None:
    clock, sleeps = Clock(), Sleeps()
    limiter = RateLimiter(qps=2.0, burst=3, clock=clock, sleep=sleeps)
    for _ in range(3):
        limiter.take()
    assert sleeps == []
    limiter.take()
    assert sleeps == [0.5]


def test_tokens_come_back_with_time_up_to_the_burst() -> None:
    clock, sleeps = Clock(), Sleeps()
    limiter = RateLimiter(qps=2.0, burst=2, clock=clock, sleep=sleeps)
    limiter.take()
    limiter.take()
    clock.now += 60  # a long pause refills at most the burst
    for _ in range(2):
        limiter.take()
    assert sleeps == []
    limiter.take()
    assert sleeps == [0.5]


def test_a_rate_of_zero_never_waits() -> None:
    sleeps = Sleeps()
    limiter = RateLimiter(qps=0.0, burst=0, clock=Clock(), sleep=sleeps)
    for _ in range(100):
        limiter.take()
    assert sleeps == []


def test_requests_go_through_the_rate_limit(server: FakeApiServer, tmp_path: Path) -> None:
    """The second token comes 1/qps after the first was taken, however long the first
    request took (it was taken after ``started``): a bound no schedule can break, where
    timing the second request alone assumed the first took under 1/qps."""
    api = Kube(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")), qps=4,
               burst=1)
    try:
        started = time.monotonic()
        api.get_node(NODE)
        api.get_node(NODE)
        took = time.monotonic() - started
    finally:
        api.close()
    assert took >= 0.249, "the second request waited for its token (1/4 s after the first)"


def test_the_limiter_refuses_a_token_that_would_come_too_late() -> None:
    clock, sleeps = Clock(), Sleeps()
    limiter = RateLimiter(qps=2.0, burst=1, clock=clock, sleep=sleeps)
    assert limiter.take(within=0.0)
    assert not limiter.take(within=0.4), "the next token comes in 0.5 s"
    assert sleeps == [], "refused at once, without waiting"
    assert limiter.take(within=0.5)
    assert sleeps == [0.5], "the refused call took no token"
    assert limiter.take() and sleeps == [0.5, 1.0], "the taker before it still waits"


def test_a_wait_never_refills_the_bucket() -> None:
    """Regression: a taker that waited left the tokens below zero, which read as a bucket
    not filled yet: the next taker found it full again, and a burst followed each wait."""
    clock, sleeps = Clock(), Sleeps()
    limiter = RateLimiter(qps=5.0, burst=2, clock=clock, sleep=sleeps)
    for _ in range(4):
        limiter.take()
    assert sleeps == [0.2, 0.4], "the third and fourth wait their turn at 5/s"


# ----------------------------------------------------------------------------- the cycle's budget


@pytest.fixture
def budget() -> Budget:
    return Budget()


@pytest.fixture
def budgeted(server: FakeApiServer, tmp_path: Path, budget: Budget,
             requests: list[tuple[str, str]]) -> Iterator[Kube]:
    """A client whose requests may take 30 s each, sharing ``budget``."""
    api = Kube(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")), qps=0,
               timeout=30, budget=budget,
               on_request=lambda verb, code: requests.append((verb, code)))
    yield api
    api.close()


def test_a_request_ends_at_the_cycles_deadline_before_its_own(
        server: FakeApiServer, budgeted: Kube, budget: Budget,
        requests: list[tuple[str, str]]) -> None:
    server.inject(200, 1, method="GET", body={"kind": "Node", "apiVersion": "v1"},
                  size=10_000, trickle=0.1)
    budget.open(0.5)
    started = time.monotonic()
    error = api_error(lambda: budgeted.get_node(NODE))
    assert time.monotonic() - started < 20, "ended by the cycle's 0.5 s, not its own 30 s"
    assert re.fullmatch(rf"get node {NODE}: no complete answer from the API server within "
                        r"0\.[0-9]+ s, what was left of this cycle's 0\.5 s for API requests "
                        r"\(a slow or stuck connection\)", str(error)), str(error)
    assert error.retriable and requests == [("get", "error")]


def test_a_request_after_the_budget_is_spent_is_not_sent(
        server: FakeApiServer, budgeted: Kube, budget: Budget,
        requests: list[tuple[str, str]]) -> None:
    budget.open(0.0)
    error = api_error(lambda: budgeted.apply_node_labels(NODE, {"a": "1"},
                                                         field_manager="gfd"))
    assert str(error) == (f"patch node {NODE}: not sent: the requests before it used up this "
                          "cycle's 0 s for API requests (a slow API server; the next cycle "
                          "tries again)")
    assert server.requests == [] and requests == [], "never sent, never counted"
    budget.close()
    assert budgeted.get_node(NODE)["metadata"]["name"] == NODE, "the next cycle's is sent"


def test_the_budget_binds_only_the_thread_that_opened_it(
        budgeted: Kube, budget: Budget) -> None:
    """The watch and Events threads never hold up a cycle: the cycle's budget is not
    theirs (each of their requests keeps its own deadline)."""
    budget.open(0.0)
    answers: list[Any] = []
    other = threading.Thread(target=lambda: answers.append(budgeted.get_node(NODE)))
    other.start()
    other.join(timeout=30)
    assert [a["metadata"]["name"] for a in answers] == [NODE]
    api_error(lambda: budgeted.get_node(NODE))


def test_the_rate_limit_never_holds_a_request_past_the_budget(
        server: FakeApiServer, tmp_path: Path, budget: Budget) -> None:
    """The second token comes 10 s after the first, past the 5 s budget (whatever the first
    request took): refused at once, not waited for."""
    api = Kube(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")), qps=0.1,
               burst=1, budget=budget)
    try:
        budget.open(5.0)
        api.get_node(NODE)
        error = api_error(lambda: api.get_node(NODE))
    finally:
        api.close()
    assert str(error) == (f"get node {NODE}: not sent: the client-side rate limit "
                          "(--kube-api-qps) would hold it past this cycle's 5 s for API "
                          "requests (a slow API server; the next cycle tries again)")
    assert len(server.requests) == 1


# ----------------------------------------------------------------------------- resourceslices


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


# ----------------------------------------------------------------------------- watches


def collect(stream: WatchStream) -> list[tuple[str, str]]:
    return [(e.type, e.resource_version) for e in stream]


def test_list_object_gives_the_object_and_the_current_resource_version(
        server: FakeApiServer, kube: Kube, requests: list[tuple[str, str]]) -> None:
    server.add_node("other")  # moves the server's resourceVersion past the node's own
    obj, rv = kube.list_object("node", NODE)
    assert obj == server.node(NODE)  # kind and apiVersion too, as from a GET
    assert rv == server.resource_version != obj["metadata"]["resourceVersion"]
    [listed] = server.requests[-1:]
    assert (listed.path, listed.query) == ("/api/v1/nodes", {"fieldSelector":
                                                             f"metadata.name={NODE}"})
    assert kube.list_object("nodefeature", NF, namespace=NS) == (None, server.resource_version)
    kube.create_nodefeature(NS, build(NODE, NS, {"a": "1"}, []))
    nodefeature, _ = kube.list_object("nodefeature", NF, namespace=NS)
    assert nodefeature == server.nodefeature(NS, NF)
    assert requests[-1] == ("list", "200")
    with pytest.raises(ValueError, match="namespaced"):
        kube.list_object("nodefeature", NF)


def test_a_watch_yields_each_event_and_ends_cleanly_at_its_timeout(
        server: FakeApiServer, kube: Kube, requests: list[tuple[str, str]]) -> None:
    server.clear_log()
    stream = kube.watch("node", NODE, resource_version="", timeout=4.5)
    [request] = server.requests
    assert request.query == {"watch": "1", "fieldSelector": f"metadata.name={NODE}",
                             "allowWatchBookmarks": "true", "timeoutSeconds": "5"}
    assert requests == [("watch", "200")]  # reported once, when the stream opens
    first = next(stream)
    assert (first.type, first.object, first.resource_version) == (
        "ADDED", server.node(NODE), server.node(NODE)["metadata"]["resourceVersion"])
    started = time.monotonic()
    server.set_label(NODE, "a", "1")
    modified = next(stream)
    assert time.monotonic() - started < 4, "delivered as it happens, not at the end (5 s)"
    assert modified.object is not None and modified.object["metadata"]["labels"]["a"] == "1"
    assert modified.resource_version == server.resource_version
    # the server's clean end (a bookmark may come first: the watch asked for them)
    assert [e.type for e in stream if e.type != "BOOKMARK"] == []
    assert time.monotonic() - started < 15


def test_a_watch_resumes_after_a_resource_version_and_sees_deletion(
        server: FakeApiServer, kube: Kube) -> None:
    start = server.resource_version
    server.set_label(NODE, "a", "1")
    server.delete_node(NODE)
    events = list(kube.watch("node", NODE, resource_version=start, timeout=1))
    assert [e.type for e in events] == ["MODIFIED", "DELETED"]
    assert events[1].resource_version == server.resource_version
    assert events[1].object is not None and events[1].object["metadata"]["name"] == NODE
    assert server.requests[-1].query["resourceVersion"] == start


def test_a_bookmark_has_no_object_and_carries_the_resource_version(
        server: FakeApiServer, kube: Kube) -> None:
    server.bookmark_interval = 0.1
    with kube.watch("node", NODE, resource_version=server.resource_version,
                    timeout=30) as stream:
        server.add_node("other")
        bookmark = next(stream)
    assert (bookmark.type, bookmark.object, bookmark.resource_version) == (
        "BOOKMARK", None, server.resource_version)


def test_a_nodefeature_watch_follows_its_object(server: FakeApiServer, kube: Kube) -> None:
    with kube.watch("nodefeature", NF, namespace=NS, resource_version=server.resource_version,
                    timeout=30) as stream:
        kube.create_nodefeature(NS, build(NODE, NS, {"a": "1"}, []))
        added = next(stream)
        kube.delete_nodefeature(NS, NF)
        deleted = next(stream)
    assert (added.type, deleted.type) == ("ADDED", "DELETED")
    assert added.object is not None and added.object["spec"]["labels"] == {"a": "1"}


def test_an_expired_resource_version_is_watch_expired_as_event_or_answer(
        server: FakeApiServer, kube: Kube) -> None:
    old = server.resource_version
    server.set_label(NODE, "a", "1")
    server.compact()
    stream = kube.watch("node", NODE, resource_version=old, timeout=30)
    event_form = api_error(lambda: list(stream))
    server.expired_as_http = True
    answer_form = api_error(lambda: kube.watch("node", NODE, resource_version=old, timeout=30))
    for error in (event_form, answer_form):
        assert isinstance(error, WatchExpired)
        assert (error.status, error.reason) == (410, "Expired")
        assert str(error).startswith(f"watch node {NODE}: HTTP 410 Expired: too old resource "
                                     f"version: {old} (")


def test_an_error_event_is_an_api_error_with_its_status(server: FakeApiServer,
                                                        kube: Kube) -> None:
    stream = kube.watch("node", NODE, resource_version=server.resource_version, timeout=30)
    wait_for(lambda: server.open_watches == 1)
    server.send_watch_error(500, "InternalError", "etcd\nis sad")
    error = api_error(lambda: next(stream))
    assert not isinstance(error, WatchExpired)
    assert (error.status, error.reason) == (500, "InternalError")
    assert str(error) == f"watch node {NODE}: HTTP 500 InternalError: etcd is sad"


@pytest.mark.parametrize("status", [403, 500, 503], ids=["forbidden", "internal", "unavailable"])
def test_an_error_answer_to_a_watch_is_raised_at_once(
        server: FakeApiServer, kube: Kube, requests: list[tuple[str, str]], status: int) -> None:
    if status == 403:
        server.forbid("watch", "nodes", NODE)
    else:
        server.inject_watch(status, retry_after=3)
    error = api_error(lambda: kube.watch("node", NODE, resource_version="", timeout=30))
    assert error.status == status
    assert (RBAC_HINT in str(error)) is (status == 403)
    assert error.retry_after == (None if status == 403 else 3.0)
    assert requests == [("watch", str(status))]
    assert kube.get_node(NODE)["metadata"]["name"] == NODE  # the client is still usable


def test_a_watch_without_the_crd_names_the_fix(server: FakeApiServer, kube: Kube) -> None:
    server.set_crd_installed(False)
    error = api_error(lambda: kube.watch("nodefeature", NF, namespace=NS, resource_version="",
                                         timeout=30))
    assert error.status == 404 and error.resource_missing and CRD_HINT in str(error)


def test_a_connection_lost_mid_stream_is_an_error_without_a_status(
        server: FakeApiServer, kube: Kube) -> None:
    stream = kube.watch("node", NODE, resource_version="", timeout=30)
    assert next(stream).type == "ADDED"
    wait_for(lambda: server.open_watches == 1)
    server.drop_watches()
    error = api_error(lambda: next(stream))
    assert error.status is None
    assert "lost mid-stream" in str(error)
    assert list(stream) == []  # done; the next watch gets a fresh connection
    assert next(kube.watch("node", NODE, resource_version="", timeout=30)).type == "ADDED"


def test_no_answer_to_a_watch_is_an_error_without_a_status(
        server: FakeApiServer, kube: Kube, requests: list[tuple[str, str]]) -> None:
    server.set_down(True)
    error = api_error(lambda: kube.watch("node", NODE, resource_version="", timeout=30))
    assert error.status is None and "cannot reach the API server" in str(error)
    assert requests == [("watch", "error")]


def test_close_from_another_thread_ends_a_blocked_iteration_at_once(
        server: FakeApiServer, kube: Kube) -> None:
    stream = kube.watch("node", NODE, resource_version=server.resource_version, timeout=3600)
    seen: list[WatchEvent] = []
    reader = threading.Thread(target=lambda: seen.extend(stream))
    reader.start()
    wait_for(lambda: server.open_watches == 1)
    started = time.monotonic()
    stream.close()
    reader.join(30)
    assert not reader.is_alive() and time.monotonic() - started < 10  # not the hour
    assert seen == []  # ended, not failed
    stream.close()  # idempotent
    wait_for(lambda: server.open_watches == 0)


def test_requests_are_answered_while_a_watch_is_open(server: FakeApiServer,
                                                     kube: Kube) -> None:
    with kube.watch("node", NODE, resource_version=server.resource_version,
                    timeout=3600) as stream:
        reader = threading.Thread(target=lambda: list(stream))
        reader.start()
        wait_for(lambda: server.open_watches == 1)
        started = time.monotonic()
        kube.apply_node_labels(NODE, {"a": "1"}, field_manager="gfd")
        assert kube.get_node(NODE)["metadata"]["labels"]["a"] == "1"
        assert time.monotonic() - started < 10  # not after the watch's hour
    reader.join(2)
    assert not reader.is_alive()


def test_events_cut_across_chunks_or_sharing_one_are_read_whole(server: FakeApiServer,
                                                               kube: Kube) -> None:
    server.watch_chunk_bytes = 5
    start = server.resource_version
    for i in range(3):
        server.set_label(NODE, f"k{i}", "v")
    events = collect(kube.watch("node", NODE, resource_version=start, timeout=1))
    assert [e[0] for e in events] == ["MODIFIED"] * 3
    server.watch_chunk_bytes = 100_000
    assert collect(kube.watch("node", NODE, resource_version=start, timeout=1)) == events


def test_an_event_over_the_cap_is_an_error_not_an_unbounded_read(server: FakeApiServer,
                                                                 kube: Kube) -> None:
    kube.max_watch_event_bytes = 4096
    body = build(NODE, NS, {}, [])
    body["spec"]["features"] = {"attributes": {"x.y": {"elements": {"big": "z" * 100_000}}}}
    kube.create_nodefeature(NS, body)
    error = api_error(lambda: next(kube.watch("nodefeature", NF, namespace=NS,
                                              resource_version="", timeout=30)))
    assert error.status is None and "larger than 4 KiB" in str(error)


@pytest.mark.parametrize("body, expected", [
    ("<html>login</html>\n", "not a watch event: '<html>login</html>'"),
    ('{"type": "SURPRISE", "object": {}}\n', "unknown watch event type 'SURPRISE'"),
], ids=["html", "unknown-type"])
def test_a_stream_that_is_not_watch_events_is_an_error(server: FakeApiServer, kube: Kube,
                                                       body: str, expected: str) -> None:
    server.inject_watch(200, body=body)
    stream = kube.watch("node", NODE, resource_version="", timeout=30)
    error = api_error(lambda: next(stream))
    assert error.status is None and expected in str(error)


def test_a_watch_takes_a_token_from_the_rate_limit(server: FakeApiServer,
                                                  tmp_path: Path) -> None:
    """Timed from before the request whose token came first, as in
    ``test_requests_go_through_the_rate_limit`` (timing the watch alone assumed that request
    took under 1/qps)."""
    api = Kube(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")), qps=4,
               burst=1)
    try:
        started = time.monotonic()
        api.get_node(NODE)
        api.watch("node", NODE, resource_version="", timeout=1).close()
        took = time.monotonic() - started
    finally:
        api.close()
    assert took >= 0.249, "the watch waited for its token (1/4 s after the request's)"


class WithoutRead1:
    """An urllib3 response as versions before ``read1`` had it."""

    def __init__(self, response: Any) -> None:
        self._response = response
        self.connection = response.connection

    def stream(self, amt: int, decode_content: bool) -> Any:
        return self._response.stream(amt, decode_content=decode_content)

    def close(self) -> None:
        self._response.close()

    def release_conn(self) -> None:
        self._response.release_conn()


def test_a_response_without_read1_is_read_chunk_by_chunk(server: FakeApiServer,
                                                         kube: Kube) -> None:
    opened = kube.watch("node", NODE, resource_version="", timeout=5)
    stream = WatchStream(f"node {NODE}", WithoutRead1(opened._response), 1 << 20)
    assert next(stream).type == "ADDED"
    started = time.monotonic()
    server.set_label(NODE, "a", "1")
    # as it happens, not at the watch's end (5 s); a loaded machine may take a while
    assert next(stream).type == "MODIFIED" and time.monotonic() - started < 4
    assert [e.type for e in stream if e.type != "BOOKMARK"] == []


# ----------------------------------------------------------------------------- events


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
