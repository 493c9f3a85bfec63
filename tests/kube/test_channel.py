"""Channels: the watchdog ends the request in flight at its deadline and never the next one,
over TLS too, and requests start no thread each."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fakes.apiserver import FakeApiServer, self_signed
from helpers.kube import api_error
from helpers.timing import Clock

from gfd.kube.client import Kube

NODE = "gpu-node-1"


class _Conn:
    """A urllib3 connection as the watchdog sees it: something with a socket."""

    def __init__(self) -> None:
        self.sock = object()


def test_a_deadline_that_passes_late_never_ends_the_next_request(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from gfd.kube import channel as kube_module

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
        # 2 s: the next request's TLS handshake may take over 0.5 s on a loaded machine
        api = Kube(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")), qps=0,
                   timeout=2.0)
        try:
            server.inject(200, 1, method="GET", body={"kind": "Node", "apiVersion": "v1"},
                          size=10_000, trickle=0.1, trickle_headers=False)
            started = time.monotonic()
            error = api_error(lambda: api.get_node(NODE))
            assert time.monotonic() - started < 10  # not the 1000 s of the whole trickle
            assert "no complete answer from the API server within 2 s" in str(error)
            assert api.get_node(NODE)["metadata"]["name"] == NODE
        finally:
            api.close()
