"""``FakeApiServer``: the HTTP server and its handler threads, the lifecycle, kubeconfigs,
the request log and the path of one request (faults, authentication, routing, admission,
the handler, the answer); ``self_signed`` and standalone use."""

from __future__ import annotations

import argparse
import io
import json
import signal
import socket
import ssl
import subprocess
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

from .admission import AdmissionMixin, _bearer_matches, _Rule
from .errors import ApiError, _no_such_resource, status_body
from .exchange import RequestRecord, _Request, _Response
from .faults import FaultsMixin, _Fault
from .handlers import HandlersMixin
from .objects import DEFAULT_TOKEN, DEFAULT_USER, JSON, RESOURCES, Resource, _Stored
from .store import StoreMixin
from .watch import WatchMixin, _Change, _Watch, _WatchStart

# --------------------------------------------------------------------------- the server


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, fake: FakeApiServer, tls: ssl.SSLContext | None = None) -> None:
        self.fake = fake
        self.connections: set[socket.socket] = set()
        self.busy: set[socket.socket] = set()
        self.threads: set[threading.Thread] = set()
        self.stopping = False
        self.connections_lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)
        if tls is not None:  # HTTPS, as in-cluster credentials expect
            self.socket = tls.wrap_socket(self.socket, server_side=True)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.threads.add(threading.current_thread())
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self.connections_lock:
                self.threads.discard(threading.current_thread())

    def join_threads(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self.connections_lock:
            threads = list(self.threads)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def set_busy(self, conn: socket.socket, busy: bool) -> bool:
        """Mark a connection as serving a request; False once the server is stopping."""
        with self.connections_lock:
            (self.busy.add if busy else self.busy.discard)(conn)
            return not self.stopping

    def close_connections(self) -> None:
        """Close idle keep-alive connections; busy ones close after their answer."""
        with self.connections_lock:
            self.stopping = True
            conns = list(self.connections - self.busy)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = -1  # buffered: status line, headers and body leave in one segment
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        # no Nagle: otherwise delayed ACKs add ~40 ms to some requests
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _any(self) -> None:
        self.server.set_busy(self.connection, True)
        try:
            self.server.fake._serve(self)
        finally:
            if not self.server.set_busy(self.connection, False):
                self.close_connection = True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

    def log_message(self, format: str, *args: Any) -> None:
        pass


class FakeApiServer(StoreMixin, HandlersMixin, WatchMixin, AdmissionMixin, FaultsMixin):
    """A fake kube-apiserver on ``127.0.0.1:<random port>``; see the module docstring."""

    def __init__(self, *, token: str | None = DEFAULT_TOKEN, user: str = DEFAULT_USER,
                 tls: tuple[Path, Path] | None = None) -> None:
        self.token = token
        self.user = user
        self.tls = tls
        """(certificate, key) files to serve HTTPS with (see ``self_signed``); None: HTTP."""
        self._lock = threading.RLock()
        self._objects: dict[Resource, dict[tuple[str, str], _Stored]] = {
            r: {} for r in RESOURCES.values()
        }
        self._rv = 1000
        self.expired_continues: set[str] = set()
        """Continue tokens a list answers with 410 Expired (the compaction passed them)."""
        self._crd_installed = True
        self._rules: list[_Rule] = []
        self._denied: dict[str, str] = {}
        self._faults: list[_Fault] = []
        self._latency = 0.0
        self._down = False
        self._log: list[RequestRecord] = []
        self._errors: list[str] = []
        # watches: the history of changes, how far compact() forgot it, the open watches
        self._history: list[_Change] = []
        self._compacted = 0
        self._watches: set[_Watch] = set()
        self._watch_changed = threading.Condition(self._lock)
        self._watch_faults: list[_Fault] = []
        self.bookmark_interval = 60.0
        """Seconds between BOOKMARK events of a watch that allows them (the API server: about
        a minute); read when a watch opens."""
        self.bookmark_before_timeout = 2.0
        """The API server also sends a BOOKMARK this long before a watch's timeout (0: no)."""
        self.expired_as_http = False
        """Refuse a watch from a compacted resourceVersion with HTTP 410 before streaming (as
        some servers and proxies do) instead of a 200 stream holding one ERROR event."""
        self.watch_chunk_bytes: int | None = None
        """Cut each batch of watch events into HTTP chunks of this many bytes (an event split
        across chunks, several in one); None: one chunk per event, as the API server does."""
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._routes = self._build_routes()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> FakeApiServer:
        if self._httpd is not None:
            return self
        context = None
        if self.tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(self.tls[0]), str(self.tls[1]))
        self._httpd = _HTTPServer(self, context)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.01},
            name="fake-apiserver",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, thread = self._httpd, self._thread
        if httpd is None:
            return
        self._httpd = self._thread = None
        self.drop_watches()
        httpd.shutdown()
        httpd.close_connections()
        httpd.server_close()
        httpd.join_threads(timeout=5)
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("FakeApiServer is not started")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def write_service_account(self, directory: Path, *, namespace: str) -> Path:
        """What the kubelet mounts at /var/run/secrets/kubernetes.io/serviceaccount for
        in-cluster credentials: token, ca.crt (this server's certificate) and namespace."""
        if self.tls is None or self.token is None:
            raise RuntimeError("in-cluster credentials need HTTPS and a token")
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "token").write_text(self.token)
        (directory / "ca.crt").write_bytes(self.tls[0].read_bytes())
        (directory / "namespace").write_text(namespace)
        return directory

    def write_kubeconfig(self, path: str | Path, *, namespace: str | None = None) -> Path:
        """Write a kubeconfig (context, cluster and user all named ``fake``)."""
        context: JSON = {"cluster": "fake", "user": "fake"}
        if namespace:
            context["namespace"] = namespace
        user: JSON = {"token": self.token} if self.token else {}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url, **(
                {"certificate-authority": str(self.tls[0])} if self.tls else {})}}],
            "contexts": [{"name": "fake", "context": context}],
            "users": [{"name": "fake", "user": user}],
            "current-context": "fake",
            "preferences": {},
        }
        out = Path(path)
        out.write_text(yaml.safe_dump(config, sort_keys=False))
        return out

    # ------------------------------------------------------------------ request log

    @property
    def requests(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._log)

    def clear_log(self) -> None:
        with self._lock:
            self._log.clear()

    def count(self, method: str | None = None, path_contains: str | None = None) -> int:
        with self._lock:
            return sum(
                1
                for r in self._log
                if (method is None or r.method == method.upper())
                and (path_contains is None or path_contains in r.path)
            )

    @property
    def errors(self) -> list[str]:
        """Tracebacks of bugs inside the fake (answered as 500); should stay empty."""
        with self._lock:
            return list(self._errors)

    # ------------------------------------------------------------------ HTTP plumbing

    def _serve(self, h: _Handler) -> None:
        split = urlsplit(h.path)
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        raw_type = h.headers.get("Content-Type")
        req = _Request(
            method=h.command,
            path=unquote(split.path),
            query=query,
            content_type=raw_type.split(";")[0].strip().lower() if raw_type else None,
            body=body,
            user_agent=h.headers.get("User-Agent", ""),
            authorization=h.headers.get("Authorization"),
        )
        with self._lock:
            down, latency = self._down, self._latency
        if down:
            self._record(req, raw_type, 0, 0)
            h.close_connection = True
            return
        if latency > 0:
            time.sleep(latency)
        resp = self._dispatch(req)
        if isinstance(resp, _WatchStart) and resp.watch is not None:
            self._record(req, raw_type, resp.status, 0)
            with self._lock:
                resp.watch.logged = True
            self._serve_watch(h, resp.watch)
            return
        if isinstance(resp.body, dict):
            payload = json.dumps(resp.body).encode()
            ctype = "application/json"
        else:
            payload = resp.body.encode() if isinstance(resp.body, str) else resp.body
            ctype = "text/plain; charset=utf-8"
        ctype = resp.content_type or ctype
        if resp.size is not None or resp.chunked or resp.trickle:
            self._record(req, raw_type, resp.status, max(len(payload), resp.size or 0))
            self._stream(h, resp, payload, ctype)
            return
        self._record(req, raw_type, resp.status, len(payload))
        try:
            h.send_response(resp.status)
            h.send_header("Content-Type", ctype)
            h.send_header("Content-Length", str(len(payload)))
            h.send_header("Cache-Control", "no-cache, private")
            for key, value in resp.headers.items():
                h.send_header(key, value)
            h.end_headers()
            h.wfile.write(payload)
        except OSError:
            h.close_connection = True

    def _stream(self, h: _Handler, resp: _Response, payload: bytes, ctype: str) -> None:
        """Write an answer piece by piece: padded to ``size`` (a body that ends ``"}`` when it
        is JSON, so it stays a valid object), chunked, or one byte at a time."""
        filler = b""
        if resp.size is not None and resp.size > len(payload):
            if payload.endswith(b"}"):  # {..., "pad": "xxx...x"}
                payload = payload[:-1] + b', "pad": "'
                tail = b'"}'
            else:
                tail = b""
            filler_len = resp.size - len(payload) - len(tail)
            filler = b"x" * min(filler_len, 1 << 20)
            pieces = self._padded(payload, filler, filler_len, tail)
        else:
            pieces = iter([payload])
        total = max(len(payload), resp.size or 0)
        lines = [f"HTTP/1.1 {resp.status} {h.responses.get(resp.status, ('',))[0]}",
                 f"Content-Type: {ctype}", "Cache-Control: no-cache, private"]
        lines += [f"{k}: {v}" for k, v in resp.headers.items()]
        lines += ["Transfer-Encoding: chunked"] if resp.chunked else [f"Content-Length: {total}"]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode()
        h.close_connection = True
        try:
            self._send(h, head, resp.trickle if resp.trickle_headers else 0.0)
            for piece in pieces:
                if resp.chunked:
                    piece = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
                self._send(h, piece, resp.trickle)
            if resp.chunked:
                self._send(h, b"0\r\n\r\n", resp.trickle)
        except OSError:  # the client gave up: drop what is left, even from the buffer
            h.wfile = io.BytesIO()

    @staticmethod
    def _padded(payload: bytes, filler: bytes, length: int, tail: bytes) -> Any:
        yield payload
        while length > 0:
            piece = filler[:length]
            length -= len(piece)
            yield piece
        if tail:
            yield tail

    def _send(self, h: _Handler, data: bytes, trickle: float) -> None:
        if not trickle:
            h.wfile.write(data)
            h.wfile.flush()
            return
        for i in range(len(data)):
            if self._httpd is None or self._httpd.stopping:
                raise OSError("the fake API server is stopping")
            h.wfile.write(data[i : i + 1])
            h.wfile.flush()
            time.sleep(trickle)

    def _record(self, req: _Request, raw_type: str | None, status: int, size: int) -> None:
        record = RequestRecord(
            method=req.method,
            path=req.path,
            query=dict(req.query),
            content_type=raw_type,
            status=status,
            request_bytes=len(req.body),
            response_bytes=size,
            timestamp=time.time(),
            body=req.body,
        )
        with self._lock:
            self._log.append(record)

    def _dispatch(self, req: _Request) -> _Response:
        try:
            fault = self._take_fault(req)
            if fault is not None:
                return fault
            if req.method == "GET" and req.path == "/version":
                return _Response(200, {"major": "1", "minor": "35", "gitVersion": "v1.35.0-fake"})
            if self.token is not None and not _bearer_matches(req.authorization, self.token):
                raise ApiError(401, "Unauthorized", "Unauthorized")
            route, params = self._route(req)
            with self._lock:
                self._authorize(route, req, params)
                if route.resource.custom and not self._crd_installed:
                    raise _no_such_resource()
                return route.handler(req, params)
        except ApiError as err:
            return _Response(err.code, err.body(), err.headers)
        except Exception:
            tb = traceback.format_exc()
            with self._lock:
                self._errors.append(tb)
            return _Response(500, status_body(500, "InternalError", f"fake apiserver bug: {tb}"))


# --------------------------------------------------------------------------- standalone use


def main(argv: list[str] | None = None) -> None:
    """Serve until killed: ``python -m fakes.apiserver --kubeconfig PATH [--node N]`` (in
    tests/)."""
    parser = argparse.ArgumentParser(
        description="A local, stateful fake of the Kubernetes API server, over real HTTP.")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--node", action="append", default=[])
    args = parser.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with FakeApiServer() as api:
        for name in args.node:
            api.add_node(name)
        api.write_kubeconfig(args.kubeconfig)
        print(api.url, flush=True)
        stop.wait()



def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, made with the openssl command."""
    cert, key = directory / "apiserver.crt", directory / "apiserver.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key
