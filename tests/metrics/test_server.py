"""The real HTTP server that serves /metrics, /healthz and /readyz: its answers, its limits
on what clients can make it hold, and its one line per failure."""

from __future__ import annotations

import http.client
import logging
import socket
import struct
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.process import wait_for
from helpers.timing import Clock
from prometheus_client.parser import text_string_to_metric_families

from gfd.errors import ConfigError
from gfd.metrics.health import Health
from gfd.metrics.registry import Metrics
from gfd.metrics.server import MetricsServer


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def health(clock: Clock) -> Health:
    return Health(stuck_after=120, clock=clock)


@pytest.fixture
def metrics() -> Metrics:
    return Metrics(version="9.9.9")


@pytest.fixture
def server(metrics: Metrics, health: Health) -> Iterator[MetricsServer]:
    srv = MetricsServer(metrics, health, port=0, host="127.0.0.1")
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def get(server: MetricsServer, path: str) -> tuple[int, str, str]:
    """(status, content type, body) of GET path; HTTP errors are answers, not exceptions."""
    url = f"http://127.0.0.1:{server.port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as err:
        with err:
            return err.code, err.headers["Content-Type"], err.read().decode()


def test_server_binds_a_free_port(server: MetricsServer) -> None:
    assert server.port > 0


def test_server_serves_metrics(server: MetricsServer, metrics: Metrics) -> None:
    metrics.cycle("published", 0.5)
    status, content_type, body = get(server, "/metrics")
    assert status == 200
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    families = {f.name: f for f in text_string_to_metric_families(body)}
    assert families["gfd_build_info"].samples[0].labels == {"version": "9.9.9"}
    cycles = {s.labels["result"]: s.value for s in families["gfd_cycles"].samples
              if s.name == "gfd_cycles_total"}  # fmt: skip
    assert cycles["published"] == 1.0


def test_server_healthz_is_ok_then_503_with_the_reason_when_stuck(
    server: MetricsServer, health: Health, clock: Clock
) -> None:
    assert get(server, "/healthz")[::2] == (200, "ok\n")
    health.cycle_started()
    clock.now += 312
    assert get(server, "/healthz")[::2] == (503, "cycle running for 312s (limit 120s)\n")
    health.cycle_finished()
    assert get(server, "/healthz")[0] == 200


def test_server_readyz_is_503_then_200_once_published(
    server: MetricsServer, health: Health
) -> None:
    assert get(server, "/readyz")[::2] == (503, "no labels published yet\n")
    health.mark_published()
    assert get(server, "/readyz")[::2] == (200, "ok\n")


@pytest.mark.parametrize("path", ["/", "/metricsx", "/healthz/extra", "/favicon.ico"])
def test_server_answers_404_for_other_paths(server: MetricsServer, path: str) -> None:
    assert get(server, path)[0] == 404


def test_server_stop_is_idempotent_and_frees_the_port(metrics: Metrics, health: Health) -> None:
    srv = MetricsServer(metrics, health, port=0, host="127.0.0.1")
    srv.stop()  # never started: harmless
    srv.start()
    port = srv.port
    srv.stop()
    srv.stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)


def test_a_busy_port_is_one_config_error_naming_it(metrics: Metrics, health: Health) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        srv = MetricsServer(metrics, health, port=port, host="127.0.0.1")
        with pytest.raises(ConfigError) as caught:
            srv.start()
    message = str(caught.value)
    assert message.startswith(f"--metrics-port {port}: cannot listen on 127.0.0.1:{port}: ")
    assert "choose a free one, or 0 to serve no metrics" in message
    assert srv.port == port, "not started: the requested port"


def test_a_server_starts_once(server: MetricsServer) -> None:
    with pytest.raises(RuntimeError, match="already started"):
        server.start()


def test_a_query_string_does_not_change_the_path(server: MetricsServer) -> None:
    assert get(server, "/healthz?verbose=1")[::2] == (200, "ok\n")
    assert get(server, "/metrics?name[]=gfd_nvml_up")[0] == 200


@pytest.mark.parametrize("path, status", [("/metrics", 200), ("/healthz", 200),
                                          ("/readyz", 503), ("/nope", 404)])
def test_head_answers_the_status_and_length_without_a_body(server: MetricsServer, path: str,
                                                           status: int) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        connection.request("HEAD", path)
        response = connection.getresponse()
        assert response.status == status
        assert int(response.headers["Content-Length"]) > 0
        assert response.read() == b""
    finally:
        connection.close()


def test_a_metrics_rendering_failure_is_a_500_and_the_server_keeps_serving(
        health: Health, caplog: pytest.LogCaptureFixture) -> None:
    class Broken(Metrics):
        def render(self) -> bytes:
            raise RuntimeError("collector broke")

    srv = MetricsServer(Broken(version="x"), health, port=0, host="127.0.0.1")
    srv.start()
    try:
        assert get(srv, "/metrics")[::2] == (500, "error rendering metrics\n")
        assert get(srv, "/healthz")[0] == 200
    finally:
        srv.stop()
    assert "rendering metrics failed" in caplog.text


def raw(port: int, request: bytes) -> bytes:
    """Send ``request`` as is and read the whole answer (the server closes after one)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def closed_by_server(sock: socket.socket, timeout: float = 5.0) -> bool:
    """True when the server has closed this connection (EOF or reset) within ``timeout``."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@pytest.fixture
def small(metrics: Metrics, health: Health) -> Iterator[MetricsServer]:
    """A server that holds 4 connections and gives each 2 s (a loaded client may take
    over 0.3 s between its connect and its request)."""
    srv = MetricsServer(metrics, health, port=0, host="127.0.0.1", max_connections=4,
                        request_timeout=2.0)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def test_idle_connections_beyond_the_cap_close_the_oldest_and_probes_still_answer(
        small: MetricsServer) -> None:
    idle = [socket.create_connection(("127.0.0.1", small.port), timeout=5) for _ in range(12)]
    try:
        assert get(small, "/healthz")[::2] == (200, "ok\n")
        assert closed_by_server(idle[0]), "the oldest idle connection made room"
    finally:
        for sock in idle:
            sock.close()


def test_a_client_that_trickles_is_cut_off_after_the_request_timeout(
        small: MetricsServer) -> None:
    """A byte every 50 ms keeps the connection busy but never completes a request: the
    request timeout counts from the accept, not from the last byte."""
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 200
    sent = 0
    with socket.create_connection(("127.0.0.1", small.port), timeout=5) as sock:
        started = time.monotonic()
        try:
            while sent < len(request) and time.monotonic() - started < 20:
                sock.sendall(request[sent:sent + 1])
                sent += 1
                if closed_by_server(sock, timeout=0.05):
                    break
        except (BrokenPipeError, ConnectionResetError):
            pass
        took = time.monotonic() - started
    assert sent >= 4, "it trickled for a while first"
    # cut at 2 s (late on a loaded machine), long before the whole request (11 s or more)
    assert sent < len(request) and 1.9 < took < 10, (sent, took)
    assert get(small, "/healthz")[0] == 200


def test_an_idle_connection_is_closed_after_the_request_timeout(small: MetricsServer) -> None:
    with socket.create_connection(("127.0.0.1", small.port), timeout=5) as sock:
        assert closed_by_server(sock, timeout=4.0)  # at 2 s, before the default 5 s


def test_a_request_over_the_size_limit_is_431(server: MetricsServer) -> None:
    answer = raw(server.port, b"GET /healthz HTTP/1.1\r\nX-Big: " + b"a" * 10000 + b"\r\n\r\n")
    assert answer.startswith(b"HTTP/1.0 431 ")


@pytest.mark.parametrize("request_line, status", [
    (b"nonsense\r\n\r\n", b"400"), (b"GET /healthz\r\n\r\n", b"400"),
    (b"POST /healthz HTTP/1.1\r\nContent-Length: 0\r\n\r\n", b"405"),
    (b"GET /healthz HTTP/1.1\n\n", b"200"),
], ids=["no-version", "http-0.9", "post", "bare-newlines"])
def test_odd_requests_get_a_status_not_a_traceback(server: MetricsServer, request_line: bytes,
                                                   status: bytes,
                                                   capfd: pytest.CaptureFixture[str]) -> None:
    assert raw(server.port, request_line).split(b" ", 2)[1] == status
    assert get(server, "/healthz")[0] == 200
    assert "Traceback" not in capfd.readouterr().err


def test_a_client_that_disconnects_is_one_debug_line_and_nothing_on_stderr(
        server: MetricsServer, caplog: pytest.LogCaptureFixture,
        capfd: pytest.CaptureFixture[str]) -> None:
    caplog.set_level(logging.DEBUG, logger="gfd.metrics")
    for payload in (b"", b"GET /metrics HTTP/1.1\r\n"):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        sock.sendall(payload)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()  # a reset
    wait = 0
    while "disconnected" not in caplog.text and wait < 50:
        time.sleep(0.05)
        wait += 1
    lines = [r for r in caplog.records if r.name == "gfd.metrics" and "disconnected" in
             r.getMessage()]
    assert lines and all(r.levelno == logging.DEBUG and "\n" not in r.getMessage()
                         for r in lines)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert capfd.readouterr().err == ""


def test_the_answer_closes_the_connection_and_says_so(server: MetricsServer) -> None:
    answer = raw(server.port, b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 503 Service Unavailable\r\n")
    assert b"\r\nConnection: close" in head and body == b"no labels published yet\n"


def test_an_address_not_on_this_host_is_one_config_error_naming_the_setting(
        metrics: Metrics, health: Health) -> None:
    srv = MetricsServer(metrics, health, port=0, host="192.0.2.1")  # TEST-NET-1
    with pytest.raises(ConfigError) as caught:
        srv.start()
    assert str(caught.value).startswith("--metrics-address 192.0.2.1: cannot listen on "
                                        "192.0.2.1:0: ")


def test_an_ipv6_address_is_served(metrics: Metrics, health: Health) -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    srv = MetricsServer(metrics, health, port=0, host="::1")
    try:
        srv.start()
    except ConfigError:
        pytest.skip("::1 is not configured here")
    try:
        with socket.create_connection(("::1", srv.port), timeout=5) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
            assert sock.recv(100).startswith(b"HTTP/1.0 200 OK")
    finally:
        srv.stop()


def test_limits_must_be_positive(metrics: Metrics, health: Health) -> None:
    with pytest.raises(ValueError):
        MetricsServer(metrics, health, port=0, max_connections=0)


def _switches(thread_id: int) -> int:
    from pathlib import Path

    status = Path(f"/proc/self/task/{thread_id}/status").read_text()
    return int(status.split("voluntary_ctxt_switches:")[1].split()[0])


def test_an_idle_server_never_wakes(metrics: Metrics, health: Health) -> None:
    """Every manifest runs the server: its idle cost is gfd's idle cost. No connection, no
    deadline: its thread blocks until a client comes (each wake-up is a context switch)."""
    import threading

    srv = MetricsServer(metrics, health, port=0, host="127.0.0.1")
    srv.start()
    try:
        assert get(srv, "/healthz")[0] == 200
        thread = next(t for t in threading.enumerate() if t.name == "gfd-metrics-http")
        assert thread.native_id is not None
        tid = thread.native_id
        looks: list[int] = []

        def settled() -> bool:
            """Blocked, and not woken since the last look: done with the probe's connection
            (a loaded machine may get there late; a fixed 0.2 s pause assumed it would not)."""
            looks.append(_switches(tid))
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
            return stat.rpartition(")")[2].split()[0] == "S" and looks[-2:] == looks[-1:] * 2

        wait_for(settled)
        before = _switches(thread.native_id)
        time.sleep(2.5)
        assert _switches(thread.native_id) == before
        assert get(srv, "/healthz")[0] == 200, "and it still answers at once"
    finally:
        srv.stop()


def test_the_server_exports_the_limit_of_the_health_it_serves(server: MetricsServer) -> None:
    families = {f.name: f for f in text_string_to_metric_families(get(server, "/metrics")[2])}
    assert [s.value for s in families["gfd_stuck_after_seconds"].samples] == [120.0]


# -- routes that hold a request (a long poll) ---------------------------------------------


class Held:
    """Routes whose /poll is held until ``ready`` (or ``hold`` seconds: then answered
    "late"); /echo answers the request's query and headers."""

    def __init__(self, hold: float = 60.0) -> None:
        self.ready = False
        self.hold = hold
        self.asked = 0

    def answer(self, request: Any, *, final: bool) -> Any:
        from http import HTTPStatus

        from gfd.metrics.server import Response

        if request.path == "/echo":
            body = repr((sorted(request.query.items()), request.headers.get("x-probe")))
            return Response(status=HTTPStatus.OK, body=body.encode())
        self.asked += 1
        if self.ready:
            return Response(status=HTTPStatus.OK, body=b"changed\n")
        if final:
            return Response(status=HTTPStatus.OK, body=b"late\n")
        return request.received + self.hold


@pytest.fixture
def held() -> Iterator[tuple[Any, Held]]:
    from gfd.metrics.server import HttpServer

    routes = Held()
    srv = HttpServer(routes, port=0, host="127.0.0.1", max_held=2)
    srv.start()
    try:
        yield srv, routes
    finally:
        srv.stop()


def test_a_route_sees_the_query_and_the_headers(held: tuple[Any, Held]) -> None:
    srv, _ = held
    answer = raw(srv.port, b"GET /echo?a=1&b=&a=2 HTTP/1.1\r\nX-Probe: yes\r\n\r\n")
    assert answer.split(b"\r\n\r\n", 1)[1] == repr(
        ([("a", ["1", "2"]), ("b", [""])], "yes")).encode()


def test_a_held_request_is_answered_when_woken(held: tuple[Any, Held]) -> None:
    srv, routes = held
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
    try:
        sock.sendall(b"GET /poll HTTP/1.1\r\n\r\n")
        wait_for(lambda: routes.asked >= 1)
        assert get(srv, "/echo")[0] == 200  # the server goes on meanwhile
        assert not closed_by_server(sock, timeout=0.2)
        routes.ready = True
        srv.wake()
        sock.settimeout(60)
        assert read_all(sock).endswith(b"\r\n\r\nchanged\n")
    finally:
        sock.close()


def test_a_held_request_is_answered_at_its_time(held: tuple[Any, Held]) -> None:
    srv, routes = held
    routes.hold = 0.5
    answer = raw(srv.port, b"GET /poll HTTP/1.1\r\n\r\n")
    assert answer.endswith(b"\r\n\r\nlate\n")


def test_past_the_held_limit_a_request_is_answered_at_once(held: tuple[Any, Held]) -> None:
    srv, routes = held
    socks = [socket.create_connection(("127.0.0.1", srv.port), timeout=60) for _ in range(2)]
    try:
        for sock in socks:
            sock.sendall(b"GET /poll HTTP/1.1\r\n\r\n")
        wait_for(lambda: routes.asked >= 2)
        assert raw(srv.port, b"GET /poll HTTP/1.1\r\n\r\n").endswith(b"late\n")
    finally:
        for sock in socks:
            sock.close()


def test_a_held_client_that_goes_away_is_closed(held: tuple[Any, Held],
                                                caplog: pytest.LogCaptureFixture) -> None:
    srv, routes = held
    caplog.set_level(logging.DEBUG, logger="gfd.metrics")
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
    sock.sendall(b"GET /poll HTTP/1.1\r\n\r\n")
    wait_for(lambda: routes.asked >= 1)
    sock.close()
    wait_for(lambda: "disconnected while held" in caplog.text)


def read_all(sock: socket.socket) -> bytes:
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out
