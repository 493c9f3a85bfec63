"""Watches on one object over the real client: the list that starts one, its events and clean
end, resuming, bookmarks, 410 as WatchExpired, errors, a lost connection, close from another
thread, bounded events, and a stream read chunk by chunk."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fakes.apiserver import FakeApiServer
from helpers.kube import api_error
from helpers.process import wait_for

from gfd.errors import WatchExpired
from gfd.kube.client import Kube
from gfd.kube.watch import WatchEvent, WatchStream
from gfd.sinks.nodefeature import build, object_name

NODE = "gpu-node-1"
NS = "gfd"
NF = object_name(NODE)
CRD_HINT = "the NodeFeature CRD is not installed"
RBAC_HINT = "grant this permission to gfd's ServiceAccount"


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
