"""``gfd fleet --serve``: a view of the fleet (any ``ViewSource``: a dump, one read, or the
view watches keep current) on the agent's hardened HTTP server (``server.HttpServer``):

- ``/``: the page (``gfd/data/fleet.html``: one file, no external asset; it fetches
  ``fleet?nodes=true`` relatively, so it works through ``kubectl port-forward`` and through
  ``kubectl proxy``'s service path);
- ``/fleet``: ``gfd fleet --check -o json``'s document of the current view (schema
  ``gfd/v1``), without ``nodes`` unless ``?nodes=true``; the selector's filters as query
  parameters (``?product=H100&count=2``) add ``fits``; beside them ``view`` (its generation,
  version, last change and health) and ``notes``. ``?version=V&wait=S`` holds the request
  until the view's version is no longer V, S seconds at most (a long poll); an
  ``If-None-Match`` of the current ETag is answered 304;
- ``/metrics``: ``fleetmetrics``' families (OpenMetrics where the Accept header asks);
- ``/healthz``: 200 while the server serves; ``/readyz``: 200 once every collection's first
  LIST is in and while none is refused, else 503 with the reason.

``serve`` is the one entry: ``gfd fleet --serve`` calls it with its source."""

from __future__ import annotations

import gzip
import json
import logging
import secrets
import signal
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from hashlib import sha256
from http import HTTPStatus
from importlib import resources
from typing import Any, Final

from gfd import __version__
from gfd.errors import ConfigError
from gfd.fleet import query, report
from gfd.fleet.count import index
from gfd.fleet.fits import fits as fleet_fits
from gfd.fleet.health import ViewHealth
from gfd.fleet.view import View, ViewSource
from gfd.metrics import fleetmetrics
from gfd.metrics.server import REQUEST_TIMEOUT, HttpServer, Request, Response, endpoint

log = logging.getLogger("gfd.metrics")

DEFAULT_PORT: Final = 8080
MAX_WAIT: Final = 30.0
"""Seconds a long poll is held at most (under the API server proxy's and most load
balancers' idle timeouts)."""
CACHED: Final = 16
"""Documents kept per view (each query's); a new view drops them."""
JSON_TYPE: Final = "application/json; charset=utf-8"
PAGE = "data/fleet.html"
SERVE_PARAMETERS: Final = ("nodes", "version", "wait")
"""``/fleet``'s own query parameters, beside the filters (``query.PARAMETERS``)."""


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[IPv6]:PORT``, ``:PORT`` (every interface) or ``PORT``; the host an
    IP address. A ConfigError names ``--serve`` and the forms."""
    forms = "give HOST:PORT, [IPv6]:PORT, :PORT or PORT, HOST an IP address"
    host, port = "0.0.0.0", text
    if text.startswith("["):
        inside, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ConfigError(f"--serve {text}: {forms}")
        host, port = inside, rest[1:]
    elif ":" in text:
        head, _, port = text.rpartition(":")
        host = head or host
    if not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"--serve {text}: no port ({forms})")
    import ipaddress

    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise ConfigError(f"--serve {text}: {host!r} is not an IP address ({forms})") from None
    return host, int(port)


def _flag(key: str, values: list[str]) -> bool:
    if len(values) != 1 or values[0].lower() not in ("", "true", "1", "false", "0"):
        raise ConfigError(f"{key}: true or false, once")
    return values[0].lower() in ("", "true", "1")


def _rfc3339(seconds: float) -> str | None:
    if not seconds:
        return None
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def health_api(health: ViewHealth) -> dict[str, Any]:
    return {"ready": health.ready, "complete": health.complete,
            "lastChange": _rfc3339(health.last_change),
            "collections": [{"name": c.name, "synced": c.synced, "refused": c.refused,
                             "restarts": c.restarts, "relists": c.relists}
                            for c in health.collections]}


def readiness(health: ViewHealth) -> tuple[bool, str]:
    """Ready once every collection's first LIST is in, and while none is refused."""
    if not health.collections:
        return False, "no collection read yet"
    refused = [f"{c.name}: {c.refused}" for c in health.collections if c.refused]
    waiting = [c.name for c in health.collections if not c.synced and not c.refused]
    if refused:  # said first: a refused LIST is what an operator has to mend
        return False, "refused: " + "; ".join(refused)
    if waiting:
        return False, "waiting for the first LIST of " + ", ".join(waiting)
    return True, "ok"


@dataclass(frozen=True, slots=True)
class _Page:
    body: bytes
    policy: str


def _page() -> _Page:
    """The page, and a Content-Security-Policy that lets only its own inline script and
    style run, and only fetch from where it came from."""
    body = resources.files("gfd").joinpath(PAGE).read_bytes()
    text = body.decode()

    def digest(tag: str) -> str:
        start = text.index(f"<{tag}>") + len(tag) + 2
        inline = text[start:text.index(f"</{tag}>", start)]
        import base64

        return "'sha256-" + base64.b64encode(sha256(inline.encode()).digest()).decode() + "'"

    policy = (f"default-src 'none'; script-src {digest('script')}; style-src "
              f"{digest('style')}; connect-src 'self'; img-src data:; base-uri 'none'; "
              "form-action 'none'; frame-ancestors 'none'")
    return _Page(body, policy)


class FleetRoutes:
    """What ``gfd fleet --serve`` answers (``server.Routes``), from one source."""

    def __init__(self, source: ViewSource, *, node_findings: bool = False,
                 version: str = __version__, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self._source = source
        self._node_findings = node_findings
        self._version = version
        self._clock = clock
        self._wall = wall
        self._boot = secrets.token_hex(4)
        """Tells this server's versions from a restarted one's (whose generations restart)."""
        self._page = _page()
        self._lock = threading.Lock()
        self._cached_for: tuple[int, ViewHealth] | None = None
        self._documents: OrderedDict[str, bytes] = OrderedDict()
        self._figures: fleetmetrics.Figures | None = None

    def version_of(self, view: View) -> str:
        """Changes whenever what ``/fleet`` and ``/metrics`` show of the view does."""
        return f"{self._boot}-{view.generation}-{hash(view.health) & 0xFFFFFFFF:08x}"

    def current_version(self) -> str:
        with self._source.read() as view:
            return self.version_of(view)

    # -- routes -----------------------------------------------------------------------

    def answer(self, request: Request, *, final: bool) -> Response | float:
        path = request.path
        if path == "/":
            return Response(status=HTTPStatus.OK, body=self._page.body,
                            content_type="text/html; charset=utf-8",
                            headers=(("Content-Security-Policy", self._page.policy),
                                     ("X-Content-Type-Options", "nosniff"),
                                     ("Referrer-Policy", "no-referrer"),
                                     ("Cache-Control", "no-cache")))
        if path == "/fleet":
            try:
                return self._fleet(request, final=final)
            except ConfigError as exc:
                return Response(status=HTTPStatus.BAD_REQUEST, body=f"{exc}\n".encode())
        if path == "/metrics":
            return self._metrics(request)
        if path == "/healthz":
            return Response(status=HTTPStatus.OK, body=b"ok\n")
        if path == "/readyz":
            with self._source.read() as view:
                ok, reason = readiness(view.health)
            return Response(status=HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE,
                            body=reason.encode() + b"\n")
        return Response(status=HTTPStatus.NOT_FOUND, body=b"not found\n")

    def _fleet(self, request: Request, *, final: bool) -> Response | float:
        q = request.query
        unknown = sorted(set(q) - set(SERVE_PARAMETERS) - set(query.PARAMETERS))
        if unknown:
            raise ConfigError(f"{', '.join(unknown)}: not a parameter of /fleet (those are "
                              f"{', '.join((*SERVE_PARAMETERS, *query.PARAMETERS))})")
        nodes = _flag("nodes", q["nodes"]) if "nodes" in q else False
        wait = 0.0
        if "wait" in q:
            text = q["wait"][0] if len(q["wait"]) == 1 else ""
            try:
                wait = min(MAX_WAIT, max(0.0, float(text)))
            except ValueError:
                raise ConfigError(f"wait={text}: seconds, at most {MAX_WAIT:g}") from None
        asked = query.from_query(q)
        known = q.get("version", [""])[0]
        with self._source.read() as view:
            version = self.version_of(view)
            if known and known == version and wait and not final:
                return request.received + wait
            etag = f'"{version}"'
            if request.headers.get("if-none-match") == etag and not wait:
                return Response(status=HTTPStatus.NOT_MODIFIED, headers=(("ETag", etag),))
            key = json.dumps([nodes, {k: v for k, v in sorted(q.items())
                                      if k not in SERVE_PARAMETERS}])
            packed = "gzip" in request.headers.get("accept-encoding", "").lower()
            seen = (view.generation, view.health)
            body = self._cached(view, key + " gzip" if packed else key)
            plain = self._cached(view, key) if body is None and packed else None
            made = document(view, version=version, nodes=nodes, asked=asked) \
                if body is None and plain is None else None
        # the view let go: what was made of it is the server's own now
        if body is None:
            if plain is None:
                plain = json.dumps(made, separators=(",", ":")).encode() + b"\n"
                self._store(seen, key, plain)
            body = plain
            if packed:
                body = gzip.compress(plain, compresslevel=1, mtime=0)
                self._store(seen, key + " gzip", body)
        headers: tuple[tuple[str, str], ...] = (
            ("ETag", etag), ("Cache-Control", "no-store"), ("Vary", "Accept-Encoding"))
        if packed:
            headers += (("Content-Encoding", "gzip"),)
        return Response(status=HTTPStatus.OK, body=body, content_type=JSON_TYPE,
                        headers=headers)

    def _cached(self, view: View, key: str) -> bytes | None:
        """What was made of this view for ``key`` (each query's document, plain or
        gzipped: at 5,000 nodes a tenth of it), or None."""
        with self._lock:
            self._forget_unless(view)
            found = self._documents.get(key)
            if found is not None:
                self._documents.move_to_end(key)
            return found

    def _store(self, seen: tuple[int, ViewHealth], key: str, body: bytes) -> None:
        with self._lock:
            if self._cached_for == seen:
                self._documents[key] = body
                while len(self._documents) > CACHED:
                    self._documents.popitem(last=False)

    def _forget_unless(self, view: View) -> None:
        if self._cached_for != (view.generation, view.health):
            self._cached_for = (view.generation, view.health)
            self._documents.clear()
            self._figures = None

    def _metrics(self, request: Request) -> Response:
        with self._source.read() as view:
            with self._lock:
                self._forget_unless(view)
                figs = self._figures
            if figs is None:
                figs = fleetmetrics.figures(view)
                with self._lock:
                    if self._cached_for == (view.generation, view.health):
                        self._figures = figs
        body, content_type = fleetmetrics.render(
            figs, now=self._wall(), version=self._version, node_findings=self._node_findings,
            accept=request.headers.get("accept", ""))
        return Response(status=HTTPStatus.OK, body=body, content_type=content_type)


def document(view: View, *, version: str, nodes: bool = True,
             asked: query.Asked | None = None) -> dict[str, Any]:
    """``/fleet``'s document: ``gfd fleet --check -o json``'s of the view (``fits`` with
    filters; without ``nodes`` unless asked), ``complete`` false while the view is not, and
    ``view`` and ``notes`` beside."""
    fleet, counted = view.fleet, view.counted
    fit = None
    notes: list[str] = []
    if asked is not None:
        if counted.index is None:  # a count kept incrementally may hold none
            counted = replace(counted, index=index(fleet, tolerated=counted.tolerated))
        fit = fleet_fits(fleet, counted, asked.filters, label_set=asked.label_set,
                         gates=asked.gates)
        notes += [*asked.filters.warnings, *(f"note: {n}" for n in fit.notes)]
    doc = report.document(fleet, counted, fits=fit, findings=list(view.findings))
    if not nodes:
        del doc["nodes"]
    doc["complete"] = doc["complete"] and view.health.complete
    doc["view"] = {"generation": view.generation, "version": version,
                   **health_api(view.health)}
    doc["notes"] = [*report.notes(fleet, counted), *notes]
    return doc


class FleetServer:
    """The server over one source: ``start``, ``stop``, the bound ``port``; a thread follows
    the source and wakes the requests held for a change."""

    def __init__(self, source: ViewSource, *, host: str = "0.0.0.0", port: int = DEFAULT_PORT,
                 node_findings: bool = False, version: str = __version__,
                 request_timeout: float | None = None) -> None:
        self.source = source
        self.routes = FleetRoutes(source, node_findings=node_findings, version=version)
        self._http = HttpServer(self.routes, host=host, port=port, name="gfd-fleet-http",
                                request_timeout=request_timeout or REQUEST_TIMEOUT)
        self._stopped = threading.Event()
        self._follower: threading.Thread | None = None

    @property
    def host(self) -> str:
        return self._http.host

    @property
    def port(self) -> int:
        return self._http.port

    @property
    def url(self) -> str:
        host = self.host
        if host in ("0.0.0.0", "::"):
            host = "127.0.0.1" if host == "0.0.0.0" else "::1"
        return f"http://{endpoint(host, self.port)}/"

    def start(self) -> None:
        where = endpoint(self.host, self.port)
        try:
            self._http.start()
        except OSError as exc:
            raise ConfigError(f"--serve {where}: cannot listen there: "
                              f"{exc.strerror or exc} (another process may hold the port, or "
                              "the address is not this host's)") from exc
        self._follower = threading.Thread(target=self._follow, name="gfd-fleet-follow",
                                          daemon=True)
        self._follower.start()

    def _follow(self) -> None:
        """Wake the held requests when the source's generation or health moves."""
        try:
            with self.source.read() as view:
                seen, health = view.generation, view.health
            while not self._stopped.is_set():
                generation = self.source.wait(seen, 0.5)
                with self.source.read() as view:
                    now = (view.generation, view.health)
                if now != (seen, health) or generation != seen:
                    seen, health = now
                    self._http.wake()
        except Exception as exc:  # the server goes on; held requests answer at their time
            log.error("fleet server: following the view failed: %s: %s",
                      type(exc).__name__, exc)
            log.debug("fleet server failure", exc_info=True)

    def stop(self) -> None:
        """Stop serving (the source is the caller's: it goes on)."""
        self._stopped.set()
        if self._follower is not None:
            self._follower.join(timeout=5)
        self._http.stop()


def serve(source: ViewSource, address: str, *, node_findings: bool = False,
          version: str = __version__, stop: threading.Event | None = None,
          announce: Callable[[str], None] | None = None) -> None:
    """Serve ``source`` at ``address`` (``parse_address``'s forms) until ``stop`` is set,
    SIGTERM or Ctrl-C; ``announce`` gets one line once it listens (its URL). A ConfigError
    when the address is not one, or cannot be listened on."""
    host, port = parse_address(address)
    server = FleetServer(source, host=host, port=port, node_findings=node_findings,
                         version=version)
    done = stop or threading.Event()
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, lambda *_: done.set())
    server.start()
    try:
        line = (f"serving the fleet on {server.url} (/fleet /metrics /healthz /readyz; "
                f"listening on {endpoint(host, server.port)})")
        (announce or log.info)(line)
        try:
            done.wait()
        except KeyboardInterrupt:
            pass
    finally:
        server.stop()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
