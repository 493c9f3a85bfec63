"""``gfd.kube.lists``: a collection read in pages of ``limit`` objects, following ``continue``
until the server gives none; a token that expired (410) restarts the collection once; a
refused LIST is an ``ApiError`` with its status. Over the fake API server, whose list pages
as the real one does (realapi/test_fleet_rbac.py and the fleet benchmark read a real one)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.apiserver import FakeApiServer

from gfd.errors import ApiError
from gfd.kube.lists import Lister

NODES = [f"gpu-{i:02d}" for i in range(7)]


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as srv:
        for name in NODES:
            srv.add_node(name, labels={"pool": "a" if name < "gpu-04" else "b"})
        yield srv


@pytest.fixture
def lister(server: FakeApiServer, tmp_path: Path) -> Iterator[Lister]:
    found = Lister(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")), page=3)
    yield found
    found.close()


def _names(pages: list[list[dict[str, object]]]) -> list[str]:
    return [str(i["metadata"]["name"]) for page in pages for i in page]  # type: ignore[index]


def test_a_collection_is_read_in_pages_of_the_limit_until_no_continue_is_given(
        lister: Lister, server: FakeApiServer) -> None:
    pages = list(lister.pages("/api/v1/nodes", "nodes"))
    assert [len(p) for p in pages] == [3, 3, 1]
    assert _names(pages) == NODES
    lists = [r for r in server.requests if r.method == "GET"]
    assert [r.query.get("limit") for r in lists] == ["3", "3", "3"]
    assert [r.query.get("continue", "") for r in lists] == ["", "fake-continue-3",
                                                             "fake-continue-6"]
    assert lister.requests == 3


def test_a_label_selector_goes_to_the_server_on_every_page(lister: Lister,
                                                           server: FakeApiServer) -> None:
    pages = list(lister.pages("/api/v1/nodes", "nodes", label_selector="pool=b"))
    assert _names(pages) == NODES[4:]
    assert {r.query.get("labelSelector") for r in server.requests if r.method == "GET"} == {
        "pool=b"}


def test_an_expired_continue_token_restarts_the_collection_once(
        lister: Lister, server: FakeApiServer) -> None:
    server.expired_continues.add("fake-continue-3")
    with pytest.raises(ApiError) as caught:
        list(lister.pages("/api/v1/nodes", "nodes"))
    assert caught.value.status == 410  # expired again after the restart: not a loop
    tokens = [r.query.get("continue", "") for r in server.requests if r.method == "GET"]
    assert tokens == ["", "fake-continue-3", "", "fake-continue-3"]


def test_a_refused_list_is_an_api_error_with_its_status(lister: Lister,
                                                        server: FakeApiServer) -> None:
    server.forbid("list", "nodes")
    with pytest.raises(ApiError) as caught:
        list(lister.pages("/api/v1/nodes", "nodes"))
    assert caught.value.status == 403
    assert "forbidden" in str(caught.value)


def test_one_object_is_got_and_a_missing_one_is_none(lister: Lister,
                                                     server: FakeApiServer) -> None:
    found = lister.get("/api/v1/nodes/gpu-03", "nodes")
    assert found is not None and found["metadata"]["name"] == "gpu-03"
    assert lister.get("/api/v1/nodes/gpu-99", "nodes") is None
    assert lister.requests == 0  # LIST pages only


def test_the_listings_resource_version_is_known_once_its_first_page_is_in(
        lister: Lister, server: FakeApiServer) -> None:
    pages = lister.pages("/api/v1/nodes", "nodes")
    assert pages.resource_version == ""
    next(pages)
    first = server.resource_version
    assert pages.resource_version == first
    server.add_node("gpu-99")
    assert [len(p) for p in pages] == [3, 2] and pages.resource_version == first


def test_a_watch_of_the_collection_starts_at_the_listings_version_with_bookmarks(
        lister: Lister, server: FakeApiServer) -> None:
    pages = lister.pages("/api/v1/nodes", "nodes", label_selector="pool=b")
    list(pages)
    server.add_node("gpu-07", labels={"pool": "b"})
    server.add_node("gpu-08", labels={"pool": "a"})
    with lister.watch("/api/v1/nodes", "nodes", resource_version=pages.resource_version,
                      label_selector="pool=b", timeout=5) as stream:
        event = next(stream)
    assert (event.type, event.object["metadata"]["name"]) == ("ADDED", "gpu-07")
    (query,) = [r.query for r in server.requests if r.watch]
    assert query == {"watch": "1", "allowWatchBookmarks": "true", "timeoutSeconds": "5",
                     "resourceVersion": pages.resource_version, "labelSelector": "pool=b"}
    assert lister.watches == 1
