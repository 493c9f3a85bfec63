"""``gfd fleet --serve``'s server over a source: /fleet is ``gfd fleet --check -o json``'s
document of the view (nodes when asked, where a pod fits from the query), held for a change
when the client has the current version, 304 for its ETag; /metrics the fleet's families,
OpenMetrics where asked; /readyz ready only once every collection is in and none refused;
/ the page, with a policy that runs its own inline script alone; ``serve`` announces its
URL and stops when told; an address is one of four forms."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from helpers.fleetviews import A100, H100, ChangingSource, dump, node, pod, view_of

from gfd.errors import ConfigError
from gfd.fleet import report
from gfd.fleet.health import Collection, ViewHealth
from gfd.fleet.view import View
from gfd.metrics.fleetserver import FleetServer, parse_address, readiness, serve


def fleet_objects(bound: bool = False) -> list[dict[str, Any]]:
    objects = [node("h100-1", H100, 8), node("a100-1", A100, 4), pod("a", 2, node="h100-1"),
               pod("waits", 4, product=H100[0])]
    if bound:
        objects[-1] = pod("waits", 4, node="h100-1", product=H100[0])
    return objects


@pytest.fixture
def source() -> ChangingSource:
    return ChangingSource(view_of(dump(fleet_objects())))


@pytest.fixture
def server(source: ChangingSource) -> Iterator[FleetServer]:
    srv = FleetServer(source, host="127.0.0.1", port=0, version="9.9.9")
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def get(server: FleetServer, path: str, headers: dict[str, str] | None = None,
        timeout: float = 60) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(f"{server.url}{path.lstrip('/')}", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        with err:
            return err.code, dict(err.headers), err.read()


def doc(server: FleetServer, path: str = "/fleet") -> dict[str, Any]:
    status, headers, body = get(server, path)
    assert status == 200 and headers["Content-Type"].startswith("application/json"), body
    return dict(json.loads(body))


def test_fleet_is_the_check_documents_of_the_view_with_the_view_beside(
        server: FleetServer, source: ChangingSource) -> None:
    with source.read() as view:
        wanted = report.document(view.fleet, view.counted, findings=list(view.findings))
    got = doc(server, "/fleet?nodes=true")
    assert {k: v for k, v in got.items() if k not in ("view", "notes")} == wanted
    assert got["view"]["generation"] == 0 and got["view"]["ready"] is True
    assert [c["name"] for c in got["view"]["collections"]] == [
        "nodes", "pods", "resourceslices", "resourceclaims", "deviceclasses"]
    assert got["view"]["lastChange"] == "2026-01-01T00:00:00.000Z"
    summary = doc(server)
    assert "nodes" not in summary and summary["kinds"] == wanted["kinds"]


def test_fleet_is_gzipped_for_a_client_that_takes_it(server: FleetServer) -> None:
    import gzip

    plain = get(server, "/fleet?nodes=true")
    status, headers, body = get(server, "/fleet?nodes=true", {"Accept-Encoding": "gzip"})
    assert status == 200 and headers["Content-Encoding"] == "gzip"
    assert headers["Vary"] == "Accept-Encoding" and "Content-Encoding" not in plain[1]
    assert json.loads(gzip.decompress(body)) == json.loads(plain[2])


def test_fleet_with_filters_says_where_such_a_pod_fits(server: FleetServer) -> None:
    got = doc(server, "/fleet?product=H100&count=2")
    assert got["fits"]["resource"] == "nvidia.com/gpu" and got["fits"]["count"] == 2
    assert got["fits"]["nodes"] == [{"node": "h100-1", "free": 6, "pods": 3, "cannotTell": 0}]


@pytest.mark.parametrize("query, said", [
    ("?nodes=maybe", "nodes: true or false"), ("?colour=red", "colour: not a parameter"),
    ("?count=two", "count=two: a whole number"), ("?wait=soon", "wait=soon: seconds"),
])
def test_a_bad_query_is_400_and_one_line(server: FleetServer, query: str, said: str) -> None:
    status, _, body = get(server, f"/fleet{query}")
    assert status == 400 and body.decode().startswith(said) and body.count(b"\n") == 1


def test_the_etag_answers_304_until_the_view_changes(server: FleetServer,
                                                     source: ChangingSource) -> None:
    status, headers, _ = get(server, "/fleet")
    etag = headers["ETag"]
    assert get(server, "/fleet", {"If-None-Match": etag})[0] == 304
    with source.read() as view:
        source.change(view)
    status, headers, _ = get(server, "/fleet", {"If-None-Match": etag})
    assert status == 200 and headers["ETag"] != etag


def test_a_long_poll_is_answered_when_the_view_changes(server: FleetServer,
                                                       source: ChangingSource) -> None:
    first = doc(server, "/fleet?nodes=true")
    version = first["view"]["version"]
    got: list[dict[str, Any]] = []
    poll = threading.Thread(target=lambda: got.append(
        doc(server, f"/fleet?nodes=true&wait=30&version={version}")))
    poll.start()
    assert poll.is_alive()  # held: nothing has changed
    source.change(view_of(dump(fleet_objects(bound=True))))
    poll.join(timeout=60)
    assert not poll.is_alive() and got, "the held poll was answered"
    assert got[0]["view"]["generation"] == 1 and got[0]["view"]["version"] != version
    h100 = next(k for k in got[0]["kinds"] if k["model"] == H100[0])
    assert (h100["allocated"], h100["pending"]) == (6, 0)


def test_a_long_poll_without_a_change_answers_the_same_view_at_its_time(
        server: FleetServer) -> None:
    version = doc(server)["view"]["version"]
    started = time.monotonic()
    again = doc(server, f"/fleet?wait=0.5&version={version}")
    assert again["view"]["version"] == version and time.monotonic() - started >= 0.5


def test_a_health_change_is_a_new_version(server: FleetServer, source: ChangingSource) -> None:
    version = doc(server)["view"]["version"]
    with source.read() as view:
        refused = ViewHealth(collections=tuple(
            replace(c, refused="watch pods: forbidden") if c.name == "pods" else c
            for c in view.health.collections), last_change=view.health.last_change)
        source.change(replace(view, health=refused))
    got = doc(server, f"/fleet?wait=30&version={version}")
    assert got["view"]["version"] != version and got["complete"] is False
    assert got["view"]["complete"] is False


def test_metrics_are_the_fleets_families_openmetrics_where_asked(server: FleetServer) -> None:
    status, headers, body = get(server, "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert re.search(rb'gfd_fleet_units\{[^}]*model="NVIDIA-H100-80GB-HBM3"[^}]*state="free"'
                     rb"\} 6.0", body)
    assert b'gfd_build_info{version="9.9.9"} 1.0' in body
    status, headers, body = get(server, "/metrics", {
        "Accept": "application/openmetrics-text; version=1.0.0; charset=utf-8"})
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")


def test_metrics_follow_the_view(server: FleetServer, source: ChangingSource) -> None:
    assert b'state="pending"} 4.0' in get(server, "/metrics")[2]
    source.change(view_of(dump(fleet_objects(bound=True))))
    assert b'state="pending"} 4.0' not in get(server, "/metrics")[2]


def health(*collections: Collection) -> ViewHealth:
    return ViewHealth(collections=collections)


@pytest.mark.parametrize("h, ready, said", [
    (health(Collection(name="nodes", synced=True), Collection(name="pods", synced=True)),
     True, "ok"),
    (health(Collection(name="nodes", synced=True), Collection(name="pods")), False,
     "waiting for the first LIST of pods"),
    (health(Collection(name="nodes", synced=True),
            Collection(name="pods", synced=True, refused="list pods: forbidden")), False,
     "refused: pods: list pods: forbidden"),
    (health(), False, "no collection read yet"),
], ids=["ready", "not-synced", "refused", "nothing"])
def test_ready_once_every_collection_is_in_and_while_none_is_refused(
        h: ViewHealth, ready: bool, said: str) -> None:
    assert readiness(h) == (ready, said)


def test_readyz_and_healthz(server: FleetServer, source: ChangingSource) -> None:
    assert get(server, "/readyz")[::2] == (200, b"ok\n")
    assert get(server, "/healthz")[::2] == (200, b"ok\n")
    with source.read() as view:
        source.change(replace(view, health=health(Collection(name="nodes"))))
    assert get(server, "/readyz")[::2] == (503, b"waiting for the first LIST of nodes\n")
    assert get(server, "/healthz")[0] == 200
    assert get(server, "/nothing-here")[0] == 404


def test_the_page_runs_its_own_inline_script_and_style_alone(server: FleetServer) -> None:
    status, headers, body = get(server, "/")
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    text = body.decode()
    policy = headers["Content-Security-Policy"]
    for tag in ("script", "style"):
        inline = re.search(rf"<{tag}>(.*?)</{tag}>", text, re.S)
        assert inline, tag
        digest = base64.b64encode(hashlib.sha256(inline[1].encode()).digest()).decode()
        assert f"{tag}-src 'sha256-{digest}'" in policy
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy
    # no external asset, and every URL it fetches is relative
    assert not re.search(r"""(?:src|href)=["']?(?:https?:)?//""", text)
    assert re.findall(r"fetch\(new URL\(`([^`]*)`", text) == [
        "fleet?nodes=true${query}"]


@pytest.mark.parametrize("text, address", [
    ("8080", ("0.0.0.0", 8080)), (":9100", ("0.0.0.0", 9100)),
    ("127.0.0.1:0", ("127.0.0.1", 0)), ("[::1]:8080", ("::1", 8080)),
    ("[::]:80", ("::", 80)),
])
def test_an_address_in_each_form(text: str, address: tuple[str, int]) -> None:
    assert parse_address(text) == address


@pytest.mark.parametrize("text", ["", "localhost:8080", "1.2.3.4", ":http", "[::1]8080",
                                  ":70000"])
def test_an_address_that_is_not_one_names_serve_and_the_forms(text: str) -> None:
    with pytest.raises(ConfigError, match=r"--serve .*HOST:PORT"):
        parse_address(text)


def test_serve_announces_its_url_and_stops_when_told(source: ChangingSource) -> None:
    said: list[str] = []
    announced, stop = threading.Event(), threading.Event()

    def announce(line: str) -> None:
        said.append(line)
        announced.set()

    runner = threading.Thread(target=serve, args=(source, "127.0.0.1:0"),
                              kwargs={"stop": stop, "announce": announce})
    runner.start()
    try:
        assert announced.wait(60), "announced"
        url = re.search(r"http://\S+/", said[0])
        assert url
        with urllib.request.urlopen(url[0] + "healthz", timeout=60) as resp:
            assert resp.read() == b"ok\n"
    finally:
        stop.set()
        runner.join(timeout=60)
    assert not runner.is_alive()


def test_a_port_in_use_is_one_config_error(server: FleetServer,
                                           source: ChangingSource) -> None:
    other = FleetServer(source, host="127.0.0.1", port=server.port)
    with pytest.raises(ConfigError, match=rf"--serve 127.0.0.1:{server.port}: cannot listen"):
        other.start()


def test_the_document_is_rendered_once_per_view(server: FleetServer,
                                                source: ChangingSource,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import gfd.metrics.fleetserver as module

    made: list[View] = []
    real = module.document

    def counting(view: View, **kw: Any) -> dict[str, Any]:
        made.append(view)
        return real(view, **kw)

    monkeypatch.setattr(module, "document", counting)
    for _ in range(3):
        doc(server, "/fleet?nodes=true")
    assert len(made) == 1
    with source.read() as view:
        source.change(view)
    doc(server, "/fleet?nodes=true")
    assert len(made) == 2


def test_where_a_pod_fits_from_a_count_without_its_index(source: ChangingSource) -> None:
    from gfd.fleet.query import from_query
    from gfd.metrics.fleetserver import document

    with source.read() as view:
        bare = replace(view, counted=replace(view.counted, index=None))
        asked = from_query({"product": ["H100"], "count": ["2"]})
        assert document(bare, version="v", asked=asked)["fits"] == document(
            view, version="v", asked=asked)["fits"]
