"""The watch on gfd's own published object, with the real client against the local fake API
server: drift is reported as it happens (not at the resync), a deletion as None; a clean
end reconnects at once from the last resourceVersion (bookmarks included) without reading
the object again; 410 reads it once and watches on; a lost connection or an error backs off
(never a busy loop); each failure is logged once; close() is prompt and leaves no thread."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.apiserver import FakeApiServer
from helpers.process import wait_for

from gfd.kube import Kube
from gfd.sinks.nodefeature import build, object_name
from gfd.sinks.objectwatch import FORBIDDEN_AFTER_ALLOWED, FORBIDDEN_RETRY, ObjectWatch, Reason

NODE = "gpu-node-1"
NS = "gfd"
NF = object_name(NODE)


class Seen:
    """What the callbacks got, in order, with when."""

    def __init__(self) -> None:
        self.changes: list[tuple[float, dict[str, Any] | None]] = []
        self.reasons: list[Reason] = []

    def on_change(self, obj: dict[str, Any] | None) -> None:
        self.changes.append((time.monotonic(), obj))

    def on_reconnect(self, reason: Reason) -> None:
        self.reasons.append(reason)

    @property
    def last(self) -> dict[str, Any] | None:
        return self.changes[-1][1]

    def labels(self) -> dict[str, str]:
        assert self.last is not None
        return dict(self.last["metadata"].get("labels") or {})


class Delays(list[float]):
    """A sleep that records each delay and waits it out."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)
        time.sleep(seconds)


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as srv:
        srv.add_node(NODE, labels={"kubernetes.io/hostname": NODE})
        srv.add_node("other-node")
        yield srv
        assert srv.errors == []


@pytest.fixture
def kube(server: FakeApiServer, tmp_path: Path) -> Iterator[Kube]:
    api = Kube(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")), qps=0)
    yield api
    api.close()


@pytest.fixture
def seen() -> Seen:
    return Seen()


@pytest.fixture
def watch(kube: Kube, seen: Seen) -> Iterator[Callable[..., ObjectWatch]]:
    made: list[ObjectWatch] = []

    def make(kind: str = "node", name: str = NODE, **options: Any) -> ObjectWatch:
        options.setdefault("on_change", seen.on_change)
        options.setdefault("on_reconnect", seen.on_reconnect)
        options.setdefault("rand", lambda: 1.0)
        w = ObjectWatch(kube, kind, name, **options)  # type: ignore[arg-type]
        made.append(w)
        w.start()
        return w

    yield make
    for w in made:
        w.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("gfd-watch-")]


def lists(server: FakeApiServer) -> int:
    return sum(1 for r in server.requests if r.method == "GET" and "fieldSelector" in r.query
               and not r.watch)


def most_requests(seconds: float) -> int:
    """The most watch requests ``seconds`` can hold with backoff from 0.05 s doubling to a
    0.4 s cap (no jitter): after 0.05 + 0.1 + 0.2, one every 0.4 s -- a handful a second,
    not the thousands of a busy loop. Counted from the time the test took, so a loaded
    machine that ran the watch late never fails it (a fixed second assumed a schedule)."""
    return 4 + int(seconds / 0.4) + 1


def watch_versions(server: FakeApiServer) -> list[str]:
    return [r.query.get("resourceVersion", "") for r in server.requests if r.watch]


def test_drift_is_reported_as_it_happens_not_at_the_resync(
        server: FakeApiServer, seen: Seen, watch: Callable[..., ObjectWatch]) -> None:
    """Each change arrives by the open watch, in well under a second on a quiet machine;
    the bound is seconds, since a loaded one may run the watch's thread late (the resync,
    the only other way to see drift, is a day away)."""
    w = watch()
    wait_for(lambda: w.healthy)
    assert len(seen.changes) == 1 and seen.last == server.node(NODE)  # the state at start
    for value in ("1", "2", "3"):
        count = len(seen.changes)
        changed_at = time.monotonic()
        server.set_label(NODE, "nvidia.com/gpu.count", value, manager="kubectl")
        wait_for(lambda n=count: len(seen.changes) > n, timeout=2.0)
        assert seen.changes[-1][0] - changed_at < 5
        assert seen.labels()["nvidia.com/gpu.count"] == value
    assert w.resource_version == server.resource_version
    server.set_label("other-node", "a", "1")  # another object: nothing
    time.sleep(0.2)
    assert len(seen.changes) == 4 and seen.reasons == []
    assert lists(server) == 1 and server.watch_requests == 1


def test_a_deleted_object_is_none_and_a_recreated_one_is_reported(
        server: FakeApiServer, seen: Seen, watch: Callable[..., ObjectWatch]) -> None:
    w = watch()
    wait_for(lambda: w.healthy)
    uid = server.node(NODE)["metadata"]["uid"]
    server.delete_node(NODE)
    wait_for(lambda: seen.last is None, timeout=2.0)
    server.add_node(NODE)
    wait_for(lambda: seen.last is not None, timeout=2.0)
    assert seen.last is not None and seen.last["metadata"]["uid"] != uid
    assert [obj is None for _, obj in seen.changes] == [False, True, False]


def test_a_missing_object_is_none_at_start_then_followed(
        server: FakeApiServer, kube: Kube, seen: Seen,
        watch: Callable[..., ObjectWatch]) -> None:
    w = watch("nodefeature", NF, namespace=NS)
    wait_for(lambda: w.healthy)
    assert [obj for _, obj in seen.changes] == [None]
    kube.create_nodefeature(NS, build(NODE, NS, {"nvidia.com/gpu.count": "8"}, []))
    wait_for(lambda: seen.last is not None, timeout=2.0)
    assert seen.last is not None and seen.last["spec"]["labels"] == {"nvidia.com/gpu.count": "8"}
    kube.delete_nodefeature(NS, NF)
    wait_for(lambda: seen.last is None, timeout=2.0)
    assert w.target == f"nodefeature {NS}/{NF}"


def test_a_clean_end_reconnects_at_once_from_the_last_version_without_a_read(
        server: FakeApiServer, seen: Seen, watch: Callable[..., ObjectWatch]) -> None:
    delays = Delays()
    w = watch(watch_timeout=1, sleep=delays)
    wait_for(lambda: w.healthy)
    server.set_label(NODE, "a", "1")
    wait_for(lambda: len(seen.changes) == 2)
    last = server.resource_version
    # The stream ends at its timeout and is opened again at once from the last version it
    # saw (on a busy machine the change may reach the second stream, and a stream may end
    # more than once meanwhile): never with a read, never after a wait.
    wait_for(lambda: last in watch_versions(server)[1:])
    assert seen.reasons and set(seen.reasons) == {"timeout"} and delays == []
    assert lists(server) == 1
    server.set_label(NODE, "b", "1")
    wait_for(lambda: "b" in seen.labels(), timeout=2.0)


def test_an_expired_version_reads_the_object_once_and_watches_from_the_new_one(
        server: FakeApiServer, seen: Seen, watch: Callable[..., ObjectWatch]) -> None:
    delays = Delays()
    w = watch(watch_timeout=1, sleep=delays)  # no bookmark: under the server's 2 s margin
    wait_for(lambda: w.healthy)
    started = w.resource_version
    for i in range(3):
        server.set_label("other-node", "n", str(i))
    server.compact()
    wait_for(lambda: seen.reasons[:2] == ["timeout", "expired"], timeout=3.0)
    wait_for(lambda: server.watch_requests >= 3)
    versions = watch_versions(server)
    assert versions[:2] == [started, started]  # the second one answered 410
    assert int(versions[2]) > int(started)
    assert lists(server) == 2  # one read at start, one after the 410
    assert len(seen.changes) == 2 and seen.last == server.node(NODE)
    assert delays == []
    server.set_label(NODE, "after", "1")
    wait_for(lambda: "after" in seen.labels(), timeout=2.0)


def test_bookmarks_advance_the_version_so_a_reconnect_replays_nothing_and_survives_compaction(
        server: FakeApiServer, seen: Seen, watch: Callable[..., ObjectWatch]) -> None:
    server.bookmark_interval = 0.1
    w = watch(backoff_start=0.05)
    wait_for(lambda: w.healthy)
    server.set_label(NODE, "a", "1")
    wait_for(lambda: len(seen.changes) == 2)
    for i in range(3):
        server.set_label("other-node", "n", str(i))
    wait_for(lambda: w.resource_version == server.resource_version, timeout=2.0)
    server.compact()
    server.drop_watches()
    wait_for(lambda: server.watch_requests == 2 and w.healthy, timeout=2.0)
    assert watch_versions(server)[1] == server.resource_version
    time.sleep(0.3)
    assert seen.reasons == ["dropped"]  # not expired: the bookmark's version is kept
    assert len(seen.changes) == 2 and lists(server) == 1  # nothing replayed, nothing re-read


def test_a_dropped_connection_reconnects_with_backoff_reset_by_a_stream_that_delivered(
        server: FakeApiServer, seen: Seen, watch: Callable[..., ObjectWatch],
        caplog: pytest.LogCaptureFixture) -> None:
    delays = Delays()
    w = watch(backoff_start=0.2, sleep=delays)

    def drop_and_reconnect(requests: int) -> None:
        wait_for(lambda: w.healthy and server.open_watches == 1)
        server.drop_watches()
        wait_for(lambda: server.watch_requests == requests and w.healthy, timeout=3.0)

    with caplog.at_level(logging.INFO, logger="gfd.sinks.objectwatch"):
        drop_and_reconnect(2)
        drop_and_reconnect(3)
        server.set_label(NODE, "a", "1")
        wait_for(lambda: len(seen.changes) == 2)
        drop_and_reconnect(4)
    assert seen.reasons == ["dropped"] * 3
    assert delays == [0.2, 0.4, 0.2]
    assert lists(server) == 1
    failed = [r.message for r in caplog.records if "failed" in r.message]
    assert len(failed) >= 1 and "lost mid-stream" in failed[0]
    assert any("re-established" in r.message for r in caplog.records)
    server.set_label(NODE, "b", "1")
    wait_for(lambda: "b" in seen.labels(), timeout=2.0)


class Recorded(list[float]):
    """A sleep that records each delay and returns at once."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)
        time.sleep(0.01)


def test_a_forbidden_watch_waits_an_hour_between_tries_and_says_why_once(
        server: FakeApiServer, seen: Seen, watch: Callable[..., ObjectWatch],
        caplog: pytest.LogCaptureFixture) -> None:
    # GFD's manifests grant no list/watch: one request an hour, not one a minute
    server.forbid("watch", "nodes")
    delays = Recorded()
    with caplog.at_level(logging.INFO, logger="gfd.sinks.objectwatch"):
        w = watch(backoff_start=0.05, backoff_cap=0.4, sleep=delays)
        wait_for(lambda: len(delays) >= 3)
        assert not w.healthy and set(seen.reasons) == {"error"}
        assert lists(server) == 1  # the read worked; only the watch is retried
        server.allow_all()
        wait_for(lambda: w.healthy, timeout=2.0)
    assert set(delays) == {FORBIDDEN_RETRY}
    said = [r for r in caplog.records if "cannot watch" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING
    assert "HTTP 403 Forbidden" in said[0].getMessage()
    assert "grant gfd list and watch" in said[0].getMessage()
    assert [r.getMessage() for r in caplog.records if "re-established" in r.getMessage()] == [
        f"watch on node {NODE} re-established"]


def test_a_403_where_the_watch_was_allowed_is_retried_with_backoff_before_the_hour(
        server: FakeApiServer, seen: Seen, watch: Callable[..., ObjectWatch]) -> None:
    # a kube-apiserver just restarted answers 403 until its RBAC caches fill (tests/realapi)
    delays = Recorded()
    w = watch(backoff_start=0.05, backoff_cap=0.4, sleep=delays)
    wait_for(lambda: w.healthy)
    server.forbid("watch", "nodes")
    server.drop_watches()
    wait_for(lambda: FORBIDDEN_RETRY in delays)
    # the drop, then 403s: backoff for FORBIDDEN_AFTER_ALLOWED failures in a row, then an hour
    first = delays.index(FORBIDDEN_RETRY)
    assert first == FORBIDDEN_AFTER_ALLOWED and all(d < 1 for d in delays[:first])
    server.allow_all()
    wait_for(lambda: w.healthy, timeout=2.0)
    delays.clear()
    server.forbid("watch", "nodes")
    server.drop_watches()
    wait_for(lambda: len(delays) >= 2)
    assert delays[0] < 1, "allowed again: a 403 is first taken for a restart again"


def test_a_failing_watch_backs_off_and_is_logged_once(
        server: FakeApiServer, seen: Seen, watch: Callable[..., ObjectWatch],
        caplog: pytest.LogCaptureFixture) -> None:
    server.inject_watch(500, count=None)
    with caplog.at_level(logging.INFO, logger="gfd.sinks.objectwatch"):
        started = time.monotonic()
        w = watch(backoff_start=0.05, backoff_cap=0.4)
        wait_for(lambda: server.watch_requests >= 3)
        assert server.watch_requests <= most_requests(time.monotonic() - started)
        assert not w.healthy and set(seen.reasons) == {"error"}
        server.clear_faults()
        wait_for(lambda: w.healthy, timeout=2.0)
    failures = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(failures) == 1 and failures[0].levelno == logging.WARNING


def test_a_server_ending_each_watch_at_once_is_not_a_busy_loop(
        server: FakeApiServer, seen: Seen, watch: Callable[..., ObjectWatch]) -> None:
    server.inject_watch(200, count=None, body="")  # 200, an empty body: a clean, empty end
    started = time.monotonic()
    w = watch(watch_timeout=60, backoff_start=0.05, backoff_cap=0.4)
    wait_for(lambda: server.watch_requests >= 3)
    assert server.watch_requests <= most_requests(time.monotonic() - started)
    assert set(seen.reasons) == {"timeout"}
    server.clear_faults()
    wait_for(lambda: w.healthy, timeout=2.0)


def test_expired_again_and_again_backs_off_after_the_first(
        server: FakeApiServer, seen: Seen, watch: Callable[..., ObjectWatch]) -> None:
    delays = Delays()
    server.inject_watch(410, count=4)  # the HTTP form: refused before streaming
    w = watch(backoff_start=0.05, sleep=delays)
    wait_for(lambda: w.healthy, timeout=3.0)
    assert seen.reasons == ["expired"] * 4
    assert delays == [0.1, 0.2, 0.4]  # the first 410 re-reads at once
    assert lists(server) == 5 and len(seen.changes) == 5


def test_close_is_prompt_idempotent_and_leaves_no_thread(
        server: FakeApiServer, seen: Seen, watch: Callable[..., ObjectWatch]) -> None:
    w = watch(close_timeout=60)  # a join that gave up would leave the thread: seen below
    wait_for(lambda: w.healthy)
    started = time.monotonic()
    w.close()
    assert time.monotonic() - started < 10  # the stream cut, not the 3600 s watch timeout
    assert not w.healthy
    w.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("gfd-watch-")]
    assert seen.reasons == []  # closing is not a reconnect
    wait_for(lambda: server.open_watches == 0)
    w.start()  # closed for good
    assert not [t for t in threading.enumerate() if t.name.startswith("gfd-watch-")]


def test_close_cuts_a_backoff_wait_short(server: FakeApiServer, seen: Seen,
                                         watch: Callable[..., ObjectWatch]) -> None:
    server.inject_watch(500, count=None)
    w = watch(backoff_start=30)
    wait_for(lambda: seen.reasons == ["error"])
    started = time.monotonic()
    w.close()
    assert time.monotonic() - started < 10  # not the 15-30 s of the backoff
    assert server.watch_requests == 1


def test_the_callbacks_may_close_the_watch(server: FakeApiServer, kube: Kube) -> None:
    got: list[dict[str, Any] | None] = []
    w: ObjectWatch

    def on_change(obj: dict[str, Any] | None) -> None:
        got.append(obj)
        w.close()

    w = ObjectWatch(kube, "node", NODE, on_change=on_change)
    w.start()
    wait_for(lambda: got != [])
    wait_for(lambda: not [t for t in threading.enumerate() if t.name.startswith("gfd-watch-")])
    assert server.watch_requests == 0 and len(got) == 1


def test_a_watch_thread_that_dies_says_so_once_and_reports_its_death(
        server: FakeApiServer, kube: Kube, caplog: pytest.LogCaptureFixture) -> None:
    deaths: list[BaseException] = []

    def on_change(obj: dict[str, Any] | None) -> None:
        raise KeyError("metadata")

    w = ObjectWatch(kube, "node", NODE, on_change=on_change, on_death=deaths.append)
    w.start()
    try:
        wait_for(lambda: bool(deaths))
        wait_for(lambda: not [t for t in threading.enumerate()
                              if t.name.startswith("gfd-watch-")])
        assert not w.healthy, "the sink's resync takes over"
        errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
        assert errors == [f"watch on node {NODE} stopped: KeyError: 'metadata'; drift is "
                          "repaired at the resync instead"]
    finally:
        w.close()
