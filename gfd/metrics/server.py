"""The /metrics /healthz /readyz HTTP server, and the same server for any ``Routes``
(``gfd fleet --serve``'s /, /fleet, /metrics, /healthz, /readyz).

The server is one thread over non-blocking sockets, so what clients do cannot exhaust the
process: at most ``MAX_CONNECTIONS`` connections are open at once (a new one closes the
oldest idle one, so a probe still gets through a flood of idle connections); each has
``REQUEST_TIMEOUT`` seconds for the whole exchange, request in and answer out (a client
that trickles is cut off); a request is at most ``MAX_REQUEST_BYTES``; every error goes
through gfd's logger as one line (a client's disconnect at debug). A route may hold a
request to answer it later (a long poll): at most ``MAX_HELD`` are held at once (one more is
answered at once), each until the time its route gave or until ``wake`` (from any thread)
has the route look again.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import selectors
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, Final, Protocol
from urllib.parse import parse_qs

from gfd.errors import ConfigError
from gfd.metrics.health import Health

log = logging.getLogger("gfd.metrics")
"""Named for the package: its lines read ``gfd.metrics`` as they did before the split."""

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
"""Content type of ``/metrics``: the classic Prometheus text exposition format."""

MAX_CONNECTIONS: Final = 64
"""Connections open at once; a new one beyond this closes the oldest idle one."""
REQUEST_TIMEOUT: Final = 5.0
"""Seconds a connection has for the whole exchange (the kubelet's probes wait 1-5 s)."""
MAX_REQUEST_BYTES: Final = 8192
"""The request line and headers; a longer request gets 431 and is closed."""
BACKLOG: Final = 128
MAX_HELD: Final = 64
"""Requests a route holds at once (long polls); one more is answered at once."""
_ACCEPT_ERRORS: Final = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class Exposed(Protocol):
    """What the server serves at /metrics (``registry.Metrics``)."""

    def render(self) -> bytes: ...
    def follow(self, health: Health) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    method: str
    """``GET`` or ``HEAD`` (the server answers the others 405 itself)."""
    target: str
    path: str
    query: dict[str, list[str]] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    """By lower-case name."""
    peer: str = ""
    received: float = 0.0
    """When the request was in whole, on the server's clock (a long poll's start)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Response:
    status: HTTPStatus
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()


class Routes(Protocol):
    """What the server answers: a ``Response``, or (a long poll) the time on the server's
    clock until which to hold the request. A held request is asked again after each
    ``wake`` and, with ``final`` True, once that time has come (then it must answer)."""

    def answer(self, request: Request, *, final: bool) -> Response | float: ...


class _AgentRoutes:
    """The agent's: /metrics, /healthz, /readyz; 404 otherwise."""

    def __init__(self, metrics: Exposed, health: Health) -> None:
        self._metrics = metrics
        self._health = health

    def answer(self, request: Request, *, final: bool) -> Response | float:
        if request.path == "/metrics":
            try:
                payload = self._metrics.render()
            except Exception as exc:  # a broken collector must not stop the server
                log.error("rendering metrics failed: %s: %s", type(exc).__name__, exc)
                log.debug("rendering metrics failed", exc_info=True)
                return Response(status=HTTPStatus.INTERNAL_SERVER_ERROR,
                                body=b"error rendering metrics\n")
            return Response(status=HTTPStatus.OK, body=payload, content_type=CONTENT_TYPE)
        if request.path in ("/healthz", "/readyz"):
            ok, reason = self._health.live() if request.path == "/healthz" else \
                self._health.ready()
            return Response(status=HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE,
                            body=reason.encode() + b"\n")
        return Response(status=HTTPStatus.NOT_FOUND, body=b"not found\n")


class _Connection:
    """One client connection: what it sent so far, what is left to send, its deadline."""

    __slots__ = ("deadline", "held", "inbox", "outbox", "peer", "sock")

    def __init__(self, sock: socket.socket, peer: str, deadline: float) -> None:
        self.sock = sock
        self.peer = peer
        self.deadline = deadline
        self.inbox = bytearray()
        self.outbox = memoryview(b"")
        self.held: tuple[Request, float] | None = None
        """A request its route holds, and until when."""

    @property
    def idle(self) -> bool:
        """Nothing received and nothing to send: the first to go when the server is full."""
        return not self.inbox and not self.outbox


def _peer(address: Any) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        host = str(address[0])
        return f"[{host}]:{address[1]}" if ":" in host else f"{host}:{address[1]}"
    return str(address)


def endpoint(host: str, port: int) -> str:
    """``0.0.0.0:8080``, ``[::]:8080``."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _Loop:
    """The server's one thread: accept, read each request, answer it, close."""

    def __init__(self, listener: socket.socket, *, routes: Routes, max_connections: int,
                 request_timeout: float, max_held: int = MAX_HELD,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._listener = listener
        self._max = max_connections
        self._timeout_s = request_timeout
        self._routes = routes
        self._max_held = max_held
        self._clock = clock
        self._selector = selectors.DefaultSelector()
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._wake_reader.setblocking(False)
        self._wake_writer.setblocking(False)
        self._connections: OrderedDict[int, _Connection] = OrderedDict()
        """By accept time, which is also deadline order (the deadline is accept + timeout)."""
        self._held: dict[int, _Connection] = {}
        """Requests their routes hold (long polls), apart: their deadline is the route's."""
        self._woken = False
        self._stopping = False
        self._paused_until = 0.0
        self._refused_logged = False
        self._selector.register(listener, selectors.EVENT_READ, "listen")
        self._selector.register(self._wake_reader, selectors.EVENT_READ, "wake")

    # -- the loop ---------------------------------------------------------------------

    def serve(self) -> None:
        try:
            while not self._stopping:
                events = self._selector.select(self._timeout())
                # requests first, new connections last: a batch of new connections then
                # never closes one whose request has arrived but is not read yet
                for key, mask in sorted(events, key=lambda event: event[0].data == "listen"):
                    self._event(key, mask)
                if self._woken:
                    self._woken = False
                    self._ask_held(final=False)
                self._expire()
                self._resume()
        except Exception as exc:  # the server stops; the agent keeps labelling
            log.error("metrics server stopped: %s: %s", type(exc).__name__, exc)
            log.debug("metrics server failure", exc_info=True)
        finally:
            self._close_all()

    def stop(self) -> None:
        self._stopping = True
        self.wake()

    def wake(self) -> None:
        """Have the routes look at their held requests again (from any thread)."""
        try:
            self._wake_writer.send(b"x")
        except OSError:
            pass

    def _timeout(self) -> float | None:
        """Until the next real deadline (a connection's, the end of a pause); None: block
        until a connection or ``stop`` (an idle server never wakes)."""
        soonest = []
        if self._connections:
            soonest.append(next(iter(self._connections.values())).deadline)
        soonest += [conn.held[1] for conn in self._held.values() if conn.held]
        if self._paused_until:
            soonest.append(self._paused_until)
        if not soonest:
            return None
        return max(0.0, min(soonest) - self._clock())

    def _event(self, key: selectors.SelectorKey, mask: int) -> None:
        if key.data == "listen":
            self._accept()
        elif key.data == "wake":
            try:
                self._wake_reader.recv(4096)
            except OSError:
                pass
            self._woken = True
        else:
            conn = key.data
            assert isinstance(conn, _Connection)
            try:
                if conn.held is not None:
                    self._read_held(conn)
                    return
                if mask & selectors.EVENT_READ:
                    self._read(conn)
                if mask & selectors.EVENT_WRITE and conn.sock.fileno() >= 0:
                    self._write(conn)
            except Exception as exc:  # one connection's failure never stops the server
                log.error("metrics server: %s: %s: %s", conn.peer, type(exc).__name__, exc)
                log.debug("metrics server failure", exc_info=True)
                self._close(conn, "")

    # -- connections ------------------------------------------------------------------

    def _accept(self) -> None:
        # At most half the connections per round: one accepted in this round is never among
        # the oldest, so it is not closed for room before its request is read.
        for _ in range(max(1, self._max // 2)):
            try:
                sock, address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._accept_failed(exc)
                return
            if len(self._connections) >= self._max:
                self._evict()
            sock.setblocking(False)
            conn = _Connection(sock, _peer(address), self._clock() + self._timeout_s)
            self._connections[sock.fileno()] = conn
            self._selector.register(sock, selectors.EVENT_READ, conn)
            self._read(conn)  # the request is often there already

    def _accept_failed(self, exc: OSError) -> None:
        """Out of file descriptors or memory: make room, or stop accepting for a moment
        (never spin on a listener that stays readable)."""
        if exc.errno not in _ACCEPT_ERRORS:
            log.debug("metrics server: accept failed: %s", exc.strerror or exc)
            return
        if not self._refused_logged:
            log.warning("metrics server: cannot accept a connection: %s; closing the oldest "
                        "or pausing briefly", exc.strerror or exc)
            self._refused_logged = True
        if self._connections:
            self._evict()
            return
        self._selector.unregister(self._listener)
        self._paused_until = self._clock() + 0.1

    def _resume(self) -> None:
        if self._paused_until and self._clock() >= self._paused_until and not self._stopping:
            self._paused_until = 0.0
            self._selector.register(self._listener, selectors.EVENT_READ, "listen")

    def _evict(self) -> None:
        """Close the oldest idle connection (the oldest of all when none is idle)."""
        victim = next((c for c in self._connections.values() if c.idle), None)
        if victim is None:
            victim = next(iter(self._connections.values()))
        self._close(victim, f"dropped: {self._max} connections open")

    def _expire(self) -> None:
        now = self._clock()
        for conn in [c for c in self._held.values() if c.held and c.held[1] <= now]:
            self._ask(conn, final=True)
        while self._connections:
            conn = next(iter(self._connections.values()))
            if conn.deadline > now:
                return
            self._close(conn, f"timed out after {self._timeout_s:g}s")

    def _close(self, conn: _Connection, why: str) -> None:
        fd = conn.sock.fileno()
        if fd >= 0:
            self._connections.pop(fd, None)
            self._held.pop(fd, None)
            try:
                self._selector.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
        if why:
            log.debug("metrics server: %s: %s", conn.peer, why)
        conn.sock.close()

    def _close_all(self) -> None:
        for conn in [*self._connections.values(), *self._held.values()]:
            self._close(conn, "")
        self._selector.close()
        self._wake_reader.close()
        self._wake_writer.close()

    # -- one request ------------------------------------------------------------------

    def _read(self, conn: _Connection) -> None:
        try:
            data = conn.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._close(conn, f"disconnected: {exc.strerror or exc}")
            return
        if not data:
            self._close(conn, "disconnected before a whole request")
            return
        conn.inbox += data
        end = conn.inbox.find(b"\r\n\r\n")
        if end < 0:
            end = conn.inbox.find(b"\n\n")
        if end < 0:
            if len(conn.inbox) > MAX_REQUEST_BYTES:
                self._reply(conn, "", HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                            b"request too large\n", body=True)
            return
        if end > MAX_REQUEST_BYTES:
            self._reply(conn, "", HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                        b"request too large\n", body=True)
            return
        line = bytes(conn.inbox[: conn.inbox.find(b"\n")]).rstrip(b"\r")
        self._answer(conn, line)

    def _answer(self, conn: _Connection, line: bytes) -> None:
        parts = line.decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            self._reply(conn, line.decode("latin-1"), HTTPStatus.BAD_REQUEST,
                        b"bad request\n", body=True)
            return
        method, target, _ = parts
        if method not in ("GET", "HEAD"):
            self._reply(conn, f"{method} {target}", HTTPStatus.METHOD_NOT_ALLOWED,
                        b"method not allowed\n", body=True, extra=(("Allow", "GET, HEAD"),))
            return
        path, _, query = target.partition("?")
        request = Request(method=method, target=target, path=path,
                          query=parse_qs(query, keep_blank_values=True),
                          headers=_headers(bytes(conn.inbox)), peer=conn.peer,
                          received=self._clock())
        conn.held = (request, 0.0)
        self._ask(conn, final=False)

    def _ask(self, conn: _Connection, *, final: bool) -> None:
        """The route's answer to the connection's request, or hold it (or keep holding it)."""
        assert conn.held is not None
        request = conn.held[0]
        try:
            got = self._routes.answer(request, final=final)
        except Exception as exc:  # one route's failure never stops the server
            log.error("metrics server: %s %s: %s: %s", request.method, request.target,
                      type(exc).__name__, exc)
            log.debug("metrics server failure", exc_info=True)
            got = Response(status=HTTPStatus.INTERNAL_SERVER_ERROR, body=b"internal error\n")
        fd = conn.sock.fileno()
        if not isinstance(got, Response):
            if final:  # a route must answer once the time it gave has come
                got = Response(status=HTTPStatus.INTERNAL_SERVER_ERROR,
                               body=b"internal error\n")
            elif fd not in self._held and len(self._held) >= self._max_held:
                self._ask(conn, final=True)  # as many held as may be: answer now
                return
            else:
                conn.held = (request, float(got))
                if fd not in self._held:
                    self._connections.pop(fd, None)
                    self._held[fd] = conn
                return
        if fd in self._held:  # back among the others, its time to write from now
            del self._held[fd]
            conn.deadline = self._clock() + self._timeout_s
            self._connections[fd] = conn
        conn.held = None
        self._reply(conn, f"{request.method} {request.target}", got.status, got.body,
                    body=request.method == "GET", content_type=got.content_type,
                    extra=got.headers)

    def _ask_held(self, *, final: bool) -> None:
        for conn in list(self._held.values()):
            if conn.held is not None:
                self._ask(conn, final=final)

    def _read_held(self, conn: _Connection) -> None:
        """A held connection's client spoke: it went away (EOF, a reset), or sent more,
        which is dropped (one request a connection)."""
        try:
            data = conn.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._close(conn, f"disconnected: {exc.strerror or exc}")
            return
        if not data:
            self._close(conn, "disconnected while held")

    def _reply(self, conn: _Connection, request: str, status: HTTPStatus, payload: bytes, *,
               body: bool, content_type: str = "text/plain; charset=utf-8",
               extra: tuple[tuple[str, str], ...] = ()) -> None:
        head = [f"HTTP/1.0 {status.value} {status.phrase}", "Server: gfd",
                f"Date: {formatdate(usegmt=True)}", f"Content-Type: {content_type}",
                f"Content-Length: {len(payload)}", "Connection: close",
                *(f"{name}: {value}" for name, value in extra)]
        conn.outbox = memoryview(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (
            payload if body else b""))
        conn.inbox.clear()
        log.debug("metrics server: %s %r %d", conn.peer, request, status.value)
        self._selector.modify(conn.sock, selectors.EVENT_WRITE, conn)
        self._write(conn)

    def _write(self, conn: _Connection) -> None:
        try:
            sent = conn.sock.send(conn.outbox)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._close(conn, f"disconnected: {exc.strerror or exc}")
            return
        conn.outbox = conn.outbox[sent:]
        if not len(conn.outbox):
            try:
                conn.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            self._close(conn, "")


def _headers(raw: bytes) -> dict[str, str]:
    """A request's header fields by lower-case name (the last of a name given twice)."""
    out = {}
    for line in raw.decode("latin-1").splitlines()[1:]:
        if not line:
            break
        name, sep, value = line.partition(":")
        if sep:
            out[name.strip().lower()] = value.strip()
    return out


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6 and ipaddress.ip_address(host).is_unspecified:
            try:  # "::": IPv4 too, where the host allows it
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            except OSError:
                pass
        sock.bind((host, port))
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


class HttpServer:
    """The server on a daemon thread, answering what ``routes`` answer."""

    def __init__(self, routes: Routes, *, port: int, host: str = "0.0.0.0",
                 max_connections: int = MAX_CONNECTIONS,
                 request_timeout: float = REQUEST_TIMEOUT, max_held: int = MAX_HELD,
                 name: str = "gfd-http") -> None:
        if max_connections < 1 or request_timeout <= 0 or max_held < 0:
            raise ValueError("max_connections and request_timeout must be positive")
        self._routes = routes
        self._host = host
        self._port = port
        self._max_connections = max_connections
        self._request_timeout = request_timeout
        self._max_held = max_held
        self._name = name
        self._listener: socket.socket | None = None
        self._loop: _Loop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Bind the port and serve on a daemon thread (OSError if it cannot be bound)."""
        with self._lock:
            if self._listener is not None:
                raise RuntimeError("server already started")
            listener = _listen(self._host, self._port)
            self._listener = listener
            self._loop = _Loop(listener, routes=self._routes,
                               max_connections=self._max_connections,
                               request_timeout=self._request_timeout, max_held=self._max_held)
            self._thread = threading.Thread(target=self._loop.serve, name=self._name,
                                            daemon=True)
            self._thread.start()

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        """The bound port once started (``port=0`` binds a free one); the requested one before."""
        listener = self._listener
        if listener is None:
            return self._port
        return int(listener.getsockname()[1])

    def wake(self) -> None:
        """Have the routes look at the requests they hold again (from any thread)."""
        loop = self._loop
        if loop is not None:
            loop.wake()

    def stop(self) -> None:
        """Shut down and close the socket; idempotent (and harmless if never started)."""
        with self._lock:
            listener, loop, thread = self._listener, self._loop, self._thread
            self._listener = self._loop = self._thread = None
        if listener is None or loop is None or thread is None:
            return
        loop.stop()
        thread.join(timeout=5)
        listener.close()


class MetricsServer:
    """The agent's server on a daemon thread: /metrics, /healthz, /readyz; 404 otherwise."""

    def __init__(
        self, metrics: Exposed, health: Health, *, port: int, host: str = "0.0.0.0",
        max_connections: int = MAX_CONNECTIONS, request_timeout: float = REQUEST_TIMEOUT,
    ) -> None:
        metrics.follow(health)
        self._server = HttpServer(_AgentRoutes(metrics, health), port=port, host=host,
                                  max_connections=max_connections,
                                  request_timeout=request_timeout, name="gfd-metrics-http")
        self._host = host
        self._port = port

    def start(self) -> None:
        """Bind the port and serve on a daemon thread (ConfigError if it cannot be bound)."""
        where = endpoint(self._host, self._port)
        try:
            self._server.start()
        except RuntimeError:
            raise RuntimeError("MetricsServer already started") from None
        except OSError as exc:
            reason = exc.strerror or str(exc)
            if exc.errno == errno.EADDRNOTAVAIL:
                raise ConfigError(
                    f"--metrics-address {self._host}: cannot listen on {where}: {reason} "
                    "(not an address of this host: use 0.0.0.0 for every interface, or "
                    "one of the pod's addresses)") from exc
            raise ConfigError(
                f"--metrics-port {self._port}: cannot listen on {where}: {reason} "
                "(another process may hold the port: choose a free one, or 0 to serve no "
                "metrics)") from exc
        log.info("serving /metrics /healthz /readyz on %s", endpoint(self._host, self.port))

    @property
    def port(self) -> int:
        """The bound port once started (``port=0`` binds a free one); the requested one before."""
        return self._server.port

    def stop(self) -> None:
        """Shut down and close the socket; idempotent (and harmless if never started)."""
        self._server.stop()
