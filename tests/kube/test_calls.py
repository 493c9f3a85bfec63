"""One request: answers gfd cannot trust (not a Kubernetes object, too large, trickling past
the deadline) are one-line ApiErrors; the client-side rate limit; the cycle's budget, which
ends a request on the loop's thread before its own deadline."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.apiserver import FakeApiServer
from helpers.kube import api_error
from helpers.timing import Clock, Sleeps

from gfd.budget import Budget
from gfd.kube.calls import MAX_ANSWER_BYTES, RateLimiter
from gfd.kube.client import Kube
from gfd.sinks.nodefeature import build, object_name

NODE = "gpu-node-1"
NS = "gfd"
NF = object_name(NODE)


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
               timeout=2.0, on_request=lambda verb, code: requests.append((verb, code)))
    try:
        server.inject(200, 1, method="GET", body={"kind": "Node", "apiVersion": "v1"},
                      size=10_000, trickle=0.1, trickle_headers=headers)
        started = time.monotonic()
        error = api_error(lambda: api.get_node(NODE))
        took = time.monotonic() - started
        assert 1.9 < took < 10, took  # the deadline, not the 1000 s the trickle would take
        assert str(error) == (f"get node {NODE}: no complete answer from the API server "
                              "within 2 s (a slow or stuck connection)")
        assert error.status is None and error.retriable
        assert requests == [("get", "error")]
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
