"""The connections requests go over: a ``Channel`` (an ApiClient whose requests run one at a
time, each ended by a watchdog when its deadline passes, by shutting down its socket), and the
TCP keepalive that watches' connections use."""

from __future__ import annotations

import functools
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, cast

import urllib3
import urllib3.connectionpool
from kubernetes import client


def shut_under_reader(holder: Any) -> None:
    """End a read another thread is blocked in on ``holder``'s socket (a urllib3 connection):
    the plain socket's shutdown, also under TLS (an SSL socket's would drop its state under
    the reader). Nothing while it has no socket yet (still connecting: its timeout ends it)."""
    sock = getattr(holder, "sock", None)
    if sock is None:
        return
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


class _Deadline:
    """One request's deadline: its own ``fired`` and connection, so a deadline that passes
    late can only ever end its own request."""

    __slots__ = ("at", "conn", "fired")

    def __init__(self, at: float) -> None:
        self.at = at
        self.conn: Any = None
        self.fired = False


class _Watchdog:
    """Ends the request in flight when its deadline passes, by shutting down the socket of
    the connection it uses (the pool hands that connection over in ``attach``). One
    long-lived thread per channel waits for the current deadline; ``arm`` gives each
    request its own ``_Deadline``, and only the current one can fire."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._cond = threading.Condition()
        self._current: _Deadline | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def arm(self, seconds: float) -> _Deadline:
        deadline = _Deadline(self._clock() + seconds)
        with self._cond:
            self._current = deadline
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name="gfd-api-deadline",
                                                daemon=True)
                self._thread.start()
            self._cond.notify()
        return deadline

    def attach(self, conn: Any) -> None:
        with self._cond:
            deadline = self._current
            if deadline is None:
                return
            deadline.conn = conn
            if deadline.fired:
                shut_under_reader(conn)

    def disarm(self, deadline: _Deadline) -> None:
        with self._cond:
            deadline.conn = None
            if self._current is deadline:
                self._current = None

    def expire(self) -> float | None:
        """Fire the current deadline if it has passed. Seconds until it will otherwise;
        None when there is nothing left to wait for."""
        with self._cond:
            return self._expire()

    def _expire(self) -> float | None:
        deadline = self._current
        if deadline is None or deadline.fired:
            return None
        left = deadline.at - self._clock()
        if left > 0:
            return left
        deadline.fired = True
        if deadline.conn is not None:
            shut_under_reader(deadline.conn)
        return None

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                self._cond.wait(self._expire())

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


class _WatchedPool(urllib3.connectionpool.HTTPConnectionPool):
    """A pool that hands each connection it gives out to the request's watchdog."""

    def __init__(self, *args: Any, watchdog: _Watchdog, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._watchdog = watchdog

    def _get_conn(self, timeout: float | None = None) -> Any:
        conn = super()._get_conn(timeout)
        self._watchdog.attach(conn)
        return conn


class _WatchedHttpsPool(_WatchedPool, urllib3.connectionpool.HTTPSConnectionPool):
    """The same over TLS (the MRO puts the HTTPS pool under ``_WatchedPool``)."""


KEEPALIVE = (30, 10, 3)
"""Idle seconds before the first probe, seconds between probes, probes lost before the
connection counts as dead: about a minute for a watch whose peer went away."""


def keepalive_socket_options() -> list[tuple[int, int, int]]:
    """urllib3's default socket options (no Nagle) plus TCP keepalive, where the OS has it."""
    idle, interval, count = KEEPALIVE
    options = list(urllib3.connection.HTTPConnection.default_socket_options)
    options.append((socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1))
    for name, value in (("TCP_KEEPIDLE", idle), ("TCP_KEEPINTVL", interval),
                        ("TCP_KEEPCNT", count)):
        if hasattr(socket, name):
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    return options


class Channel:
    """An ApiClient whose requests each run under one deadline (its watchdog), one at a
    time: the loop's requests use one, the watch thread's reads another."""

    def __init__(self, cfg: Any) -> None:
        self.api = client.ApiClient(cfg)
        self.watchdog = _Watchdog()
        self.one_at_a_time = threading.Lock()
        pools = self.api.rest_client.pool_manager
        pools.pool_classes_by_scheme = cast(Any, {  # this client's pools only
            "http": functools.partial(_WatchedPool, watchdog=self.watchdog),
            "https": functools.partial(_WatchedHttpsPool, watchdog=self.watchdog)})
