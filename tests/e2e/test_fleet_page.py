"""The page of ``gfd fleet --serve`` in a real browser (headless Chromium, Debian's package):
loaded from a ``--serve`` process over the sample fleet, the numbers it shows are /fleet's;
when the view changes (a pod binds) it shows the new numbers without a reload; its nodes
table sorts and filters; through a proxy's service path (``kubectl proxy``'s
``/api/v1/namespaces/NS/services/NAME:PORT/proxy/``) it fetches only under that path.

Without a browser these skip, and fail under GFD_REQUIRE_CHROMIUM=1 (CI). GFD_SCREENSHOT=PATH
writes the sample fleet's page there (docs/fleet-page.png is one)."""

from __future__ import annotations

import http.client
import http.server
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.browser import Browser, Tab
from helpers.fleetpage import expected, fleet_doc, key, shown
from helpers.fleetserve import Served
from helpers.fleetviews import A100, H100, ChangingSource, dump, node, pod, view_of

from gfd.metrics.fleetserver import FleetServer


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    b = Browser(tmp_path_factory.mktemp("chromium"))
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def tab(browser: Browser) -> Iterator[Tab]:
    t = browser.tab()
    t.call("Emulation.setDeviceMetricsOverride", width=1280, height=1000,
           deviceScaleFactor=1, mobile=False)
    try:
        yield t
    finally:
        t.goto("about:blank")
        t.close()


def test_the_page_of_a_served_fleet_shows_what_fleet_serves(tab: Tab, tmp_path: Path) -> None:
    with Served("@sample") as served:
        tab.goto(served.url)
        got = shown(tab)
        doc = fleet_doc(served.url)
        picture = tab.screenshot(Path(os.environ.get("GFD_SCREENSHOT") or
                                      tmp_path / "fleet-page.png"))
    assert got == expected(doc)
    assert len(got["kinds"]) == len(doc["kinds"]) > 5 and len(got["nodes"]) == len(doc["nodes"])
    assert picture.startswith(b"\x89PNG\r\n\x1a\n")


def small(*, bound: bool) -> dict[str, Any]:
    """Two H100 nodes and an A100 one, a cordoned H100; a pod waiting for 4 H100s, bound
    to h100-1 when ``bound``."""
    waiting = pod("waits", 4, product=H100[0], node="h100-1" if bound else "")
    return dump([node("h100-1", H100, 8), node("h100-2", H100, 8, cordoned=True),
                 node("a100-1", A100, 4), node("l40s-1", ("NVIDIA-L40S", 46068), 3,
                                               labelled_gpus=4),
                 pod("a", 2, node="h100-1"), pod("b", 1, node="a100-1"), waiting])


@pytest.fixture
def changing() -> Iterator[tuple[FleetServer, ChangingSource]]:
    source = ChangingSource(view_of(small(bound=False)))
    srv = FleetServer(source, host="127.0.0.1", port=0)
    srv.start()
    try:
        yield srv, source
    finally:
        srv.stop()


def test_when_a_pod_binds_the_page_shows_the_new_numbers_without_a_reload(
        tab: Tab, changing: tuple[FleetServer, ChangingSource]) -> None:
    srv, source = changing
    tab.goto(srv.url)
    before = shown(tab)
    assert before == expected(fleet_doc(srv.url))
    h100 = next(k for k in before["kinds"] if k["key"].split("|")[2] == H100[0])
    assert (h100["allocated"], h100["free"], h100["pending"]) == (2, 6, 4)
    assert before["findings"] == [["l40s-1", "device-plugin-units"]]
    tab.evaluate("window.gfdTestMarker = 'still this page'")
    source.change(view_of(small(bound=True)))
    after = shown(tab, generation=1)
    assert after == expected(fleet_doc(srv.url))
    h100 = next(k for k in after["kinds"] if k["key"].split("|")[2] == H100[0])
    assert (h100["allocated"], h100["free"], h100["pending"]) == (6, 2, 0)
    assert tab.evaluate("window.gfdTestMarker") == "still this page", "reloaded"


def test_the_nodes_table_filters_by_kind_and_state_and_sorts(
        tab: Tab, changing: tuple[FleetServer, ChangingSource]) -> None:
    srv, _ = changing
    tab.goto(srv.url)
    shown(tab)

    def pick(select: str, value: str) -> None:
        tab.evaluate(f"""(() => {{ const s = document.getElementById("{select}");
            s.value = {json.dumps(value)}; s.dispatchEvent(new Event("input")); }})()""")

    rows = "[...document.querySelectorAll('#nodes tbody tr')].map((r) => r.dataset.node)"
    pick("filter-state", "cordoned")
    assert tab.wait_for(f"(() => {{ const n = {rows}; return n.length === 1 && n; }})()") == [
        "h100-2"]
    pick("filter-state", "")
    a100 = next(k for k in fleet_doc(srv.url)["kinds"] if k["model"] == A100[0])
    pick("filter-kind", key(a100))
    assert tab.wait_for(f"(() => {{ const n = {rows}; return n.length === 1 && n; }})()") == [
        "a100-1"]
    pick("filter-kind", "")
    tab.evaluate("document.querySelector('#nodes th[data-key=free]').click()")
    free = ("[...document.querySelectorAll('#nodes tbody td[data-field=free]')]"
            ".map((c) => Number(c.textContent))")
    ascending = tab.wait_for(f"(() => {{ const f = {free}; return f.length === 4 && "
                             "f.every((v, i) => !i || f[i - 1] <= v) && f; })()")
    tab.evaluate("document.querySelector('#nodes th[data-key=free]').click()")
    descending = tab.wait_for(f"(() => {{ const f = {free}; return f.length === 4 && "
                              "f.every((v, i) => !i || f[i - 1] >= v) && f; })()")
    assert ascending == sorted(ascending) and descending == sorted(ascending, reverse=True)
    assert ascending != descending


PREFIX = "/api/v1/namespaces/gfd/services/gfd-fleet:http/proxy"
"""Where ``kubectl proxy`` serves the Service gfd-fleet's port ``http``."""


class ServicePath:
    """A reverse proxy serving ``upstream`` under ``PREFIX`` only, as the API server's
    service proxy does (anything else: 404), recording each path asked."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.removeprefix("http://").rstrip("/").rsplit(":", 1)
        asked: list[str] = []
        self.asked = asked

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                asked.append(self.path)
                if self.path != PREFIX and not self.path.startswith(PREFIX + "/"):
                    self.send_error(404)
                    return
                conn = http.client.HTTPConnection(host, int(port), timeout=60)
                try:
                    conn.request("GET", self.path[len(PREFIX):] or "/", headers={
                        k: v for k, v in self.headers.items() if k.lower() != "host"})
                    resp = conn.getresponse()
                    body = resp.read()
                finally:
                    conn.close()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("connection", "content-length", "server", "date"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}{PREFIX}/"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=60)


@pytest.mark.parametrize("slash", [True, False], ids=["service-path/", "service-path"])
def test_through_a_proxys_service_path_the_page_fetches_only_under_it(
        tab: Tab, changing: tuple[FleetServer, ChangingSource], slash: bool) -> None:
    srv, source = changing
    proxy = ServicePath(srv.url)
    try:
        tab.goto(proxy.url if slash else proxy.url.rstrip("/"))
        got = shown(tab)
        assert got == expected(fleet_doc(srv.url))
        source.change(view_of(small(bound=True)))
        shown(tab, generation=1)  # the long poll, through the proxy too
    finally:
        proxy.close()
    assert proxy.asked and all(p.startswith(PREFIX) for p in proxy.asked), proxy.asked
    assert any(p.startswith(PREFIX + "/fleet?nodes=true") for p in proxy.asked)
