"""One request to the API server: a rate-limiter token, one deadline for the whole answer
(connect included) within what is left of the cycle's budget, the answer read in chunks up to
a cap and required to be a Kubernetes object, every failure one ``ApiError``, and each
request reported (verb, code) for metrics."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from gfd.budget import Budget
from gfd.errors import ApiError
from gfd.kube.channel import Channel
from gfd.kube.status import snippet, status_error

MAX_ANSWER_BYTES = 4 * 1024 * 1024
"""The largest answer gfd reads: a Node or a NodeFeature is a few KB."""
DEADLINE = 30.0
"""Seconds one request may take in all, connect included (kept well under --stuck-after)."""
_CHUNK = 64 * 1024


@dataclass(slots=True)
class RateLimiter:
    """Client-side token bucket (GFD's --kube-api-qps / --kube-api-burst)."""

    qps: float
    burst: int
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    _tokens: float = field(default=0.0, init=False)
    _stamp: float | None = field(default=None, init=False)
    """When the tokens were last counted (None: never; the bucket starts full). The tokens
    go below zero while takers wait for theirs."""
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def take(self, within: float | None = None) -> bool:
        """Take a token, waiting for it if need be. ``within``: the most seconds the caller
        may wait; when the token would come later, take none and return False at once."""
        if self.qps <= 0:
            return True
        with self._lock:
            now = self.clock()
            if self._stamp is None:
                self._tokens, self._stamp = float(self.burst), now
            self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.qps)
            self._stamp = now
            wait = 0.0 if self._tokens >= 1 else (1 - self._tokens) / self.qps
            if within is not None and wait > within:
                return False
            self._tokens -= 1
        if wait > 0:
            self.sleep(wait)
        return True


class Calls:
    """Sends requests and reads their answers, as above. ``main`` is the channel of the
    loop's requests (another channel can be named per request); ``budget``: the cycle's
    deadline the loop's requests share (``gfd.budget``): each request on the thread that
    opened it ends by then, whatever its own deadline (``timeout``)."""

    def __init__(self, main: Channel, *, limiter: RateLimiter, timeout: float = DEADLINE,
                 max_answer: int = MAX_ANSWER_BYTES,
                 on_request: Callable[[str, str], None] | None = None,
                 budget: Budget | None = None) -> None:
        self.main = main
        self.limiter = limiter
        self.timeout = timeout
        self._max_answer = max_answer
        self.on_request = on_request
        self.budget = budget

    def _read(self, verb: str, what: str, raw: Any) -> bytes:
        """The whole body, read in chunks; refused (connection dropped) beyond the cap."""
        declared = str(raw.headers.get("Content-Length") or "")
        size = int(declared) if declared.isdigit() else 0
        body = bytearray()
        if size <= self._max_answer:
            for chunk in raw.stream(_CHUNK, decode_content=True):
                body += chunk
                if len(body) > self._max_answer:
                    break
            else:
                raw.release_conn()
                return bytes(body)
        raw.close()
        raise ApiError(f"{verb} {what}: the API server's answer is larger than "
                       f"{self._max_answer // 1024} KiB, more than a Node or NodeFeature can be "
                       f"(HTTP {raw.status}; a proxy in the way?)", status=int(raw.status))

    def _late(self, verb: str, what: str, limit: float, cut: bool) -> ApiError:
        share = (f", what was left of this cycle's {self._budget_seconds():g} s for API "
                 "requests" if cut else "")
        return ApiError(f"{verb} {what}: no complete answer from the API server within "
                        f"{limit:.3g} s{share} (a slow or stuck connection)")

    def _budget_seconds(self) -> float:
        return self.budget.seconds if self.budget is not None else 0.0

    def _spent(self, verb: str, what: str, why: str) -> ApiError:
        return ApiError(f"{verb} {what}: not sent: {why} this cycle's "
                        f"{self._budget_seconds():g} s for API requests (a slow API server; "
                        "the next cycle tries again)")

    def _take_token(self, verb: str, what: str) -> None:
        """A rate-limiter token, waiting no longer than the cycle's budget allows; raises
        when the budget is spent or the rate limit would hold the request past it."""
        left = self.budget.left() if self.budget is not None else None
        if left is not None and left <= 0:
            raise self._spent(verb, what, "the requests before it used up")
        if not self.limiter.take(within=left):
            raise self._spent(verb, what, "the client-side rate limit (--kube-api-qps) would "
                                          "hold it past")

    def _limit(self, verb: str, what: str) -> tuple[float, bool]:
        """The seconds the request starting now may take, and whether the cycle's budget
        (not the request's own deadline) sets them; raises when the budget is spent."""
        left = self.budget.left() if self.budget is not None else None
        if left is None or left >= self.timeout:
            return self.timeout, False
        if left <= 0:
            raise self._spent(verb, what, "the requests before it used up")
        return left, True

    def _object(self, verb: str, what: str, raw: Any, body: bytes) -> dict[str, Any]:
        """A successful answer must be a Kubernetes object (kind and apiVersion)."""
        try:
            parsed: Any = json.loads(body)
        except ValueError:
            parsed = None
        if (isinstance(parsed, dict) and isinstance(parsed.get("kind"), str)
                and isinstance(parsed.get("apiVersion"), str)):
            return parsed
        kind = str(raw.headers.get("Content-Type") or "no content type").split(";")[0]
        raise ApiError(f"{verb} {what}: the API server's answer is not a Kubernetes object: "
                       f"HTTP {raw.status}, {kind}, {snippet(body)} (a proxy in the way?)",
                       status=int(raw.status))

    def call(self, verb: str, what: str, method: str, path: str, *,
              path_params: dict[str, str], query: list[tuple[str, str]] | None = None,
              body: dict[str, Any] | None = None,
              content_type: str = "application/json",
              channel: Channel | None = None) -> dict[str, Any]:
        self._take_token(verb, what)
        code = "error"
        chan = channel or self.main
        request = chan.api.param_serialize(
            method=method, resource_path=path, path_params=path_params,
            query_params=query or [], body=body, auth_settings=["BearerToken"],
            header_params={"Accept": "application/json", "Content-Type": content_type},
        )
        with chan.one_at_a_time:
            limit, cut = self._limit(verb, what)
            deadline = chan.watchdog.arm(limit)
            raw: Any = None
            try:
                response = chan.api.call_api(*request, _request_timeout=(limit, limit))
                raw = response.response
                code = str(response.status)
                data = self._read(verb, what, raw)
                if deadline.fired:  # cut short at the deadline: not the whole answer
                    raw.close()
                    code = "error"
                    raise self._late(verb, what, limit, cut)
                if 200 <= response.status <= 299:
                    return self._object(verb, what, raw, data)
                error = ApiException(status=response.status, reason=response.reason)
                error.headers, error.body = response.headers, data.decode("utf-8", "replace")
                raise status_error(verb, what, error)
            except ApiException as exc:
                code = str(exc.status)
                raise status_error(verb, what, exc) from exc
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                if raw is not None:
                    raw.close()  # a half-read answer: its connection cannot be reused
                    code = "error"
                if deadline.fired:
                    raise self._late(verb, what, limit, cut) from exc
                raise ApiError(f"{verb} {what}: cannot reach the API server: {exc}") from exc
            finally:
                chan.watchdog.disarm(deadline)
                if self.on_request:
                    self.on_request(verb, code)
