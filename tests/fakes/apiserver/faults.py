"""Injected faults: any status with Retry-After, answers no API server sends (a proxy's
page, a huge or trickling body), latency, and the server being away."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .errors import _REASONS, status_body
from .exchange import _Request, _Response
from .objects import JSON


@dataclass
class _Fault:
    status: int
    remaining: int | None
    method: str | None
    path_contains: str | None
    retry_after: int | None
    body: JSON | str | bytes | None
    content_type: str | None = None
    size: int | None = None
    chunked: bool = False
    trickle: float = 0.0
    trickle_headers: bool = True
    path_is: str | None = None

    def matches(self, req: _Request) -> bool:
        """The request has the method and path the fault was injected for."""
        return ((self.method is None or self.method == req.method)
                and (self.path_contains is None or self.path_contains in req.path)
                and (self.path_is is None or self.path_is == req.path))


def take_fault(faults: list[_Fault], matches: Callable[[_Fault], bool]) -> _Fault | None:
    """The first fault that ``matches``, counted down (and removed once spent); None if none
    does. The caller holds the server's lock."""
    for fault in faults:
        if not matches(fault):
            continue
        if fault.remaining is not None:
            fault.remaining -= 1
            if fault.remaining <= 0:
                faults.remove(fault)
        return fault
    return None


def fault_status(status: int, details: JSON | None = None) -> JSON:
    """The Status body the real server sends with ``status`` (its reason and message)."""
    reason, message = _REASONS.get(
        status, ("", f"the server responded with the status code {status}"))
    return status_body(status, reason, message, details)


class FaultsMixin:
    """Faults a test injects; ``_take_fault`` answers a request with the first that matches.
    Uses ``_faults``, ``_latency`` and ``_down``, made by ``FakeApiServer.__init__``."""

    # ------------------------------------------------------------------ faults

    def inject(
        self,
        status: int,
        count: int | None = 1,
        *,
        method: str | None = None,
        path_contains: str | None = None,
        retry_after: int | None = None,
        body: JSON | str | bytes | None = None,
        content_type: str | None = None,
        size: int | None = None,
        chunked: bool = False,
        trickle: float = 0.0,
        trickle_headers: bool = True,
        path_is: str | None = None,
    ) -> None:
        """Answer the next ``count`` matching requests with ``status`` (None: until
        ``clear_faults``) instead of serving them; a 2xx status fakes what a proxy in front
        of the API server may answer.

        The default body is a Status with the reason the real server uses for
        ``status``; ``retry_after`` adds a ``Retry-After`` header (and, for 429,
        ``details.retryAfterSeconds``). A str/bytes body is sent as text/plain unless
        ``content_type`` says otherwise. ``size`` pads the body to that many bytes, streamed
        (a 300 MB answer costs the fake no memory); ``chunked`` sends it without a
        Content-Length; ``trickle`` sends the answer one byte every ``trickle`` seconds, from
        the status line on, or from the body on when ``trickle_headers`` is false.
        ``path_is`` matches the path exactly (``/api/v1/nodes``, a list or watch, and not
        ``/api/v1/nodes/n1``), as ``path_contains`` matches a part of it. A request takes the
        first fault that matches it.
        """
        with self._lock:
            self._faults.append(
                _Fault(
                    status,
                    count,
                    method.upper() if method else None,
                    path_contains,
                    retry_after,
                    body,
                    content_type,
                    size,
                    chunked,
                    trickle,
                    trickle_headers,
                    path_is,
                )
            )

    def faults_left(self) -> int:
        """How many injected faults still wait for a request to answer (``count`` None: one
        until ``clear_faults``)."""
        with self._lock:
            return len(self._faults)

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()
            self._watch_faults.clear()

    def set_latency(self, seconds: float) -> None:
        with self._lock:
            self._latency = seconds

    def set_down(self, down: bool) -> None:
        """While down, every request is read and then its connection closed unanswered."""
        with self._lock:
            self._down = down

    def _take_fault(self, req: _Request) -> _Response | None:
        with self._lock:
            fault = take_fault(self._faults, lambda f: f.matches(req))
        if fault is None:
            return None
        headers: dict[str, str] = {}
        if fault.retry_after is not None:
            headers["Retry-After"] = str(fault.retry_after)
        body = fault.body
        if body is None:
            details: JSON = {}
            if fault.retry_after is not None and fault.status in (429, 500, 503, 504):
                details["retryAfterSeconds"] = fault.retry_after
            body = fault_status(fault.status, details or None)
        return _Response(fault.status, body, headers, fault.content_type, fault.size,
                         fault.chunked, fault.trickle, fault.trickle_headers)

