"""``gfd.kube.reflector``: one collection listed, then watched from the listing's
resourceVersion with bookmarks; a clean end renewed from the last resourceVersion, a drop
reconnected from it (a restart, no LIST), a 410 relisted (a restart and a relist), a refused
watch or LIST one line and a problem until it clears. Over the fake API server; each test
waits for what the consumer is handed, never for time."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.apiserver import FakeApiServer

from gfd.kube.lists import Lister
from gfd.kube.reflector import Reflector, State

WAIT = 60.0
"""Seconds before a test gives up waiting for what it expects (far more than it takes)."""
PATH = "/api/v1/pods"
UNFINISHED = "status.phase!=Succeeded,status.phase!=Failed"


def pod(name: str, node: str = "n1", phase: str = "Running") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": phase}}


class Recorder:
    """The consumer: each listing (names), each event, each state; waitable."""

    def __init__(self) -> None:
        self.listings: list[list[str]] = []
        self.events: list[tuple[str, str]] = []
        self.states: list[State] = []
        self._cond = threading.Condition()

    def replace(self, resource: str, pages: Iterator[list[dict[str, Any]]]) -> None:
        names = [o["metadata"]["name"] for page in pages for o in page]
        with self._cond:
            self.listings.append(names)
            self._cond.notify_all()

    def event(self, resource: str, kind: str, obj: dict[str, Any]) -> None:
        with self._cond:
            self.events.append((kind, obj["metadata"]["name"]))
            self._cond.notify_all()

    def state(self, resource: str, state: State) -> None:
        with self._cond:
            self.states.append(state)
            self._cond.notify_all()

    def until(self, what: Callable[[], bool]) -> None:
        """Wait until ``what`` holds: woken by what the reflector hands over, and looking
        again every few milliseconds for what only the server knows (its open watches)."""
        deadline = time.monotonic() + WAIT
        with self._cond:
            while not what():
                assert time.monotonic() < deadline, (self.listings, self.events, self.states)
                self._cond.wait(0.02)

    @property
    def last(self) -> State:
        return self.states[-1] if self.states else State()


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as srv:
        srv.put_object("pods", pod("a"))
        srv.put_object("pods", pod("b"))
        srv.put_object("pods", pod("done", phase="Succeeded"))
        yield srv


@pytest.fixture
def lister(server: FakeApiServer, tmp_path: Path) -> Iterator[Lister]:
    found = Lister(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")), qps=0,
                   page=1)
    yield found
    found.close()


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def reflector(lister: Lister, recorder: Recorder) -> Iterator[Reflector]:
    found = Reflector(lister, "pods", PATH, recorder, field_selector=UNFINISHED,
                      backoff_start=0.01, backoff_cap=0.05, rand=lambda: 0.5)
    yield found
    found.close()


def watch_requests(server: FakeApiServer) -> list[dict[str, str]]:
    return [r.query for r in server.requests if r.watch]


def test_a_collection_is_listed_then_watched_from_the_listings_resource_version(
        server: FakeApiServer, reflector: Reflector, recorder: Recorder) -> None:
    assert reflector.list() is True
    assert recorder.listings == [["a", "b"]] and recorder.last.synced
    listed_at = reflector.resource_version
    reflector.start()
    server.put_object("pods", pod("c"))
    server.put_object("pods", pod("a", phase="Succeeded"))  # leaves the selection
    recorder.until(lambda: len(recorder.events) == 2)
    assert recorder.events == [("ADDED", "c"), ("DELETED", "a")]
    (query,) = watch_requests(server)
    assert query["resourceVersion"] == listed_at
    assert query["allowWatchBookmarks"] == "true"
    assert query["fieldSelector"] == UNFINISHED
    assert [r.query.get("limit") for r in server.requests if not r.watch] == ["1"] * 2


def test_a_watch_the_server_ends_is_renewed_from_the_last_version_without_a_restart(
        server: FakeApiServer, reflector: Reflector, recorder: Recorder) -> None:
    reflector.list()
    reflector.start()
    server.put_object("pods", pod("c"))
    recorder.until(lambda: recorder.events == [("ADDED", "c")])
    seen = reflector.resource_version
    server.end_watches()
    recorder.until(lambda: len(watch_requests(server)) == 2 and server.open_watches == 1)
    server.put_object("pods", pod("d"))
    recorder.until(lambda: len(recorder.events) == 2)
    assert recorder.events[1] == ("ADDED", "d")
    assert watch_requests(server)[1]["resourceVersion"] == seen
    assert (recorder.last.restarts, recorder.last.relists, len(recorder.listings)) == (0, 0, 1)


def test_a_dropped_watch_reconnects_from_the_last_version_and_misses_nothing(
        server: FakeApiServer, reflector: Reflector, recorder: Recorder,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "gfd.kube.reflector")
    reflector.list()
    reflector.start()
    recorder.until(lambda: server.open_watches == 1)
    server.drop_watches()
    server.put_object("pods", pod("e"))  # while it reconnects
    recorder.until(lambda: recorder.events == [("ADDED", "e")])
    assert (recorder.last.restarts, recorder.last.relists, len(recorder.listings)) == (1, 0, 1)
    restarts = [r.message for r in caplog.records if "watching again from" in r.message]
    assert len(restarts) == 1 and restarts[0].startswith("watch pods: ")


def test_a_watch_that_expires_lists_the_collection_again(
        server: FakeApiServer, reflector: Reflector, recorder: Recorder,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "gfd.kube.reflector")
    reflector.list()
    reflector.start()
    recorder.until(lambda: server.open_watches == 1)
    server.put_object("pods", pod("f"))
    recorder.until(lambda: len(recorder.events) == 1)
    server.add_node("n1")  # the server moves on past what the pods' watch has seen
    server.compact()
    server.drop_watches()
    recorder.until(lambda: len(recorder.listings) == 2)
    assert recorder.listings[1] == ["a", "b", "f"]
    recorder.until(lambda: recorder.last.relists == 1)
    assert recorder.last.restarts == 2 and recorder.last.synced  # the drop, then the 410
    assert any("expired" in r.message and "listing pods again" in r.message
               for r in caplog.records)


def test_a_refused_watch_is_one_line_and_a_problem_until_it_is_allowed(
        server: FakeApiServer, reflector: Reflector, recorder: Recorder,
        caplog: pytest.LogCaptureFixture) -> None:
    server.forbid("watch", "pods")
    reflector.list()
    reflector.start()
    recorder.until(lambda: recorder.last.restarts >= 3)
    assert recorder.last.synced
    assert recorder.last.problem == ("watch pods: forbidden (grant `watch` on pods cluster-wide: "
                                     "the ClusterRole in manifests/fleet)")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.message for r in warnings] == [recorder.last.problem]
    server.allow_all()
    recorder.until(lambda: not recorder.last.problem)
    server.put_object("pods", pod("g"))
    recorder.until(lambda: ("ADDED", "g") in recorder.events)


def test_a_refused_list_is_tried_again_until_it_is_read(
        server: FakeApiServer, reflector: Reflector, recorder: Recorder) -> None:
    server.forbid("list", "pods")
    assert reflector.list() is False
    assert recorder.last.problem.startswith("list pods: forbidden (grant `list` on pods")
    assert not recorder.last.synced and recorder.listings == []
    reflector.start()
    server.allow_all()
    recorder.until(lambda: recorder.last.synced and not recorder.last.problem)
    assert recorder.listings == [["a", "b"]] and recorder.last.relists == 0


def test_a_list_that_fails_midway_raises_out_of_its_pages_and_is_tried_again(
        server: FakeApiServer, reflector: Reflector) -> None:
    """The second page is refused: the consumer sees the error out of its iteration (and
    keeps nothing of the first page), the reflector a problem; the next LIST reads it all."""
    taken: list[list[str]] = []
    failures: list[str] = []

    class Staging(Recorder):
        def replace(self, resource: str, pages: Iterator[list[dict[str, Any]]]) -> None:
            names: list[str] = []
            try:
                for page in pages:
                    names += [o["metadata"]["name"] for o in page]
                    if len(names) == 1 and not failures:
                        server.inject(500, method="GET", path_contains="/api/v1/pods")
            except Exception as exc:
                failures.append(type(exc).__name__)
                raise
            taken.append(names)

    staging = Staging()
    reflector.consumer = staging
    assert reflector.list() is False
    assert (taken, failures) == ([], ["ApiError"])
    assert reflector.state.problem.startswith("list pods: ") and not reflector.state.synced
    assert reflector.list() is True and taken == [["a", "b"]]
